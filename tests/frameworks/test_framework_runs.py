"""Real Lightning and Hugging Face programs, recorded with ``record`` and no metric flag
(only ``--artifact``): the manifest holds what the frameworks wrote (metric histories,
the seed, determinism, config), and each replays on the local backend.

Each program trains a tiny model on the CPU in seconds; what takes time is importing
the framework (about 10 s a run here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from replay_tui.capture.frameworks import observe
from replay_tui.gaps import evaluate
from storage.manifest import RunManifest
from storage.store import RunStore
from tests.helpers.commands import RECORD_DEEP_OUTPUTS
from tests.helpers.repos import commit_repo
from tests.support.training import replay_tui

PROGRAMS = Path(__file__).resolve().parents[1] / "support" / "programs"

pytestmark = pytest.mark.slow


def _repo(tmp_path: Path, program: str) -> Path:
    files = {"train.py": (PROGRAMS / program).read_text()}
    return commit_repo(tmp_path / "repo", files, ignore="out/\n")


def _record(
    tmp_path: Path, program: str, *args: str, record_args: tuple[str, ...] = ()
) -> tuple[Path, RunManifest]:
    repo = _repo(tmp_path, program)
    store = tmp_path / "store" / "runs.db"
    command = ("--", sys.executable, "train.py", *args)
    proc = replay_tui(store, *RECORD_DEEP_OUTPUTS, *record_args, *command, cwd=repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with RunStore(store) as s:
        return store, s.manifest(json.loads(proc.stdout)["run_id"])


def _replay(store: Path, run_id: str) -> dict[str, object]:
    rep = replay_tui(store, "replay", run_id, "--backend", "local", "--json")
    assert rep.returncode == 0, (rep.stdout[-2000:], rep.stderr[-3000:])
    out = json.loads(rep.stdout)["replays"][0]
    assert isinstance(out, dict)
    return out


def test_lightning_csv_logger_run_is_read_and_replays(tmp_path: Path) -> None:
    store, m = _record(tmp_path, "lightning_csv_train.py")
    csv = "out/lightning_logs/version_0/metrics.csv"
    loss = m.outputs.metric_history["train_loss"]
    assert [s for s, _ in loss] == list(range(16))  # 2 epochs x 8 batches, every step
    assert m.outputs.metric_sources == {"train_loss": csv}
    assert "epoch" not in m.outputs.metric_history
    assert m.randomness.seed == 42  # "Seed set to 42", Lightning's own line
    # Trainer(deterministic=True) in a plain script (no LightningCLI, no SDK): torch's own
    # switches, observed at the end of the program
    d = m.determinism
    assert d.deterministic_algorithms is True
    assert d.cublas_workspace_config == ":4096:8"  # what Lightning sets with it
    assert d.cudnn_benchmark is False and d.cudnn_deterministic is False  # left as they were
    assert d.source == observe.SOURCE
    assert m.config["lr"] == 0.05 and m.config["hidden"] == 8  # hparams.yaml
    cs = m.config_source
    assert cs is not None and cs.framework_files == ["out/lightning_logs/version_0/hparams.yaml"]
    codes = {g.code for g in evaluate(m)}
    assert "SEED_UNKNOWN" not in codes and "NO_METRICS" not in codes
    assert "DETERMINISM_UNKNOWN" not in codes and "DETERMINISM_OFF" not in codes
    out = _replay(store, m.run_id)
    assert out["verdict"] in ("IDENTICAL", "EQUIVALENT"), out


def test_lightning_tensorboard_run_is_read_and_replays(tmp_path: Path) -> None:
    store, m = _record(tmp_path, "lightning_csv_train.py", "--logger", "tensorboard")
    (source,) = set(m.outputs.metric_sources.values())
    assert source.startswith("out/lightning_logs/version_0/events.out.tfevents.")
    loss = m.outputs.metric_history["train_loss"]
    assert [s for s, _ in loss] == list(range(16))
    times = m.outputs.metric_times["train_loss"]  # each point's wall time, in the run
    assert len(times) == 16 and times == sorted(times) and 0 <= times[0] <= m.duration_s + 1
    assert m.randomness.seed == 42
    out = _replay(store, m.run_id)
    # the event file's name holds time, host and pid: paired by what it is
    assert out["verdict"] in ("IDENTICAL", "EQUIVALENT"), out


def test_hf_trainer_run_is_read_and_replays(tmp_path: Path) -> None:
    store, m = _record(tmp_path, "hf_trainer_train.py", record_args=("--seed", "7"))
    state = "out/checkpoint-6/trainer_state.json"
    h = m.outputs.metric_history
    assert [s for s, _ in h["loss"]] == [2, 4, 6]
    assert set(h) == {"loss", "grad_norm", "learning_rate"}  # settings are no metrics
    assert "logging_steps" not in m.outputs.metrics and "max_steps" not in m.outputs.metrics
    assert m.outputs.metric_sources == {n: state for n in h}
    # TrainingArguments, read without pickle
    assert m.config["seed"] == 42 and m.config["learning_rate"] == 0.001
    assert m.config["full_determinism"] is False and m.config["max_steps"] == 6
    assert m.config["lr_scheduler_type"] == "linear"
    assert "hub_token" not in m.config
    # handed 7 by record --seed, the program seeded 42: the program's record wins, and
    # the contradiction is a gap
    assert m.randomness.seed == 42 and m.randomness.seed_handed == 7
    gaps = {g.code: g for g in evaluate(m)}
    assert "handed 7, the program seeded 42" in gaps["SEED_CONTRADICTED"].message
    out = _replay(store, m.run_id)
    assert out["verdict"] in ("IDENTICAL", "EQUIVALENT"), out
