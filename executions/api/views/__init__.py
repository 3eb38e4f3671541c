"""HTTP views, one module per resource: parse, call one service or selector, render. A
service's refusal is answered by the exception handler from the problem table
(:mod:`executions.api.problems`), never caught here.

- :mod:`.executions`: create, list, detail, events;
- :mod:`.controls`: cancel, retry, approve, reject, rollback (``executions.controls.CONTROLS``);
- :mod:`.workflows`: the workflows and their input schemas;
- :mod:`.audit`: the audit log.

The event streams, webhooks and receivers are ``delivery.api``'s.
"""
