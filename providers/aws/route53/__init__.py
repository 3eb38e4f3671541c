"""Route53: hosted zones, the records at a name, and ONE atomic change batch per request.

Three modules, one dependency direction (adapter → batch → model):

- :mod:`.model` — record sets and hosted zones as plain values, their normalization and wire
  form (no boto3, no I/O);
- :mod:`.batch` — pure logic over those values: a batch's expected pre- and post-state,
  whether observed records hold it, the compare-and-swap batch actually sent, and the
  validation every batch passes first;
- :mod:`.adapter` — :class:`Route53`, the boto3 calls: reads, the change protocol (read,
  compare, send once, resolve an ambiguous failure by reading again), hosted zones, handles,
  and the mapping of failures onto :mod:`providers.errors`. Its docstring is the contract.

Import from here; the names below are the package's public surface.
"""

from providers.aws.route53.adapter import COMMENT_LIMIT, DEFAULT_TIMEOUT, IN_FLIGHT_MARGIN, Route53
from providers.aws.route53.batch import BatchState, compare_and_swap, expected_states
from providers.aws.route53.model import (
    ACTIONS,
    CORE_MEMBERS,
    PROVIDER,
    TRAFFIC_POLICY,
    Action,
    AliasTarget,
    Change,
    Key,
    Record,
    Zone,
    key_of,
    normalize,
    normalize_name,
    record,
    to_wire,
    wire_name,
)

__all__ = [
    "ACTIONS",
    "COMMENT_LIMIT",
    "CORE_MEMBERS",
    "DEFAULT_TIMEOUT",
    "IN_FLIGHT_MARGIN",
    "PROVIDER",
    "TRAFFIC_POLICY",
    "Action",
    "AliasTarget",
    "BatchState",
    "Change",
    "Key",
    "Record",
    "Route53",
    "Zone",
    "compare_and_swap",
    "expected_states",
    "key_of",
    "normalize",
    "normalize_name",
    "record",
    "to_wire",
    "wire_name",
]
