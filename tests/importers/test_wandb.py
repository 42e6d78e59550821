"""``replay-tui import wandb`` on run folders written by the real wandb client (offline).

A tiny torch program logs to W&B from a real git repository with an uncommitted change
(so W&B stores ``diff.patch``); one run finishes, one crashes.  The imported manifests
are checked field by field against the run folder; a truncated or corrupt ``.wandb``
log and a folder that is no run are refused (exit 2) with the store's ledger head
unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replay_tui.gaps import evaluate
from replay_tui.importers.wandb import RunFolder, WandbLogError, find_log, read_records
from replay_tui.replay.consent import run_origin
from storage.manifest import config_hash
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.helpers.repos import commit_repo
from tests.support.training import git

PROGRAM = Path(__file__).resolve().parents[1] / "support" / "programs" / "wandb_train.py"
REMOTE = "https://bot:t0ken@git.example.invalid/team/tiny.git"

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REPLAY_TUI_STORE", None)
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="false")
    return env


def _cli(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "replay-tui"
    return subprocess.run(
        [str(exe), "--store", str(store), *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _ledger_head(store: Path) -> tuple[int, str] | None:
    with sqlite3.connect(store) as conn:
        row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def _train(repo: Path, *args: str) -> Path:
    before = set((repo / "wandb").glob("offline-run-*")) if (repo / "wandb").exists() else set()
    proc = subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=repo,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "--crash" in args or proc.returncode == 0, proc.stderr[-3000:]
    (new,) = set((repo / "wandb").glob("offline-run-*")) - before
    return new


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    files = {"train.py": PROGRAM.read_text()}
    repo = commit_repo(
        tmp_path_factory.mktemp("wandb") / "repo", files, "tiny program", ignore="wandb/\n*.pt\n"
    )
    git(repo, "remote", "add", "origin", REMOTE)
    with (repo / "train.py").open("a") as f:
        f.write("# an uncommitted change\n")
    ok = _train(repo, "--lr", "0.05", "--steps", "5")
    crashed = _train(repo, "--lr", "0.5", "--crash")
    return {
        "repo": repo,
        "commit": git(repo, "rev-parse", "HEAD").strip(),
        "ok": ok,
        "crashed": crashed,
    }


def test_import_offline_runs_field_by_field(runs: dict[str, Any], tmp_path: Path) -> None:
    store = tmp_path / "store" / "runs.db"
    ok_dir: Path = runs["ok"]
    # the saved checkpoint is a link into the project folder: trusted only when named
    repo = str(runs["repo"])
    proc = _cli(
        store, "import", "wandb", str(ok_dir), str(runs["crashed"]), "--trust-root", repo, "--json"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["imported"] == 2, out
    ids = [r["run_id"] for r in out["runs"]]
    with RunStore(store) as s:
        m, mc = s.manifest(ids[0]), s.manifest(ids[1])
    wandb_id = ok_dir.name.rsplit("-", 1)[1]
    # source and identity
    assert m.source is not None
    assert (m.source.tracker, m.source.run_id, m.source.experiment) == ("wandb", wandb_id, "tiny")
    assert m.source.uri == str(ok_dir.resolve())
    assert m.status == "succeeded" and m.exit_code == 0
    assert mc.status == "failed" and mc.exit_code not in (0, None)
    # config, with the command line's own view kept apart
    assert m.config == {"lr": 0.05, "steps": 5, "model": {"width": 4}}
    assert m.config_hash == config_hash(m.config)
    assert m.config_source is not None and m.config_source.source == "tracker"
    assert m.config_source.argv == {"lr": 0.05, "steps": 5}
    assert m.argv == ["python3", "train.py", "--lr", "0.05", "--steps", "5"]
    # every history step, and the summary
    assert [p[0] for p in m.outputs.metric_history["loss"]] == [0, 1, 2, 3, 4]
    times = m.outputs.metric_times["loss"]  # each row's _runtime: seconds since the start
    assert len(times) == 5 and times == sorted(times) and times[0] >= 0
    assert times[-1] <= (m.duration_s or 0) + 1
    halves = [round(v, 9) for _, v in m.outputs.metric_history["half"]]
    assert halves == [round(v / 2, 9) for _, v in m.outputs.metric_history["loss"]]
    assert m.outputs.metrics["best_loss"] == 0.125
    assert m.outputs.metrics["loss"] == m.outputs.metric_history["loss"][-1][1]
    assert [p[0] for p in mc.outputs.metric_history["loss"]] == [0]
    # git: remote without its credentials, commit, and the stored diff
    assert m.code.commit == runs["commit"]
    assert m.code.repo_url == "https://git.example.invalid/team/tiny.git"
    diff = (ok_dir / "files" / "diff.patch").read_bytes()
    assert b"an uncommitted change" in diff
    assert m.code.dirty is True and m.code.diff_sha256 == hashlib.sha256(diff).hexdigest()
    # environment from W&B's environment record and requirements.txt
    assert m.environment.python_version == ".".join(map(str, sys.version_info[:3]))
    reqs = (ok_dir / "files" / "requirements.txt").read_text().split()
    assert m.environment.packages is not None and set(m.environment.packages) == set(reqs)
    assert any(p.startswith("torch==") for p in m.environment.packages)
    assert m.hardware.cpu_count == os.cpu_count()
    assert m.environment.os and m.environment.hostname
    # the saved checkpoint: hashed and kept; the code snapshot is not an output
    arts = {a.path: a for a in m.outputs.artifacts}
    assert set(arts) == {"model.pt"}
    pt = (runs["repo"] / "model.pt").read_bytes()
    assert arts["model.pt"].sha256 == hashlib.sha256(pt).hexdigest()
    assert arts["model.pt"].kind == "checkpoint" and arts["model.pt"].tensor_sha256
    kept = ObjectStore.beside(store).get(hashlib.sha256(pt).hexdigest())
    assert kept is not None and kept.read_bytes() == pt
    # the diff and the log are in the store
    with RunStore(store) as s:
        assert s.get_blob(hashlib.sha256(diff).hexdigest()) == diff
        assert m.outputs.log_sha256 is not None
        log = s.get_blob(m.outputs.log_sha256)
    assert log is not None and b"step 4 loss" in log
    # not recorded by W&B: None, with its gap; nothing guessed
    assert m.image is None and m.randomness.seed is None and m.data == []
    codes = {g.code for g in evaluate(m)}
    assert {"IMAGE_NONE", "SEED_UNKNOWN", "IMPORTED_RUN", "CODE_DIRTY_DIFF_STORED"} <= codes
    assert "CONFIG_MISSING" not in codes and "PACKAGES_MISSING" not in codes
    assert m.tags == {"baseline": ""}
    # the store remembers where the run came from; the local backend will not run it
    with RunStore(store) as s:
        assert run_origin(s, m.run_id) == "import:wandb"
    local = _cli(store, "replay", m.run_id, "--backend", "local")
    assert local.returncode == 2 and "import:wandb" in local.stderr, local.stderr[-2000:]
    # shown like any other run
    assert _cli(store, "gaps", m.run_id, "--json").returncode == 0
    stats = _cli(store, "stats", "--json")
    assert stats.returncode == 0, stats.stderr[-2000:]

    # the same run again, even from a copy of its folder, is not stored twice
    head = _ledger_head(store)
    copy = tmp_path / "copied" / ok_dir.name
    shutil.copytree(ok_dir, copy, symlinks=True)
    again = _cli(store, "import", "wandb", str(copy), str(ok_dir), "--trust-root", repo, "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    out2 = json.loads(again.stdout)
    assert out2["imported"] == 0 and out2["already"] == 1
    assert out2["runs"][0]["run_id"] == ids[0]
    assert _ledger_head(store) == head


def test_reader_uses_wandb_records(runs: dict[str, Any]) -> None:
    from wandb.proto import wandb_internal_pb2

    records = list(read_records(find_log(runs["ok"])))
    assert all(isinstance(r, wandb_internal_pb2.Record) for r in records)
    kinds = {r.WhichOneof("record_type") for r in records}
    assert {"run", "history", "summary", "environment", "exit"} <= kinds
    rf = RunFolder(runs["ok"], find_log(runs["ok"]))
    assert rf.exit is not None and rf.exit.exit_code == 0


def test_corrupt_truncated_and_foreign_folders_are_refused(
    runs: dict[str, Any], tmp_path: Path
) -> None:
    store = tmp_path / "runs.db"
    first = _cli(store, "import", "wandb", str(runs["crashed"]))
    assert first.returncode == 0, first.stderr[-2000:]
    head = _ledger_head(store)
    log = find_log(runs["ok"])
    size = log.stat().st_size

    def broken(name: str, edit: Any) -> Path:
        folder = tmp_path / name / runs["ok"].name
        shutil.copytree(runs["ok"], folder, symlinks=True)
        target = folder / log.name
        data = bytearray(target.read_bytes())
        target.write_bytes(bytes(edit(data)))
        return folder

    truncated = broken("truncated", lambda d: d[: size - 5])
    flipped = broken("corrupt", lambda d: d[:200] + bytes([d[200] ^ 0xFF]) + d[201:])
    header = broken("header", lambda d: b"NOTW&B!" + d[7:])
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (truncated, "truncated"),
        (flipped, "checksum mismatch"),
        (header, "not a W&B log"),
        (empty, "no run-*.wandb file"),
        (tmp_path / "missing", "no such run folder"),
    ]
    for folder, words in cases:
        # named beside a good run: nothing of the batch is stored
        proc = _cli(store, "import", "wandb", str(runs["ok"]), str(folder))
        assert proc.returncode == 2, (folder, proc.stdout, proc.stderr[-2000:])
        assert words in proc.stderr and str(folder.name) in proc.stderr, proc.stderr[-2000:]
        assert _ledger_head(store) == head
    with pytest.raises(WandbLogError, match="truncated"):
        list(read_records(find_log(truncated)))
    js = _cli(store, "import", "wandb", str(flipped), "--json")
    assert js.returncode == 2 and "checksum" in json.loads(js.stdout)["error"]
