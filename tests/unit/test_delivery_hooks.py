"""The delivery app connects the relay's hint to the outbox when it is ready: an emission that
owes a webhook delivery asks a relay to send it once its transaction commits."""

from __future__ import annotations

from delivery.relay import relay_publish
from executions import outbox


def test_the_relay_is_hinted_after_an_emission_that_owes_a_delivery():
    assert relay_publish in outbox._ON_OWED
