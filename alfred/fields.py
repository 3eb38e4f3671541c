"""Serializer fields that take exactly what the OpenAPI schema says they take."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictBooleanField(serializers.BooleanField):
    """JSON ``true`` or ``false`` only. DRF's BooleanField also takes ``0``, ``"yes"``,
    ``"on"`` and more, which the schema (``type: boolean``) does not allow: a client that
    sends ``"false"`` meaning *false* and one that sends it by mistake must both be told."""

    default_error_messages = {"invalid": "Must be true or false (a JSON boolean)."}

    def to_internal_value(self, data: Any) -> bool:
        if isinstance(data, bool):
            return data
        self.fail("invalid", input=data)
        raise AssertionError  # fail() raises
