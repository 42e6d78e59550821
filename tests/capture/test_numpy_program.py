"""The numpy-only trainer the tests record when they need a run but not torch
(``tests/support/programs/train_numpy.py``): a real, seeded training run whose record
holds what the torch example's does, less torch."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from storage.store import RunStore
from tests.support.training import NUMPY_SCRIPT, QUICK, make_repo, record_example


@pytest.fixture
def numpy_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", numpy=True)


def test_same_seed_gives_the_same_weights_and_another_seed_does_not(
    numpy_repo: Path, tmp_path: Path
) -> None:
    store = tmp_path / "runs.db"
    runs = [
        record_example(store, numpy_repo, *QUICK, seed=s, script=NUMPY_SCRIPT) for s in (4, 4, 5)
    ]
    assert [r["_returncode"] for r in runs] == [0, 0, 0], runs[0]["_stderr"][-2000:]
    with RunStore(store) as s:
        a, b, c = (s.manifest(r["run_id"]) for r in runs)
    hashes = [{x.path: x.sha256 for x in m.outputs.artifacts} for m in (a, b, c)]
    assert set(hashes[0]) == {"out/model.safetensors", "out/optimizer.safetensors"}
    assert hashes[0] == hashes[1] and hashes[0] != hashes[2]
    for rel, digest in hashes[2].items():  # the last run's files are on disk now
        assert hashlib.sha256((numpy_repo / rel).read_bytes()).hexdigest() == digest
    assert a.outputs.metric_history["loss"] == b.outputs.metric_history["loss"]
    assert a.outputs.metric_history["loss"] != c.outputs.metric_history["loss"]
    assert len(a.outputs.metric_history["loss"]) == 8  # 256 samples, batches of 32
    # it never started torch: the SDK seeded Python and numpy only
    assert a.randomness.seed == 4 and a.randomness.torch is None
    assert a.randomness.numpy == 4


def test_unseeded_noise_makes_two_runs_differ(numpy_repo: Path, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    runs = [
        record_example(store, numpy_repo, *QUICK, "--unseeded-noise", seed=4, script=NUMPY_SCRIPT)
        for _ in range(2)
    ]
    with RunStore(store) as s:
        a, b = (s.manifest(r["run_id"]) for r in runs)
    assert a.outputs.metric_history["loss"] != b.outputs.metric_history["loss"]
