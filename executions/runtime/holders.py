"""Who holds a run's lease, and whether that holder is known to be gone.

A holder is a worker process, named ``node:pidns:pid`` (:func:`worker_identity`), where
``node`` is its Celery worker's name (``worker@host``). Its lease is the general guarantee: a
holder that says nothing more is trusted until its lease runs out. Two things say more, and
let another worker take the run over at once, without waiting out the lease:

- the holder's process is gone from this host's PID namespace (a SIGKILLed pool process, or a
  whole worker killed beside another on the same host): it can write nothing any more;
- the holder's worker is gone (``alfred.workers``: its main process stopped marking itself
  present for three of its heartbeat periods while another worker's marks went on),
  wherever it ran: the case of a whole worker killed on another host or pod, whose message
  the broker keeps for its visibility timeout.

Either is only knowledge of absence, never a guess of life: a holder named otherwise, on
another host, or of a worker never recorded, waits out its lease. A worker taken for gone
that is not (its main process frozen, cut off from the database) is safe all the same: the
takeover moves the run's fence, and every write of the old round (a receipt, an event, a
lease renewal) is compared with it and refused; what it does outside the database meanwhile
is done again by the new holder, at least once, as after any takeover.
"""

from __future__ import annotations

import os
import socket
from functools import cache

from alfred.workers import worker_gone


def worker_identity(node: str) -> str:
    """How a worker process names itself as a lease holder: ``node:pidns:pid``. The PID
    namespace is part of it because one host name does not mean one PID namespace (a
    container with ``network_mode: host`` or Kubernetes ``hostNetwork`` shares the host's
    name, not its processes)."""
    return f"{node}:{pid_namespace()}:{os.getpid()}"


@cache
def pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        return "unknown"


def holder_parts(holder: str) -> tuple[str, str, str] | None:
    """``(node, pidns, pid)`` of a holder named by :func:`worker_identity`, else None."""
    parts = holder.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        return None
    node, namespace, pid = parts
    return node, namespace, pid


def local_holder_marker() -> str:
    """What every holder of this host and PID namespace contains: ``@host:pidns:``."""
    return f"@{socket.gethostname()}:{pid_namespace()}:"


def holder_process_dead(holder: str) -> bool:
    """A holder in this PID namespace on this host whose process is gone cannot write any
    more. Holders anywhere else are not known to be dead, nor is a holder named in any other
    form (nor one whose pid was reused: it looks alive, and waits out its lease)."""
    parts = holder_parts(holder)
    if parts is None:
        return False
    node, namespace, pid = parts
    if (
        node.rpartition("@")[2] != socket.gethostname()
        or namespace != pid_namespace()
        or namespace == "unknown"
    ):
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def holder_gone(holder: str) -> bool:
    """Whether ``holder`` is known to be gone: its process dead on this host, or its worker
    no longer present. One read (by primary key, and over the workers' rows), only for a
    holder whose lease still runs."""
    if holder_process_dead(holder):
        return True
    parts = holder_parts(holder)
    return parts is not None and worker_gone(parts[0])
