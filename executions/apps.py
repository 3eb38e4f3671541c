from django.apps import AppConfig
from django.conf import settings


class ExecutionsConfig(AppConfig):
    name = "executions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alfred.problems import problems_register
        from executions.api.problems import PROBLEMS
        from executions.engine.registry import Definition, claim_guard_register, register
        from executions.lane_holding import execution_lane_refusal
        from executions.workflows.registry import all_workflows, register_extra

        problems_register(*PROBLEMS)
        claim_guard_register(execution_lane_refusal)
        for module in settings.ALFRED_EXTRA_WORKFLOWS:
            register_extra(module)
        for workflow in all_workflows():
            register(
                Definition(
                    name=workflow.name,
                    stages=workflow.stages,
                    run_stage=workflow.run_stage,
                    canonicalize=workflow.canonicalize,
                    deadline_seconds=workflow.deadline_seconds,
                )
            )
