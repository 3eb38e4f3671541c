"""Kill points for add-subdomain, set at the Route53 adapter's network edge in the test worker:
no hook in production code. Imported by :mod:`tests.support.engine_workflows` (so by every worker
the tests start); it installs itself only in a process started with :data:`ENABLE` set, which the
kill tests' worker fixture sets and no other test does.

A point is armed like :mod:`tests.support.engine_workflows`'s, as a member ``<name>:<point>`` of
:data:`~tests.support.engine_workflows.KILL_POINTS`, ``<name>`` being the fully-qualified name the
execution adds (its canonical ``subdomain``); it SIGKILLs the pool process running the stage
once (a ``worker:`` prefix: the whole worker). The points, ``<stage>`` being the stage the
pool process runs (``plan``, ``apply``, ``verify``, or a rollback run's ``rollback``):

- ``read:<stage>`` — ``Route53.records`` at the name has returned (the plan's and verify's
  reads, the undo's read before it restores), before the step's receipt is written;
- ``change:<stage>`` — ``Route53.change`` of a batch at the name has returned: the batch has
  landed at the stand-in, and its receipt is not written;
- ``poll:<stage>`` — ``Route53.inspect`` of that batch's handle has returned (an INSYNC poll),
  before the poll's receipt;
- ``before:<stage>`` / ``after:<stage>`` — as for test-kill-points: the stage's message
  delivered and not yet claimed / the stage committed as succeeded (the next one published,
  or the execution terminal), its own message not yet acknowledged.

Only the outermost adapter call counts: the reads ``change`` and ``inspect`` make inside
themselves (the compare-and-swap's pre-state, a recovered handle's evidence) are not points.
Each task killed is noted in :data:`KILLED`, so that a test can wait for its message,
delivered again, to be done.

:data:`SETTLE` shortens a recovered change's settle time (``Route53.settle_seconds``, 60 s in
production: Route53's documented propagation time; the stand-in propagates in well under a
second). A batch whose receipt was lost with its worker is recovered on replay with an
unknowable change id, and its INSYNC is assumed only after that time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from providers.aws.route53 import Route53, normalize_name
from tests.support.kill_edges import EdgeKills

KILLED = "alfred-test:killed-tasks"  # the ids of the tasks killed, in order

ENABLE = "ALFRED_TEST_ROUTE53_KILL_POINTS"
SETTLE = "ALFRED_TEST_ROUTE53_SETTLE_SECONDS"
WORKFLOW = "add-subdomain"

KILLS = EdgeKills(WORKFLOW, lambda data: normalize_name(data["subdomain"]), KILLED)
_installed = False


def _names_of_changes(changes: Iterable[Mapping[str, Any]]) -> set[str]:
    return {normalize_name(change["record"]["name"]) for change in changes}


def _records_names(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> set[str]:
    name = args[1] if len(args) > 1 else kwargs["name"]
    return {normalize_name(name)}


def _change_names(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> set[str]:
    return _names_of_changes(args[1] if len(args) > 1 else kwargs["changes"])


def _inspect_names(args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> set[str]:
    handle = args[0] if args else kwargs["previous"]
    if handle.get("kind") != "change":
        return set()
    return _names_of_changes(handle.get("observations", {}).get("changes") or [])


def _settling(original: Callable[..., None], seconds: float) -> Callable[..., None]:
    @functools.wraps(original)
    def init(self: Route53, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("settle_seconds", seconds)
        original(self, *args, **kwargs)

    return init


def install() -> None:
    """Wrap the adapter and connect the stage signals, once, where :data:`ENABLE` asks."""
    global _installed
    if _installed or os.environ.get(ENABLE) != "1":
        return
    _installed = True
    Route53.records = KILLS.edge(Route53.records, "read", _records_names)  # type: ignore[method-assign]
    Route53.change = KILLS.edge(Route53.change, "change", _change_names)  # type: ignore[method-assign]
    Route53.inspect = KILLS.edge(Route53.inspect, "poll", _inspect_names)  # type: ignore[method-assign]
    Route53.apex_alias = KILLS.nested(Route53.apex_alias)  # type: ignore[method-assign]
    Route53.batch_state = KILLS.nested(Route53.batch_state)  # type: ignore[method-assign]
    if os.environ.get(SETTLE):
        Route53.__init__ = _settling(Route53.__init__, float(os.environ[SETTLE]))  # type: ignore[method-assign]
    KILLS.connect()


install()
