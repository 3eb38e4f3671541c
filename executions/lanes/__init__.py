"""The executions' side of the lanes (the ``lanes`` app below knows no execution): the
reconciler that reads a lane's owner and decides, which execution holds a lane for a new run
and the claim guard, and the port the lanes services reach executions through."""
