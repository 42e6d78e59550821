"""Item 6 of the third trust round (attack D1): a docker replay runs within walls.

On the real engine with the real training image: the replay's container, inspected
while it runs, has a memory limit, a CPU limit and a non-root user; a program that
writes past its output folder's bound gets ENOSPC inside the container and the host's
disk never holds what it wrote; a program that allocates past the memory limit is an
infrastructure result naming the limit, not a failed reproduction; a tmpfs a killed
replay left mounted is unmounted by the next one.  Without an engine these tests fail,
never skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from replay_tui.replay.backends.docker.walls import MOUNT_SOURCE, our_mounts
from storage.store import RunStore
from tests.helpers.commands import cli_json
from tests.helpers.engines import docker_client
from tests.helpers.foreign import foreign_manifest, head, ingested
from tests.support.training import git, make_repo, replay_tui

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MiB = 1 << 20

WAIT_FOR_GO = """\
import json, os, time
os.makedirs('out', exist_ok=True)
st = os.statvfs('out')
print('FACTS ' + json.dumps({'uid': os.getuid(), 'gid': os.getgid(),
      'out_bytes': st.f_blocks * st.f_frsize}), flush=True)
deadline = time.monotonic() + 120  # the test inspects the container, then says go
while not os.path.exists('/tmp/go') and time.monotonic() < deadline:
    time.sleep(0.05)
open('out/result.txt', 'w').write('ok')
"""

FILL_OUT = """\
import errno, json, os
os.makedirs('out', exist_ok=True)
written, err = 0, None
try:
    with open('out/big.bin', 'wb') as f:
        while written < 64 * 1024 * 1024:  # never more than 64 MiB, walls or not
            f.write(b'x' * (1024 * 1024)); f.flush(); os.fsync(f.fileno())
            written += 1024 * 1024
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
fs = [l.split(' - ')[1].split()[0] for l in open('/proc/self/mountinfo')
      if l.split()[4] == os.path.abspath('out')]
print('FILL ' + json.dumps({'written': written, 'error': err, 'fs': fs}), flush=True)
"""

ALLOCATE = """\
b = bytearray(400 * 1024 * 1024)
b[::4096] = b'x' * len(b[::4096])
print('allocated', flush=True)
"""


@pytest.fixture
def engine(image: str) -> Iterator[Any]:
    client = docker_client()
    yield client
    client.close()


def _repo(tmp_path: Path, program: str) -> Path:
    r = make_repo(tmp_path / "repo")
    (r / "probe.py").write_text(program)
    git(r, "add", "probe.py")
    git(r, "commit", "-q", "-m", "probe")
    return r


def _ingest(store: Path, repo: Path, image: str, **extra: Any) -> str:
    """A run as someone else sent it: the probe in the pinned image, writing out/."""
    digest = os.environ["REPLAY_TUI_TRAIN_DIGEST"].split("@", 1)[1]
    data = foreign_manifest(
        head(repo),
        ["python3", "probe.py"],
        image={"reference": image, "digest": digest},
        hardware={"cpu_count": 1},
        outputs={"artifacts": [{"path": "out/result.txt", "sha256": "0" * 64}]},
        capture={"artifact_globs": ["out/*"]},
        **extra,
    )
    return ingested(store, repo.parent, data)


def _replay(store: Path, rid: str, *args: str) -> tuple[int, dict[str, Any], str]:
    repo = store.parent.parent / "repo"
    return cli_json(store, "replay", rid, "--json", "--repo", str(repo), *args)


def _log(store: Path, run_id: str) -> str:
    return (store.parent / "logs" / f"{run_id}.log").read_text()


def _printed(store: Path, run_id: str, tag: str) -> dict[str, Any]:
    """What the probe printed as JSON after ``TAG `` in the run's log."""
    found: dict[str, Any] = json.loads(_log(store, run_id).split(f"{tag} ", 1)[1].splitlines()[0])
    return found


def _inspect_while_running(engine: Any, seen: dict[str, Any], done: threading.Event) -> None:
    """Each replay container that printed its FACTS: inspected, then told to go on (a
    replay that diverges may run more than one); polled until ``done``."""
    told: set[str] = set()
    while not done.is_set():
        for c in engine.containers.list(filters={"label": "io.replay-tui.run"}):
            if c.id in told or c.status != "running":
                continue
            if b"FACTS" in c.logs(stdout=True, stderr=False):
                seen.setdefault("attrs", c.attrs)
                c.exec_run(["touch", "/tmp/go"])
                told.add(c.id)
        done.wait(0.1)


def _replay_inspected(
    engine: Any, store: Path, rid: str, *args: str
) -> tuple[int, dict[str, Any], str, dict[str, Any]]:
    """:func:`_replay` with each of its containers inspected while it runs; also what the
    inspection saw (``attrs``: the first container's)."""
    seen: dict[str, Any] = {}
    done = threading.Event()
    t = threading.Thread(target=_inspect_while_running, args=(engine, seen, done), daemon=True)
    t.start()
    try:
        code, rep, out = _replay(store, rid, *args)
    finally:
        done.set()
        t.join(timeout=10)
    return code, rep, out, seen


