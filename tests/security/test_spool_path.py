"""S1: a Slurm spool whose *parent* another user can write, attacked by that user.

The attack, as it broke before: the spool sits in a root-owned folder everyone can
write (mode 0777, not sticky).  While the replay's job waits in the queue, another user
(``nobody``, a real uid, in a child process with its own uid) renames the spool away,
makes ``spool/jobs/<id>/`` again as a folder of their own and plants links there for the
files the job writes (``start.tmp``, ``output.log``, ``slurm-<id>.out``, ``probe.json``)
pointing at root's 0600 files; once the job has probed the image, they put a forged
``probe.json`` in its place, hoping it lands in the image-probe cache that later
replays of the image reuse.

Each test drives the real CLI against the real one-node Slurm cluster and Docker
engine, and asserts what the user sees (the exit code, the message), that no target
file changed and that no forged probe is ever cached.  The job is submitted held
(``--slurm-sbatch-args=--hold``) and released by the test once the attacker is done,
so the attack happens while the job is queued, with no race.  Everything lives in the
test's own temporary folders: ``tmp_path``, and one folder in ``/tmp`` that ``nobody``
can enter (pytest's own is root's alone), removed after.  Without the cluster or the
engine these tests fail, never skip; they make folders of uid 65534, so they run as
root (as CI does).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.helpers.foreign import REAL_TXT, foreign_manifest, head, ingested, pinned
from tests.helpers.repos import commit_repo

EXE = Path(sys.executable).parent / "replay-tui"
NOBODY = 65534
FORGED = {"python_version": "0.0.1-forged", "packages": ["forged==6.6.6"], "os": "forged"}
JOB_FILES = ("start.tmp", "output.log", "slurm-{job}.out", "probe.json")

WRITE_OK = """\
import os
os.makedirs("out", exist_ok=True)
with open("out/real.txt", "w") as f:
    f.write("ok")
"""

# Ends with an exit code of 128 or more, so the job script skips its own image probe
# and whatever probe.json is in the job folder is the only one there.
WRITE_OK_THEN_200 = WRITE_OK + "raise SystemExit(200)\n"

# The attacker, run as uid 65534 by the system's own python3 (nothing of ours imported).
# argv: spool, job folder name, job id, then (job file, target) pairs as JSON.  Prints
# one JSON line of what it managed, then (when it got the spool) waits for the job to
# replace its probe.json link with the image's probe and swaps a forged one in.
ATTACKER = """\
import errno, json, os, sys, time
spool, name, job_id, plants = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
forged = sys.argv[5]
seen = {}

def err(e):
    return errno.errorcode.get(e.errno, str(e.errno))

try:
    os.rename(spool, spool + ".moved")
    seen["rename"] = "ok"
except OSError as e:
    seen["rename"] = err(e)
jobdir = os.path.join(spool, "jobs", name)
if seen["rename"] == "ok":
    for d in (spool, os.path.join(spool, "jobs"), jobdir):
        os.mkdir(d)
        os.chmod(d, 0o777)
try:
    for fname, target in plants:
        os.symlink(target, os.path.join(jobdir, fname))
    seen["links"] = "ok"
except OSError as e:
    seen["links"] = err(e)
print(json.dumps(seen), flush=True)
if seen["links"] == "ok":
    probe = os.path.join(jobdir, "probe.json")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if os.path.lexists(probe) and not os.path.islink(probe):
            break
        if os.path.lexists(os.path.join(jobdir, "exit_code")):
            break
        time.sleep(0.005)
    tmp = os.path.join(jobdir, ".forged")
    with open(tmp, "w") as f:
        f.write(forged)
    os.rename(tmp, probe)
    print(json.dumps({"forged": "ok"}), flush=True)
