"""The attack rows of "One door for untrusted bytes", each through the real CLI.

Tracker folders written by the real W&B and MLflow clients (then tampered with by hand),
runs recorded and replayed on this machine, in the real Docker engine and through the
real one-node Slurm cluster: a link to a host file, a FIFO that never ends, a 3 GiB
sparse file, a spool someone else can write.  Each test asserts what the user sees
(the exit code and the message), that no host byte lands in the store or its
``objects/``, and that nothing hangs (every command runs under a timeout).  No test
touches a device node: FIFOs, links and sparse files live in the test's own folder.

The Docker and Slurm tests need scripts/docker-env.sh (and scripts/slurm-env.sh): without
the engine or the cluster they fail, never skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from replay_tui.door import LIMITS
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.helpers.engines import docker_client, train_env
from tests.helpers.foreign import REAL_TXT, foreign_manifest, ingested, pinned, seeded_store
from tests.helpers.repos import commit_repo
from tests.security.test_import_bounds import _wandb_case
from tests.support.tracker_runs import ledger_head, objects
from tests.support.training import git

PROGRAMS = Path(__file__).resolve().parents[1] / "support" / "programs"
EXE = Path(sys.executable).parent / "replay-tui"
SHADOW = b"root:$6$n0tAr3alH4sh$SHADOW-STAND-IN-5521:19000:0:99999:7:::\n"
ID_RSA = b"-----BEGIN OPENSSH PRIVATE KEY----- not a real key ID-RSA-77331\n"
SECRET_METRICS = {"loss": 424242.5, "acc": [[0, 424242]]}
GiB = 1 << 30


# -- helpers ------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REPLAY_TUI_STORE", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_DISABLE_GIT="false",
        MLFLOW_ALLOW_FILE_STORE="true",
    )
    return env


def _cli(
    store: Path, *args: str | os.PathLike[str], cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``replay-tui --store STORE ARGS...`` in a fresh process; a hang fails the test."""
    return subprocess.run(
        [str(EXE), "--store", str(store), *map(str, args)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _nothing_kept(store: Path, secret: bytes) -> None:
    """No object holds ``secret``, nor any object as big as a saved file may be."""
    assert ObjectStore.beside(store).get(hashlib.sha256(secret).hexdigest()) is None
    for p in objects(store):
        assert p.stat().st_size < LIMITS["saved file"], p
        assert secret not in p.read_bytes(), p


def _refused_import(store: Path, *args: str | Path, timeout: float = 300) -> str:
    """``ARGS`` (an import) on ``store``: exit 2, the store's ledger head unchanged; what
    it said on stderr."""
    head = ledger_head(store)
    proc = _cli(store, *args, timeout=timeout)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert ledger_head(store) == head
    return proc.stderr


def _repo(path: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A git repository holding ``files``, committed; (its path, the commit)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / ".gitignore").write_text("out/\n")
    for name, text in files.items():
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "programs")
    return path, git(path, "rev-parse", "HEAD").strip()


# -- W&B ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder written by the real wandb client (offline): its ``files/model.pt`` is
    the link ``wandb.save`` leaves to the program's checkpoint."""
    files = {"train.py": (PROGRAMS / "wandb_train.py").read_text()}
    repo = commit_repo(
        tmp_path_factory.mktemp("wandb") / "repo", files, "tiny program", ignore="wandb/\n*.pt\n"
    )
    proc = subprocess.run(
        [sys.executable, "train.py", "--steps", "2"],
        cwd=repo,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (repo / "wandb").glob("offline-run-*")
    assert (run / "files" / "model.pt").is_symlink()
    return run


def _artifacts(store: Path, out: dict[str, Any]) -> dict[str, Any]:
    (row,) = out["runs"]
    with RunStore(store) as s:
        return {a.path: a for a in s.manifest(row["run_id"]).outputs.artifacts}


@pytest.mark.slow
def test_w1_a_saved_file_linked_outside_the_files_root_is_refused(
    wandb_run: Path, tmp_path: Path
) -> None:
    """W1: ``files/model.pt`` links to a host file outside the files root (a stand-in for
    /etc/shadow): listed without a hash, ``refused: ...`` printed, no byte kept."""
    proj, folder = _wandb_case(tmp_path, wandb_run)
    shadow = tmp_path / "outside" / "shadow"
    shadow.parent.mkdir()
    shadow.write_bytes(SHADOW)
    link = folder / "files" / "model.pt"
    link.unlink()
    link.symlink_to(shadow)
    store = tmp_path / "store" / "runs.db"
    proc = _cli(store, "import", "wandb", folder, "--files-root", proj)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"refused: saved file {link} is a link to {shadow}, outside {proj}" in proc.stdout
    assert "--files-root" in proc.stdout
    js = _cli(store, "import", "wandb", folder, "--json")  # the same run: already there
    assert js.returncode == 0, js.stderr[-2000:]
    arts = _artifacts(store, json.loads(js.stdout))
    assert arts["model.pt"].sha256 is None and arts["model.pt"].size_bytes is None
    _nothing_kept(store, SHADOW)
    with RunStore(store) as s:
        (rec,) = s.list_runs()
        assert b"SHADOW-STAND-IN" not in s.manifest(rec.id).to_json().encode()


@pytest.mark.slow
def test_w2_a_files_folder_that_is_a_link_is_never_followed(
    wandb_run: Path, tmp_path: Path
) -> None:
    """W2: the run folder's ``files/`` is itself a link to a folder elsewhere.  What W&B
    keeps there (requirements, log) stops the import, naming the link; a ``files/`` link
    holding only the saved file imports it without a hash, refused."""
    _proj, folder = _wandb_case(tmp_path, wandb_run)
    elsewhere = tmp_path / "elsewhere" / "files"
    elsewhere.parent.mkdir()
    shutil.move(folder / "files", elsewhere)
    (folder / "files").symlink_to(elsewhere, target_is_directory=True)
    store = tmp_path / "store" / "runs.db"
    proc = _cli(store, "import", "wandb", folder)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert f"{folder / 'files'} is a symbolic link (-> {elsewhere})" in proc.stderr
    assert "never followed" in proc.stderr
    assert ledger_head(store) is None or not RunStore(store).list_runs()
    # only the saved file there: the run imports, the file is refused
    only = tmp_path / "only" / "files"
    only.mkdir(parents=True)
    (only / "model.pt").write_bytes(SHADOW)
    (folder / "files").unlink()
    (folder / "files").symlink_to(only, target_is_directory=True)
    proc = _cli(store, "import", "wandb", folder, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    (row,) = out["runs"]
    assert any(
        f"saved file {folder / 'files'} is a symbolic link (-> {only})" in r for r in row["refused"]
    ), row["refused"]
    assert _artifacts(store, out)["model.pt"].sha256 is None
    _nothing_kept(store, SHADOW)


@pytest.mark.slow
def test_w3_a_saved_file_linked_inside_the_files_root_imports_with_its_hash(
    wandb_run: Path, tmp_path: Path
) -> None:
    """W3: the link ``wandb.save`` leaves, to the program's file inside the files root,
    is followed: the checkpoint is hashed and kept, and nothing is refused."""
    proj, folder = _wandb_case(tmp_path, wandb_run)
    store = tmp_path / "store" / "runs.db"
    proc = _cli(store, "import", "wandb", folder, "--files-root", proj, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["runs"][0]["refused"] == []
    data = (proj / "model.pt").read_bytes()
    art = _artifacts(store, out)["model.pt"]
    assert art.sha256 == hashlib.sha256(data).hexdigest() and art.size_bytes == len(data)
    kept = ObjectStore.beside(store).get(art.sha256)
    assert kept is not None and kept.read_bytes() == data
    # the same with the files root named explicitly, from a copy elsewhere
    store2 = tmp_path / "store2" / "runs.db"
    copy = tmp_path / "copy" / folder.name
    shutil.copytree(folder, copy, symlinks=True)
    named = _cli(store2, "import", "wandb", copy, "--files-root", proj, "--json")
    assert named.returncode == 0, named.stderr[-3000:]
    assert _artifacts(store2, json.loads(named.stdout))["model.pt"].sha256 == art.sha256


@pytest.mark.slow
def test_w6_a_wandb_log_that_is_a_fifo_is_refused_without_waiting(
    wandb_run: Path, tmp_path: Path
) -> None:
    """W6: the ``.wandb`` log is a FIFO nobody writes to: refused at once (exit 2)."""
    _proj, folder = _wandb_case(tmp_path, wandb_run)
    (log,) = folder.glob("run-*.wandb")
    log.unlink()
    os.mkfifo(log)
    store = tmp_path / "store" / "runs.db"
    t0 = time.monotonic()
    proc = _cli(store, "import", "wandb", folder, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert f"W&B log {log} is not a regular file (a device, FIFO or socket)" in proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert time.monotonic() - t0 < 120
    assert stat.S_ISFIFO(os.lstat(log).st_mode)
    assert ledger_head(store) is None or not RunStore(store).list_runs()


@pytest.mark.slow
def test_w7_a_wandb_log_that_is_a_link_is_not_taken(wandb_run: Path, tmp_path: Path) -> None:
    """W7: the ``.wandb`` log is a link (to a log elsewhere): never followed, so the
    folder holds no W&B log (exit 2)."""
    _proj, folder = _wandb_case(tmp_path, wandb_run)
    (log,) = folder.glob("run-*.wandb")
    elsewhere = tmp_path / "elsewhere" / log.name
    elsewhere.parent.mkdir()
    shutil.move(log, elsewhere)
    log.symlink_to(elsewhere)
    store = tmp_path / "store" / "runs.db"
    proc = _cli(store, "import", "wandb", folder, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert f"{folder}: no run-*.wandb file: not a W&B run folder" in proc.stderr
    assert ledger_head(store) is None or not RunStore(store).list_runs()


@pytest.mark.slow
def test_w8_a_saved_file_over_its_limit_is_refused_unread(wandb_run: Path, tmp_path: Path) -> None:
    """W8: a saved file of 3 GiB (sparse: it costs nothing on disk), over
    ``LIMITS["saved file"]``: the import finishes, the file is listed refused with the
    limit named, and objects/ holds no copy of it."""
    proj, folder = _wandb_case(tmp_path, wandb_run)
    big = proj / "model.pt"
    with big.open("r+b") as f:
        f.truncate(3 * GiB)
    assert LIMITS["saved file"] < 3 * GiB
    store = tmp_path / "store" / "runs.db"
    t0 = time.monotonic()
    proc = _cli(store, "import", "wandb", folder, "--files-root", proj, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        f"refused: saved file {big} is 3 GiB; the limit for a saved file is 2 GiB" in proc.stdout
    ), proc.stdout[-3000:]
    assert "MemoryError" not in proc.stderr
    assert time.monotonic() - t0 < 300
    js = _cli(store, "import", "wandb", folder, "--json")
    assert _artifacts(store, json.loads(js.stdout))["model.pt"].sha256 is None
    assert all(p.stat().st_size < GiB for p in objects(store))


# -- MLflow -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlruns(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ``mlruns/`` folder the real MLflow client wrote (one run, two steps)."""
    files = {"train.py": (PROGRAMS / "mlflow_train.py").read_text()}
    repo = commit_repo(
        tmp_path_factory.mktemp("mlflow") / "repo", files, "tiny program", ignore="out/\nmlruns/\n"
    )
    env = {**_env(), "MLFLOW_TRACKING_URI": (repo / "mlruns").as_uri()}
    proc = subprocess.run(
        [sys.executable, "train.py", "--steps", "2"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return repo / "mlruns"


def _mlflow_case(tmp_path: Path, mlruns: Path) -> tuple[Path, Path]:
    """A copy of the ``mlruns/`` folder; (the copy, its one run's folder)."""
    copy = tmp_path / "mlruns"
    shutil.copytree(mlruns, copy, symlinks=True)
    (meta,) = (p for p in copy.glob("*/*/meta.yaml") if p.parent.parent.name != ".trash")
    return copy, meta.parent


@pytest.mark.slow
def test_m1_an_artifact_uri_pointing_at_a_home_folder_is_refused(
    mlruns: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """M1: a run's ``meta.yaml`` says ``artifact_uri: file:///<tmp>/fake-home/.ssh``:
    exit 2 naming the path, nothing stored, no ``id_rsa`` byte in objects/."""
    copy, run = _mlflow_case(tmp_path, mlruns)
    ssh = tmp_path / "fake-home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_rsa").write_bytes(ID_RSA)
    meta = run / "meta.yaml"
    lines = meta.read_text().splitlines()
    lines = [
        f"artifact_uri: {ssh.as_uri()}" if ln.startswith("artifact_uri:") else ln for ln in lines
    ]
    meta.write_text("\n".join(lines) + "\n")
    store = seeded_store(tmp_path, make_manifest())
    err = _refused_import(store, "import", "mlflow", copy)
    assert (
        f"its artifact location {ssh} is outside the tracking store's artifact root"
        f" ({copy}): refused" in err
    ), err[-3000:]
    assert "--artifact-root" in err
    _nothing_kept(store, ID_RSA)


@pytest.mark.slow
def test_m3_an_mlflow_metric_file_that_is_a_fifo_is_refused(
    mlruns: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """M3: a metric's history file in ``mlruns/`` is a FIFO: refused before the client
    opens anything (exit 2), without waiting on it."""
    copy, run = _mlflow_case(tmp_path, mlruns)
    loss = run / "metrics" / "loss"
    loss.unlink()
    os.mkfifo(loss)
    store = seeded_store(tmp_path, make_manifest())
    err = _refused_import(store, "import", "mlflow", copy, timeout=120)
    assert f"tracker metric file {loss} is not a regular file" in err
    assert "MemoryError" not in err and "Traceback" not in err
    assert stat.S_ISFIFO(os.lstat(loss).st_mode)


@pytest.mark.slow
def test_m4_an_mlflow_metric_file_that_is_a_link_is_refused(
    mlruns: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """M4: a metric's history file in ``mlruns/`` is a link to a host file: refused
    (exit 2), never followed, the host file's numbers stored nowhere."""
    copy, run = _mlflow_case(tmp_path, mlruns)
    host = tmp_path / "outside" / "loss"
    host.parent.mkdir()
    host.write_text("1795848115276 424242.5 0\n")
    loss = run / "metrics" / "loss"
    loss.unlink()
    loss.symlink_to(host)
    store = seeded_store(tmp_path, make_manifest())
    err = _refused_import(store, "import", "mlflow", copy, timeout=120)
    assert f"{loss} is a symbolic link (-> {host})" in err
    assert "links in an imported folder are never followed" in err


# -- a run's metrics file, recorded and replayed on this machine --------------------------

HOSTILE_METRICS = """\
import os, sys
os.makedirs("out", exist_ok=True)
target = "out/m.json"
if os.path.lexists(target):
    os.remove(target)
mode = sys.argv[1]
if mode == "fifo":
    os.mkfifo(target)
elif mode == "link":
    os.symlink(sys.argv[2], target)
elif mode == "big":
    with open(target, "wb") as f:
        f.truncate(int(sys.argv[2]))
with open("out/real.txt", "w") as f:
    f.write("ok")
print("planted", mode, flush=True)
"""


def _record_hostile(store: Path, repo: Path, *args: str) -> tuple[str, str]:
    """Record ``hostile_metrics.py ARGS`` with ``--metrics-file out/m.json``; (run id,
    what the user saw)."""
    proc = _cli(
        store,
        "record",
        "--metrics-file",
        "out/m.json",
        "--artifact",
        "out/real.txt",
        "--",
        sys.executable,
        "hostile_metrics.py",
        *args,
        cwd=repo,
        timeout=120,
    )
    seen = proc.stdout + proc.stderr
    assert proc.returncode == 0, seen[-3000:]
    assert "MemoryError" not in seen and "Traceback" not in seen
    with RunStore(store) as s:
        rid = s.list_runs()[0].id
    return rid, seen


def _replay_local(store: Path, rid: str, repo: Path) -> str:
    proc = _cli(store, "replay", rid, "--backend", "local", "--repo", repo, timeout=300)
    seen = proc.stdout + proc.stderr
    assert proc.returncode == 0, seen[-3000:]
    assert "MemoryError" not in seen and "Traceback" not in seen
    return seen


def test_r2_a_metrics_file_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    """R2: the run leaves its metrics file as a FIFO nobody writes to: recording and
    replaying both list it refused, at once, and take no metrics from it."""
    repo, _ = _repo(tmp_path / "repo", {"hostile_metrics.py": HOSTILE_METRICS})
    store = tmp_path / "store" / "runs.db"
    rid, seen = _record_hostile(store, repo, "fifo")
    m_json = repo / "out" / "m.json"
    assert f"refused: metrics file {m_json} is not a regular file" in seen, seen[-3000:]
    assert stat.S_ISFIFO(os.lstat(m_json).st_mode)
    seen = _replay_local(store, rid, repo)
    assert "refused: metrics file" in seen and "out/m.json is not a regular file" in seen
    with RunStore(store) as s:
        assert all(not s.manifest(r.id).outputs.metrics for r in s.list_runs())


def test_r3_a_metrics_file_linked_to_a_huge_file_is_refused_unread(tmp_path: Path) -> None:
    """R3: the run's metrics file is a link to a 3 GiB (sparse) host file, then a 300 MiB
    regular file, over ``LIMITS["metrics file"]``: refused, never read (no MemoryError,
    no wait), in the recording and in its replay."""
    repo, _ = _repo(tmp_path / "repo", {"hostile_metrics.py": HOSTILE_METRICS})
    huge = tmp_path / "outside" / "huge-metrics"
    huge.parent.mkdir()
    with huge.open("wb") as f:
        f.truncate(3 * GiB)
    store = tmp_path / "store" / "runs.db"
    rid, seen = _record_hostile(store, repo, "link", str(huge))
    m_json = repo / "out" / "m.json"
    assert f"refused: metrics file {m_json} is a symbolic link (-> {huge})" in seen, seen[-3000:]
    seen = _replay_local(store, rid, repo)
    assert "refused: metrics file" in seen and f"is a symbolic link (-> {huge})" in seen
    # a regular file over the limit
    size = LIMITS["metrics file"] + 44 * (1 << 20)
    store2 = tmp_path / "store2" / "runs.db"
    _, seen = _record_hostile(store2, repo, "big", str(size))
    assert (
        f"refused: metrics file {m_json} is {size // (1 << 20)} MiB; the limit for a metrics"
        f" file is {LIMITS['metrics file'] // (1 << 20)} MiB" in seen
    ), seen[-3000:]


# -- replays in the real engine and cluster ------------------------------------------------

HOST_LINK = """\
import os, sys
os.makedirs("out", exist_ok=True)
if not os.path.lexists("out/m.json"):
    os.symlink(sys.argv[1], "out/m.json")
with open("out/real.txt", "w") as f:
    f.write("ok")
print("planted", flush=True)
"""

WAIT_FOR_GO = """\
import os, time
os.makedirs("out", exist_ok=True)
print("waiting", flush=True)
deadline = time.monotonic() + 300
while not os.path.exists("out/go") and time.monotonic() < deadline:
    time.sleep(0.2)
with open("out/real.txt", "w") as f:
    f.write("ok")
"""


@pytest.fixture(scope="module")
def engine_image() -> str:
    """The training image by digest, once the engine answers (else a failure)."""
    docker_client().close()
    return train_env("REPLAY_TUI_TRAIN_DIGEST")


@pytest.fixture(scope="module")
def cluster(engine_image: str) -> str:
    """The training image, once the Slurm cluster answers too (else a failure)."""
    if shutil.which("sbatch") is None:
        pytest.fail("no Slurm cluster: sbatch is not on PATH (run scripts/slurm-env.sh)")
    p = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    if "UP" not in p.stdout:
        pytest.fail(f"no Slurm cluster: {p.stdout.strip()} {p.stderr.strip()}")
    return engine_image


@pytest.fixture
def hostile_repo(tmp_path: Path) -> tuple[Path, str]:
    return _repo(tmp_path / "repo", {"host_link.py": HOST_LINK, "wait.py": WAIT_FOR_GO})


def _ingest(
    store: Path, tmp_path: Path, image: str, commit: str, argv: list[str], **extra: Any
) -> str:
    """Ingest a manifest (a foreign run) of ``argv`` at ``commit`` in ``image``."""
    data = foreign_manifest(
        commit, argv, image=pinned(image), outputs={"artifacts": [REAL_TXT]}, **extra
    )
    return ingested(store, tmp_path, data)


def _host_metrics(tmp_path: Path) -> Path:
    host = tmp_path / "host" / "file.json"
    host.parent.mkdir()
    host.write_text(json.dumps(SECRET_METRICS))
    return host


def _no_host_numbers(store: Path, rid: str) -> None:
    with RunStore(store) as s:
        (replay,) = [r for r in s.list_runs() if r.id != rid]
        text = s.manifest(replay.id).to_json()
    assert "424242" not in text, text[:3000]


@pytest.mark.docker
@pytest.mark.slow
def test_r1_a_metrics_link_left_in_a_docker_replay_is_refused(
    engine_image: str, hostile_repo: tuple[Path, str], tmp_path: Path
) -> None:
    """R1: an ingested run with ``capture.metrics_file: out/m.json`` whose code, replayed
    in the real engine, leaves ``out/m.json`` as a link to a host json file: the refusal
    is listed and the replay manifest holds none of the host file's numbers."""
    repo, commit = hostile_repo
    host = _host_metrics(tmp_path)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(
        store, tmp_path, engine_image, commit, ["python3", "host_link.py", str(host)],
        capture={"metrics_file": "out/m.json"},
    )  # fmt: skip
    proc = _cli(store, "replay", rid, "--repo", repo)
    seen = proc.stdout + proc.stderr
    assert proc.returncode == 0, seen[-3000:]
    assert "refused: metrics file" in seen, seen[-3000:]
    assert f"out/m.json is a symbolic link (-> {host}); links in files from elsewhere" in seen
    _no_host_numbers(store, rid)


@pytest.mark.slurm
@pytest.mark.docker
@pytest.mark.slow
def test_d1_a_metrics_link_left_in_a_slurm_replay_is_refused(
    cluster: str, hostile_repo: tuple[Path, str], tmp_path: Path
) -> None:
    """D1: R1 through the real Slurm cluster: the job's container leaves ``out/m.json``
    as a link to a host json file; refused, the numbers stored nowhere."""
    repo, commit = hostile_repo
    host = _host_metrics(tmp_path)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(
        store, tmp_path, cluster, commit, ["python3", "host_link.py", str(host)],
        capture={"metrics_file": "out/m.json"},
    )  # fmt: skip
    proc = _cli(store, "replay", rid, "--repo", repo, "--backend", "slurm")
    seen = proc.stdout + proc.stderr
    assert proc.returncode == 0, seen[-3000:]
    assert "[slurm] submitted batch job" in seen
    assert "refused: metrics file" in seen, seen[-3000:]
    assert f"out/m.json is a symbolic link (-> {host}); links in files from elsewhere" in seen
    _no_host_numbers(store, rid)


@pytest.mark.slurm
@pytest.mark.docker
@pytest.mark.slow
def test_d2_a_spool_someone_else_can_write_is_refused(
    cluster: str, hostile_repo: tuple[Path, str], tmp_path: Path
) -> None:
    """D2: a spool owned by another user (uid 65534), and one of ours that everyone can
    write (mode 1777): ``replay --backend slurm`` refuses (exit 2) and says how to make a
    safe one; nothing is submitted, nothing lands in the spool."""
    if os.geteuid() != 0:
        pytest.fail("this test makes a folder of uid 65534: it runs as root (as CI does)")
    repo, commit = hostile_repo
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, tmp_path, cluster, commit, ["python3", "wait.py"])
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    cases = [
        (theirs, f"Slurm spool {theirs} belongs to uid 65534, not to you (uid 0)"),
        (shared, f"Slurm spool {shared} can be written by others (mode 1777)"),
    ]
    for spool, words in cases:
        proc = _cli(
            store, "replay", rid, "--repo", repo, "--backend", "slurm", "--slurm-spool", spool,
            timeout=120,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
        assert f"error: {words}" in proc.stderr, proc.stderr[-3000:]
        assert "would run inside replay containers" in proc.stderr
        assert f"hint: make one that is yours alone (mkdir -m 700 {tmp_path}/$USER-spool)" in (
            proc.stderr
        )
        assert "submitted batch job" not in proc.stderr
        assert not any(spool.iterdir())
    assert os.stat(theirs).st_uid == 65534 and stat.S_IMODE(os.stat(shared).st_mode) == 0o1777


def _poll(what: str, find: Any, proc: subprocess.Popen[str], timeout: float = 240) -> Any:
    """``find()`` once it is truthy; fails if the replay ends or ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while True:
        found = find()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"the replay ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {timeout}s")
        time.sleep(0.2)


@pytest.mark.slurm
@pytest.mark.docker
@pytest.mark.slow
def test_d3_d4_a_spool_of_ours_is_tightened_and_job_files_are_private(
    cluster: str, hostile_repo: tuple[Path, str], tmp_path: Path
) -> None:
    """D3: a spool of ours at 0755 is tightened to 0700.  D4: while the job runs, its
    folder ``jobs/<id>/`` is 0700 and ``output.log`` and ``slurm-N.out`` are 0600; a
    forged ``image-probes/<image id>.json`` left in the spool is never read (the replay
    manifest's Python is the image's own)."""
    import docker

    repo, commit = hostile_repo
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, tmp_path, cluster, commit, ["python3", "wait.py"])
    spool = tmp_path / "spool"
    spool.mkdir()
    spool.chmod(0o755)
    client = docker.from_env(timeout=120)
    img = client.images.get(cluster)
    real_python = (
        client.containers.run(
            img.id, ["python3", "-c", "import sys; print(sys.version.split()[0])"], remove=True
        )
        .decode()
        .strip()
    )
    forged = {"python_version": "0.0.1-forged", "packages": ["forged==6.6.6"], "os": "forged"}
    probes = spool / "image-probes"
    probes.mkdir(mode=0o700)
    for name in (img.id.replace(":", "_"), "digest-" + cluster.split("@", 1)[1].replace(":", "_")):
        (probes / f"{name}.json").write_text(json.dumps(forged))
    argv = [str(EXE), "--store", str(store), "replay", rid, "--repo", str(repo)]
    # the runtime named: no probe job first, so the first job folder is the replay's
    argv += ["--backend", "slurm", "--slurm-spool", str(spool), "--slurm-runtime", "docker"]
    out_f, err_f = tmp_path / "replay.out", tmp_path / "replay.err"
    with out_f.open("w") as o, err_f.open("w") as e:
        proc = subprocess.Popen(argv, env=_env(), stdout=o, stderr=e, text=True)
    try:
        outs = _poll(
            "slurm-N.out in a job folder", lambda: sorted(spool.glob("jobs/*/slurm-*.out")), proc
        )
        job = outs[0].parent
        assert stat.S_IMODE(os.stat(spool).st_mode) == 0o700  # D3: tightened
        assert stat.S_IMODE(os.stat(spool / "jobs").st_mode) == 0o700
        assert stat.S_IMODE(os.stat(job).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(job / "output.log").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(outs[0]).st_mode) == 0o600
        out_dir = _poll(
            "the replay's output folder",
            lambda: sorted(spool.glob("work/replay-tui-replay-*/replay-tui-wt-*/out")),
            proc,
        )[0]
        (out_dir / "go").write_text("")
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out_f.read_text()[-2000:] + err_f.read_text()[-3000:]
    with RunStore(store) as s:
        (replay,) = [r for r in s.list_runs() if r.id != rid]
        env = s.manifest(replay.id).environment
    assert env.python_version == real_python != forged["python_version"]
    assert "forged==6.6.6" not in (env.packages or [])


# -- stats --prometheus -------------------------------------------------------------------


def test_f4_prometheus_output_that_is_a_fifo_or_folder_is_refused(
    tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """F4: ``stats --prometheus`` naming a FIFO exits 2 saying it is not a regular file,
    and the FIFO is still a FIFO (never opened, never replaced); a folder likewise (the
    option itself takes no folder)."""
    store = seeded_store(tmp_path, make_manifest())
    fifo = tmp_path / "metrics.prom"
    os.mkfifo(fifo)
    proc = _cli(store, "stats", "--prometheus", fifo, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert f"{fifo} exists and is a device, FIFO or socket, not a regular file" in proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    folder = tmp_path / "prom"
    folder.mkdir()
    proc = _cli(store, "stats", "--prometheus", folder, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert f"'--prometheus': File '{folder}' is a directory" in proc.stderr  # said by click
    assert folder.is_dir() and not any(folder.iterdir())
