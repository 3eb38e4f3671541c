from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from alfred.ids import Prefixed
from alfred.principals import Role

__all__ = ["ApiToken", "Role"]

TOKEN_NAME_MAX = 100


class ApiToken(models.Model):
    """A bearer token for an integration, a viewer or an operator. Only its sha256 is stored:
    the token itself is shown once, when it is created.

    ``principal_id`` is who the token acts as: executions, idempotency keys and audit entries
    are recorded under it. A rotation hands it to the new token; a token created under a
    name used before gets a new one (it inherits nothing)."""

    id = models.CharField(primary_key=True, max_length=40, default=Prefixed("tok"), editable=False)
    principal_id = models.CharField(max_length=40, default=Prefixed("prn"), db_index=True)
    name = models.CharField(max_length=TOKEN_NAME_MAX)
    role = models.CharField(max_length=20, choices=Role.choices)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"
        constraints = [
            models.UniqueConstraint(
                fields=["name"],
                condition=models.Q(revoked_at__isnull=True),
                name="uniq_active_token_name",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.role}, {self.prefix}…)"

    @property
    def principal(self) -> str:
        return self.principal_id


class BeatLease(models.Model):
    """Which beat process sends the periodic tasks now. Several beats may run (one per host);
    each tick, each tries to take or renew this row (``alfred.beat``), and only its holder
    sends. A lease, not an advisory lock: a holder that is stopped rather than killed (a
    frozen VM, SIGSTOP) keeps its connection, and would keep a lock, but not its lease."""

    name = models.CharField(primary_key=True, max_length=40)
    holder = models.CharField(max_length=200)
    # Taken over this many times: a holder whose epoch changed has lost the lease meanwhile.
    epoch = models.PositiveBigIntegerField(default=1)
    expires_at = models.DateTimeField()
    renewed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name}: {self.holder} until {self.expires_at:%H:%M:%S}"


class WorkerHeartbeat(models.Model):
    """Proof that a worker consumes: every ``ALFRED_WORKER_HEARTBEAT_SECONDS`` its main process
    sends a task to the worker's own queue, and the pool process that runs it writes
    ``consumed_at`` (``alfred.worker_http``). A worker whose consumer stopped (the Redis
    reconnect that silently ends consumption, a pool that no longer takes tasks) stops
    moving it: its readiness fails and ``alfred_worker_heartbeat_age_seconds`` grows.

    ``seen_at`` is apart from consumption: the worker's main process writes it itself every
    period, broker or not, so it stops only when that process is gone (killed, its pod
    rescheduled) or cannot reach the database. A worker not seen for three periods is gone:
    no longer reported, and the runs its processes held are taken over without waiting out
    their leases (``alfred.worker_http``, ``executions.runtime``)."""

    worker = models.CharField(primary_key=True, max_length=200)
    consumed_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_default=Now())
    # Since when its marks came without a gap (``alfred.workers``: when another may be gone).
    seen_since = models.DateTimeField(db_default=Now())
    # The worker's own ALFRED_WORKER_HEARTBEAT_SECONDS: whoever judges it gone (the web's
    # /metrics, another host's scan) counts its periods, not their own.
    period_seconds = models.FloatField(db_default=10.0)

    def __str__(self) -> str:
        return f"{self.worker} at {self.consumed_at:%H:%M:%S}"