"""


# -- helpers ------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("REPLAY_TUI_STORE", None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _cli(store: Path, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), "--store", str(store), *map(str, args)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def cluster() -> str:
    """The training image by digest, once the Docker engine and the Slurm cluster both
    answer (else a failure, never a skip)."""
    if os.geteuid() != 0:
        pytest.fail("these tests make folders of uid 65534 and run as it: they run as root")
    image = os.environ.get("REPLAY_TUI_TRAIN_DIGEST")
    if not image:
        pytest.fail(
            "REPLAY_TUI_TRAIN_DIGEST unset (source /var/lib/replay-tui-env/train-image.env)"
        )
    try:
        import docker

        docker.from_env(timeout=120).ping()
    except Exception as e:
        pytest.fail(f"no Docker engine: {e} (run scripts/docker-env.sh)")
    if shutil.which("sbatch") is None:
        pytest.fail("no Slurm cluster: sbatch is not on PATH (run scripts/slurm-env.sh)")
    p = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60)
    if "UP" not in p.stdout:
        pytest.fail(f"no Slurm cluster: {p.stdout.strip()} {p.stderr.strip()}")
    return image


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder of this test in /tmp that uid 65534 can enter (root's, 0755), removed
    after: the shared parent, the spool and the target files go in it."""
    base = Path(tempfile.mkdtemp(prefix="replay-tui-spool-path-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _ingest(store: Path, tmp_path: Path, image: str, program: str) -> tuple[str, Path]:
    """A foreign run of ``python3 prog.py`` (writes out/real.txt) at a commit of a fresh
    repository, ingested; (its run id, the repository)."""
    repo = commit_repo(tmp_path / "repo", {"prog.py": program}, ignore="out/\n")
    data = foreign_manifest(
        head(repo), ["python3", "prog.py"], image=pinned(image), outputs={"artifacts": [REAL_TXT]}
    )
    return ingested(store, tmp_path, data), repo


def _targets(base: Path) -> dict[str, Path]:
    """Root's 0600 files the attacker's links point at, one per job file."""
    folder = base / "root-only"
    folder.mkdir(mode=0o700)
    out = {}
    for name in JOB_FILES:
        t = folder / name.replace("{job}", "N")
        t.write_bytes(f"root's own {name}, not to be touched\n".encode())
        t.chmod(0o600)
        out[name] = t
    return out


def _snapshot(targets: dict[str, Path]) -> dict[str, tuple[bytes, int, int]]:
    return {
        n: (p.read_bytes(), p.stat().st_mtime_ns, stat.S_IMODE(p.stat().st_mode))
        for n, p in targets.items()
    }


def _held_job(spool: Path, proc: subprocess.Popen[str]) -> tuple[str, str] | None:
    """(job folder name, job id) of the replay's job once it is queued, or None when the
    replay ends first (it refused the spool)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for d in (spool / "jobs").glob("*") if (spool / "jobs").is_dir() else []:
            jid = d / "job_id"
            if jid.is_file() and jid.read_text().strip().isdigit():
                return d.name, jid.read_text().strip()
        if proc.poll() is not None:
            return None
        time.sleep(0.2)
    pytest.fail("the replay neither queued a job nor ended within 300 s")


def _cached(store: Path) -> list[str]:
    """Every file of the image-probe cache beside the store, as text."""
    cache = store.parent / "image-probes"
    return [p.read_text() for p in sorted(cache.glob("*"))] if cache.is_dir() else []


def _image_python(image: str) -> str:
    import docker

    out = docker.from_env(timeout=120).containers.run(
        image, ["python3", "-c", "import sys; print(sys.version.split()[0])"], remove=True
    )
    return bytes(out).decode().strip()


def _replay(store: Path, rid: str, repo: Path, spool: Path, tmp_path: Path) -> Any:
    argv = [str(EXE), "--store", str(store), "replay", rid, "--repo", str(repo)]
    argv += ["--backend", "slurm", "--slurm-spool", str(spool), "--slurm-sbatch-args=--hold"]
    out = (tmp_path / "replay.out").open("w")
    return subprocess.Popen(argv, env=_env(), stdout=out, stderr=subprocess.STDOUT, text=True)


# -- the attack ---------------------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("parent_mode", [0o777, 0o1777], ids=["world-writable", "sticky"])
def test_s1_another_user_cannot_swap_the_spool_under_a_queued_job(
    cluster: str, shared_tmp: Path, tmp_path: Path, parent_mode: int
) -> None:
    """S1 as ``nobody``.  Under a world-writable parent that is not sticky, ``replay
    --backend slurm`` refuses the spool (exit 2, naming the parent and what is wrong
    with it) before a job is submitted or a file made in it.  Under a sticky parent
    (as ``/tmp``) with the spool ours, the replay runs; the attacker can neither rename
    the spool nor plant a link in its job folder.  Either way root's files behind the
    links are unchanged and no forged probe reaches the image-probe cache."""
    store = tmp_path / "store" / "runs.db"
    rid, repo = _ingest(store, tmp_path, cluster, WRITE_OK)
    shared = shared_tmp / "shared"
    shared.mkdir()
    shared.chmod(parent_mode)
    spool = shared / "spool"
    spool.mkdir(mode=0o700)
    targets = _targets(shared_tmp)
    before = _snapshot(targets)

    proc = _replay(store, rid, repo, spool, tmp_path)
    attacker: subprocess.Popen[str] | None = None
    job: tuple[str, str] | None = None
    try:
        job = _held_job(spool, proc)
        if job is not None:  # queued and held: the attack, as nobody
            name, job_id = job
            plants = [[f.replace("{job}", job_id), str(targets[f])] for f in JOB_FILES]
            attacker = subprocess.Popen(
                ["/usr/bin/python3", "-I", "-c", ATTACKER, str(spool), name, job_id,
                 json.dumps(plants), json.dumps(FORGED)],
                user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
            assert attacker.stdout is not None
            seen = json.loads(attacker.stdout.readline() or "{}")
            release = subprocess.run(
                ["scontrol", "release", job_id], capture_output=True, text=True, timeout=60
            )
            assert release.returncode == 0, release.stderr
        else:
            seen = {}
        proc.wait(timeout=600)
    finally:
        for p in (proc, attacker):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        if job is not None:  # ended by now; a job left queued by a failure is cancelled
            subprocess.run(["scancel", job[1]], capture_output=True, timeout=60)
    shown = (tmp_path / "replay.out").read_text()

    assert _snapshot(targets) == before, "a file behind a planted link was written"
    assert not any("forged" in text for text in _cached(store)), _cached(store)
    if parent_mode == 0o777:
        assert proc.returncode == 2, shown[-3000:]
        assert job is None and "submitted batch job" not in shown
        assert (
            f"error: Slurm spool {spool}: the folder {shared} above it can be written by"
            " others (mode 0777) and is not sticky: they could move the spool away and put"
            " a folder of their own in its place"
        ) in shown, shown[-3000:]
        assert "hint: keep the spool under folders only you and root can write" in shown
        assert list(spool.iterdir()) == []  # nothing made in it
        assert sorted(p.name for p in shared.iterdir()) == ["spool"]
    else:
        assert proc.returncode == 0, shown[-3000:]
        assert seen == {"rename": "EPERM", "links": "EACCES"}, seen
        real = _image_python(cluster)
        with RunStore(store) as s:
            (replay,) = [r for r in s.list_runs() if r.id != rid]
            env = s.manifest(replay.id).environment
        assert env.python_version == real != FORGED["python_version"]
        (entry,) = [json.loads(t) for t in _cached(store)]  # the job's own probe, kept
        assert json.loads(entry["probe"])["python_version"] == real


@pytest.mark.slurm
@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize(
    "case", ["parent 0777", "parent 0775", "grandparent of nobody", "spool a link"]
)
def test_a_spool_whose_path_others_control_is_refused_before_anything_is_made(
    cluster: str, shared_tmp: Path, tmp_path: Path, case: str
) -> None:
    """Each folder from the spool up to ``/`` must be root's or ours and writable by no
    one else (unless sticky); the refusal names the first folder that is not, says what
    is wrong with it, exits 2, and makes nothing (not the spool, not a job)."""
    store = tmp_path / "store" / "runs.db"
    rid, repo = _ingest(store, tmp_path, cluster, WRITE_OK)
    top = shared_tmp / "top"
    top.mkdir(mode=0o755)
    spool = top / "mid" / "spool"  # not made yet: refused before it is
    if case == "parent 0777":
        (top / "mid").mkdir()
        (top / "mid").chmod(0o777)
        bad, words = top / "mid", "can be written by others (mode 0777) and is not sticky"
    elif case == "parent 0775":
        (top / "mid").mkdir()
        (top / "mid").chmod(0o775)
        bad, words = top / "mid", "can be written by its group (mode 0775) and is not sticky"
    elif case == "grandparent of nobody":
        os.chown(top, NOBODY, NOBODY)
        (top / "mid").mkdir(mode=0o755)
        bad, words = top, f"belongs to uid {NOBODY}, neither you (uid 0) nor root"
    else:  # the path the user gave leads, through a link, under a folder of nobody's
        os.chown(top, NOBODY, NOBODY)
        (top / "mid").mkdir(mode=0o755)
        link = tmp_path / "spool-link"
        link.symlink_to(spool)
        bad, words = top, f"belongs to uid {NOBODY}, neither you (uid 0) nor root"
    given = tmp_path / "spool-link" if case == "spool a link" else spool
    proc = _cli(store, "replay", rid, "--repo", repo, "--backend", "slurm",
                "--slurm-spool", given)  # fmt: skip
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 2, shown[-3000:]
    assert f"error: Slurm spool {spool}: the folder {bad} above it {words}" in shown, shown
    assert "submitted batch job" not in shown
    assert not spool.exists()


@pytest.mark.slurm
@pytest.mark.docker
@pytest.mark.slow
def test_a_probe_json_the_job_did_not_write_is_never_cached(cluster: str, tmp_path: Path) -> None:
    """A ``probe.json`` (with a ``probe.mac``) put in a queued job's folder by anyone
    but the job itself, even by this user, is not taken: the job skips its own probe
    (its program exits 200), and neither the replay's manifest nor the image-probe
    cache holds the forged Python; the job's MAC is keyed by a secret only the job
    script and this process know."""
    store = tmp_path / "store" / "runs.db"
    rid, repo = _ingest(store, tmp_path, cluster, WRITE_OK_THEN_200)
    spool = tmp_path / "spool"
    proc = _replay(store, rid, repo, spool, tmp_path)
    try:
        job = _held_job(spool, proc)
        assert job is not None, (tmp_path / "replay.out").read_text()[-3000:]
        name, job_id = job
        folder = spool / "jobs" / name
        body = json.dumps(FORGED).encode()
        (folder / "probe.json").write_bytes(body)
        (folder / "probe.mac").write_text(hashlib.sha256(body).hexdigest() + "\n")
        release = subprocess.run(
            ["scontrol", "release", job_id], capture_output=True, text=True, timeout=60
        )
        assert release.returncode == 0, release.stderr
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    shown = (tmp_path / "replay.out").read_text()
    assert "submitted batch job" in shown, shown[-3000:]
    assert proc.returncode != 0  # the replay's program exited 200
    with RunStore(store) as s:
        replays = [r for r in s.list_runs() if r.id != rid]
        envs = [s.manifest(r.id).environment for r in replays]
    assert replays, shown[-3000:]
    assert all(e.python_version != FORGED["python_version"] for e in envs)
    assert all("forged==6.6.6" not in (e.packages or []) for e in envs)
    assert not any("forged" in text for text in _cached(store)), _cached(store)