def _check_limits(attrs: dict[str, Any]) -> dict[str, Any]:
    """The inspected container's walls: memory without swap past it, the recorded one
    CPU, nobody inside; its host config."""
    host: dict[str, Any] = attrs["HostConfig"]
    assert host["Memory"] > 0 and host["MemorySwap"] == host["Memory"]  # no swap beyond it
    assert host["NanoCpus"] == 1_000_000_000  # the recorded cpu_count, 1
    assert attrs["Config"]["User"] == "65534:65534"  # root on the host, nobody inside
    return host


def _check_facts_and_sandbox(store: Path, replay_run: str, host: dict[str, Any]) -> Any:
    """The probe ran as nobody in a 1 GiB output folder, the store verifies, and the replay
    manifest records the walls the container had; that manifest."""
    facts = _printed(store, replay_run, "FACTS")
    assert (facts["uid"], facts["gid"]) == (65534, 65534)
    assert facts["out_bytes"] == 1 << 30  # the default bound: at least 1 GiB
    with RunStore(store) as s:
        m = s.manifest(replay_run)
        assert s.verify().ok
    assert m.replay is not None and m.replay.sandbox is not None
    sb = m.replay.sandbox
    assert sb.user == "65534:65534" and sb.cpus == 1.0 and sb.output_bytes == 1 << 30
    assert sb.memory_limit and sb.memory_limit.endswith("m")
    assert int(sb.memory_limit[:-1]) * MiB == host["Memory"]
    return m


def _check_filled_to_the_bound(store: Path, rep: dict[str, Any], out: str) -> dict[str, Any]:
    """A completed replay of FILL_OUT under ``--output-size 8m``: ENOSPC inside, in a
    tmpfs, the bound recorded; what the probe printed."""
    r = rep["replays"][0]
    assert r["replay_status"] == "completed", out[-3000:]
    fill = _printed(store, r["replay_run"], "FILL")
    assert fill["error"] == "ENOSPC", fill  # the wall, inside the container
    assert fill["written"] <= 8 * MiB
    assert fill["fs"] and set(fill["fs"]) == {"tmpfs"}  # never this host's disk
    with RunStore(store) as s:
        m = s.manifest(r["replay_run"])
    assert m.replay is not None and m.replay.sandbox is not None
    assert m.replay.sandbox.output_bytes == 8 * MiB
    return fill


def _check_killed_for_memory(
    store: Path, rid: str, rep: dict[str, Any], code: int, out: str, why: str
) -> None:
    """A replay under ``--memory 96m`` that the wall ended: an infrastructure result whose
    reason names the limit and ``why``, the run never judged, the limit recorded."""
    assert code == 3, out[-3000:]  # the machine's wall ended it: not "not reproduced"
    r = rep["replays"][0]
    assert r["replay_status"] == "infra-error"
    assert "memory limit of 96m" in r["reason"] and why in r["reason"]
    assert r["verdict"] == "INCOMPLETE"
    with RunStore(store) as s:
        assert s.get_run(rid).last_verdict is None  # never judged
        m = s.manifest(r["replay_run"])
    assert m.replay is not None and m.replay.sandbox is not None
    assert m.replay.sandbox.memory_limit == "96m"


def test_the_replay_container_has_a_memory_and_cpu_limit_and_no_root(
    image: str, engine: Any, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, WAIT_FOR_GO)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)
    code, rep, out, seen = _replay_inspected(engine, store, rid, "--keep-workdir")
    kept = _kept_workdirs(store, rep)
    try:
        _check_walls(store, rep, code, out, seen)
        # the kept checkouts hold the outputs once the bounded folders are unmounted
        assert kept
        for wt in kept:
            assert (wt / "out" / "result.txt").read_text() == "ok"
            assert not [p for p, _ in our_mounts() if p.startswith(str(wt))]
    finally:
        for wt in kept:
            shutil.rmtree(wt.parent, ignore_errors=True)


def _kept_workdirs(store: Path, rep: dict[str, Any]) -> list[Path]:
    with RunStore(store) as s:
        return [
            Path(loc.host_path)
            for r in rep.get("replays", [])
            if r.get("replay_run")
            for loc in s.locations(r["replay_run"])
            if loc.role == "workdir"
        ]


def _check_walls(
    store: Path, rep: dict[str, Any], code: int, out: str, seen: dict[str, Any]
) -> None:
    assert seen, f"the test never saw the replay container running: {out[-2000:]}"
    host = _check_limits(seen["attrs"])
    r = rep["replays"][0]
    assert code != 3 and r["replay_status"] == "completed", out[-3000:]  # ran to its end
    _check_facts_and_sandbox(store, r["replay_run"], host)


