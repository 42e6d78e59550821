"""A command that cannot start in the image is a failed run (exit 127), not a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from storage.store import RunStore
from tests.helpers.repos import commit_repo
from tests.support.training import replay_tui

if TYPE_CHECKING:
    from replay_tui.capture.executor import ExecSpec

pytestmark = pytest.mark.docker


def test_a_command_missing_from_the_image_is_a_failed_run(
    tmp_path: Path,
    engine: Any,
    train_image: str,
) -> None:
    repo = commit_repo(tmp_path / "repo", {"train.py": "print('never runs')\n"}, "x")
    store = tmp_path / "store" / "runs.db"
    proc = replay_tui(
        store, "record", "--json", "--image", train_image, "--", "no-such-python", "train.py",
        cwd=repo,
    )  # fmt: skip
    assert proc.returncode == 127, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "failed" and out["exit_code"] == 127
    with RunStore(store) as s:
        m = s.manifest(out["run_id"])
        assert m.outputs.log_tail is not None and "cannot start 'no-such-python'" in (
            m.outputs.log_tail
        )
        assert s.verify().ok


def _spec(tmp_path: Path, script: str) -> ExecSpec:
    """``python3 -c SCRIPT`` in ``tmp_path``, its handoff folder made there, its log
    beside it."""
    from replay_tui.capture.executor import ExecSpec

    (tmp_path / "handoff").mkdir()
    return ExecSpec(
        ["python3", "-c", script], tmp_path, {}, tmp_path / "handoff", tmp_path / "output.log"
    )


def test_a_cancel_kills_the_container_at_once(
    tmp_path: Path,
    engine: Any,
    train_image: str,
) -> None:
    """Cancelling stops the run now (SIGKILL), not after a grace period: the command, which
    handles SIGTERM the way a training loop that saves on SIGTERM does, never sees one."""
    from replay_tui.replay.backends.docker.engine import DockerExecutor

    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('got SIGTERM', flush=True))\n"
        "print('ready', flush=True)\n"
        "for _ in range(600):\n"
        "    time.sleep(0.1)\n"
        "print('ran to its end', flush=True)\n"
    )
    spec = _spec(tmp_path, script)
    lines: list[str] = []
    ex = DockerExecutor(train_image, [], "/tmp")
    res = ex.run(spec, lines.append, lambda: "ready" in lines)
    assert res.status == "interrupted" and res.exit_code == 137, res
    assert "cancelled" in (res.reason or "")
    assert "got SIGTERM" not in lines and "ran to its end" not in lines, lines
    assert not engine.containers.list(all=True, filters={"id": ex.container_id})


def test_ctrl_c_stops_the_container_and_the_replay_goes_on(
    tmp_path: Path,
    engine: Any,
    train_image: str,
) -> None:
    """Ctrl-C while the container runs (SIGINT to this process, as a terminal sends it):
    the container is killed and the run ends 'interrupted' with its partial log, so the
    replay hashes and compares what it left and prints its summary, as the local backend
    does; no KeyboardInterrupt escapes, and this process's own handler is back after."""
    import os
    import signal

    from replay_tui.replay.backends.docker.engine import DockerExecutor

    script = (
        "import time\n"
        "print('ready', flush=True)\n"
        "for _ in range(600):\n"
        "    time.sleep(0.1)\n"
        "print('ran to its end', flush=True)\n"
    )
    spec = _spec(tmp_path, script)
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        if line == "ready":
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C

    before = signal.getsignal(signal.SIGINT)
    ex = DockerExecutor(train_image, [], "/tmp")
    res = ex.run(spec, on_line, lambda: False)
    assert res.status == "interrupted" and res.exit_code == 137, res
    assert (res.reason or "").startswith("interrupted (Ctrl-C)")
    assert "ran to its end" not in lines
    assert signal.getsignal(signal.SIGINT) is before
    assert not engine.containers.list(all=True, filters={"id": ex.container_id})
