"""``replay-tui import mlflow`` on runs written by the real MLflow client.

A tiny torch program logs to MLflow from inside a real git repository (so MLflow itself
records the commit and remote), once to a ``sqlite:///`` store and once to an ``mlruns/``
folder.  The imported manifests are checked field by field against what the client
reads back; unreachable servers, unknown runs and missing stores are refused with the
store (its ledger head) unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from replay_tui.gaps import evaluate
from replay_tui.replay.consent import run_origin
from storage.manifest import config_hash
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.helpers.repos import commit_repo
from tests.support.tracker_runs import ledger_head
from tests.support.training import git

PROGRAM = Path(__file__).resolve().parents[1] / "support" / "programs" / "mlflow_train.py"
REMOTE = "https://ci-bot:s3cret@git.example.invalid/team/tiny.git"
IMAGE = "localhost:5000/team/train@sha256:" + "ab" * 32

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REPLAY_TUI_STORE", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def _cli(store: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "replay-tui"
    return subprocess.run(
        [str(exe), "--store", str(store), *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _start_log(repo: Path, uri: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "train.py", *args],
        cwd=repo,
        env=_env(MLFLOW_TRACKING_URI=uri, MLFLOW_ALLOW_FILE_STORE="true"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _logged(proc: subprocess.Popen[str]) -> str:
    """The run id the program printed last, once it has ended."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return out.strip().splitlines()[-1]


