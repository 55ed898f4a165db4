"""Every fuzz target as one deterministic hypothesis test with a small budget.

``python scripts/fuzz.py --minutes N`` runs the same targets for as long as you like.
"""

from __future__ import annotations

import pytest
from fuzz.harness import load, suite_test

TARGETS = load()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz(name: str) -> None:
    suite_test(TARGETS[name])()
