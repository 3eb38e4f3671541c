"""Prefixed, sortable identifiers: ``exe_01JD4Q…`` (a ULID after a type prefix).

48 bits of milliseconds then 80 random bits in Crockford base32: ids sort by creation time,
so cursor pagination and "newest first" need no extra column, and they are safe to show.
"""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid(now_ms: int | None = None) -> str:
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    out = []
    for _ in range(26):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    return f"{prefix}_{ulid()}"


class Prefixed:
    """A callable default for a model's primary key (picklable for migrations)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self) -> str:
        return new_id(self.prefix)

    def deconstruct(self) -> tuple[str, tuple[str], dict[str, str]]:
        return ("alfred.ids.Prefixed", (self.prefix,), {})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Prefixed) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)
