import logging
import os
import threading

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "alfred.settings")
# See ALFRED_DB_POOL_SIZE in settings: a request under ASGI runs on a fresh thread.
os.environ.setdefault("ALFRED_DB_POOL_SIZE", "10")
application = get_asgi_application()


def _release_ready_lanes() -> None:
    """Before serving triggers: lanes left blocked whose owner holds valid readiness evidence
    are released (DESIGN §5). Read-only instances change nothing. If the database does not
    answer yet, serve anyway: /readyz says so, and the next start tries again."""
    from django.conf import settings

    from lanes.reconciler import lanes_release_ready

    if settings.ALFRED_READ_ONLY:
        return
    try:
        lanes_release_ready()
    except Exception:
        logging.getLogger(__name__).exception("releasing ready lanes at start failed")


# On a thread of its own: uvicorn's worker processes (--workers) import the application inside
# a running event loop, where Django refuses a synchronous query.
_start = threading.Thread(target=_release_ready_lanes, name="alfred-release-ready-lanes")
_start.start()
_start.join()
