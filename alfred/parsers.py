"""What Alfred accepts as a request body: strict JSON (RFC 8259 read as I-JSON, RFC 7493), sent
as exactly ``application/json``.

:class:`StrictJSONParser` refuses, as 400 ``malformed_request`` with a short message of its own:

- a body that is not UTF-8 (or starts with a byte order mark);
- nesting deeper than :data:`MAX_DEPTH` arrays and objects — the parser itself stops at
  Python's recursion limit (refused the same way), and what it returns is measured without
  recursion, in one pass over the values;
- an object with a key twice: JSON leaves the meaning open (the last one wins in Python, the
  first in other parsers), so the body is refused rather than read one way here and another
  way by whoever sent it;
- a ``\\ud800``-style escape that leaves a lone surrogate, which no UTF-8 text can carry (it
  would fail later, when stored or rendered);
- ``NaN``, ``Infinity``, a number that overflows a double and an integer literal of more than
  :data:`MAX_NUMBER_DIGITS` digits.

:class:`StrictContentNegotiation` picks a parser only for a media type named exactly: a
request ``Content-Type`` with a wildcard (``*/*``, ``application/*``) or a charset other than
UTF-8 is 415 ``unsupported_media_type`` instead of being read as JSON by DRF's matching, which
lets a wildcard on either side match.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import IO, Any

from django.utils.http import parse_header_parameters
from rest_framework.exceptions import ParseError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from alfred.problems import PROBLEM_CONTENT_TYPE as PROBLEM_JSON
from alfred.problems import shown

# Deeper than any workflow input (two levels) needs, shallow enough that nothing recursive
# downstream (the parser, JSON Schema, canonical JSON) comes near Python's recursion limit.
MAX_DEPTH = 32
# An integer literal longer than this is refused before int() sees it (slow on thousands of
# digits, and a ValueError past 4,300). A shorter one beyond I-JSON's 2**53 is still refused,
# with 422, by canonical JSON (executions.identity).
MAX_NUMBER_DIGITS = 64

_UTF8 = ("utf-8", "utf8")
MAX_MEDIA_TYPE_LENGTH = 256  # as DRF's DefaultContentNegotiation


class _Refused(ValueError):
    """Raised from the decoder's hooks; its message is Alfred's, shown as it is."""


def _depth_exceeded(data: Any, limit: int) -> bool:
    """Whether arrays and objects nest deeper than ``limit`` in ``data`` (linear, no
    recursion: a scan of the text would have to understand strings, and a regular expression
    that does backtracks quadratically on an unclosed one)."""
    pending = [(data, 1)] if isinstance(data, dict | list) else []
    while pending:
        value, depth = pending.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        pending.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"The key {shown(key)} appears twice in one object; send it once.")
        out[key] = value
    return out


def _holds_lone_surrogate(data: Any) -> bool:
    """Whether a string or a key anywhere in ``data`` holds a lone surrogate (one C-speed
    pass: UTF-8 cannot encode one)."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON number; send a finite number.")


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _Refused("A number in the body does not fit a double; send a smaller one.")
    return value


def _int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _Refused(f"An integer in the body has more than {MAX_NUMBER_DIGITS} digits.")
    return int(literal)


def json_loads_strict(raw: bytes) -> Any:
    """``raw`` as strict JSON, or :class:`ParseError` with a message of Alfred's own."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"The body is not valid UTF-8 (byte {exc.start}).") from None
    if text.startswith("\ufeff"):
        raise ParseError("The body starts with a byte order mark; send UTF-8 without one.")
    too_deep = f"The body nests arrays and objects deeper than {MAX_DEPTH} levels."
    try:
        data = json.loads(
            text,
            object_pairs_hook=_object,
            parse_constant=_constant,
            parse_float=_float,
            parse_int=_int,
        )
    except _Refused as exc:
        raise ParseError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"The body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
        ) from None
    except ValueError:  # pragma: no cover - the hooks above refuse what int()/float() would
        raise ParseError("The body is not valid JSON.") from None
    except RecursionError:
        raise ParseError(too_deep) from None
    if _depth_exceeded(data, MAX_DEPTH):
        raise ParseError(too_deep)
    if _holds_lone_surrogate(data):
        raise ParseError("A string holds a lone surrogate escape (\\ud800-\\udfff).")
    return data


class StrictJSONParser(BaseParser):
    """DRF's JSON parser with the refusals of this module (see its docstring)."""

    media_type = "application/json"
    renderer_class = JSONRenderer

    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        # The body is at most ALFRED_MAX_BODY_BYTES: ApiGuardMiddleware refused a larger one.
        return json_loads_strict(stream.read())


class StrictContentNegotiation(DefaultContentNegotiation):
    """Selects the parser whose media type the request names exactly (case-insensitive;
    parameters other than ``charset`` ignored). Renderer selection is DRF's, except that
    ``application/problem+json`` in Accept counts as ``application/json``: a problem is JSON,
    and a client that asks for problems (RFC 9457) gets JSON answers, not a 406."""

    def get_accept_list(self, request: Request) -> list[str]:
        return [
            "application/json" + token[len(PROBLEM_JSON) :]
            if token.lower().startswith(PROBLEM_JSON)
            else token
            for token in super().get_accept_list(request)
        ]

    def select_parser(self, request: Request, parsers: Iterable[BaseParser]) -> BaseParser | None:
        content_type = request.content_type or ""
        if len(content_type) > MAX_MEDIA_TYPE_LENGTH:
            return None
        media_type, params = parse_header_parameters(content_type)
        if "*" in media_type:
            return None
        charset = params.get("charset")
        if charset is not None and charset.strip('"').lower() not in _UTF8:
            return None
        for parser in parsers:
            if parser.media_type == media_type:  # parse_header_parameters lower-cases it
                return parser
        return None


class FormatQueryNegotiation(StrictContentNegotiation):
    """The schema view's negotiation: ``?format=json`` (or ``yaml``) picks the rendering, as
    Swagger UI and ``/api/schema/?format=json`` expect. The API itself has no format
    override (``URL_FORMAT_OVERRIDE`` is off): its answers are negotiated by Accept alone."""

    def select_renderer(
        self, request: Request, renderers: Any, format_suffix: str | None = None
    ) -> Any:
        chosen = format_suffix or request.query_params.get("format")
        return super().select_renderer(request, renderers, chosen)
