from typing import Any

from django.apps import AppConfig


class LanesConfig(AppConfig):
    name = "lanes"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alfred.problems import problems_register
        from executions.engine.terminal import execution_finished
        from lanes.api import PROBLEMS

        problems_register(*PROBLEMS)
        execution_finished.connect(_reconcile_at_once, dispatch_uid="lanes.reconcile")


def _reconcile_at_once(sender: Any, *, execution_id: str, lane_key: str | None, **_: Any) -> None:
    """After every terminal transition: act on that lane now (beat is the guarantee)."""
    if not lane_key:
        return  # no lane (add-subdomain), or a child under its root's ownership
    import logging

    from lanes.reconciler import lane_reconcile

    try:
        lane_reconcile(lane_key)
    except Exception:
        logging.getLogger(__name__).exception("reconciling %s after %s", lane_key, execution_id)
