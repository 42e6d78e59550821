"""Shared work of the runtime tests (Docker, Podman, Apptainer), done once per session.

One run is recorded in the registry image (with Docker, as ``record --image`` does), and
the first Apptainer replays of it convert the image to a SIF file in a fresh cache: the
conversion (about a minute on two busy cores) happens once per test session, however
many test modules ask for it.  A session-scoped fixture defined in this module and
imported by several test modules would run once per module, so the work is kept in a
folder of the session's base temp dir, under a lock, and read back by the others.

A missing runtime is a failure, never a skip: these tests are how the runtimes are shown
to work (scripts/podman-env.sh and scripts/apptainer-env.sh set them up).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.training import QUICK, make_repo, record_in_image, replay_tui


def require(tool: str, script: str) -> str:
    """The path of ``tool``, or a failure naming the script that installs it."""
    found = shutil.which(tool)
    if found is None:
        pytest.fail(f"{tool} is not installed: run scripts/{script} (a failure, never a skip)")
    return found


def train_image() -> tuple[str, str]:
    """(tag, name@digest) of the training image in the local registry."""
    tag = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    ref = os.environ.get("REPLAY_TUI_TRAIN_DIGEST")
    if not tag or not ref:
        pytest.fail(
            "REPLAY_TUI_TRAIN_IMAGE / REPLAY_TUI_TRAIN_DIGEST unset: run scripts/docker-env.sh"
            " and source /var/lib/replay-tui-env/train-image.env"
        )
    return tag, ref


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@dataclass(frozen=True)
class Recorded:
    """The run recorded in the registry image: its store, repository and id."""

    store: Path
    repo: Path
    run_id: str


def recorded_once(
    base: Path, name: str, runs: Sequence[Sequence[str]]
) -> tuple[Path, Path, list[str]]:
    """The store, repository and run ids of ``train_mlp.py`` recorded in the training
    image, one run for each entry of ``runs`` (that run's own arguments), in ``base/name``:
    recorded by the first caller under a lock, read back by every later one."""
    tag, _ = train_image()
    folder = base / name
    with _locked(base / f"{name}.lock"):
        done = folder / "runs.json"
        if done.is_file():
            kept = json.loads(done.read_text())
            return Path(kept["store"]), Path(kept["repo"]), kept["runs"]
        shutil.rmtree(folder, ignore_errors=True)
        store = folder / "store" / "runs.db"
        repo = make_repo(folder / "repo")
        ids = [
            record_in_image(store, repo, tag, "train_mlp.py", "--data", "data/train.npz",
                            *extra, *QUICK)
            for extra in runs
        ]  # fmt: skip
        done.write_text(json.dumps({"store": str(store), "repo": str(repo), "runs": ids}))
        return store, repo, ids


def recorded_run(base: Path) -> Recorded:
    """The session's run recorded in the training image (recorded on first use)."""
    require("docker", "docker-env.sh")
    store, repo, (rid,) = recorded_once(base, "runtimes-recorded", [()])
    return Recorded(store, repo, rid)


def apptainer_replay(
    rec: Recorded, cache: Path, *, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``replay-tui replay`` of the recorded run with ``--backend apptainer`` on the SIF
    cache ``cache``, quiet."""
    return replay_tui(
        rec.store,
        "replay",
        rec.run_id,
        "--backend",
        "apptainer",
        "--apptainer-cache",
        str(cache),
        "--quiet",
        timeout=timeout,
    )


@dataclass(frozen=True)
class ApptainerProof:
    """What the session's first Apptainer replays showed: the cache they shared, each
    replay's exit code, stderr and replay run id (two replays started at once)."""

    cache: Path
    replays: list[dict[str, Any]]


def apptainer_first_replays(base: Path) -> ApptainerProof:
    """Two replays of the recorded run with ``--backend apptainer``, started together on
    a fresh SIF cache: the image is converted once for both (done on first use)."""
    require("apptainer", "apptainer-env.sh")
    rec = recorded_run(base)
    cache = base / "sif-cache"
    with _locked(base / "sif-cache.lock"):
        done = base / "apptainer-first.json"
        if done.is_file():
            return ApptainerProof(cache, json.loads(done.read_text()))
        shutil.rmtree(cache, ignore_errors=True)
        results: list[dict[str, Any]] = [{}, {}]

        def one(i: int) -> None:
            proc = apptainer_replay(rec, cache, timeout=1800)
            results[i] = {"code": proc.returncode, "stderr": proc.stderr, "stdout": proc.stdout}

        threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.write_text(json.dumps(results))
        return ApptainerProof(cache, results)


def replays_of(store: Path, run_id: str, backend: str) -> list[tuple[Any, Any]]:
    """(the replay fact, its replay manifest) of each replay of ``run_id`` made with
    ``backend``, oldest first."""
    from storage.store import RunStore

    with RunStore(store) as s:
        facts = [f for f in s.replays_of(run_id) if f.backend == backend and f.replay_run]
        return [(f, s.manifest(f.replay_run)) for f in facts]


def push_other_image(tag: str) -> str:
    """A tiny image (one file, FROM scratch) pushed to the local registry as ``tag``:
    another image, to swap for the training image's SIF.  Returns ``name@sha256:…``."""
    require("docker", "docker-env.sh")
    import tempfile

    with tempfile.TemporaryDirectory() as ctx:
        Path(ctx, "other.txt").write_text("another image\n")
        Path(ctx, "Dockerfile").write_text("FROM scratch\nCOPY other.txt /other.txt\n")
        subprocess.run(
            ["docker", "build", "--quiet", "--network", "none", "-t", tag, ctx],
            check=True,
            capture_output=True,
            env={**os.environ, "DOCKER_BUILDKIT": "0"},
        )
    subprocess.run(["docker", "push", "--quiet", tag], check=True, capture_output=True)
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", tag],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = tag.rsplit(":", 1)[0]
    digests = [d for d in json.loads(out) if d.startswith(name + "@")]
    assert digests, out
    return str(digests[0])