def test_a_write_past_the_output_bound_fails_inside_with_enospc(image: str, tmp_path: Path) -> None:
    repo = _repo(tmp_path, FILL_OUT)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)
    code, rep, out = _replay(store, rid, "--output-size", "8m")
    _check_filled_to_the_bound(store, rep, out)
    # what it wrote lived in the bounded folder (a tmpfs), which is unmounted and gone
    # with the replay's scratch folder
    assert not _left_by_dead_replays()
    leftovers = [p for p in Path(tempfile.gettempdir()).glob("replay-tui-replay-*") if p.is_dir()]
    assert not any((p / "out" / "big.bin").exists() for p in leftovers)
    assert code in (0, 1)  # judged: a completed replay, not an infrastructure failure


def _left_by_dead_replays() -> list[str]:
    """Mounts of ours whose replay process is gone (others' live replays may run)."""
    dead = []
    for point, source in our_mounts():
        pid = source.split(".")[1]
        if not Path(f"/proc/{pid}").exists():
            dead.append(point)
    return dead


def test_a_replay_killed_for_memory_is_an_infrastructure_result_naming_the_limit(
    image: str, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, ALLOCATE)
    store = tmp_path / "store" / "runs.db"
    rid = _ingest(store, repo, image)
    code, rep, out = _replay(store, rid, "--memory", "96m")
    _check_killed_for_memory(store, rid, rep, code, out, "OOMKilled")


def test_a_bounded_folder_a_killed_replay_left_is_unmounted_by_the_next(
    image: str, tmp_path: Path
) -> None:
    left = Path(tempfile.mkdtemp(prefix="replay-tui-replay-")) / "wt" / "out"
    left.mkdir(parents=True)
    dead = f"{MOUNT_SOURCE}.999999999.0"  # no such process
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", dead, str(left)], check=True)
    try:
        repo = _repo(tmp_path, FILL_OUT)
        store = tmp_path / "store" / "runs.db"
        rid = _ingest(store, repo, image)
        proc = replay_tui(store, "replay", rid, "--repo", str(repo), "--output-size", "4m")
        out = proc.stdout + proc.stderr
        assert f"unmounted {left}, left by a replay that was killed" in out, out[-3000:]
        assert str(left) not in [p for p, _ in our_mounts()]
        assert not left.parent.parent.exists()  # its unclaimed scratch folder is gone
    finally:
        subprocess.run(["umount", str(left)], capture_output=True)
        shutil.rmtree(left.parent.parent, ignore_errors=True)


def test_record_image_runs_within_walls_and_keeps_what_it_did_not_write(
    image: str, engine: Any, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, WAIT_FOR_GO)
    (repo / "out").mkdir()
    (repo / "out" / "old.txt").write_text("left by an earlier run")
    before = (repo / "out" / "old.txt").stat()
    store = tmp_path / "store" / "runs.db"
    seen: dict[str, Any] = {}
    done = threading.Event()

    def inspect_then_go() -> None:
        while not done.is_set():
            for c in engine.containers.list(filters={"label": "io.replay-tui.run"}):
                ours = str(repo) in json.dumps(c.attrs["Mounts"])  # this test's, no other's
                if ours and c.status == "running" and b"FACTS" in c.logs(stdout=True):
                    seen.setdefault("attrs", c.attrs)
                    c.exec_run(["touch", "/tmp/go"])
            done.wait(0.1)

    t = threading.Thread(target=inspect_then_go, daemon=True)
    t.start()
    try:
        proc = replay_tui(
            store, "record", "--json", "--image", image, "--artifact", "out/*",
            "--", "python3", "probe.py", cwd=repo,
        )  # fmt: skip
    finally:
        done.set()
        t.join(timeout=10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert seen, f"the test never saw the record container running: {proc.stderr[-2000:]}"
    host = seen["attrs"]["HostConfig"]
    assert host["Memory"] > 0 and host["MemorySwap"] == host["Memory"]
    assert host["NanoCpus"] > 0
    assert seen["attrs"]["Config"]["User"] == "65534:65534"  # root records, nobody inside
    rid = json.loads(proc.stdout)["run_id"]
    facts = _printed(store, rid, "FACTS")
    assert (facts["uid"], facts["gid"]) == (65534, 65534)
    # what it wrote is in the repository once the bounded folder is gone; what an earlier
    # run left there is the same file, still told apart (stale), never claimed as written
    assert (repo / "out" / "result.txt").read_text() == "ok"
    after = (repo / "out" / "old.txt").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not [p for p, _ in our_mounts() if p.startswith(str(repo))]
    with RunStore(store) as s:
        m = s.manifest(rid)
    arts = {a.path: a for a in m.outputs.artifacts}
    assert arts["out/result.txt"].sha256 is not None and arts["out/result.txt"].stale is None
    assert arts["out/old.txt"].stale is not None
