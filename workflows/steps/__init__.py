"""The one layer that sees both a stage's ``ctx`` and the providers (docs/architecture.md, "The
house"; docs/workflows.md).

Stages call ``ctx.step(key, <function from here>, ...)``; the functions here call the
providers, map their errors once (:mod:`.errors`), hand a dry run read-only adapters and the
simulator, and declare each mutation's compensation beside it (:mod:`.compensations`), which
the engine finds through its registry by the receipt's ``resource`` and ``action``.
"""
