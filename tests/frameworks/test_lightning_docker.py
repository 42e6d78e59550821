"""A real Lightning run recorded in a container and replayed on the Docker backend.

The program is the ``CSVLogger`` one of test_framework_runs.py (Lightning's docs' way),
recorded with ``record --image`` and only ``--artifact``, in the framework image that
scripts/framework-image.sh builds on the training image (the same torch, plus
``lightning==2.6.6``, pinned as in the dev extras) and scripts/docker-env.sh names in
train-image.env as REPLAY_TUI_FRAMEWORK_IMAGE / REPLAY_TUI_FRAMEWORK_DIGEST.  Under CI a
missing engine or image is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from replay_tui.gaps import evaluate
from storage.store import RunStore
from tests.support.training import program_repo, record_run, replay_tui

PROGRAM = Path(__file__).resolve().parents[1] / "support" / "programs" / "lightning_csv_train.py"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def framework_image(engine: Any) -> str:
    """The framework image's tag, the image present in the engine."""
    tag = os.environ.get("REPLAY_TUI_FRAMEWORK_IMAGE")
    if not tag or not os.environ.get("REPLAY_TUI_FRAMEWORK_DIGEST"):
        msg = (
            "REPLAY_TUI_FRAMEWORK_IMAGE / REPLAY_TUI_FRAMEWORK_DIGEST unset "
            "(run scripts/docker-env.sh and source its env file)"
        )
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    engine.images.get(tag)  # raises (a failure) when the env file names a missing image
    return tag


def test_lightning_run_recorded_in_its_image_replays_on_docker(
    tmp_path: Path, framework_image: str
) -> None:
    repo = program_repo(tmp_path / "repo", {"train.py": PROGRAM.read_text()})
    store = tmp_path / "store" / "runs.db"
    rid = record_run(
        store, repo, "--image", framework_image, "--artifact", "out/**", "--", "python3", "train.py"
    )
    with RunStore(store) as s:
        m = s.manifest(rid)
    assert m.image is not None and m.image.reference == framework_image
    digest = os.environ["REPLAY_TUI_FRAMEWORK_DIGEST"].split("@", 1)[1]
    assert m.image.digest == digest
    # what Lightning wrote in the container, read with no metric flag
    csv = "out/lightning_logs/version_0/metrics.csv"
    loss = m.outputs.metric_history["train_loss"]
    assert [s for s, _ in loss] == list(range(16))  # 2 epochs x 8 batches, every step
    assert m.outputs.metric_sources == {"train_loss": csv}
    assert "epoch" not in m.outputs.metric_history
    assert m.randomness.seed == 42  # "Seed set to 42", Lightning's own line
    assert m.config["lr"] == 0.05 and m.config["hidden"] == 8  # hparams.yaml
    paths = {a.path for a in m.outputs.artifacts}
    assert csv in paths and "out/lightning_logs/version_0/hparams.yaml" in paths
    assert any(p.endswith(".ckpt") for p in paths), paths
    codes = {g.code for g in evaluate(m)}
    assert "SEED_UNKNOWN" not in codes and "NO_METRICS" not in codes

    rep = replay_tui(store, "replay", rid, "--backend", "docker", "--json")
    assert rep.returncode == 0, (rep.stdout[-2000:], rep.stderr[-3000:])
    out = json.loads(rep.stdout)["replays"][0]
    assert out["verdict"] == "IDENTICAL", out  # same image, same commit, deterministic=True
    with RunStore(store) as s:
        r = s.manifest(out["replay_run"])
        assert r.kind == "replay" and r.replay_of == rid
        assert r.replay is not None and r.replay.backend == "docker"
        assert r.replay.network == "none"
        assert r.image is not None and r.image.digest == digest
        assert r.outputs.metric_history["train_loss"] == loss
        assert s.get_run(rid).last_verdict == out["verdict"]
        assert s.verify().ok
