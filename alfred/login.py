"""A bound on failed admin logins (password guessing), counted in the shared Redis cache.

Failures are counted twice, for the username (any case) and for the client address, each in
a window that opens at its first failure (``ALFRED_LOGIN_LOCKOUT_SECONDS``). The
``ALFRED_LOGIN_FAILURES``-th failure locks that username or address for a whole window from
then: the form refuses every attempt, the right password too, and refused attempts neither
count nor extend the lock. A successful login clears its username's count; not the address's,
or one valid account would reset the count of an address guessing at others.

Both counts are needed: by username alone, one address guesses at many accounts; by address
alone, many addresses guess at one. Counting by username lets anyone lock an account out
for a window; that is the price of the bound, and the window is short.

Like the throttles it fails open (alfred/throttling.py): with Redis down the admin still logs
in, unbounded, and a warning is logged; operators need the admin most during an incident.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.utils.translation import ngettext

from alfred.throttling import CACHE_ERRORS, client_address

log = logging.getLogger(__name__)


def _count_keys(username: str, address: str | None) -> list[str]:
    # A username is whatever was typed: hashed, it makes a short key of plain characters.
    digest = hashlib.sha256(username.casefold().encode()).hexdigest()[:32]
    keys = [f"login:user:{digest}"]
    if address:
        keys.append(f"login:addr:{address}")
    return keys


def _lock_key(count_key: str) -> str:
    return count_key + ":locked"


def login_lockout_remaining(*, username: str, address: str | None) -> float:
    """Seconds until this username and address may try again; 0 when neither is locked."""
    locks = [_lock_key(key) for key in _count_keys(username, address)]
    try:
        until = cache.get_many(locks).values()
    except CACHE_ERRORS as exc:
        log.warning("login lockout not checked: the cache failed (%s)", exc)
        return 0.0
    return max([u - time.time() for u in until if isinstance(u, int | float)] + [0.0])


def login_failure_record(*, username: str, address: str | None) -> None:
    """Count a failed login; lock the username or address that reached the limit."""
    window = settings.ALFRED_LOGIN_LOCKOUT_SECONDS
    try:
        for key in _count_keys(username, address):
            cache.add(key, 0, window)  # opens the window; incr is atomic across processes
            try:
                failures = cache.incr(key)
            except ValueError:  # the window closed between add and incr
                cache.add(key, 1, window)
                failures = 1
            if failures >= settings.ALFRED_LOGIN_FAILURES:
                cache.set(_lock_key(key), time.time() + window, window)
                cache.delete(key)  # once the lock ends, a fresh window
                log.warning(
                    "admin login locked for %ss after %s failures (username %r, address %s)",
                    window,
                    failures,
                    username,
                    address,
                )
    except CACHE_ERRORS as exc:
        log.warning("failed login not counted: the cache failed (%s)", exc)


def login_failures_clear(*, username: str) -> None:
    try:
        cache.delete(_count_keys(username, None)[0])
    except CACHE_ERRORS as exc:
        log.warning("login failures not cleared: the cache failed (%s)", exc)


class AdminLoginForm(AdminAuthenticationForm):
    """The admin's login form, refusing attempts while the username or address is locked."""

    def clean(self) -> dict[str, object]:
        username = self.cleaned_data.get("username")
        password = self.cleaned_data.get("password")
        if not username or not password:  # the fields' own errors say what is missing
            return super().clean()
        address = client_address(self.request) if self.request is not None else None
        remaining = login_lockout_remaining(username=username, address=address)
        if remaining > 0:
            minutes = max(1, math.ceil(remaining / 60))
            raise ValidationError(
                ngettext(
                    "Too many failed logins; try again in %(minutes)d minute.",
                    "Too many failed logins; try again in %(minutes)d minutes.",
                    minutes,
                ),
                code="locked_out",
                params={"minutes": minutes},
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            login_failure_record(username=username, address=address)
            raise
        login_failures_clear(username=username)
        return cleaned
