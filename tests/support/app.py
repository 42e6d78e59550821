"""Stores for the TUI tests, built from fixed manifests so every screen looks the same twice.

``build_fixed_store`` makes a store with 40 realistic runs (some with critical gaps), an
original run with a replay that diverged (real safetensors checkpoints in the object
store, so the comparison holds a real per-tensor diff), a replay that reproduced
exactly, a few more judged replays and a drill.  The store's clock is frozen while it is
built, so every timestamp is fixed too.  No test lives here; the helpers are imported
by the ``test_app*`` modules.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from textual.pilot import Pilot

from replay_tui.compare.gaps import gap_counts
from replay_tui.replay.drill import DrillReport
from replay_tui.tui.app import ReplayApp
from replay_tui.tui.screens.runs import RunsScreen
from storage import ledger
from storage.manifest import RunManifest, manifest_from_data
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.support.factories import apply_overrides, realistic_manifest

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXED_NOW = "2025-06-02T09:30:00.000Z"
ORIGINAL_ID = "01JRORIGINAL0000000000000A"
REPLAY_ID = "01JRREPLAY000000000000000B"
SAME_ORIGINAL_ID = "01JRSAMEORIG00000000000000"
SAME_REPLAY_ID = "01JRSAMEREPLAY000000000000"
RUNS = 40


@dataclass(frozen=True)
class FixedStore:
    path: Path
    original_id: str
    replay_id: str
    diverged_comparison: int
    identical_comparison: int
    critical_id: str


@contextmanager
def frozen_clock(now: str = FIXED_NOW) -> Iterator[None]:
    """The store's clock (``ingested_at``, fact ``created_at``) stands still."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ledger, "utc_now", lambda: now)
        yield


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _checkpoints(folder: Path) -> tuple[Path, Path]:
    """Two real safetensors checkpoints: B has one tensor close and one outside tolerance."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(7)
    a = {
        "encoder.weight": rng.standard_normal((16, 8)).astype(np.float32),
        "encoder.bias": rng.standard_normal(16).astype(np.float32),
        "head.weight": rng.standard_normal((4, 16)).astype(np.float32),
        "head.bias": np.zeros(4, dtype=np.float32),
    }
    b = dict(a)
    b["encoder.bias"] = a["encoder.bias"] * np.float32(1 + 1e-7)
    b["head.weight"] = a["head.weight"] + np.float32(0.02)
    folder.mkdir(parents=True, exist_ok=True)
    pa, pb = folder / "a.safetensors", folder / "b.safetensors"
    save_file(a, str(pa))
    save_file(b, str(pb))
    return pa, pb


def _history(points: list[list[float]], *, diverge_after: int | None) -> list[list[float]]:
    out = []
    for step, value in points:
        if diverge_after is not None and step > diverge_after:
            value = round(value + 0.002 * (step - diverge_after) / 50, 6)
        out.append([step, value])
    return out


def _original_and_replay(ckpt_a: Path, ckpt_b: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    base = realistic_manifest(500, history_steps=40)
    base = apply_overrides(
        base,
        {
            "run_id": ORIGINAL_ID,
            "name": "resnet50-imagenet-audit-2025q2",
            "started_at": "2025-05-30T08:00:00.000Z",
            "ended_at": "2025-05-30T14:12:30.000Z",
            "duration_s": 22350.0,
        },
    )
    arts = base["outputs"]["artifacts"]
    arts[1] = {
        "path": "checkpoints/best.safetensors",
        "sha256": _sha256(ckpt_a),
        "size_bytes": ckpt_a.stat().st_size,
        "kind": "checkpoint",
        "tensor_sha256": None,
    }
    replay = copy.deepcopy(base)
    replay.update(
        run_id=REPLAY_ID,
        kind="replay",
        replay_of=ORIGINAL_ID,
        started_at="2025-06-01T10:00:00.000Z",
        ended_at="2025-06-01T16:20:00.000Z",
        duration_s=22800.0,
        replay={
            "backend": "local",
            "environment_pinned": False,
            "network": "none",
            "gpus": "all",
            "cpu_fallback": False,
            "forced_data": False,
            "diff_applied": False,
            "determinism": "recorded",
            "reason": None,
        },
    )
    r_arts = replay["outputs"]["artifacts"]
    r_arts[1] = dict(arts[1], sha256=_sha256(ckpt_b), size_bytes=ckpt_b.stat().st_size)
    r_arts[2] = dict(arts[2], sha256="0" * 63 + "1")  # the training log differs
    hist = replay["outputs"]["metric_history"]
    hist["loss"] = _history(hist["loss"], diverge_after=1200)
    replay["outputs"]["metrics"]["loss"] = hist["loss"][-1][1]
    replay["outputs"]["metrics"]["throughput_samples_s"] = 812.5
    replay["hardware"]["driver_version"] = "550.90.07"
    pkgs = list(replay["environment"]["packages"])
    pkgs[3] = pkgs[3].split("==")[0] + "==9.9.9"
    replay["environment"]["packages"] = pkgs
    replay["environment"]["packages_sha256"] = hashlib.sha256("\n".join(pkgs).encode()).hexdigest()
    replay["environment"]["hostname"] = "gpu-node-063"
    replay["hardware"]["gpus"] = [
        dict(g, uuid="GPU-00000000-0000-0000-0000-00000000000" + str(k))
        for k, g in enumerate(replay["hardware"]["gpus"])
    ]
    return base, replay


def _same_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    orig = realistic_manifest(600, history_steps=20)
    orig = apply_overrides(
        orig,
        {
            "run_id": SAME_ORIGINAL_ID,
            "name": "bert-base-drill-baseline",
            "started_at": "2025-05-20T09:00:00.000Z",
        },
    )
    rep = copy.deepcopy(orig)
    rep.update(
        run_id=SAME_REPLAY_ID,
        kind="replay",
        replay_of=SAME_ORIGINAL_ID,
        started_at="2025-05-21T09:00:00.000Z",
        replay={"backend": "docker", "environment_pinned": True},
    )
    return orig, rep


def build_fixed_store(root: Path) -> FixedStore:
    """The store every snapshot is taken from (see the module doc)."""
    from replay_tui.compare.verdict import compare_runs

    root.mkdir(parents=True, exist_ok=True)
    path = root / "store.db"
    with frozen_clock(), RunStore(path) as store:
        manifests: list[RunManifest] = []
        for i in range(RUNS):
            over: dict[str, Any] = {}
            if i % 9 == 4:
                over = {"image": None, "randomness__seed": None, "randomness__python": None}
            elif i % 7 == 3:
                over = {"env__PYTHONHASHSEED": "0", "randomness__python_hash_seed": None}
                over["determinism__cudnn_benchmark"] = True
            manifests.append(manifest_from_data(apply_overrides(realistic_manifest(i), over)))
        ckpt_a, ckpt_b = _checkpoints(root / "ckpt")
        objects = ObjectStore.beside(path)
        objects.put(ckpt_a, _sha256(ckpt_a))
        objects.put(ckpt_b, _sha256(ckpt_b))
        orig_d, rep_d = _original_and_replay(ckpt_a, ckpt_b)
        same_o, same_r = _same_pair()
        orig, rep = manifest_from_data(orig_d), manifest_from_data(rep_d)
        so, sr = manifest_from_data(same_o), manifest_from_data(same_r)
        manifests += [orig, rep, so, sr]
        store.ingest_many([(m, gap_counts(m), (), {}) for m in manifests])
        diverged = compare_runs(orig, rep, objects=objects)
        cid = store.add_comparison(
            orig.run_id,
            rep.run_id,
            diverged.verdict,
            diverged.to_dict(),
            rtol=diverged.rtol,
            atol=diverged.atol,
            set_verdict_on=rep.run_id,
        )
        store.add_replay(
            orig.run_id,
            replay_run=rep.run_id,
            backend="local",
            status="succeeded",
            verdict=diverged.verdict,
            reason=None,
            duration_s=22800.0,
            comparison_id=cid,
            body={"replay": rep_d["replay"], "verdict": diverged.verdict},
        )
        same = compare_runs(so, sr, objects=objects)
        cid_same = store.add_comparison(
            so.run_id,
            sr.run_id,
            same.verdict,
            same.to_dict(),
            rtol=same.rtol,
            atol=same.atol,
            set_verdict_on=sr.run_id,
        )
        store.add_replay(
            so.run_id,
            replay_run=sr.run_id,
            backend="docker",
            status="succeeded",
            verdict=same.verdict,
            reason=None,
            duration_s=812.0,
            comparison_id=cid_same,
            body={"replay": {"backend": "docker"}, "verdict": same.verdict},
        )
        judged = [("IDENTICAL", 1), ("EQUIVALENT", 2), ("INCOMPLETE", 5)]
        for verdict, i in judged:
            store.add_replay(
                manifests[i].run_id,
                replay_run=None,
                backend="docker",
                status="completed",
                verdict=verdict,
                reason=None if verdict != "INCOMPLETE" else "exit code 1",
                duration_s=600.0,
                comparison_id=None,
                body={"verdict": verdict},
            )
        # a cancelled attempt after the IDENTICAL one: shown apart, never the verdict
        store.add_replay(
            manifests[1].run_id,
            replay_run=None,
            backend="docker",
            status="cancelled",
            verdict=None,
            reason="cancelled before the replay finished",
            duration_s=3.0,
            comparison_id=None,
            body={"reason": "cancelled"},
            sets_verdict=False,
        )
        store.add_drill(
            False,
            {
                "pick": "random",
                "count": 3,
                "backend": "docker",
                "runs": [
                    {"run_id": SAME_ORIGINAL_ID, "status": "reproduced", "verdict": "IDENTICAL"},
                    {"run_id": ORIGINAL_ID, "status": "not_reproduced", "verdict": "DIVERGED"},
                    {"run_id": manifests[1].run_id, "status": "reproduced", "verdict": "IDENTICAL"},
                ],
            },
        )
    critical = next(m.run_id for m in manifests if gap_counts(m).critical)
    return FixedStore(path, ORIGINAL_ID, REPLAY_ID, cid, cid_same, critical)


# -- a real recorded run ----------------------------------------------------------------


def cli_env() -> dict[str, str]:
    """Environment whose ``python`` (first on PATH) has torch and the project."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("REPLAY_TUI_SEED", None)
    env.pop("PYTHONHASHSEED", None)
    env.pop("REPLAY_TUI_STORE", None)
    return env


