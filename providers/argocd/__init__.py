"""ArgoCD: what an application runs, and whether it has converged on a commit (httpx).

Three modules, one dependency direction (adapter → assessment → model):

- :mod:`.model` — :class:`ApplicationStatus`, the parts of a ``v1alpha1.Application`` that say
  what it runs, and the operation phase values (no httpx, no I/O);
- :mod:`.assessment` — the pure decisions: :func:`assess` ("converged on commit X": Synced
  and Healthy at X with no operation running, and no failed operation at X) and
  :class:`SyncOwner` (whether an operation is this sync's, by the operation identity in its
  ``infos``); its docstring is the contract;
- :mod:`.adapter` — :class:`ArgoCD`, the httpx calls: read, watch, sync, inspect, stop, and
  the mapping of ArgoCD's answers onto :mod:`providers.errors`.

Import from here; the names below are the package's public surface.
"""

from providers.argocd.adapter import ArgoCD
from providers.argocd.assessment import (
    MAX_OPERATION,
    OPERATION_FAILED,
    OPERATION_RUNNING,
    OUT_OF_SYNC,
    REVISION_MISMATCH,
    UNHEALTHY,
    Convergence,
    Reason,
    SyncOwner,
    assess,
)
from providers.argocd.model import (
    FAILED_PHASES,
    OPERATION_INFO,
    PROVIDER,
    RUNNING_PHASES,
    ApplicationStatus,
    Source,
)

__all__ = [
    "FAILED_PHASES",
    "MAX_OPERATION",
    "OPERATION_FAILED",
    "OPERATION_INFO",
    "OPERATION_RUNNING",
    "OUT_OF_SYNC",
    "PROVIDER",
    "REVISION_MISMATCH",
    "RUNNING_PHASES",
    "UNHEALTHY",
    "ApplicationStatus",
    "ArgoCD",
    "Convergence",
    "Reason",
    "Source",
    "SyncOwner",
    "assess",
]
