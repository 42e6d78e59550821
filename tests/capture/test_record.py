"""The launcher and the SDK on real git repositories and real training: the torch example
where torch's seeds, determinism switches and checkpoints are the point, the numpy-only
trainer (``NUMPY_SCRIPT``, no torch start) where only what the launcher records is."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.support.training import (
    LOSS_REGEX,
    NUMPY_SCRIPT,
    QUICK,
    cli_env,
    git,
    make_repo,
    record_example,
    replay_tui,
    write_data,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def numpy_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "numpy-repo", numpy=True)


def _record_numpy(store: Path, repo: Path, *args: str, **kw: Any) -> dict[str, Any]:
    return record_example(store, repo, *QUICK, *args, script=NUMPY_SCRIPT, **kw)


def _manifest(store: Path, run_id: str):  # type: ignore[no-untyped-def]
    with RunStore(store) as s:
        return s.manifest(run_id)


def test_same_seed_deterministic_runs_are_identical(repo: Path, store: Path) -> None:
    # Two DataLoader workers and shuffling: the seeded generator must pin the order.
    args = ["--epochs", "1", "--samples", "256", "--workers", "2"]
    a = record_example(store, repo, *args, seed=5)
    b = record_example(store, repo, *args, seed=5)
    assert a["_returncode"] == 0 and b["_returncode"] == 0, a["_stderr"][-2000:]
    ma, mb = _manifest(store, a["run_id"]), _manifest(store, b["run_id"])
    ha = {x.path: x.sha256 for x in ma.outputs.artifacts}
    hb = {x.path: x.sha256 for x in mb.outputs.artifacts}
    assert set(ha) == {"out/model.pt", "out/model.safetensors"}
    assert ha == hb
    # the hashes are the files' real sha256 (computed here, not read back)
    for rel, digest in ha.items():
        assert hashlib.sha256((repo / rel).read_bytes()).hexdigest() == digest
    assert ma.outputs.metric_history["loss"] == mb.outputs.metric_history["loss"]
    assert len(ma.outputs.metric_history["loss"]) == 8
    assert ma.randomness.seed == 5 and ma.randomness.torch == 5
    assert ma.determinism.deterministic_algorithms is True
    assert ma.determinism.cudnn_benchmark is False
    assert ma.env["PYTHONHASHSEED"] == "5"


def test_different_seed_gives_different_weights_and_losses(repo: Path, store: Path) -> None:
    a = record_example(store, repo, *QUICK, seed=1)
    b = record_example(store, repo, *QUICK, seed=2)
    ma, mb = _manifest(store, a["run_id"]), _manifest(store, b["run_id"])
    assert {x.sha256 for x in ma.outputs.artifacts}.isdisjoint(
        {x.sha256 for x in mb.outputs.artifacts}
    )
    assert ma.outputs.metric_history["loss"] != mb.outputs.metric_history["loss"]
    assert ma.config_hash != mb.config_hash  # the seed is a hyperparameter too


def test_code_identity_and_dirty_diff_captured(numpy_repo: Path, store: Path) -> None:
    repo = numpy_repo
    head = git(repo, "rev-parse", "HEAD").strip()
    clean = _record_numpy(store, repo)
    mc = _manifest(store, clean["run_id"])
    assert mc.code.commit == head and mc.code.dirty is False and mc.code.diff_sha256 is None
    assert mc.code.branch == "main"
    script = repo / NUMPY_SCRIPT
    script.write_text(script.read_text().replace("v *= 0.9", "v *= 0.8"))
    (repo / "notes.txt").write_text("untracked\n")
    expected_diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "--binary", "HEAD"], capture_output=True, check=True
    ).stdout
    dirty = _record_numpy(store, repo)
    md = _manifest(store, dirty["run_id"])
    assert md.code.dirty is True
    assert md.code.diff_sha256 == hashlib.sha256(expected_diff).hexdigest()
    assert md.code.untracked == ["notes.txt"]
    with RunStore(store) as s:
        assert s.get_blob(md.code.diff_sha256) == expected_diff
    assert b"v *= 0.8" in expected_diff


def test_changed_data_changes_data_hash(numpy_repo: Path, store: Path) -> None:
    data = numpy_repo / "data" / "train.npz"
    a = _record_numpy(store, numpy_repo)
    write_data(data, seed=99)
    b = _record_numpy(store, numpy_repo)
    da, db = _manifest(store, a["run_id"]).data[0], _manifest(store, b["run_id"]).data[0]
    assert da.path == "data/train.npz" and da.file_count == 1
    assert db.sha256 == hashlib.sha256(data.read_bytes()).hexdigest()
    assert da.sha256 != db.sha256
    assert db.size_bytes == data.stat().st_size


def test_metric_regex_extracts_the_series_the_script_printed(numpy_repo: Path, store: Path) -> None:
    res = _record_numpy(
        store, numpy_repo, extra=["--metric-regex", LOSS_REGEX, "--metric-name", "printed_loss"]
    )
    m = _manifest(store, res["run_id"])
    log = Path(res["log"]).read_text()
    expected = [
        (int(mm.group(1)), float(mm.group(2)))
        for mm in re.finditer(r"^step (\d+) loss (\S+)$", log, re.M)
    ]
    assert len(expected) == 8
    assert m.outputs.metric_history["printed_loss"] == expected
    # the SDK's own series agrees with the printed one to the printed precision
    sdk = m.outputs.metric_history["loss"]
    assert [s for s, _ in sdk] == [s for s, _ in expected]
    assert all(abs(v - w) < 1e-7 for (_, v), (_, w) in zip(sdk, expected, strict=True))
    # every point has its wall time, in seconds since the start, in logging order (the
    # printed line's arrival; the SDK's own clock), within the run's duration
    for name in ("printed_loss", "loss"):
        times = m.outputs.metric_times[name]
        assert len(times) == 8 and times == sorted(times)
        assert times[0] >= 0 and times[-1] <= (m.duration_s or 0) + 1


def test_metrics_file_jsonl(repo: Path, store: Path) -> None:
    script = repo / "emit.py"
    script.write_text(
        "import json\n"
        "with open('m.jsonl', 'w') as f:\n"
        "    for i in range(5):\n"
        "        f.write(json.dumps({'step': i, 'acc': i / 10}) + '\\n')\n"
    )
    proc = replay_tui(
        store,
        "record",
        "--json",
        "--metrics-file",
        "m.jsonl",
        "--",
        "python",
        "emit.py",
        cwd=repo,
    )
    assert proc.returncode == 0, proc.stderr
    m = _manifest(store, json.loads(proc.stdout)["run_id"])
    assert m.outputs.metric_history["acc"] == [(i, i / 10) for i in range(5)]
    assert m.outputs.metrics["acc"] == 0.4


def test_failing_command_is_recorded_as_failed(numpy_repo: Path, store: Path) -> None:
    res = _record_numpy(store, numpy_repo, "--fail-at", "3")
    assert res["_returncode"] == 1
    assert res["status"] == "failed" and res["exit_code"] == 1
    m = _manifest(store, res["run_id"])
    assert m.status == "failed" and m.exit_code == 1
    assert m.outputs.log_tail is not None and "deliberate failure at step 3" in m.outputs.log_tail
    with RunStore(store) as s:
        assert s.verify().ok


def test_ctrl_c_records_interrupted(repo: Path, store: Path) -> None:
    (repo / "slow.py").write_text(
        "import pathlib, time\npathlib.Path('started.flag').write_text('1')\ntime.sleep(60)\n"
    )
    exe = Path(sys.executable).parent / "replay-tui"
    proc = subprocess.Popen(
        [str(exe), "--store", str(store), "record", "--json", "--", "python", "slow.py"],
        cwd=repo,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Wait until the command itself runs (it wrote its flag file): a Ctrl-C while the
    # child interpreter is still starting up ends it with exit 1 instead of the signal's
    # 130, and this test is about the signal.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (repo / "started.flag").exists():
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    summary = json.loads(out)
    assert summary["status"] == "interrupted", err
    assert proc.returncode == 130
    assert _manifest(store, summary["run_id"]).status == "interrupted"


def test_nondeterministic_op_recorded_by_name(repo: Path, store: Path) -> None:
    res = record_example(store, repo, *QUICK, "--nondeterministic-op")
    m = _manifest(store, res["run_id"])
    assert m.determinism.nondeterministic_ops == ["put_"]


def test_no_deterministic_flag_reaches_the_sdk(repo: Path, store: Path) -> None:
    res = record_example(store, repo, *QUICK, extra=["--no-deterministic"])
    m = _manifest(store, res["run_id"])
    assert m.determinism.deterministic_algorithms is False
    assert m.env["REPLAY_TUI_DETERMINISM"] == "off"


def test_sdk_standalone_manifest_is_ingestible(repo: Path, store: Path) -> None:
    env = cli_env()
    env["PYTHONHASHSEED"] = "0"
    proc = subprocess.run(
        ["python", "train_mlp.py", "--data", "data/train.npz", *QUICK, "--seed", "4"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    files = list((repo / "runs").glob("*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["randomness"]["seed"] == 4
    assert data["code"]["commit"] == git(repo, "rev-parse", "HEAD").strip()
    ing = replay_tui(store, "ingest", "--json", str(files[0]))
    assert ing.returncode == 0, ing.stderr
    m = _manifest(store, data["run_id"])
    arts = {a.path: a.sha256 for a in m.outputs.artifacts}
    assert (
        arts["out/model.safetensors"]
        == hashlib.sha256((repo / "out" / "model.safetensors").read_bytes()).hexdigest()
    )


def test_sdk_imports_no_torch_until_used() -> None:
    code = "import sys, replay_tui; replay_tui.seed_everything; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "REPLAY_TUI_SEED": ""},
    ).stdout
    assert out.strip() == "False"


def test_bad_record_arguments_exit_2_and_store_nothing(repo: Path, store: Path) -> None:
    bad = replay_tui(store, "record", "--metric-regex", "(?P<step>\\d+)", "--", "true", cwd=repo)
    assert bad.returncode == 2 and "value" in bad.stderr
    missing = replay_tui(store, "record", "--data", "nope.bin", "--", "true", cwd=repo)
    assert missing.returncode == 2 and "nope.bin" in missing.stderr
    assert not store.exists() or RunStore(store).count_runs() == 0
