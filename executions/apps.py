from django.apps import AppConfig
from django.conf import settings


class ExecutionsConfig(AppConfig):
    """Besides the engine's registrations, the executions' side of the lanes: the port the
    lanes services reach executions through (``lanes.effects``: lanes import nothing of
    executions, the dependency points executions → lanes) and, after every terminal
    transition, the lane reconciler at once (the engine knows no lanes)."""

    name = "executions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alfred.metrics import state_register
        from alfred.metrics_state import SqlGauges
        from alfred.problems import problems_register
        from executions.api.problems import PROBLEMS
        from executions.engine.registry import claim_guard_register, register
        from executions.engine.terminal import execution_finished
        from executions.lane_effects import ExecutionLaneEffects
        from executions.lane_holding import execution_lane_refusal
        from executions.metrics import EXECUTION_GAUGES
        from executions.workflows.registry import all_workflows, register_extra
        from lanes.effects import lane_effects_install
        from lanes.reconciler import lane_reconcile_on_finish

        problems_register(*PROBLEMS)
        state_register(SqlGauges(EXECUTION_GAUGES))
        claim_guard_register(execution_lane_refusal)
        lane_effects_install(ExecutionLaneEffects())
        execution_finished.connect(lane_reconcile_on_finish, dispatch_uid="lanes.reconcile")
        for module in settings.ALFRED_EXTRA_WORKFLOWS:
            register_extra(module)
        for workflow in all_workflows():
            register(workflow.definition(), *(old.definition() for old in workflow.previous))
