"""Settings, from the environment (12-factor). See README "Configuration" for every variable.

With neither ``DATABASE_URL`` nor ``CELERY_BROKER_URL`` set, Alfred uses the embedded stack
(PostgreSQL and Redis from pip wheels, data under ``ALFRED_STATE_DIR``). ``ALFRED_ENV=production``
refuses that and every other insecure default.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from alfred import embedded
from alfred.broker import redis_url_of
from providers.budgets import budgets_parse
from providers.config import ProviderConfig

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

ALFRED_ENV = env.str("ALFRED_ENV", default="development")
PRODUCTION = ALFRED_ENV == "production"
if ALFRED_ENV not in {"development", "production", "test"}:
    raise ImproperlyConfigured("ALFRED_ENV must be development, production or test")

# Outside production a missing key is generated once per state directory, never a constant
# that anyone could read here and forge sessions with.
SECRET_KEY = env.str("ALFRED_SECRET_KEY", default="") or (
    "" if PRODUCTION else embedded.development_secret_key()
)
# Off unless asked for: `make run` asks; a deployment that forgot ALFRED_ENV does not leak.
DEBUG = env.bool("ALFRED_DEBUG", default=False)
ALFRED_PUBLIC_URL = env.str("ALFRED_PUBLIC_URL", default="http://127.0.0.1:8000").rstrip("/")
ALFRED_READ_ONLY = env.bool("ALFRED_READ_ONLY", default=False)
ALFRED_MAX_BODY_BYTES = env.int("ALFRED_MAX_BODY_BYTES", default=64 * 1024)
# Modules whose WORKFLOWS are added to the five (the tests' own workflows).
ALFRED_EXTRA_WORKFLOWS = env.list("ALFRED_EXTRA_WORKFLOWS", default=[])
# A worker's claim on a run; renewed at every step boundary. Longer than any single step.
ALFRED_LEASE_SECONDS = env.float("ALFRED_LEASE_SECONDS", default=120.0)
# How long the next stage's message may take (a queue backlog) before the recovery scan
# publishes the run again.
ALFRED_HANDOFF_GRACE_SECONDS = env.float("ALFRED_HANDOFF_GRACE_SECONDS", default=60.0)
# How long a plan waits for an operator's approval before the execution fails
# (approval_expired). Default: 7 days.
ALFRED_APPROVAL_TTL_SECONDS = env.float("ALFRED_APPROVAL_TTL_SECONDS", default=7 * 24 * 3600.0)
if ALFRED_APPROVAL_TTL_SECONDS <= 0:
    raise ImproperlyConfigured("ALFRED_APPROVAL_TTL_SECONDS: more than 0")
# Who may approve a plan, and how many must (executions.approvals): a TOML file versioned
# with the deployment, read at start; none: one approval, from any operator but the requester.
ALFRED_APPROVAL_POLICY = env.str("ALFRED_APPROVAL_POLICY", default="")
# The platform edge add-domain and onboard-domain point a domain at: A and AAAA alias records
# to this target (a load balancer's or a CloudFront distribution's DNS name and the hosted
# zone id AWS gives it). Unset: those workflows fail their plan (platform_edge_missing).
ALFRED_PLATFORM_EDGE = {
    "dns_name": env.str("ALFRED_PLATFORM_EDGE_DNS_NAME", default="").strip().rstrip(".").lower(),
    "hosted_zone_id": env.str("ALFRED_PLATFORM_EDGE_ZONE_ID", default="").strip(),
    "evaluate_target_health": env.bool("ALFRED_PLATFORM_EDGE_EVALUATE_HEALTH", default=False),
}

# --- Events ---------------------------------------------------------------------------
# Webhook targets at loopback, private or reserved addresses (link-local and metadata ones
# never): off unless asked for; `make run` asks (its receivers are local).
ALFRED_WEBHOOK_ALLOW_PRIVATE = env.bool("ALFRED_WEBHOOK_ALLOW_PRIVATE", default=False)
# Seconds before each attempt of a delivery: the first at once, then after each failure.
# After the last, the delivery is failed (an operator can redeliver it).
ALFRED_WEBHOOK_RETRY_SCHEDULE = [
    float(seconds)
    for seconds in env.list(
        "ALFRED_WEBHOOK_RETRY_SCHEDULE",
        default=["0", "5", "300", "1800", "7200", "18000", "36000", "36000"],
    )
]
if not ALFRED_WEBHOOK_RETRY_SCHEDULE or min(ALFRED_WEBHOOK_RETRY_SCHEDULE) < 0:
    raise ImproperlyConfigured("ALFRED_WEBHOOK_RETRY_SCHEDULE: one or more seconds, none < 0")
ALFRED_WEBHOOK_TIMEOUT_SECONDS = env.float("ALFRED_WEBHOOK_TIMEOUT_SECONDS", default=15.0)
# Inbound notifications (delivery/receivers.py): GitHub's webhook secret (X-Hub-Signature-256) and
# the bearer secret ArgoCD's notifications service sends. Unset: that receiver answers 401.
ALFRED_GITHUB_WEBHOOK_SECRET = env.str("ALFRED_GITHUB_WEBHOOK_SECRET", default="")
ALFRED_ARGOCD_WEBHOOK_SECRET = env.str("ALFRED_ARGOCD_WEBHOOK_SECRET", default="")
# GitHub sends whole pushes (its limit is 25 MB): the receivers take more than other requests.
ALFRED_RECEIVER_MAX_BODY_BYTES = env.int("ALFRED_RECEIVER_MAX_BODY_BYTES", default=4 * 1024 * 1024)
# How often a wait on ArgoCD convergence polls (the receivers above bring a poll forward).
ALFRED_CONVERGE_POLL_SECONDS = env.float("ALFRED_CONVERGE_POLL_SECONDS", default=2.0)
# Every wait's polls come this many times their interval apart (Route53's INSYNC every 2 s,
# ACM's 1-2 s, ArgoCD's ALFRED_CONVERGE_POLL_SECONDS, Lambda's 1 s, a child's 1-5 s): above 1
# a wait spends less of the providers' rate budgets and ends later; the test settings use 0.25.
ALFRED_POLL_SCALE = env.float("ALFRED_POLL_SCALE", default=1.0)
if not 0 < ALFRED_POLL_SCALE <= 100:
    raise ImproperlyConfigured("ALFRED_POLL_SCALE: more than 0, at most 100")
# Server-Sent Events: a keep-alive comment this often; how many events one client may lag
# behind before it is dropped (it reconnects with Last-Event-ID and misses nothing).
ALFRED_SSE_KEEPALIVE_SECONDS = env.float("ALFRED_SSE_KEEPALIVE_SECONDS", default=15.0)
ALFRED_SSE_CLIENT_BUFFER = env.int("ALFRED_SSE_CLIENT_BUFFER", default=1000)

# --- Operations --------------------------------------------------------------------------
# /metrics (the web's; a worker's on ALFRED_WORKER_HTTP_PORT): with a token, any client that
# sends it as a bearer token; without, only clients at these networks (the connection's own
# address: scrape the pod, not through the proxy).
ALFRED_METRICS_TOKEN = env.str("ALFRED_METRICS_TOKEN", default="")
ALFRED_METRICS_NETWORKS = env.list("ALFRED_METRICS_NETWORKS", default=["127.0.0.0/8", "::1/128"])
# The web's /metrics on a port of its own (alfred/metrics_port.py), which nothing in front of
# the web routes to; the web's port then answers /metrics with 404. 0 (the default, `make
# run`): on the web's port. The chart and compose set it: an Ingress or a proxy routing "/"
# would otherwise let the internet in as the proxy's (private) address.
ALFRED_METRICS_PORT = env.int("ALFRED_METRICS_PORT", default=0)
# A worker proves it consumes by running a task it sends to its own queue this often
# (alfred/worker_http.py); its /readyz fails once the last one is three periods old.
ALFRED_WORKER_HEARTBEAT_SECONDS = env.float("ALFRED_WORKER_HEARTBEAT_SECONDS", default=10.0)
# Where a worker serves /healthz, /readyz and /metrics; unset: nowhere (the heartbeat runs).
ALFRED_WORKER_HTTP_PORT = env.int("ALFRED_WORKER_HTTP_PORT", default=0)
# How long a worker asked to stop (SIGTERM) lets its running tasks finish before it cancels
# them (their messages go back to the queue) and exits: under the grace of whatever stops it
# (the chart and compose: 60 s; `make run`: 10 s), with a few seconds to spare
# (alfred/worker_stop.py).
ALFRED_WORKER_STOP_SECONDS = env.float("ALFRED_WORKER_STOP_SECONDS", default=45.0)
# A worker that has not been ready (consumed its heartbeat) for this long stops on its own, so
# that its restart policy starts a new one: the chart's liveness window, for compose too. 0:
# never (alfred/worker_stop.py).
ALFRED_WORKER_LIVENESS_SECONDS = env.float("ALFRED_WORKER_LIVENESS_SECONDS", default=180.0)
# Each worker also consumes a queue of its own (<name>.dq2): the heartbeat's.
CELERY_WORKER_DIRECT = True

_public_host = ALFRED_PUBLIC_URL.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
ALLOWED_HOSTS = env.list(
    "ALFRED_ALLOWED_HOSTS",
    default=[_public_host]
    if PRODUCTION
    else [_public_host, "127.0.0.1", "localhost", "testserver"],
)
CSRF_TRUSTED_ORIGINS = env.list("ALFRED_CSRF_TRUSTED_ORIGINS", default=[ALFRED_PUBLIC_URL])
# Whether the proxy in front is trusted to say how the client connected: X-Forwarded-Proto
# (SECURE_PROXY_SSL_HEADER) and the rightmost X-Forwarded-For entry (the client address the
# login lockout and the throttles' fallback count by). Off everywhere unless asked for: without
# a proxy that overwrites them, a client could claim https or any address.
ALFRED_TRUST_PROXY_HEADERS = env.bool("ALFRED_TRUST_PROXY_HEADERS", default=False)
# The proxies in front of the web process (addresses or networks; empty, the default: none)
# whose X-Forwarded-For and X-Forwarded-Proto it believes for the connection's client and
# scheme (alfred/asgi.py): what the access log, the throttles and /metrics' network check see.
# A connection from anywhere else is taken at its own address, whatever it sends.
ALFRED_TRUSTED_PROXIES = env.list("ALFRED_TRUSTED_PROXIES", default=[])

if PRODUCTION:
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
        raise ImproperlyConfigured("production needs ALFRED_SECRET_KEY: 50+ random characters")
    if DEBUG:
        raise ImproperlyConfigured("production refuses ALFRED_DEBUG=1")
    for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
        if not env.str(name, default=""):
            raise ImproperlyConfigured(f"production needs {name}; the embedded stack is dev-only")
    if not ALFRED_PUBLIC_URL.startswith("https://"):
        raise ImproperlyConfigured("production needs an https:// ALFRED_PUBLIC_URL")
    # Django's only wildcard is a whole "*"; "*.example.com" matches nothing Django would
    # check and "." no real host, so both are refused as mistakes for a wildcard.
    if wild := [h for h in ALLOWED_HOSTS if "*" in h or h.strip(".") == ""]:
        raise ImproperlyConfigured(
            f"production refuses wildcard ALFRED_ALLOWED_HOSTS ({', '.join(wild)}): name the "
            "hosts (a leading dot, .example.com, admits its subdomains)"
        )

# Where AWS, GitHub and ArgoCD are (providers/config.py): `make run` points these at the
# stand-ins and says so with ALFRED_PROVIDERS=sandbox.
ALFRED_PROVIDERS = ProviderConfig.from_env(os.environ)
if ALFRED_PROVIDERS.mode not in {"sandbox", "external"}:
    raise ImproperlyConfigured("ALFRED_PROVIDERS must be sandbox or external")
if PRODUCTION and ALFRED_PROVIDERS.mode == "sandbox":
    raise ImproperlyConfigured("production refuses ALFRED_PROVIDERS=sandbox (the stand-ins)")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "alfred",
    "executions",
    "lanes",
    "workflows",
    "delivery",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "alfred.middleware.ApiGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "alfred.urls"
WSGI_APPLICATION = "alfred.wsgi.application"
ASGI_APPLICATION = "alfred.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------
# True when the database URL was derived from the state directory (no DATABASE_URL): only the
# test session uses it, to know it must start the embedded servers itself.
ALFRED_EMBEDDED = not env.str("DATABASE_URL", default="")
DATABASES = {
    "default": {
        **embedded.database_config(env.str("DATABASE_URL", default=embedded.database_url())),
        "CONN_MAX_AGE": env.int("ALFRED_DB_CONN_MAX_AGE", default=60),
        "CONN_HEALTH_CHECKS": True,
    }
}
# The web process serves on threads of two kinds (alfred.asgi): its WSGI pool's, and those
# Django's ASGI handler makes per event-stream request; connections are per thread, so
# alfred.asgi turns a pool on that all of them share, and checks a connection before a loan
# only when its socket is not silent (alfred.dbpool). Workers and commands (long-lived
# threads) keep persistent connections.
ALFRED_DB_POOL_SIZE = env.int("ALFRED_DB_POOL_SIZE", default=0)
# Threads per web process that serve every request but the event streams (alfred.asgi).
ALFRED_WEB_THREADS = env.int("ALFRED_WEB_THREADS", default=4)
if ALFRED_DB_POOL_SIZE > 0:
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": min(2, ALFRED_DB_POOL_SIZE),
        "max_size": ALFRED_DB_POOL_SIZE,
        "timeout": env.float("ALFRED_DB_POOL_TIMEOUT", default=10.0),
    }
# The stage path's and the outbox's hand-written statements as server-side prepared
# statements (alfred/db.py); off behind a transaction-mode pooler that cannot keep them.
ALFRED_DB_PREPARED = env.bool("ALFRED_DB_PREPARED", default=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Celery -----------------------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=embedded.broker_url())
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_TASK_DEFAULT_QUEUE = "stages"
# First match wins (Celery tries the patterns in order).
CELERY_TASK_ROUTES = {
    "executions.tasks.webhook*": {"queue": "webhooks"},
    "executions.tasks.*": {"queue": "stages"},
    "lanes.tasks.*": {"queue": "scanners"},
}
# Publishing happens after commit, inside the request: fail fast to start_failed rather than
# hang the API when the broker is away (the recovery scan re-dispatches start_pending work).
CELERY_BROKER_CONNECTION_TIMEOUT = env.float("ALFRED_BROKER_CONNECT_TIMEOUT", default=2.0)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}
# Several beats may run (one per host): one leads, holding a lease in the database for this
# many seconds and renewing it every fifth of that; a leader killed outright is replaced once
# it runs out (alfred/beat.py).
CELERY_BEAT_SCHEDULER = "alfred.beat:LeaderScheduler"
ALFRED_BEAT_LEASE_SECONDS = env.float("ALFRED_BEAT_LEASE_SECONDS", default=5.0)
# How long a beat asked to stop may take before it exits anyway (alfred.beat: under every
# grace, `make run`'s 10 s included; the lease it held runs out on its own).
ALFRED_BEAT_STOP_SECONDS = env.float("ALFRED_BEAT_STOP_SECONDS", default=5.0)
if ALFRED_BEAT_LEASE_SECONDS < 1:
    raise ImproperlyConfigured("ALFRED_BEAT_LEASE_SECONDS: 1 or more")
# A file every beat touches at each tick, leader or not (empty: none): its age is the beat's
# liveness probe in the chart and compose (alfred/beat.py, docs/deploy.md).
ALFRED_BEAT_ALIVE_FILE = env.str("ALFRED_BEAT_ALIVE_FILE", default="")
# One message at a time per worker process: a long stage never holds others hostage.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup closes every database connection before and after each task unless
# this is set (then once in 2 × this many): a new PostgreSQL connection per task. Workers keep
# their connections as requests do instead, by Django's own rules (alfred/celery.py).
CELERY_DB_REUSE_MAX = 2**62
# A message is redelivered if not acknowledged within this many seconds. Stage tasks ack when
# they return and never wait inside (waits are durable timers), so an hour is far beyond any
# task; a lease (ALFRED_LEASE_SECONDS) fences the rare redelivery of a task still running.
CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"] = 3600
CELERY_BEAT_SCHEDULE = {
    "timers-scan": {
        "task": "executions.tasks.timers_scan",
        "schedule": env.float("ALFRED_TIMER_SCAN_SECONDS", default=1.0),
        "options": {"queue": "scanners", "expires": 5},
    },
    "lanes-reconcile": {
        "task": "lanes.tasks.reconcile",
        "schedule": env.float("ALFRED_LANE_RECONCILE_SECONDS", default=5.0),
        "options": {"queue": "scanners", "expires": 10},
    },
    "webhooks-scan": {
        "task": "executions.tasks.webhook_relay",
        "schedule": env.float("ALFRED_WEBHOOK_SCAN_SECONDS", default=1.0),
        "options": {"queue": "webhooks", "expires": 5},
    },
    "runs-recover": {
        "task": "executions.tasks.runs_recover",
        "schedule": env.float("ALFRED_RECOVERY_SCAN_SECONDS", default=5.0),
        "options": {"queue": "scanners", "expires": 10},
    },
}
# Retention (executions/retention.py; `manage.py alfred_prune`, docs/runbook.md): an ended
# execution's events, webhook deliveries and attempts, step receipts and timers are deleted
# this many days after it ended; its row, keys, runs, stages, checkpoints and audit stay.
ALFRED_RETENTION_DAYS = env.float("ALFRED_RETENTION_DAYS", default=90.0)
if ALFRED_RETENTION_DAYS <= 0:
    raise ImproperlyConfigured("ALFRED_RETENTION_DAYS: more than 0")
# Beat prunes every this many seconds (0, the default: never; alfred_prune by hand or cron),
# each execution's history written to ALFRED_PRUNE_ARCHIVE_DIR first when that is set.
ALFRED_PRUNE_SCHEDULE_SECONDS = env.float("ALFRED_PRUNE_SCHEDULE_SECONDS", default=0.0)
ALFRED_PRUNE_ARCHIVE_DIR = env.str("ALFRED_PRUNE_ARCHIVE_DIR", default="")
CELERY_BEAT_SCHEDULE["executions-prune"] = {
    "task": "executions.tasks.executions_prune",
    "schedule": ALFRED_PRUNE_SCHEDULE_SECONDS or 3600.0,
    # Listed even when off: django-celery-beat keeps running an entry it once saved.
    "enabled": ALFRED_PRUNE_SCHEDULE_SECONDS > 0,
    "options": {"queue": "scanners", "expires": 60},
}
# The drift watch (executions/drift.py; docs/contract.md, "The drift watch"): each succeeded
# execution's post-condition is read again once per period, the reads spread over it; the
# tick looks for what is due (0 turns the watch off). A certificate that expires within
# ALFRED_DRIFT_CERTIFICATE_DAYS counts as drift (ACM renews an issued certificate well before).
ALFRED_DRIFT_PERIOD_SECONDS = env.float("ALFRED_DRIFT_PERIOD_SECONDS", default=6 * 3600.0)
ALFRED_DRIFT_TICK_SECONDS = env.float("ALFRED_DRIFT_TICK_SECONDS", default=30.0)
ALFRED_DRIFT_CERTIFICATE_DAYS = env.float("ALFRED_DRIFT_CERTIFICATE_DAYS", default=30.0)
if ALFRED_DRIFT_PERIOD_SECONDS < 0 or ALFRED_DRIFT_TICK_SECONDS <= 0:
    raise ImproperlyConfigured(
        "ALFRED_DRIFT_PERIOD_SECONDS: 0 (off) or more; ALFRED_DRIFT_TICK_SECONDS: more than 0"
    )
CELERY_BEAT_SCHEDULE["drift-watch"] = {
    "task": "executions.tasks.drift_watch",
    "schedule": ALFRED_DRIFT_TICK_SECONDS,
    # Listed even when off, as executions-prune.
    "enabled": ALFRED_DRIFT_PERIOD_SECONDS > 0,
    "options": {"queue": "scanners", "expires": ALFRED_DRIFT_TICK_SECONDS},
}
# Beat keeps its schedule in django-celery-beat's IntervalSchedule, in whole seconds: 1.5
# would run every second and 0.25 every 0 seconds, sent as fast as beat can loop.
for _entry, _variable in {
    "timers-scan": "ALFRED_TIMER_SCAN_SECONDS",
    "lanes-reconcile": "ALFRED_LANE_RECONCILE_SECONDS",
    "webhooks-scan": "ALFRED_WEBHOOK_SCAN_SECONDS",
    "runs-recover": "ALFRED_RECOVERY_SCAN_SECONDS",
    "executions-prune": "ALFRED_PRUNE_SCHEDULE_SECONDS",
    "drift-watch": "ALFRED_DRIFT_TICK_SECONDS",
}.items():
    _every = float(CELERY_BEAT_SCHEDULE[_entry]["schedule"])
    if _every < 1 or not _every.is_integer():
        raise ImproperlyConfigured(f"{_variable}: whole seconds, at least 1 (not {_every:g})")
# Rate budgets (alfred/budgets.py; docs/providers.md, "Rate budgets"): every request to a
# provider draws from its budget per account, shared by every process through Redis. A little
# under the documented limits (Route53: 5/s per account; ACM: DescribeCertificate 10/s; Lambda:
# 15/s for its control plane), leaving room for the account's other clients. "off": none.
_BUDGETS = env.str(
    "ALFRED_PROVIDER_BUDGETS",
    default="aws.route53=4/s,aws.acm=8/s,aws.lambda=12/s,github=10/s,argocd=20/s",
)
try:
    ALFRED_PROVIDER_BUDGETS = (
        {} if _BUDGETS.strip().lower() in ("", "off") else budgets_parse(_BUDGETS)
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"ALFRED_PROVIDER_BUDGETS: {exc}") from None
# A request that would wait longer than this for its budget is refused as throttled instead
# (the step's durable retry waits, holding no worker).
ALFRED_PROVIDER_BUDGET_MAX_WAIT_SECONDS = env.float(
    "ALFRED_PROVIDER_BUDGET_MAX_WAIT_SECONDS", default=30.0
)
if not 0 < ALFRED_PROVIDER_BUDGET_MAX_WAIT_SECONDS <= 3600:
    raise ImproperlyConfigured("ALFRED_PROVIDER_BUDGET_MAX_WAIT_SECONDS: more than 0, at most 3600")
CELERY_WORKER_HIJACK_ROOT_LOGGER = False


# --- Cache (throttle and login-failure counters) -----------------------------------------
def _cache_url(broker: str) -> str:
    """The broker's Redis as a redis-py URL (``alfred.broker.redis_url_of``; a ``redis://``
    or ``rediss://`` URL as it is, its options redis-py's too)."""
    if broker.startswith(("redis://", "rediss://")):
        return broker
    url = redis_url_of(broker)
    if url is None:
        raise ImproperlyConfigured("the cache needs a Redis broker, or set ALFRED_CACHE_URL")
    return url


