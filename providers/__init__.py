"""Side-effect adapters: AWS (boto3), GitOps (PyGithub), ArgoCD (httpx), and their stand-ins.

Providers know nothing of Django models, executions or the engine (docs/architecture.md, "The
house"): they take explicit configuration (:mod:`providers.config`), raise :mod:`providers.errors`,
and return JSON handles (:mod:`providers.handles`) that a workflow stores in its receipts as
evidence. The workflows translate provider errors into the engine's (retryable, fatal, readiness).
"""
