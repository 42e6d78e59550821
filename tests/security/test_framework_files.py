"""Framework files a run wrote are untrusted: a truncated or corrupted event file, a
metrics.csv past the point limit, a huge (sparse) trainer_state.json and a
training_args.bin that names ``os.system`` are each refused with what was wrong and where,
and none of their content reaches the findings (so nothing of them is stored)."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from replay_tui.capture.frameworks import MAX_POINTS, read_outputs
from replay_tui.gaps import evaluate


def _event_file(path: Path, n: int) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(path))
    for i in range(n):
        w.add_scalar("loss", 1.0 / (i + 1), i)
    w.close()
    (f,) = path.glob("events.out.tfevents.*")
    return f


def test_a_good_event_file_gives_every_scalar(tmp_path: Path) -> None:
    _event_file(tmp_path / "out", 50)
    f = read_outputs(tmp_path, ["out/**"], [])
    (fm,) = f.files.values()
    assert [s for s, _, _ in fm.points["loss"]] == list(range(50))
    assert all(t is not None for _, _, t in fm.points["loss"])
    assert not f.unread


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_event_file_is_refused(tmp_path: Path, damage: str) -> None:
    ev = _event_file(tmp_path / "out", 50)
    data = bytearray(ev.read_bytes())
    if damage == "truncate":
        data = data[: len(data) - 7]
    else:
        data[len(data) // 2] ^= 0xFF  # a record's CRC no longer matches
    ev.write_bytes(bytes(data))
    f = read_outputs(tmp_path, ["out/**"], [])
    rel = ev.relative_to(tmp_path).as_posix()
    assert not f.files  # not one of its points taken
    why = f.unread[rel]
    assert why.startswith("refused: TensorBoard event file " + rel)
    assert "truncated or corrupted" in why


def test_metrics_csv_with_a_million_rows_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "out" / "lightning_logs" / "version_0"
    d.mkdir(parents=True)
    with (d / "metrics.csv").open("w") as fh:
        fh.write("epoch,step,train_loss\n")
        fh.writelines(f"0,{i},0.5\n" for i in range(1_000_000))
    f = read_outputs(tmp_path, ["out/**"], [])
    assert not f.files
    assert f.unread["out/lightning_logs/version_0/metrics.csv"] == (
        "refused: Lightning metrics.csv out/lightning_logs/version_0/metrics.csv:"
        f" more than {MAX_POINTS} points"
    )


def test_a_huge_trainer_state_is_refused_unread(tmp_path: Path) -> None:
    d = tmp_path / "out" / "checkpoint-6"
    d.mkdir(parents=True)
    with (d / "trainer_state.json").open("wb") as fh:
        fh.write(b'{"log_history": [')
        fh.truncate(1 << 30)  # 1 GiB, sparse: nothing written past the start
    f = read_outputs(tmp_path, ["out/**"], [])
    why = f.unread["out/checkpoint-6/trainer_state.json"]
    assert why.startswith("refused: Hugging Face trainer_state.json ")
    assert "out/checkpoint-6/trainer_state.json is 1 GiB" in why and "64 MiB" in why
    assert not f.files


def test_a_trainer_state_over_its_limit_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "out" / "checkpoint-6"
    d.mkdir(parents=True)
    (d / "trainer_state.json").write_bytes(b" " * (64 << 20) + b"{}")  # dense, 64 MiB + 2
    f = read_outputs(tmp_path, ["out/**"], [])
    why = f.unread["out/checkpoint-6/trainer_state.json"]
    assert "64 MiB" in why and not f.files


class _Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned",))


def test_training_args_naming_os_system_is_refused_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "out" / "checkpoint-6"
    d.mkdir(parents=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:  # torch.save's layout
        z.writestr("training_args/data.pkl", pickle.dumps(_Evil(), protocol=2))
        z.writestr("training_args/version", "3\n")
    (d / "training_args.bin").write_bytes(buf.getvalue())
    monkeypatch.chdir(tmp_path)  # where a run os.system would touch its file
    f = read_outputs(tmp_path, ["out/**"], [])
    assert not (tmp_path / "pwned").exists()
    why = f.unread["out/checkpoint-6/training_args.bin"]
    assert why.startswith("refused: Hugging Face training_args.bin out/checkpoint-6/")
    assert "global posix.system" in why or "global os.system" in why
    assert f.config == {} and f.seed is None


def test_a_link_to_a_metrics_file_is_not_followed(tmp_path: Path) -> None:
    d = tmp_path / "out"
    d.mkdir()
    secret = tmp_path / "secret.csv"
    secret.write_text("epoch,step,loss\n0,0,1\n")
    (d / "metrics.csv").symlink_to(secret)
    f = read_outputs(tmp_path, ["out/**"], [])
    assert not f.files  # a link is never read (not even listed as a framework file)


def test_an_empty_metrics_file_is_a_gap_naming_it() -> None:
    from storage.manifest import manifest_from_data
    from tests.compare.test_gaps import clean

    d = clean()
    d["outputs"]["metric_files_unread"] = {"out/v/metrics.csv": "no metric in it"}
    (gap,) = [g for g in evaluate(manifest_from_data(d)) if g.code == "METRICS_SOURCE_EMPTY"]
    assert "out/v/metrics.csv" in gap.message and "no metric in it" in gap.message


def test_metrics_file_naming_a_trainer_state_reads_it_as_one(tmp_path: Path) -> None:
    from replay_tui.capture.metrics import read_metrics_file

    state = b'{"logging_steps": 2, "max_steps": 6, "log_history": [{"loss": 1.5, "step": 2}]}'
    (tmp_path / "trainer_state.json").write_bytes(state)
    assert read_metrics_file(tmp_path, "trainer_state.json").finals == {}  # no settings
    f = read_outputs(tmp_path, [], [], metrics_file="trainer_state.json")
    assert f.files["trainer_state.json"].points == {"loss": [(2, 1.5, None)]}


def test_lightning_cli_config_gives_seed_and_determinism(tmp_path: Path) -> None:
    d = tmp_path / "out" / "lightning_logs" / "version_0"
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(
        "seed_everything: 7\ntrainer:\n  deterministic: true\n  max_epochs: 2\nmodel:\n  lr: 0.05\n"
    )
    (tmp_path / "out" / "config.yaml").write_text("seed_everything: 9\n")  # not LightningCLI's
    f = read_outputs(tmp_path, ["out/**"], [])
    assert f.seed == 7 and f.seed_from == "out/lightning_logs/version_0/config.yaml"
    assert f.deterministic is True
    assert f.config["trainer"] == {"deterministic": True, "max_epochs": 2}
    (d / "config.yaml").write_text("!!python/object/apply:os.system ['touch pwned']\n")
    monkey = read_outputs(tmp_path, ["out/**"], [])
    assert "not YAML" in monkey.unread["out/lightning_logs/version_0/config.yaml"]
    assert not (tmp_path / "pwned").exists()
