"""Test settings: the embedded stack under its own state directory, so the suite never touches
the data of `make run`. DATABASE_URL / CELERY_BROKER_URL still win (.ci/run's services pass)."""

import os
from urllib.parse import urlsplit, urlunsplit

os.environ.setdefault("ALFRED_STATE_DIR", ".alfred/test")
# `make test` runs the suite on two pytest-xdist processes (gw0, gw1): each owns a stack of its
# own, beside the session's (.alfred/test-gw0), so no test shares a database, a broker or a
# worker with another running at that moment. (The processes they start inherit the suffix.)
if os.environ.get("PYTEST_XDIST_WORKER"):
    _suffix = "-" + os.environ["PYTEST_XDIST_WORKER"]
    if not os.environ["ALFRED_STATE_DIR"].endswith(_suffix):
        os.environ["ALFRED_STATE_DIR"] += _suffix
# .ci/run's services pass runs on pytest-xdist processes too, all against the machine's one
# Redis (pytest-django gives each its own database, alfred_ci_test_gw0 and so on): each takes a
# broker database of its own, two apart (tests.support.engine_workflows counts effects in the
# one after the broker's). Moved once, here in the pytest process: the processes it starts
# inherit the moved URL, or are given one of their own (tests.support.hosts), and keep it.
_broker = urlsplit(os.environ.get("CELERY_BROKER_URL", ""))
if (
    os.environ.get("PYTEST_XDIST_WORKER")
    and _broker.scheme in ("redis", "rediss")
    and not os.environ.get("ALFRED_TEST_BROKER_MOVED")
):
    _index = int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw"))
    if _index >= 4:  # past that the databases wrap onto another's, or the launcher test's 7
        raise RuntimeError("the machine's services take at most 4 test processes")
    _db = (int(_broker.path.strip("/") or 0) - 2 * _index) % 16
    os.environ["CELERY_BROKER_URL"] = urlunsplit(_broker._replace(path=f"/{_db}"))
    os.environ["ALFRED_TEST_BROKER_MOVED"] = "1"
os.environ.setdefault("ALFRED_ENV", "test")
# The tests' own workflows, and short leases and scan intervals so crash tests run in seconds.
# Set in the environment, so the worker processes the tests start get them too.
os.environ.setdefault("ALFRED_EXTRA_WORKFLOWS", "tests.support.engine_workflows")
os.environ.setdefault("ALFRED_LEASE_SECONDS", "4")
os.environ.setdefault("ALFRED_RECOVERY_SCAN_SECONDS", "1")
os.environ.setdefault("ALFRED_HANDOFF_GRACE_SECONDS", "5")
# Waits poll four times as often (Route53's INSYNC due 0.5 s after the last poll, not 2 s;
# the timer scan, once a second, fires what is due): the stand-ins answer in a fraction of a
# second, so a workflow test spent most of its time between polls.
os.environ.setdefault("ALFRED_POLL_SCALE", "0.25")
# A beat killed by a test is replaced (restarted, or another's) within two seconds.
os.environ.setdefault("ALFRED_BEAT_LEASE_SECONDS", "2")
# The webhook scan only matters to the webhook tests (which set their own): elsewhere it is
# one more background query racing the flush between tests.
os.environ.setdefault("ALFRED_WEBHOOK_SCAN_SECONDS", "30")
# Throttles on, but far above what any test sends, so only tests/integration/test_throttling.py
# (which lowers them) is ever throttled; every test's tokens are new principals anyway.
os.environ.setdefault("ALFRED_THROTTLE_TRIGGER", "100000/min")
os.environ.setdefault("ALFRED_THROTTLE_CONTROL", "100000/min")
# Most tests' stand-ins meter nothing, so their workers draw from no rate budget; the budgets'
# own tests (tests/integration/test_budgets.py) turn both on, as make run has them.
os.environ.setdefault("ALFRED_PROVIDER_BUDGETS", "off")

from alfred.settings import *  # noqa: E402, F403  (the environment above first)

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("ALFRED_TEST_DATABASE", "alfred_test")}  # noqa: F405