# Shared by every web process, so a limit holds across them. The broker's own Redis and
# database, keys prefixed "alfred:" (nothing of kombu's starts so): so never cache.clear(),
# which is FLUSHDB and would drop queued messages. Short timeouts: the throttles and the login
# lockout let requests through when Redis does not answer (alfred/throttling.py).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": env.str("ALFRED_CACHE_URL", default="") or _cache_url(CELERY_BROKER_URL),
        "KEY_PREFIX": "alfred",
        "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
    }
}

# --- Auth, API ----------------------------------------------------------------------------
# Admin login: after this many failed logins for one username (any case) or from one client
# address, the login form refuses every attempt, the right password too, for the lockout
# window (alfred/login.py).
ALFRED_LOGIN_FAILURES = env.int("ALFRED_LOGIN_FAILURES", default=5)
ALFRED_LOGIN_LOCKOUT_SECONDS = env.int("ALFRED_LOGIN_LOCKOUT_SECONDS", default=900)
if ALFRED_LOGIN_FAILURES < 1 or ALFRED_LOGIN_LOCKOUT_SECONDS < 1:
    raise ImproperlyConfigured("ALFRED_LOGIN_FAILURES and ALFRED_LOGIN_LOCKOUT_SECONDS: 1 or more")


def _throttle_rate(name: str, default: str) -> str | None:
    """A DRF rate (``120/min``: a count per s, min, h or day), or None for "off" or empty."""
    rate = env.str(name, default=default).strip().lower()
    if rate in {"", "off"}:
        return None
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|m|min|h|hour|d|day)", rate):
        raise ImproperlyConfigured(f"{name} must be like 120/min (per s, min, hour, day) or off")
    return rate


