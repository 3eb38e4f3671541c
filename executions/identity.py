"""Canonical JSON (RFC 8785), the request fingerprint and the logical identity (docs/contract.md,
"Asking for an execution").

- fingerprint: sha256 of the RFC 8785 form of ``{"workflow", "body"}``, the body *as sent*. It
  decides "same key, same request" — ``{"a":1,"b":2}`` and ``{"b":2, "a":1}`` are the same
  body; a default sent explicitly is not; the same body to another workflow is not.
- logical identity: sha256 of the RFC 8785 form of ``{"workflow", "input": canonical input}``.
  It decides "is this the same operation?" across keys and principals.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785


class NotCanonicalizable(ValueError):
    """A value RFC 8785 cannot represent exactly (an integer beyond ±2⁵³, a NaN)."""


def canonical_json(value: Any) -> bytes:
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError as exc:
        raise NotCanonicalizable(str(exc)) from exc


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(workflow: str, body: Any) -> str:
    return sha256_hex(canonical_json({"workflow": workflow, "body": body}))


def logical_identity(workflow: str, canonical_input: Any) -> str:
    return sha256_hex(canonical_json({"workflow": workflow, "input": canonical_input}))
