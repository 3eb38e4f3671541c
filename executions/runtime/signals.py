"""What the stage path tells whoever listens, each sent with ``run_id`` and ``stage`` in the
worker running the run. Only the tests listen today (their kill points and their engine
workflows, ``tests/support/``); tracing opens its spans in the runner itself
(``executions.runtime.tracing.stage_span``), not here.

- ``stage_claiming``: before a stage's code runs: before the claim of the stage a message
  names (a message naming a stage already done then stands for the run's next: sent again
  for that one), or, when the worker goes on from the stage before, right after the
  transaction that ended that one and claimed this one;
- ``stage_completed``: once the stage's success committed (after the last stage, with the
  terminal transition).

A module of its own, importing nothing: a receiver can connect before the apps are ready.
"""

from django.dispatch import Signal

stage_claiming = Signal()
stage_completed = Signal()