def _log(repo: Path, uri: str, *args: str) -> str:
    return _logged(_start_log(repo, uri, *args))


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A git repo whose program logged three runs to sqlite and one to mlruns/."""
    root = tmp_path_factory.mktemp("mlflow")
    ignore = "out/\nmlruns/\n*.db\nmlartifacts/\n"
    repo = commit_repo(
        root / "repo", {"train.py": PROGRAM.read_text()}, "tiny program", ignore=ignore
    )
    git(repo, "remote", "add", "origin", REMOTE)
    commit = git(repo, "rev-parse", "HEAD").strip()
    db = f"sqlite:///{repo / 'mlflow.db'}"
    # the folder store's run beside the first SQLite one (separate stores); the SQLite
    # runs one after another (the first creates the schema; SQLite takes one writer)
    folder = _start_log(repo, (repo / "mlruns").as_uri(), "--steps", "3")
    try:
        ok = _log(repo, db, "--lr", "0.05", "--image", IMAGE)
        folder_run = _logged(folder)
    finally:
        if folder.poll() is None:
            folder.kill()
            folder.wait()
    failed = _log(repo, db, "--lr", "0.5", "--fail")
    other = _log(repo, db, "--experiment", "other", "--steps", "2")
    return {
        "repo": repo,
        "commit": commit,
        "db": db,
        "ok": ok,
        "failed": failed,
        "other": other,
        "folder_run": folder_run,
    }


def _client_run(uri: str, run_id: str) -> Any:
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=uri)
    return client, client.get_run(run_id)


def test_import_sqlite_store_field_by_field(tracked: dict[str, Any], tmp_path: Path) -> None:
    store = tmp_path / "store" / "runs.db"
    proc = _cli(store, "import", "mlflow", tracked["db"], "--experiment", "tiny", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["imported"] == 2 and out["already"] == 0  # "other" is another experiment
    by_source = {r["source_run_id"]: r for r in out["runs"]}
    assert set(by_source) == {tracked["ok"], tracked["failed"]}

    client, run = _client_run(tracked["db"], tracked["ok"])
    with RunStore(store) as s:
        m = s.manifest(by_source[tracked["ok"]]["run_id"])
        mf = s.manifest(by_source[tracked["failed"]]["run_id"])
    # identity and source
    assert m.source is not None
    assert (m.source.tracker, m.source.run_id, m.source.experiment) == (
        "mlflow",
        run.info.run_id,
        "tiny",
    )
    assert m.source.uri == tracked["db"]
    assert m.name == "lr-0.05" and m.status == "succeeded" and m.exit_code is None
    assert mf.status == "failed"
    # times: MLflow's milliseconds, to the millisecond
    start_ms, end_ms = run.info.start_time, run.info.end_time
    assert m.started_at.endswith("Z") and m.ended_at is not None
    assert m.duration_s == pytest.approx((end_ms - start_ms) / 1000.0)
    # params -> config, typed only where unambiguous, raw strings kept
    assert m.config == {"lr": 0.05, "steps": 6, "optimizer": "sgd", "note": "007"}
    assert m.config_hash == config_hash(m.config)
    assert m.config_source is not None and m.config_source.source == "tracker"
    assert m.config_source.raw == dict(run.data.params)
    # every step of every metric, and the final values
    for key in ("loss", "lr_now"):
        hist = client.get_metric_history(run.info.run_id, key)
        assert [tuple(p) for p in m.outputs.metric_history[key]] == [
            (h.step, h.value) for h in sorted(hist, key=lambda h: h.step)
        ]
        assert m.outputs.metrics[key] == run.data.metrics[key]
        # each point's wall time: MLflow's timestamp, in seconds since the run started
        assert m.outputs.metric_times[key] == [
            round(max(0, h.timestamp - start_ms) / 1000.0, 3)
            for h in sorted(hist, key=lambda h: (h.step, h.timestamp))
        ]
    assert len(m.outputs.metric_history["loss"]) == 6
    assert len(mf.outputs.metric_history["loss"]) == 2
    # git tags MLflow wrote itself; the remote's credentials are not kept
    assert m.code.commit == tracked["commit"]
    assert m.code.repo_url == "https://git.example.invalid/team/tiny.git"
    assert m.code.dirty is None and m.code.diff_sha256 is None  # MLflow does not say
    # the docker image tag, pinned by its digest
    assert m.image is not None and m.image.reference == IMAGE
    assert m.image.digest == "sha256:" + "ab" * 32
    assert mf.image is None
    # artifacts: hashed from the client's own download and kept in the object store
    arts = {a.path: a for a in m.outputs.artifacts}
    assert set(arts) == {"ckpt/model.pt", "notes.txt"}
    repo = tracked["repo"]
    out_dir = f"out/{tracked['ok']}"
    for rel, local in (
        ("ckpt/model.pt", f"{out_dir}/model.pt"),
        ("notes.txt", f"{out_dir}/notes.txt"),
    ):
        digest = hashlib.sha256((repo / local).read_bytes()).hexdigest()
        assert arts[rel].sha256 == digest
        kept = ObjectStore.beside(store).get(digest)
        assert kept is not None and kept.read_bytes() == (repo / local).read_bytes()
    assert arts["ckpt/model.pt"].kind == "checkpoint" and arts["ckpt/model.pt"].tensor_sha256
    assert mf.outputs.artifacts == []
    # the script as MLflow saw it (relative to the repository): a command a checkout runs
    assert run.data.tags["mlflow.source.name"] == "train.py"
    assert m.argv == ["python3", "train.py"]
    # nothing guessed: what MLflow did not record is None and raises its gap
    assert m.randomness.seed is None and m.environment.packages is None
    assert m.hardware.cpu_model is None and m.environment.hostname is None and m.data == []
    codes = {g.code for g in evaluate(m)}
    assert {"SEED_UNKNOWN", "PACKAGES_MISSING", "HARDWARE_UNRECORDED", "IMPORTED_RUN"} <= codes
    assert "CODE_DIRTY_UNKNOWN" in codes and "IMPORT_NO_COMMAND" not in codes
    assert "CONFIG_MISSING" not in codes and "IMAGE_NONE" not in codes
    assert m.tags == {"team": "vision"}

    # the store remembers where the run came from
    with RunStore(store) as s:
        assert run_origin(s, m.run_id) == "import:mlflow"
    # shown like any other run
    runs = _cli(store, "runs", "--json")
    assert runs.returncode == 0 and by_source[tracked["ok"]]["run_id"] in runs.stdout
    gaps = _cli(store, "gaps", m.run_id, "--json")
    assert gaps.returncode == 0 and "IMPORTED_RUN" in gaps.stdout
    cmp = _cli(store, "compare", m.run_id, mf.run_id, "--json")
    assert cmp.returncode in (0, 1), cmp.stderr[-2000:]
    assert "PAIR_CONFIG_DIFFERS" in cmp.stdout

    # importing again stores nothing new: same ids, ledger head unchanged
    head = ledger_head(store)
    again = _cli(store, "import", "mlflow", tracked["db"], "--experiment", "tiny", "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    out2 = json.loads(again.stdout)
    assert out2["imported"] == 0 and out2["already"] == 2
    assert {r["run_id"] for r in out2["runs"]} == {r["run_id"] for r in out["runs"]}
    assert ledger_head(store) == head
    # one run by id, from a store that already has it and one that does not
    one = _cli(store, "import", "mlflow", tracked["db"], "--run-id", tracked["other"], "--json")
    assert one.returncode == 0 and json.loads(one.stdout)["imported"] == 1


def test_import_mlruns_folder(tracked: dict[str, Any], tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    folder = tracked["repo"] / "mlruns"
    proc = _cli(store, "import", "mlflow", str(folder), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert [r["source_run_id"] for r in out["runs"]] == [tracked["folder_run"]]
    with RunStore(store) as s:
        m = s.manifest(out["runs"][0]["run_id"])
    assert m.source is not None and m.source.uri == folder.resolve().as_uri()
    assert m.config["steps"] == 3 and len(m.outputs.metric_history["loss"]) == 3
    assert m.code.commit == tracked["commit"]


def test_bad_sources_leave_the_store_unchanged(tracked: dict[str, Any], tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    first = _cli(store, "import", "mlflow", tracked["db"], "--run-id", tracked["ok"])
    assert first.returncode == 0, first.stderr[-2000:]
    head = ledger_head(store)
    assert head is not None
    cases = [
        (["http://127.0.0.1:9/"], 3, "cannot read"),  # nothing listens on port 9
        ([tracked["db"], "--run-id", "0" * 32], 2, "0" * 32),
        ([tracked["db"], "--experiment", "nope"], 2, "no experiment named 'nope'"),
        ([f"sqlite:///{tmp_path / 'missing.db'}"], 2, "no such SQLite file"),
        ([str(tmp_path / "no-mlruns")], 2, "no such folder"),
    ]
    # all at once (each process's time is MLflow's import); the ledger checked after
    with ThreadPoolExecutor(len(cases)) as pool:
        procs = list(pool.map(lambda case: _cli(store, "import", "mlflow", *case[0]), cases))
    for (args, code, words), proc in zip(cases, procs, strict=True):
        assert proc.returncode == code, (args, proc.stdout, proc.stderr[-2000:])
        assert words in proc.stderr, (args, proc.stderr[-2000:])
    assert ledger_head(store) == head
    assert not (tmp_path / "missing.db").exists()  # not created by the client either
    js = _cli(store, "import", "mlflow", "http://127.0.0.1:9/", "--json")
    assert js.returncode == 3 and json.loads(js.stdout)["exit_code"] == 3


def test_import_through_a_tracking_server(tracked: dict[str, Any], tmp_path: Path) -> None:
    """The same store served by a real ``mlflow server`` on 127.0.0.1 imports the same."""
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exe = Path(sys.executable).parent / "mlflow"
    cmd = [str(exe), "server", "--backend-store-uri", tracked["db"], "--host", "127.0.0.1"]
    server = subprocess.Popen(
        [*cmd, "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
        start_new_session=True,
    )
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240  # a busy machine: wait for the end state
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, "mlflow server exited"
            assert time.monotonic() < deadline, "mlflow server did not answer /health"
            time.sleep(1)
        store = tmp_path / "runs.db"
        # the server names artifacts by a file:// path on this machine: not taken unless
        # the user names that folder (a server could name ~/.ssh just as well)
        refused = _cli(store, "import", "mlflow", uri, "--run-id", tracked["ok"])
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert "outside the tracking store's artifact root" in refused.stderr
        root = Path(tracked["db"][len("sqlite:///") :]).parent
        proc = _cli(
            store, "import", "mlflow", uri, "--run-id", tracked["ok"], "--json",
            "--artifact-root", str(root),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        (row,) = json.loads(proc.stdout)["runs"]
        with RunStore(store) as s:
            m = s.manifest(row["run_id"])
        assert m.source is not None and m.source.uri == uri
        assert m.config == {"lr": 0.05, "steps": 6, "optimizer": "sgd", "note": "007"}
        assert len(m.outputs.metric_history["loss"]) == 6
        assert m.code.commit == tracked["commit"]
        # the same source run as through sqlite: the same id, so never stored twice
        sq = _cli(store, "import", "mlflow", tracked["db"], "--run-id", tracked["ok"], "--json")
        (again,) = json.loads(sq.stdout)["runs"]
        assert (again["run_id"], again["status"]) == (row["run_id"], "already")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
