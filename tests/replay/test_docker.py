"""Replays in the real Docker engine from images in the real local registry.

These tests need scripts/docker-env.sh (the test command runs it): it starts dockerd and
a registry on 127.0.0.1:5000 and pushes the training image whose tag and digest it
exports as REPLAY_TUI_TRAIN_IMAGE / REPLAY_TUI_TRAIN_DIGEST.  Under CI a missing engine
is a failure, never a skip.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.helpers.commands import cli_json
from tests.support.training import QUICK, replay_tui, write_data
from tests.support.training import record_in_image as record_in

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def replay(store: Path, run_id: str, *args: str) -> tuple[int, dict[str, Any], str]:
    return cli_json(store, "replay", run_id, "--json", *args)


def test_record_in_pushed_image_and_replay_identically(
    store: Path, repo: Path, train_image: str
) -> None:
    rid = record_in(store, repo, train_image, "train_mlp.py", "--data", "data/train.npz", *QUICK)
    with RunStore(store) as s:
        m = s.manifest(rid)
    assert m.image is not None and m.image.digest is not None
    assert m.image.reference == train_image
    assert m.environment.torch_version == "2.13.0+cpu"
    assert m.environment.os and "bookworm" in m.environment.os
    original = {a.path: a.sha256 for a in m.outputs.artifacts}
    assert (
        original["out/model.safetensors"]
        == hashlib.sha256((repo / "out" / "model.safetensors").read_bytes()).hexdigest()
    )
    code, rep, err = replay(store, rid)
    assert code == 0, err[-3000:]
    assert rep["replays"][0]["verdict"] == "IDENTICAL"
    with RunStore(store) as s:
        r = s.manifest(rep["replays"][0]["replay_run"])
        assert r.kind == "replay" and r.replay_of == rid
        assert r.replay is not None and r.replay.backend == "docker" and r.replay.network == "none"
        assert {a.path: a.sha256 for a in r.outputs.artifacts} == original
        assert r.image is not None and r.image.digest == m.image.digest
        assert s.get_run(rid).last_verdict == "IDENTICAL"
        assert s.verify().ok


def test_replay_uses_digest_after_tag_moves(
    engine: Any, store: Path, repo: Path, train_image: str
) -> None:
    moving = "localhost:5000/replay-tui/test-moving:latest"
    engine.images.get(train_image).tag(moving)
    engine.images.push(moving)
    rid = record_in(store, repo, moving, "train_mlp.py", "--data", "data/train.npz", *QUICK)
    with RunStore(store) as s:
        recorded_digest = s.manifest(rid).image.digest  # type: ignore[union-attr]
    # Move the tag: a new image whose python3 always fails, pushed under the same tag.
    dockerfile = f"FROM {train_image}\nRUN ln -sf /bin/false /usr/local/bin/python3\n"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    _img, _ = engine.images.build(fileobj=buf, custom_context=True, tag=moving, network_mode="none")
    engine.images.push(moving)
    pushed = engine.images.get(moving).attrs["RepoDigests"]
    assert all(recorded_digest not in d for d in pushed if d.startswith(moving.split(":")[0]))
    code, rep, err = replay(store, rid)
    assert code == 0, err[-3000:]
    assert rep["replays"][0]["verdict"] == "IDENTICAL"
    with RunStore(store) as s:
        r = s.manifest(rep["replays"][0]["replay_run"])
    assert r.image is not None and r.image.digest == recorded_digest


def test_changed_data_refuses_with_exit_3(store: Path, repo: Path, train_image: str) -> None:
    rid = record_in(store, repo, train_image, "train_mlp.py", "--data", "data/train.npz", *QUICK)
    write_data(repo / "data" / "train.npz", seed=42)
    code, _, err = replay(store, rid)
    assert code == 3
    assert "train.npz" in err and "changed" in err
    with RunStore(store) as s:
        facts = s.facts("replays")
        assert facts[-1]["status"] == "infra-error" and "train.npz" in facts[-1]["reason"]
        assert s.count_runs() == 1  # no replay manifest stored
        assert s.verify().ok


def test_dirty_tree_run_replays_with_its_diff(store: Path, repo: Path, train_image: str) -> None:
    script = repo / "train_mlp.py"
    script.write_text(script.read_text().replace("nn.Dropout(0.2)", "nn.Dropout(0.3)"))
    rid = record_in(store, repo, train_image, "train_mlp.py", "--data", "data/train.npz", *QUICK)
    with RunStore(store) as s:
        m = s.manifest(rid)
    assert m.code.dirty and m.code.diff_sha256
    code, rep, err = replay(store, rid)
    assert code == 0, err[-3000:]
    with RunStore(store) as s:
        r = s.manifest(rep["replays"][0]["replay_run"])
    assert r.replay is not None and r.replay.diff_applied
    assert {a.sha256 for a in r.outputs.artifacts} == {a.sha256 for a in m.outputs.artifacts}


SANDBOX_PROBE = r"""
import json, os, socket, sys
facts = {}
try:
    s = socket.create_connection(("1.1.1.1", 53), timeout=2); facts["net"] = "connected"
