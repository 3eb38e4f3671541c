from __future__ import annotations

from django.db import models

from alfred.ids import Prefixed


class Role(models.TextChoices):
    INTEGRATION = "integration", "Integration"  # trigger and read
    OPERATOR = "operator", "Operator"  # also approve, roll back, recover lanes


class ApiToken(models.Model):
    """A bearer token for an integration or an operator. Only its sha256 is stored: the
    token itself is shown once, when it is created."""

    id = models.CharField(primary_key=True, max_length=40, default=Prefixed("tok"), editable=False)
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=20, choices=Role.choices)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise it.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
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
        """The name idempotency keys are scoped to: the token's name, so a rotated token
        (revoked, then created again under its name) keeps its keys."""
        return f"token:{self.name}"
