"""How the API answers the delivery's own refusal (registered by ``DeliveryConfig.ready``)."""

from __future__ import annotations

from typing import Any

from alfred.problems import ProblemMap
from delivery.relay import DeliveryInFlight

PROBLEMS: tuple[ProblemMap[Any], ...] = (
    # Says when its answer will have been recorded, so the operator knows when to look again.
    ProblemMap(
        DeliveryInFlight,
        "delivery_in_flight",
        members=lambda exc: {
            "delivery": exc.delivery_id,
            "claimed_until": exc.claimed_until.isoformat(),
        },
    ),
)
