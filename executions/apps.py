from django.apps import AppConfig


class ExecutionsConfig(AppConfig):
    """Connects what the lower layers call without importing it: the port the lanes
    services reach executions through (``lanes.effects``), the claim guard and, after every
    terminal transition, the lane reconciler at once (the runtime knows no lanes); the
    problems and gauges the kernel serves. It reads the approval policy, so a policy that
    does not hold stops the process at start."""

    name = "executions"
    # The label the tables, migrations, permissions and admin URLs were made under.
    label = "executions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core.exceptions import ImproperlyConfigured

        from alfred.metrics import state_register
        from alfred.metrics_state import BrokerQueues, SqlGauges, settings_queues
        from alfred.problems import problems_register
        from executions.api.problems import PROBLEMS
        from executions.approvals import PolicyInvalid, policy
        from executions.freezes import freeze_hold
        from executions.lanes.effects import ExecutionLaneEffects
        from executions.lanes.holding import execution_lane_admits_sql, execution_lane_refusal
        from executions.lanes.reconciler import lane_reconcile_on_finish
        from executions.metrics import EXECUTION_GAUGES
        from executions.runtime.registry import (
            claim_guard_register,
            mutation_gate_register,
            stage_queues_all,
        )
        from executions.runtime.terminal import execution_finished
        from lanes.effects import lane_effects_install

        try:
            policy()  # a policy that does not hold stops the process here, not at an approval
        except PolicyInvalid as exc:
            raise ImproperlyConfigured(f"ALFRED_APPROVAL_POLICY: {exc}") from None
        problems_register(*PROBLEMS)
        state_register(SqlGauges(EXECUTION_GAUGES))
        state_register(BrokerQueues(lambda: settings_queues() | stage_queues_all()))
        claim_guard_register(execution_lane_refusal, execution_lane_admits_sql)
        mutation_gate_register(freeze_hold)
        lane_effects_install(ExecutionLaneEffects())
        execution_finished.connect(lane_reconcile_on_finish, dispatch_uid="lanes.reconcile")
