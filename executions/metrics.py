"""The executions' and lanes' state at each scrape of ``/metrics``: executions not yet
terminal, the oldest run waiting per lane and reason, timers due but unfired, approvals
pending, lanes by state, webhook backlogs (registered in ``ExecutionsConfig.ready``; the
mechanism and why it reads rather than keeps: ``alfred.metrics_state``)."""

from __future__ import annotations

from alfred.metrics_state import SqlGauge
from executions.models import (
    ACTIVE_STATUSES,
    DeliveryStatus,
    Drift,
    DriftWatch,
    Execution,
    Freeze,
    Hook,
    HookStatus,
    Run,
    StartState,
    Timer,
    TimerPurpose,
    TimerStatus,
    WebhookDelivery,
)
from lanes.models import Lane, LaneWaiter

NO_LANE = "none"  # the lane label of executions that take none (a workflow that queues on no lane)

_E, _R = Execution._meta.db_table, Run._meta.db_table
_ACTIVE = ", ".join(f"'{status}'" for status in sorted(ACTIVE_STATUSES))

EXECUTION_GAUGES: tuple[SqlGauge, ...] = (
    SqlGauge(
        "alfred_executions",
        "Executions not yet terminal, by workflow and status (terminal ones are counted by "
        "alfred_execution_transitions_total).",
        ("workflow", "status"),
        f"SELECT workflow, status, count(*) FROM {_E} WHERE status IN ({_ACTIVE}) GROUP BY 1, 2",  # noqa: S608
    ),
    SqlGauge(
        "alfred_active_runs",
        "Runs of executions not yet terminal, by workflow and the definition version they "
        "started under: an earlier version may leave a deploy once its count is 0.",
        ("workflow", "version"),
        f"""SELECT e.workflow, coalesce(r.definition ->> 'version', 'none'), count(*)
              FROM {_E} e JOIN {_R} r ON r.id = e.current_run_id
             WHERE e.status IN ({_ACTIVE}) GROUP BY 1, 2""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_lane_queue",
        "Executions queued behind each lane's owner.",
        ("lane",),
        f"SELECT lane_id, count(*) FROM {LaneWaiter._meta.db_table} GROUP BY 1",  # noqa: S608
    ),
    SqlGauge(
        "alfred_oldest_run_age_seconds",
        "How long the oldest execution has been in each state, per lane: queued behind the "
        "lane's owner, start_pending (its start message not yet consumed), waiting.",
        ("lane", "state"),
        f"""
        SELECT w.lane_id, 'queued', extract(epoch FROM clock_timestamp() - min(w.created_at))
          FROM {LaneWaiter._meta.db_table} w GROUP BY 1
        UNION ALL
        SELECT coalesce(e.lane_key, '{NO_LANE}'), 'start_pending',
               extract(epoch FROM clock_timestamp() - min(r.created_at))
          FROM {_E} e JOIN {_R} r ON r.id = e.current_run_id
         WHERE e.start_state = '{StartState.START_PENDING}' AND e.status IN ({_ACTIVE})
           AND NOT EXISTS (SELECT 1 FROM {LaneWaiter._meta.db_table} w
                            WHERE w.execution_id = e.id)
         GROUP BY 1
        UNION ALL
        SELECT coalesce(lane_key, '{NO_LANE}'), 'waiting',
               extract(epoch FROM clock_timestamp() - min(updated_at))
          FROM {_E} WHERE status = 'waiting' GROUP BY 1
        """,  # noqa: S608
    ),
    SqlGauge(
        "alfred_timers_overdue",
        "Timers due but not yet fired (the timer scan fires them every second or so).",
        (),
        f"""SELECT count(*) FROM {Timer._meta.db_table}
             WHERE status = '{TimerStatus.PENDING}' AND due_at < clock_timestamp()""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_timer_overdue_seconds",
        "How long the most overdue timer has been due.",
        (),
        f"""SELECT coalesce(extract(epoch FROM clock_timestamp() - min(due_at)), 0)
              FROM {Timer._meta.db_table}
             WHERE status = '{TimerStatus.PENDING}' AND due_at < clock_timestamp()""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_approvals_pending",
        "Executions paused for an operator's approval.",
        (),
        f"""SELECT count(*) FROM {Hook._meta.db_table}
             WHERE status = '{HookStatus.PENDING}' AND operator""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_approval_oldest_seconds",
        "How long the oldest pending approval has waited.",
        (),
        f"""SELECT coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)
              FROM {Hook._meta.db_table}
             WHERE status = '{HookStatus.PENDING}' AND operator""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_freezes_in_force",
        "Change freezes in force now.",
        (),
        f"""SELECT count(*) FROM {Freeze._meta.db_table}
             WHERE starts_at <= clock_timestamp() AND ended_at IS NULL
               AND (ends_at IS NULL OR ends_at > clock_timestamp())""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_executions_held",
        "Executions a change freeze holds before their first change, by freeze.",
        ("freeze",),
        f"""SELECT substr(topic, 8), count(DISTINCT t.run_id)
              FROM {Timer._meta.db_table} t, jsonb_array_elements_text(t.topics) AS topic
             WHERE t.status = '{TimerStatus.PENDING}' AND t.purpose = '{TimerPurpose.HOLD}'
               AND starts_with(topic, 'freeze:') GROUP BY 1""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_executions_drifted",
        "Succeeded executions whose work the drift watch found changed (an open drift), by "
        "workflow.",
        ("workflow",),
        f"""SELECT e.workflow, count(*) FROM {Drift._meta.db_table} d
              JOIN {_E} e ON e.id = d.execution_id
             WHERE d.status = 'open' GROUP BY 1""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_drift_unreadable",
        "Watched executions whose last drift check could not read a provider (a credential, a "
        "resource gone that the check reads through): never taken for in place.",
        (),
        f"""SELECT count(*) FROM {DriftWatch._meta.db_table}
             WHERE retired_at IS NULL AND outcome = 'unreadable'""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_drift_watch_overdue_seconds",
        "How far behind the drift watch is: the age of its most overdue check (0: none due). "
        "It grows when no scanner runs its ticks, or the checks outnumber what a period holds.",
        (),
        f"""SELECT coalesce(extract(epoch FROM clock_timestamp() - min(due_at)), 0)
              FROM {DriftWatch._meta.db_table}
             WHERE retired_at IS NULL AND due_at < (SELECT clock_timestamp())""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_lanes",
        "Lanes by state (recovery_required: blocked for an operator).",
        ("state",),
        f"SELECT state, count(*) FROM {Lane._meta.db_table} GROUP BY 1",  # noqa: S608
    ),
    SqlGauge(
        "alfred_webhook_backlog",
        "Webhook deliveries owed, by endpoint (pending: due, or waiting out a back-off).",
        ("endpoint",),
        f"""SELECT endpoint_id, count(*) FROM {WebhookDelivery._meta.db_table}
             WHERE status = '{DeliveryStatus.PENDING}' GROUP BY 1""",  # noqa: S608
    ),
    SqlGauge(
        "alfred_webhook_oldest_pending_seconds",
        "How long the oldest delivery owed to each endpoint has been owed.",
        ("endpoint",),
        f"""SELECT endpoint_id, extract(epoch FROM clock_timestamp() - min(created_at))
              FROM {WebhookDelivery._meta.db_table}
             WHERE status = '{DeliveryStatus.PENDING}' GROUP BY 1""",  # noqa: S608
    ),
)
