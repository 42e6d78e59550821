"""Shared work of the Slurm runtime tests (``--slurm-runtime``), done once per session.

Three runs are recorded in the registry image (with Docker, as ``record --image`` does)
in a store of their own, and the first Slurm+Apptainer work is a drill of those three on
a fresh spool: its jobs convert the image into the spool's SIF cache (about a minute or
two on two busy cores), once for the three.  Every later Slurm+Apptainer test names that
spool (``--slurm-spool``) and starts from the SIF already there.  As in
tests/support/runtimes.py, the work is kept in the session's base temp dir under a lock,
so test modules that ask for it share it.

A missing cluster or runtime is a failure, never a skip.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.runtimes import _locked, recorded_once, require
from tests.support.training import replay_tui


def cluster_ready() -> None:
    """A failure naming what is missing unless the cluster and the runtimes answer."""
    from tests.replay.test_slurm import _cluster_problem

    problem = _cluster_problem()
    if problem:
        pytest.fail(f"no Slurm cluster: {problem} (run scripts/slurm-env.sh)")
    for tool, script in (
        ("docker", "docker-env.sh"),
        ("podman", "podman-env.sh"),
        ("apptainer", "apptainer-env.sh"),
    ):
        require(tool, script)


@dataclass(frozen=True)
class Recorded:
    """Three runs recorded in the registry image: their store, repository and ids."""

    store: Path
    repo: Path
    runs: list[str]


def recorded_runs(base: Path) -> Recorded:
    """The three runs (seeds 1, 2 and 3) recorded in the training image once a session."""
    cluster_ready()
    seeds = [("--seed", str(seed)) for seed in (1, 2, 3)]
    return Recorded(*recorded_once(base, "slurm-runtimes-recorded", seeds))


def store_copy(base: Path, dest: Path) -> Path:
    """A copy of the recorded store for one test (its own replays, its own probes)."""
    rec = recorded_runs(base)
    shutil.copytree(rec.store.parent, dest, ignore=shutil.ignore_patterns("slurm-spool"))
    return dest / "runs.db"


@dataclass(frozen=True)
class DrillProof:
    """The session's first Slurm+Apptainer work: a drill of the three runs on a fresh
    spool.  Its store, its spool (with the SIF cache its jobs filled) and what the
    command said."""

    store: Path
    spool: Path
    result: dict[str, Any]


def apptainer_drill(base: Path) -> DrillProof:
    """``drill --backend slurm --slurm-runtime apptainer --count 3`` on a fresh spool
    (done on first use; later callers get what it did and its filled SIF cache)."""
    spool = base / "slurm-runtimes-spool"
    with _locked(base / "slurm-runtimes-spool.lock"):
        done = base / "slurm-apptainer-drill.json"
        if done.is_file():
            kept = json.loads(done.read_text())
            return DrillProof(Path(kept["store"]), spool, kept["result"])
        store = store_copy(base, base / "slurm-apptainer-drill-store")
        shutil.rmtree(spool, ignore_errors=True)
        proc = replay_tui(
            store,
            "drill",
            "--backend",
            "slurm",
            "--slurm-runtime",
            "apptainer",
            "--slurm-spool",
            str(spool),
            "--count",
            "3",
            "--pick",
            "oldest",
            "--json",
            timeout=2400,
        )
        result = {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
        done.write_text(json.dumps({"store": str(store), "result": result}))
        return DrillProof(store, spool, result)