# Per principal (a rotated token keeps its predecessor's budget), by the views' throttle_scope;
# read per request by alfred.throttling.PrincipalScopedThrottle, so tests can override them.
ALFRED_THROTTLE_RATES = {
    "trigger": _throttle_rate("ALFRED_THROTTLE_TRIGGER", "120/min"),
    "control": _throttle_rate("ALFRED_THROTTLE_CONTROL", "60/min"),
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
DATA_UPLOAD_MAX_MEMORY_SIZE = ALFRED_MAX_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "alfred.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["alfred.permissions.IsPrincipal"],
    "DEFAULT_PARSER_CLASSES": ["alfred.parsers.StrictJSONParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "alfred.parsers.StrictContentNegotiation",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "alfred.problems.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["alfred.throttling.PrincipalScopedThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
    # No ?format= override: JSON is negotiated by Accept alone (an unknown format was a 404).
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Alfred",
    "DESCRIPTION": (
        "A durable control plane for infrastructure workflows. Every error is "
        "`application/problem+json` (RFC 9457) with a stable `code`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "executions.api.schema.workflow_paths",
        "executions.api.schema.operation_links",
        "alfred.openapi.document_refusals",
        "alfred.openapi.blank_strings",
    ],
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVERS": [{"url": ALFRED_PUBLIC_URL}],
    "ENUM_NAME_OVERRIDES": {
        "ExecutionStatusEnum": "executions.models.ExecutionStatus",
        "StageStatusEnum": "executions.models.StageStatus",
        "LaneStateEnum": "lanes.models.LaneState",
        "EventTypeEnum": "delivery.api.webhooks.EVENT_TYPES",
    },
    # Swagger UI from the sidecar package: the docs page works on a machine without internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = ["alfred.formats"]  # one date format, with the zone, across the admin
STATIC_URL = "static/"
STATIC_ROOT = (
    env.str("ALFRED_STATIC_ROOT", default=str(BASE_DIR / "staticfiles")) if PRODUCTION else None
)
# WhiteNoise serves the admin's and the API docs' assets under uvicorn; in development straight
# from the apps (no collectstatic), in production from STATIC_ROOT (collectstatic at build).
WHITENOISE_USE_FINDERS = not PRODUCTION
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# Readable text by default (`make run`); ALFRED_LOG_FORMAT=json: one JSON object a line, with
# the execution, run, stage and trace ids a line is about (alfred/logs.py), uvicorn's lines
# included. A refused request (4xx) is uvicorn's access line alone: Django's "Bad Request"
# warnings repeated it; its 5xx errors and their tracebacks stay.
ALFRED_LOG_FORMAT = env.str("ALFRED_LOG_FORMAT", default="text")
if ALFRED_LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured("ALFRED_LOG_FORMAT: text or json")
_LOG_LEVEL = env.str("ALFRED_LOG_LEVEL", default="INFO")
_console = {"handlers": ["console"], "propagate": False}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s%(context)s"},
        "json": {"()": "alfred.logs.JsonLines"},
    },
    "filters": {
        "quiet_scans": {"()": "alfred.logs.QuietScans"},
        "context": {"()": "alfred.logs.LogContext"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": ALFRED_LOG_FORMAT,
            "filters": ["quiet_scans", "context"],
        }
    },
    "root": {"handlers": ["console"], "level": _LOG_LEVEL},
    "loggers": {
        # Django's own console handler (DEBUG only) printed each of its lines a second time.
        "django": {**_console, "level": _LOG_LEVEL},
        "django.request": {**_console, "level": "ERROR"},
        # httpx says every request it sends at INFO (a webhook attempt, an ArgoCD poll): the
        # relay and the adapters say what matters of them.
        "httpx": {**_console, "level": "WARNING"},
        **(
            {name: {**_console, "level": "INFO"} for name in ("uvicorn", "uvicorn.access")}
            if ALFRED_LOG_FORMAT == "json"
            else {}
        ),
    },
}

# --- Production hardening (checked by `manage.py check --deploy`) -------------------------
if ALFRED_TRUST_PROXY_HEADERS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if PRODUCTION:
    # Behind a TLS-terminating proxy every request reaches Django as plain http: without
    # ALFRED_TRUST_PROXY_HEADERS=1 (and a proxy that sets X-Forwarded-Proto) this redirect
    # sends every https request back to https, forever. Set the one or turn this off.
    SECURE_SSL_REDIRECT = env.bool("ALFRED_SSL_REDIRECT", default=True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SECURE_HSTS_SECONDS = env.int("ALFRED_HSTS_SECONDS", default=31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"
