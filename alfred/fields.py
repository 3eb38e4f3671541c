"""Serializer fields that take exactly what the OpenAPI schema says they take, and a
ModelSerializer that plans its answer once (``PlannedSerializer``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework import serializers
from rest_framework.fields import SkipField
from rest_framework.relations import PKOnlyObject


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


# Fields whose representation reads the value alone: never the serializer's context (a
# request, for a URL) nor its parent. Another kind in a planned serializer is refused.
_CONTEXT_FREE = (
    serializers.BigIntegerField,
    serializers.BooleanField,
    serializers.CharField,
    serializers.ChoiceField,
    serializers.DateTimeField,
    serializers.IntegerField,
    serializers.JSONField,
    serializers.PrimaryKeyRelatedField,
    serializers.ReadOnlyField,
)

Reader = Callable[[serializers.Serializer, Any], Any]
_ABSENT = object()  # what a reader gives for a field DRF would leave out (``SkipField``)


class PlannedSerializer(serializers.ModelSerializer):
    """A ModelSerializer whose representation is planned once per class.

    DRF builds a ModelSerializer's fields again for every instance (it reads the model's
    metadata and makes each field anew), and for an execution that cost more than the rest
    of its answer together: about 1 ms of an acceptance's 6. Here the fields are built once,
    on first use, into a plan of readers, one per readable field, that every instance
    follows: a model field is read and shown by its field (built from the model as DRF
    builds it, and shared: none of these keeps state of a representation), a
    ``SerializerMethodField`` calls the method of the instance at hand (with its own
    context). Only fields of the kinds that read their value alone may appear, those kinds
    themselves and not a subclass (``_CONTEXT_FREE``); the answer is DRF's own, which
    ``tests/integration/test_planned_serializers.py`` checks. Input,
    validation and the OpenAPI schema are DRF's as ever."""

    def to_representation(self, instance: Any) -> dict[str, Any]:
        represented: dict[str, Any] = {}
        for name, read in self._plan():
            value = read(self, instance)
            if value is not _ABSENT:
                represented[name] = value
        return represented

    @classmethod
    def _plan(cls) -> list[tuple[str, Reader]]:
        plan: list[tuple[str, Reader]] | None = cls.__dict__.get("_planned")
        if plan is None:
            fields = cls().fields  # a template instance: no context, no parent
            plan = [(n, _reader(f)) for n, f in fields.items() if not f.write_only]
            cls._planned = plan  # type: ignore[attr-defined] # its own: a subclass plans anew
        return plan


def _reader(field: serializers.Field) -> Reader:
    if isinstance(field, serializers.SerializerMethodField):
        method_name = field.method_name

        def call(serializer: serializers.Serializer, obj: Any) -> Any:
            return getattr(serializer, method_name)(obj)

        return call
    if type(field) not in _CONTEXT_FREE:  # a subclass could read the context: refused too
        raise TypeError(f"{field.field_name}: {type(field).__name__} is not planned")
    shown_by: serializers.Field = field  # (typed as any field: each shows its own values)

    def read(serializer: serializers.Serializer, obj: Any) -> Any:
        try:
            value = shown_by.get_attribute(obj)
        except SkipField:  # an absent optional attribute: left out, as DRF leaves it
            return _ABSENT
        shown = value.pk if isinstance(value, PKOnlyObject) else value
        return None if shown is None else shown_by.to_representation(value)

    return read
