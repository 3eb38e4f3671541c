"""Kill points for add-certificate, set at the ACM and Route53 adapters' network edge in the
test worker: no hook in production code. Imported by :mod:`tests.support.engine_workflows` (so by
every worker the tests start); it installs itself only in a process started with :data:`ENABLE`
set, which the add-certificate kill tests' worker fixture sets and no other test does.

A point is armed as a member ``<domain>:<point>`` of
:data:`~tests.support.engine_workflows.KILL_POINTS`, ``<domain>`` being the execution's canonical
domain; it SIGKILLs the pool process running the stage once (a ``worker:`` prefix: the whole
worker). The points, ``<stage>`` being the stage the pool process runs (``plan``,
``request``, ``validate_dns``, ``await_issued``, ``verify``, or a rollback's ``rollback``):

- ``request:<stage>`` — ``Acm.request`` has returned: the certificate exists at the stand-in,
  and the step's receipt is not written;
- ``change:<stage>`` — ``Route53.change`` has returned: the batch has landed, its receipt is
  not written;
- ``describe:<stage>`` — an outermost ``Acm.describe`` has returned (await_issued's poll,
  verify's read, the undo's read), before its receipt;
- ``delete:<stage>`` — ``Acm.delete`` has returned: the certificate is gone, the step's
  receipt is not written;
- ``before:<stage>`` / ``after:<stage>`` — the stage's message delivered and not yet claimed /
  the stage committed as succeeded, its own message not yet acknowledged.

:data:`tests.support.kill_points.SETTLE` shortens a recovered change's settle time as there (the
rollback's batch back, its answer lost with a killed worker, is recovered on replay).

Each task killed is noted in :data:`tests.support.kill_points.KILLED` (the list add-subdomain's kill
points use), so that a test can wait for its message, delivered again, to be done.
"""

from __future__ import annotations

import os

from providers.aws.acm import Acm
from providers.aws.route53 import Route53
from tests.support.kill_edges import EdgeKills
from tests.support.kill_points import KILLED, SETTLE, _settling

ENABLE = "ALFRED_TEST_ACM_KILL_POINTS"
WORKFLOW = "add-certificate"

KILLS = EdgeKills(WORKFLOW, lambda data: str(data["domain"]), KILLED)
_installed = False


def install() -> None:
    """Wrap the adapters and connect the stage signals, once, where :data:`ENABLE` asks."""
    global _installed
    if _installed or os.environ.get(ENABLE) != "1":
        return
    _installed = True
    Acm.request = KILLS.edge(Acm.request, "request")  # type: ignore[method-assign]
    Acm.describe = KILLS.edge(Acm.describe, "describe")  # type: ignore[method-assign]
    Acm.delete = KILLS.edge(Acm.delete, "delete")  # type: ignore[method-assign]
    Acm.validation_records = KILLS.nested(Acm.validation_records)  # type: ignore[method-assign]
    Route53.change = KILLS.edge(Route53.change, "change")  # type: ignore[method-assign]
    if os.environ.get(SETTLE):
        Route53.__init__ = _settling(Route53.__init__, float(os.environ[SETTLE]))  # type: ignore[method-assign]
    KILLS.connect()


install()
