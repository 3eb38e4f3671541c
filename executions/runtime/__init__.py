"""The durable runtime: stages run under a fenced lease, steps recorded once, waits that hold
no worker, rollback from receipts. It knows no lane, no workflow and no provider: what it runs
is registered with it (``registry``)."""
