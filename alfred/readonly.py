"""``ALFRED_READ_ONLY=1``: an instance that serves inspection and changes nothing.

Three layers hold it: the middleware answers every unsafe HTTP method with 503 (the API's
``read_only_instance`` problem; the admin's page) except the admin's login and logout; the
admin shows no write and no action; and every service that writes on a person's behalf
(controls, lane recovery, tokens, users) calls :func:`writes_allowed` first, so a management
command refuses too. Background work that mutates does not run (the stage task, the scans,
the reconciler, ``alfred.asgi``'s start-up release). Outside this: Django's own commands
(``migrate``, ``createsuperuser``, ``changepassword``), sessions written by an admin login, and
the beat scheduler's bookkeeping of its own schedule."""

from __future__ import annotations

from django.conf import settings


class ReadOnlyInstance(Exception):
    def __init__(self) -> None:
        super().__init__("this Alfred instance is read-only: it serves inspection only")


def read_only() -> bool:
    return bool(settings.ALFRED_READ_ONLY)


def writes_allowed() -> None:
    if read_only():
        raise ReadOnlyInstance
