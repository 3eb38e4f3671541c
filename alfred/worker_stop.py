"""How a worker ends: within its grace when it is asked to, and on its own once it stopped
consuming.

**Within the grace.** SIGTERM is Celery's warm shutdown: no new task, and the worker waits for
the running ones however long they take, so a stage in a slow provider call outlived the
grace of `make run` (10 s), compose and the chart (60 s) and the whole worker was SIGKILLed,
its pool included. So once a warm shutdown begins (``worker_shutting_down``), a timer gives
the running tasks ``ALFRED_WORKER_STOP_SECONDS`` and then sends the worker SIGQUIT: Celery's
cold shutdown, which cancels the tasks still running (stage tasks are ``acks_late`` and not
yet acknowledged, so their messages go back to the queue; every finished step is recorded,
so only the step cut short is redone, fenced by the run's lease) and exits. A worker whose
main thread no longer runs Python (no signal handler gets to run) is ended with ``os._exit``
``_LAST_RESORT_SECONDS`` later. Set ``ALFRED_WORKER_STOP_SECONDS`` below the grace of whatever
stops the worker, leaving the cold shutdown a few seconds: the chart derives it from
``worker.terminationGracePeriodSeconds``, compose and `make run` set it.

**Stopped consuming.** A worker that stopped taking tasks (``alfred.worker_http``: its
heartbeat went unconsumed) fails its readiness at once, and Kubernetes restarts it once its
liveness probe failed for three minutes. Compose restarts a container only when it exits
(``restart:``), never for a failed health check. So the worker applies the same rule to
itself, everywhere: once it has not been ready for ``ALFRED_WORKER_LIVENESS_SECONDS`` (180,
the chart's liveness window; 0: never), it logs why and stops as above, and the restart
policy (compose's ``unless-stopped``, the pod's ``Always``) starts a new one. Under `make
run` the launcher sees a child die and stops the stack, naming it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Any

from celery.signals import worker_ready, worker_shutting_down
from django.conf import settings

from alfred.logs import stdout_is_json
from alfred.worker_http import worker_ready_check

log = logging.getLogger(__name__)

# After the cold shutdown was asked for: enough for Celery to cancel and end its pool.
_LAST_RESORT_SECONDS = 10.0
_stopping = threading.Event()


def _cold_shutdown(pid: int) -> None:
    log.warning(
        "still stopping after %.0f s (ALFRED_WORKER_STOP_SECONDS): cancelling the tasks still "
        "running; their messages go back to the queue",
        settings.ALFRED_WORKER_STOP_SECONDS,
    )
    os.kill(pid, signal.SIGQUIT)


def _last_resort() -> None:
    log.error("the worker did not end after a cold shutdown: exiting")
    logging.shutdown()
    os._exit(1)


def _timer(seconds: float, function: Any, *args: Any) -> None:
    timer = threading.Timer(seconds, function, args)
    timer.daemon = True  # a worker that ends sooner does not wait for it
    timer.start()


@worker_shutting_down.connect
def _stop_bounded(how: str = "", **_: Any) -> None:
    """In the main process, from the signal handler of a warm shutdown: bound it."""
    if stdout_is_json():  # Celery's own line went nowhere (alfred.logs.JsonStdout)
        log.info("worker: %s shutdown (MainProcess)", how)
    if how != "Warm" or _stopping.is_set():
        return
    _stopping.set()
    seconds = settings.ALFRED_WORKER_STOP_SECONDS
    _timer(seconds, _cold_shutdown, os.getpid())
    _timer(seconds + _LAST_RESORT_SECONDS, _last_resort)


class _Liveness(threading.Thread):
    """Checks the worker's readiness every heartbeat period; stops the worker once it has
    failed for ``limit`` seconds in a row."""

    def __init__(self, worker: str, limit: float) -> None:
        super().__init__(name="alfred-liveness", daemon=True)
        self.worker, self.limit = worker, limit

    def run(self) -> None:
        period = settings.ALFRED_WORKER_HEARTBEAT_SECONDS
        ready_at = time.monotonic()  # a worker just started has its first heartbeat to come
        while not _stopping.wait(period):
            ready, checks = worker_ready_check(self.worker)
            if ready:
                ready_at = time.monotonic()
                continue
            if time.monotonic() - ready_at >= self.limit:
                log.error(
                    "worker %s has not consumed its heartbeat for %.0f s "
                    "(ALFRED_WORKER_LIVENESS_SECONDS; %s): stopping, so that it is restarted",
                    self.worker,
                    self.limit,
                    checks,
                )
                os.kill(os.getpid(), signal.SIGTERM)  # a warm shutdown, bounded as above
                return


@worker_ready.connect
def _liveness_start(sender: Any, **_: Any) -> None:
    """In the worker's main process, once it consumes."""
    limit = settings.ALFRED_WORKER_LIVENESS_SECONDS
    if limit > 0:
        _Liveness(str(sender.hostname), limit).start()
