"""The admin login form bounds failed logins per username and per client address.

Counters live in Redis and outlive a test: every test logs in as a new username from a new
address (documentation-range IPv6), so no count carries over.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
LOCKED = "Too many failed logins; try again in"
WRONG = "Please enter the correct username and password"


def _address() -> str:
    return f"2001:db8::{uuid.uuid4().hex[:4]}:{uuid.uuid4().hex[:4]}"


@pytest.fixture
def username() -> str:
    name = f"alice-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_user(name, password=PASSWORD, is_staff=True)
    return name


def _attempt(username: str, password: str, address: str, **headers: str) -> tuple[bool, str]:
    """Whether the login succeeded, and the page's text when it did not."""
    client = Client(REMOTE_ADDR=address, headers=headers)
    response = client.post(
        "/admin/login/", {"username": username, "password": password, "next": "/admin/"}
    )
    if response.status_code == 302:
        return True, ""
    assert response.status_code == 200
    return False, response.content.decode()


def test_the_right_password_is_refused_after_five_failures(username):
    # given: five wrong passwords for one username
    address = _address()
    for _ in range(5):
        ok, page = _attempt(username, "wrong", address)
        assert not ok and WRONG in page

    # when: the right one
    ok, page = _attempt(username, PASSWORD, address)

    # then: refused, saying for how long
    assert not ok
    assert "Too many failed logins; try again in 15 minutes." in page


def test_the_username_is_counted_in_any_case_and_from_any_address(username):
    # given: five failures, each in another case and from another address
    for variant in (username.upper(), username, username.title(), username.upper(), username):
        _attempt(variant, "wrong", _address())

    # when / then: the username is locked from a fresh address too
    ok, page = _attempt(username, PASSWORD, _address())
    assert not ok and LOCKED in page


def test_an_address_is_locked_after_five_failures_for_any_usernames(username):
    # given: one address guessed at five other usernames
    address = _address()
    for i in range(5):
        _attempt(f"nobody-{i}-{uuid.uuid4().hex[:6]}", "wrong", address)

    # when / then: a real user is refused from that address, and logs in from another
    ok, page = _attempt(username, PASSWORD, address)
    assert not ok and LOCKED in page
    assert _attempt(username, PASSWORD, _address())[0]


def test_behind_a_trusted_proxy_the_address_is_the_one_the_proxy_appended(username, settings):
    # given: a trusted proxy, and one client (whatever it puts first) that guessed five times
    settings.ALFRED_TRUST_PROXY_HEADERS = True
    proxy, guesser = _address(), _address()
    for i in range(5):
        forwarded = f"{_address()}, {guesser}"  # the client's own claim, then the proxy's entry
        _attempt(f"nobody-{i}-{uuid.uuid4().hex[:6]}", "wrong", proxy, x_forwarded_for=forwarded)

    # when / then: that client is locked out, however it starts the header; others behind
    # the same proxy are not
    ok, page = _attempt(username, PASSWORD, proxy, x_forwarded_for=f"{_address()}, {guesser}")
    assert not ok and LOCKED in page
    assert _attempt(username, PASSWORD, proxy, x_forwarded_for=_address())[0]


def test_four_failures_are_not_a_lock_and_a_success_clears_them(username):
    # given: four failures, then the right password
    address_a, address_b = _address(), _address()
    for _ in range(4):
        _attempt(username, "wrong", address_a)
    assert _attempt(username, PASSWORD, address_a)[0]

    # when: four more failures (from elsewhere, so the address's count is not the limit)
    for _ in range(4):
        _attempt(username, "wrong", address_b)

    # then: the username is not locked: the success cleared the first four
    assert _attempt(username, PASSWORD, _address())[0]


def test_the_lock_ends_when_the_window_passes(username, settings):
    # given: a one-second window, and the username locked by a single failure
    settings.ALFRED_LOGIN_LOCKOUT_SECONDS = 1
    settings.ALFRED_LOGIN_FAILURES = 1
    address = _address()
    _attempt(username, "wrong", address)
    ok, page = _attempt(username, PASSWORD, address)
    assert not ok and "try again in 1 minute." in page

    # when: the window passes
    time.sleep(1.2)

    # then: the right password logs in
    assert _attempt(username, PASSWORD, address)[0]


def test_a_cache_that_fails_does_not_lock_the_admin_out(username, settings, caplog):
    # given: a cache whose Redis does not answer
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        }
    }
    address = _address()

    # when: many failures, then the right password
    with caplog.at_level(logging.WARNING, logger="alfred.login"):
        for _ in range(6):
            _attempt(username, "wrong", address)
        ok, _ = _attempt(username, PASSWORD, address)

    # then: logged in, and the missing bound said so
    assert ok
    assert "the cache failed" in caplog.text
