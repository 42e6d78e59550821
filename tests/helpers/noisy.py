"""The noisy pair of runs whose difference is within the replicas' noise, as a fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import MakeManifest
from tests.support.app import frozen_clock
from tests.support.noisy_pair import NoisyPair, noisy_pair


@pytest.fixture
def within(store_path: Path, make_manifest: MakeManifest) -> NoisyPair:
    """The noisy pair in the test's store, its verdict WITHIN_NOISE (the clock frozen)."""
    with frozen_clock():
        pair = noisy_pair(store_path, make_manifest)
    assert pair.verdict == "WITHIN_NOISE"
    return pair
