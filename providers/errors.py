"""What a provider call can fail with, in the terms a workflow needs to decide.

Every adapter turns its client library's exceptions (botocore ``ClientError``, PyGithub
``GithubException``, httpx errors) into one of these, keeping the provider's own code and
message, so the workflows map them onto the engine's errors without knowing boto3 or GitHub:

- :class:`Transient` (and :class:`Throttled`): nothing was changed, or the call is safe to
  repeat; try again later.
- :class:`Conflict`: the provider's state is not what the caller based its change on (a stale
  DELETE, a RevisionId mismatch, a non-fast-forward ref update that re-applying cannot fix).
- :class:`NotFound`: the named resource does not exist.
- :class:`Rejected`: the request is invalid and repeating it cannot help.
- :class:`Unknown`: the outcome of a mutation could not be established (its response was lost
  and recovery could not prove either outcome); never repeat the mutation blindly.
"""

from __future__ import annotations

from typing import Any


class ProviderError(Exception):
    """``provider`` names the adapter (``aws.route53``, ``github``, ``argocd``); ``code`` is the
    provider's own error code where it has one (``InvalidChangeBatch``, ``422``)."""

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.code = code
        self.details = details or {}

    def as_dict(self) -> dict[str, Any]:
        """JSON for receipts and error fields."""
        return {
            "type": type(self).__name__,
            "provider": self.provider,
            "code": self.code,
            "message": self.message,
            "details": self.details,
            "retryable": self.retryable,
        }

    def __str__(self) -> str:
        prefix = f"{self.provider}: " + (f"{self.code}: " if self.code else "")
        return prefix + self.message


class Transient(ProviderError):
    retryable = True


class Throttled(Transient):
    pass


class Conflict(ProviderError):
    pass


class NotFound(ProviderError):
    pass


class Rejected(ProviderError):
    pass


class Unknown(ProviderError):
    pass
