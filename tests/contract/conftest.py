"""The provider contract suite.

By default every test runs against the local stand-ins (``providers/sandbox``), started once
per session on loopback ports. ``ALFRED_CONTRACT_TARGET=real`` runs the same tests against the
accounts the standard environment names (AWS credentials and region, ``ALFRED_GITHUB_*``,
``ALFRED_ARGOCD_*``); tests marked ``standin`` (fault injection, stand-in internals) are then
skipped. See docs/providers.md.

Each provider's fixtures live in ``fixtures/<provider>.py``.
"""

from __future__ import annotations

import os

import pytest

from tests.contract.fixtures.argocd import *  # noqa: F403
from tests.contract.fixtures.aws import *  # noqa: F403
from tests.contract.fixtures.gitops import *  # noqa: F403

REAL = os.environ.get("ALFRED_CONTRACT_TARGET", "sandbox") == "real"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not REAL:
        return
    skip = pytest.mark.skip(reason="needs a stand-in (ALFRED_CONTRACT_TARGET=real)")
    for item in items:
        if item.get_closest_marker("standin"):
            item.add_marker(skip)
