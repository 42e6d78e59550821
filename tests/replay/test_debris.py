"""A replay killed with SIGKILL leaves a trace, and the next replay clears its debris.

Real engine, real store, real git: the replay process is SIGKILLed while its container
runs.  Afterwards the ledger holds the attempt, and the container, the scratch folder and
the worktree registration are still there (nothing could clean them).  The next replay
of any run removes them, because their owner is dead, and leaves the store intact.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from replay_tui.replay.backends.docker.engine import OWNER_LABEL
from replay_tui.replay.debris import SCRATCH_PREFIX
from storage.store import RunStore
from tests.helpers.repos import commit_repo
from tests.support.training import cli_env, git, replay_tui

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SLOW = """\
import os, pathlib, time
pathlib.Path("out").mkdir(exist_ok=True)
if not os.path.exists("record-marker"):  # only in the recording's real checkout
    time.sleep(300)
pathlib.Path("out/result.txt").write_text("done\\n")
"""


def _wait(cond: Any, what: str, timeout: float = 180.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigkilled_replay_is_recorded_and_its_debris_swept(
    tmp_path: Path,
    engine: Any,
    train_image: str,
) -> None:
    files = {"slow_train.py": SLOW}
    repo = commit_repo(tmp_path / "repo", files, "slow in a replay", ignore="out/\nrecord-marker\n")
    (repo / "record-marker").write_text("x")
    store = tmp_path / "store" / "runs.db"
    proc = replay_tui(
        store, "record", "--json", "--image", train_image, "--artifact", "out/*",
        "--", "python3", "slow_train.py", cwd=repo,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rid = json.loads(proc.stdout)["run_id"]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**cli_env(), "TMPDIR": str(scratch)}
    exe = str(Path(sys.executable).parent / "replay-tui")
    victim = subprocess.Popen(
        [exe, "--store", str(store), "replay", rid, "--json"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def running() -> Any:
            for c in engine.containers.list(filters={"label": OWNER_LABEL}):
                if json.loads(c.labels[OWNER_LABEL]).get("pid") == victim.pid:
                    return c
            return None

        container = _wait(running, "the replay's container to run")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    # The process is gone; what it started is not, and the ledger knows it tried.
    container.reload()
    assert container.status == "running"
    left = [p for p in scratch.iterdir() if p.name.startswith(SCRATCH_PREFIX)]
    assert len(left) == 1
    assert "replay-tui-wt" in git(repo, "worktree", "list") or str(left[0]) in git(
        repo, "worktree", "list"
    )
    with RunStore(store) as s:
        kinds = [(e.kind, e.run_id) for e in s.events()]
        assert ("blob:replay-attempt", rid) in kinds
        assert s.verify().ok
    # The next replay (cut short by --timeout) sweeps the dead replay's debris.
    nxt = subprocess.run(
        [exe, "--store", str(store), "replay", rid, "--timeout", "3", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "left by a replay that was killed" in nxt.stderr, nxt.stderr[-3000:]
    import docker

    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(container.id)
    assert not [p for p in scratch.iterdir() if p.name.startswith(SCRATCH_PREFIX)]
    assert git(repo, "worktree", "list").count("\n") == 1  # only the main checkout
    with RunStore(store) as s:
        assert s.verify().ok
        attempts = [e for e in s.events() if e.kind == "blob:replay-attempt"]
        assert len(attempts) == 2
    shutil.rmtree(scratch, ignore_errors=True)
    assert os.environ.get("REPLAY_TUI_TRAIN_IMAGE") == train_image