except OSError as e:
    facts["net"] = f"refused: {e.errno}"
facts["interfaces"] = sorted(os.listdir("/sys/class/net"))
try:
    with open("data/train.npz", "ab") as f: f.write(b"x")
    facts["data_write"] = "written"
except OSError as e:
    facts["data_write"] = f"refused: {e.errno}"
try:
    with open("train_mlp.py", "a") as f: f.write("#")
    facts["code_write"] = "written"
except OSError as e:
    facts["code_write"] = f"refused: {e.errno}"
for line in open("/proc/self/status"):
    if line.startswith(("CapEff", "CapPrm", "CapBnd", "NoNewPrivs")):
        k, v = line.split(":"); facts[k] = v.strip()
facts["docker_sock"] = os.path.exists("/var/run/docker.sock") or os.path.exists("/run/docker.sock")
facts["uid"] = os.getuid()
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4] in ("/workspace", "/workspace/data/train.npz"):
        facts["mount " + f[4]] = f[5].split(",")[0]
os.makedirs("out", exist_ok=True)
print("SANDBOX " + json.dumps(facts, sort_keys=True), flush=True)
"""


def test_sandbox_inside_a_real_container(store: Path, repo: Path, train_image: str) -> None:
    (repo / "probe.py").write_text(SANDBOX_PROBE)
    from tests.support.training import git

    git(repo, "add", "probe.py")
    git(repo, "commit", "-q", "-m", "probe")
    rid = record_in(store, repo, train_image, "probe.py")
    _code, rep, _err = replay(store, rid)
    rr = rep["replays"][0]["replay_run"]
    log = (store.parent / "logs" / f"{rr}.log").read_text()
    facts = json.loads(log.split("SANDBOX ", 1)[1].splitlines()[0])
    assert facts["net"].startswith("refused")
    assert facts["interfaces"] == ["lo"]
    # a non-root user in a read-only mount: EACCES (13) or EROFS (30), never written
    assert facts["data_write"] in ("refused: 13", "refused: 30")
    assert facts["code_write"] in ("refused: 13", "refused: 30")
    assert facts["mount /workspace"] == facts["mount /workspace/data/train.npz"] == "ro"
    assert facts["uid"] == (os.getuid() or 65534)  # never root inside
    assert int(facts["CapEff"], 16) == 0 and int(facts["CapBnd"], 16) == 0
    assert facts["NoNewPrivs"] == "1"
    assert facts["docker_sock"] is False


def _slow_repo(repo: Path, body: str) -> None:
    (repo / "slow.py").write_text(body)
    from tests.support.training import git

    git(repo, "add", "slow.py")
    git(repo, "commit", "-q", "-m", "slow")


def test_timeout_is_recorded_as_an_aborted_replay(
    store: Path, repo: Path, train_image: str
) -> None:
    _slow_repo(repo, "import time\nprint('working', flush=True)\ntime.sleep(4)\n")
    rid = record_in(store, repo, train_image, "slow.py")
    code, rep, err = replay(store, rid, "--timeout", "1")
    assert code == 3, err[-2000:]  # timed out: not judged, never "not reproduced"
    r = rep["replays"][0]
    assert r["status"] == "timed_out" and "timed out after 1s" in r["reason"]
    assert r["replay_status"] == "timed_out"
    assert r["verdict"] == "INCOMPLETE"
    with RunStore(store) as s:
        assert s.verify().ok
        assert s.manifest(r["replay_run"]).status == "timed_out"


def test_container_killed_mid_run(engine: Any, store: Path, repo: Path, train_image: str) -> None:
    _slow_repo(repo, "import time\nprint('sleeping', flush=True)\ntime.sleep(6)\n")
    rid = record_in(store, repo, train_image, "slow.py")
    killed: list[str] = []

    def killer() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # polled, with a deadline
            for c in engine.containers.list(filters={"label": "io.replay-tui.run"}):
                # killed mid-run: once the program says it is in its sleep, not before
                if c.status == "running" and b"sleeping" in c.logs(stdout=True, stderr=False):
                    c.kill()
                    killed.append(c.id)
                    return
            time.sleep(0.1)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    code, rep, _err = replay(store, rid)
    t.join(timeout=5)
    assert killed, "the test never saw the replay container running"
    assert code == 1
    r = rep["replays"][0]
    assert r["status"] == "failed" and "137" in r["reason"]
    with RunStore(store) as s:
        assert s.verify().ok


def test_out_of_memory_is_recorded(store: Path, repo: Path, train_image: str) -> None:
    _slow_repo(repo, "b = bytearray(400 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\n")
    rid = record_in(store, repo, train_image, "slow.py")
    code, rep, err = replay(store, rid, "--memory", "96m")
    assert code == 3, err[-2000:]  # the machine's limit ended it: no verdict
    r = rep["replays"][0]
    assert r["replay_status"] == "infra-error"
    assert "out of memory" in r["reason"] and "memory limit of 96m" in r["reason"]


def test_digest_missing_from_registry_exits_3(store: Path, repo: Path, train_image: str) -> None:
    rid = record_in(store, repo, train_image, "train_mlp.py", "--data", "data/train.npz", *QUICK)
    with RunStore(store) as s:
        body = s.manifest(rid).model_dump(mode="json")
    body["run_id"] = body["run_id"][:-4] + "beef"
    body["image"]["digest"] = "sha256:" + "ab" * 32
    body["image"]["image_id"] = None
    body.pop("integrity")
    f = store.parent / "bad-digest.json"
    f.write_text(json.dumps(body))
    assert replay_tui(store, "ingest", str(f)).returncode == 0
    code, _, err = replay(store, body["run_id"], "--repo", str(repo), "--force-data")
    assert code == 3
    assert "cannot pull" in err and "ababab" in err


def test_engine_unreachable_exits_3(store: Path, repo: Path, train_image: str) -> None:
    rid = record_in(store, repo, train_image, "train_mlp.py", "--data", "data/train.npz", *QUICK)
    from tests.support.training import cli_env

    env = cli_env()
    env["DOCKER_HOST"] = f"unix://{store.parent}/no-engine.sock"
    import subprocess
    import sys

    proc = subprocess.run(
        [str(Path(sys.executable).parent / "replay-tui"), "--store", str(store), "replay", rid],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3
    assert "no Docker engine" in proc.stderr and "docker-env.sh" in proc.stderr
    with RunStore(store) as s:
        assert s.verify().ok
        assert s.facts("replays")[-1]["status"] == "infra-error"


def test_outputs_at_the_top_of_the_workdir(store: Path, repo: Path, train_image: str) -> None:
    _slow_repo(
        repo,
        "import hashlib\nopen('weights.bin', 'wb').write(hashlib.sha256(b'w').digest() * 64)\n",
    )
    proc = replay_tui(
        store,
        "record",
        "--json",
        "--image",
        train_image,
        "--artifact",
        "weights.bin",
        "--",
        "python3",
        "slow.py",
        cwd=repo,
    )
    # record --image never mounts the real repository writable (a git hook, edited sources)
    assert proc.returncode == 2 and "never mounts the repository writable" in proc.stdout
    # a run that did write there (recorded elsewhere) replays in a writable throwaway checkout
    from replay_tui.sdk import uuid7
    from tests.support.training import git

    weights = hashlib.sha256(b"w").digest() * 64
    data = {
        "schema_version": 1,
        "run_id": uuid7(),
        "status": "succeeded",
        "started_at": "2026-11-20T10:00:00.000Z",
        "argv": ["python3", "slow.py"],
        "code": {"commit": git(repo, "rev-parse", "HEAD").strip(), "dirty": False},
        "image": {
            "reference": train_image,
            "digest": os.environ["REPLAY_TUI_TRAIN_DIGEST"].split("@", 1)[1],
        },
        "outputs": {
            "artifacts": [
                {
                    "path": "weights.bin",
                    "sha256": hashlib.sha256(weights).hexdigest(),
                    "size_bytes": len(weights),
                }
            ]
        },
    }
    (repo.parent / "m.json").write_text(json.dumps(data))
    assert replay_tui(store, "ingest", str(repo.parent / "m.json")).returncode == 0
    code, rep, err = replay(store, str(data["run_id"]), "--repo", str(repo))
    assert code == 0, err[-2000:]
    assert rep["replays"][0]["verdict"] == "IDENTICAL"


def test_a_floor_measuring_series_in_docker_reads_within_noise(
    store: Path, repo: Path, train_image: str
) -> None:
    """``replay --times 2`` of a nondeterministic program in the sandboxed container: the
    floor is measured from the two replicas and stored, and the original is judged
    against it.  A wrong verdict (DIVERGED) needs an endpoint outside a prediction
    interval of family-wise error 1e-7 (``--alpha 1e-7``): a chance below 1e-7."""
    import shutil

    from tests.support.training import ROOT, git

    shutil.copy(ROOT / "examples" / "train_noisy.py", repo / "train_noisy.py")
    git(repo, "add", "train_noisy.py")
    git(repo, "commit", "-q", "-m", "noisy training")
    rid = record_in(store, repo, train_image, "train_noisy.py", "--steps", "30")
    code, rep, err = replay(store, rid, "--times", "2", "--alpha", "1e-7")
    assert code == 0, err[-3000:]
    assert [r["verdict"] for r in rep["replays"]] == ["WITHIN_NOISE", "WITHIN_NOISE"], rep
    assert rep["noise_floor"]["replicas"] == 2 and rep["noise_floor"]["floor_id"]
    with RunStore(store) as s:
        floors = [f for f in s.facts("noise_floors") if "floor" in f["body"]]
        assert len(floors) == 1 and floors[0]["run_id"] == rid
        replicas = floors[0]["body"]["replicas"]
        assert sorted(replicas) == sorted(r["replay_run"] for r in rep["replays"])
        assert all(s.manifest(x).replay.backend == "docker" for x in replicas)  # type: ignore[union-attr]
        assert s.verify().ok