def git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def record_real_run(root: Path, *extra: str) -> tuple[Path, str]:
    """Record the example training with the real launcher in a fresh git repo.

    Returns the store path and the recorded run id.
    """
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shutil.copy(REPO_ROOT / "examples" / "train_mlp.py", repo / "train_mlp.py")
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "add", "train_mlp.py", ".gitignore")
    git(repo, "commit", "-q", "-m", "example")
    store = root / "store.db"
    exe = Path(sys.executable).parent / "replay-tui"
    argv = [str(exe), "--store", str(store), "record", "--seed", "1", "--artifact", "out/*"]
    argv += ["--json", "--", "python", "train_mlp.py", "--out", "out", "--epochs", "1"]
    argv += ["--samples", "256", "--workers", "0", *extra]
    done = subprocess.run(
        argv, cwd=repo, env=cli_env(), capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    return store, str(json.loads(done.stdout)["run_id"])


async def settle(pilot: Pilot[Any], rounds: int = 3) -> None:
    """Let every worker finish, every message land and every table measure its rows.

    A DataTable measures new rows (its columns' widths) when its message queue is empty;
    a screenshot taken before that shows each column as wide as its label (seen once, in
    the dashboard's snapshot on a loaded machine), so that is waited for too."""
    from textual.widgets import DataTable

    for _ in range(rounds):
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    for _ in range(1200):  # up to a minute
        tables = pilot.app.screen.query(DataTable)
        if not any(t._require_update_dimensions or t._updated_cells for t in tables):
            break
        await pilot.pause(0.05)
    else:
        raise AssertionError("a table never measured its new rows")
    await pilot.pause()


GATED = """\
import os, sys, time
gate = sys.argv[1]
os.makedirs("out", exist_ok=True)
fast = os.path.exists(gate)
for i in range(4 if fast else 3000):
    print(f"step {i} loss {1.0 / (i + 1)}", flush=True)
    if not fast:
        time.sleep(0.1)
with open("out/model.bin", "w") as f:
    f.write("weights")
"""


def record_gated_run(root: Path) -> tuple[Path, str, Path]:
    """A run recorded by the real launcher whose program is quick while the gate file
    exists and runs for minutes once it is gone (a cancel or Ctrl-C always lands mid-run).

    Returns the store, the run id and the gate file (still there)."""
    import json

    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "gated.py").write_text(GATED)
    (repo / ".gitignore").write_text("out/\n")
    git(repo, "add", "gated.py", ".gitignore")
    git(repo, "commit", "-q", "-m", "gated")
    gate = root / "gate"
    gate.touch()
    store = root / "store.db"
    exe = Path(sys.executable).parent / "replay-tui"
    argv = [str(exe), "--store", str(store), "record", "--artifact", "out/*", "--json"]
    argv += ["--", "python", "gated.py", str(gate)]
    done = subprocess.run(
        argv, cwd=repo, env=cli_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return store, str(json.loads(done.stdout)["run_id"]), gate


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body in a fresh event loop (pytest takes the fixtures it names)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


async def wait_until(
    pilot: Pilot[None], predicate: Callable[[], bool], timeout: float = 60.0
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {predicate}")
        await pilot.pause(0.05)


def runs_screen(app: ReplayApp) -> RunsScreen:
    screen = app.screen
    assert isinstance(screen, RunsScreen), type(screen).__name__
    return screen


def fixed_drill() -> DrillReport:
    from replay_tui.replay.drill import DrillItem

    return DrillReport(
        pick="random",
        seed=1234,
        since=None,
        count=3,
        backend="local",
        candidates=42,
        started_at="2025-06-02T09:30:00.000Z",
        items=[
            DrillItem(
                SAME_ORIGINAL_ID,
                "bert-base-drill-baseline",
                "reproduced",
                "IDENTICAL",
                "01JRDRILLREPLAY00000000001",
                11,
                None,
                812.0,
            ),
            DrillItem(
                ORIGINAL_ID,
                "resnet50-imagenet-audit-2025q2",
                "not_reproduced",
                "DIVERGED",
                "01JRDRILLREPLAY00000000002",
                12,
                "metric loss first differs at step 1250, leaves tolerance there",
                22800.0,
            ),
            DrillItem(
                "01JRDRILLNODATA00000000003",
                "vit-small-cifar100",
                "error",
                None,
                None,
                None,
                "data input /datasets/cifar100 is missing on this host",
                3.0,
            ),
        ],
        ended_at="2025-06-02T16:00:00.000Z",
        drill_id=7,
        ledger_head="9f" * 32,
    )
