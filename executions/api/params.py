"""What the API reads from paths, headers and query strings, checked before any query:
execution ids, the Idempotency-Key, integers, and cursors (a bad one is a 400 problem, never a
database error or a silent default)."""

from __future__ import annotations

import re
from typing import Any

from django.http import Http404
from django.utils.dateparse import parse_datetime
from rest_framework import pagination
from rest_framework.exceptions import NotFound
from rest_framework.request import Request

from alfred.problems import Problem

# What alfred.ids makes: "exe_" and a ULID (26 Crockford base32 characters).
EXECUTION_ID_RE = re.compile(r"exe_[0-9A-HJKMNP-TV-Z]{26}")
# Printable ASCII without a comma and without spaces at the ends; long enough for a UUID, a
# ULID or a hash. No comma: a proxy or server joins two Idempotency-Key headers into "one,two",
# which would otherwise be accepted as a third key that neither request meant.
IDEMPOTENCY_KEY_RE = re.compile(
    r"[\x21-\x2b\x2d-\x7e](?:[\x20-\x2b\x2d-\x7e]{0,253}[\x21-\x2b\x2d-\x7e])?"
)
# An integer query parameter: ASCII digits only (int() also takes "٣", " 3", "1_000").
_DIGITS = re.compile(r"[0-9]{1,9}")


def check_execution_id(execution_id: str) -> str:
    """``execution_id`` if an execution could have it; else 404 before any query (a NUL or a
    megabyte in a path is an id that cannot exist, not a database error)."""
    if not EXECUTION_ID_RE.fullmatch(execution_id):
        raise Http404
    return execution_id


def idempotency_key(request: Request) -> str:
    """The request's Idempotency-Key, or a 400 problem when it is missing or not one key."""
    key = request.headers.get("Idempotency-Key")
    if not key:
        raise Problem("idempotency_key_missing", "Send an Idempotency-Key header.")
    if not IDEMPOTENCY_KEY_RE.fullmatch(key):
        raise Problem(
            "idempotency_key_invalid",
            "Idempotency-Key must be one key: 1–255 printable ASCII characters without a "
            "comma (two Idempotency-Key headers arrive joined by a comma).",
        )
    return key


def int_param(request: Request, name: str, default: int, low: int, high: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    value = int(raw) if _DIGITS.fullmatch(raw) else low - 1
    if value < low or (high is not None and value > high):
        bound = f"{low}–{high}" if high is not None else f"≥ {low}"
        raise Problem(
            "malformed_request",
            f"{name} must be an integer {bound}.",
            errors=[{"field": name, "message": f"integer {bound}"}],
        )
    return value


class StrictCursorPagination(pagination.CursorPagination):
    """Cursor pages whose bad input is a 400 problem, not a silent default or a 404."""

    page_size = 50
    max_page_size = 200
    page_size_query_param = "limit"

    def get_page_size(self, request: Request) -> int:
        return int_param(request, "limit", self.page_size, 1, self.max_page_size)

    def decode_cursor(self, request: Request) -> Any:
        """The cursor, or 400 when it is not one this API gave out — including a well-formed
        cursor whose position is not a value of the ordering field, which would otherwise
        reach the database as a filter (a 500 for a timestamp column, or a NUL)."""
        raw = request.query_params.get(self.cursor_query_param)
        if raw is None:
            return None
        try:
            if not _CURSOR.fullmatch(raw):  # b64decode skips the rest: "\x00" is the first page
                raise NotFound
            cursor = super().decode_cursor(request)
        except NotFound:
            cursor = None
        if cursor is None or (
            cursor.position is not None and not self.position_valid(str(cursor.position))
        ):
            raise Problem(
                "malformed_request",
                "The cursor is not one this API gave out; follow the `next` link as it is.",
                errors=[{"field": "cursor", "message": "invalid cursor"}],
            )
        return cursor

    def position_valid(self, position: str) -> bool:
        """Whether ``position`` is a value of the ordering field (override per ordering)."""
        raise NotImplementedError


# What DRF's b64encode of a cursor looks like, with room for a long position.
_CURSOR = re.compile(r"[A-Za-z0-9+/]{1,400}={0,2}")


class ExecutionCursorPagination(StrictCursorPagination):
    ordering = "-id"

    def position_valid(self, position: str) -> bool:
        return EXECUTION_ID_RE.fullmatch(position) is not None


class AuditEntryCursorPagination(StrictCursorPagination):
    ordering = "-created_at"

    def position_valid(self, position: str) -> bool:
        # DRF writes the position as str(created_at): "2025-01-31 12:00:00.123456+00:00".
        if len(position) > 40:
            return False
        try:
            moment = parse_datetime(position)
        except ValueError:  # well-formed but impossible, e.g. month 13
            return False
        return moment is not None and moment.tzinfo is not None
