"""What the acceptance benchmark says of the host (bench/acceptance.py): the stall probe that
explains a bad run's tail counts a pause of every process, and nothing when there is none."""

from __future__ import annotations

import os
import signal
import time

from bench.acceptance import STALL_MS, _StallProbe, _stalls_said


def test_a_pause_of_the_host_is_counted_as_a_stall():
    # given: the probe running; then paused, as a host's stall pauses every process
    with _StallProbe() as probe:
        time.sleep(0.2)  # it has started and sleeps its 5 ms at a time
        os.kill(probe._process.pid, signal.SIGSTOP)
        time.sleep(0.15)
        os.kill(probe._process.pid, signal.SIGCONT)
        time.sleep(0.1)

    # then: one stall about as long as the pause (a real stall of this host, 10-35 ms, may
    # come too)
    paused = [stall for stall in probe.stalls if stall > 100]
    assert len(paused) == 1 and paused[0] < 1000
    assert f"stalled {len(probe.stalls)} times" in _stalls_said(probe.stalls)


def test_no_stall_is_said_as_none():
    assert _stalls_said([]) == (
        f"The host did not stall during it (no idle 5 ms sleep ran {STALL_MS:.0f} ms over)."
    )
