"""The execution resource and everything that drives it: the models (app label
``executions``), acceptance, the controls, the outbox, the lanes' executions side, the API
and the admin; ``runtime/`` is the durable runtime itself (knows no lane, workflow or
provider). docs/architecture.md."""
