"""Smoke test: the real ``replay-tui`` in a real terminal (tmux), driven by keys.

Starts ``replay-tui --store S`` in a detached 120x36 tmux session, waits for the runs
table to be painted, reads a run's reproduction state from all its replays, moves with
j/k, searches, opens a run, picks its tabs with number keys and ``l``, copies its id with
``y``, opens the dashboard, quits, reading the screen with ``capture-pane`` at each
step.  tmux is part of the test environment: without it the test fails, never skips.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.app import FixedStore, build_fixed_store, cli_env


def tmux(*args: str) -> str:
    done = subprocess.run(["tmux", *args], capture_output=True, text=True, check=False)
    return done.stdout


class Terminal:
    def __init__(self, session: str) -> None:
        self.session = session

    def screen(self) -> str:
        return tmux("capture-pane", "-p", "-t", self.session)

    def keys(self, *keys: str) -> None:
        tmux("send-keys", "-t", self.session, *keys)

    def alive(self) -> bool:
        return (
            subprocess.run(["tmux", "has-session", "-t", self.session], check=False).returncode == 0
        )

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"the screen never showed what was awaited; it shows:\n{text}")


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> FixedStore:
    return build_fixed_store(tmp_path_factory.mktemp("tmux"))


@pytest.fixture
def terminal(fixed: FixedStore) -> Iterator[Terminal]:
    assert shutil.which("tmux") is not None, "tmux is missing: apt-get install tmux"
    session = f"replay-tui-smoke-{uuid.uuid4().hex[:8]}"
    exe = Path(sys.executable).parent / "replay-tui"
    env = cli_env()
    env["TERM"] = "xterm-256color"
    command = f"{exe} --store {fixed.path}"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "36", command],
        check=True,
        env=env,
    )
    term = Terminal(session)
    try:
        yield term
    finally:
        tmux("kill-session", "-t", session)


def _footer(screen: str) -> str:
    """The screen's last line: the keys the focused widget answers."""
    lines = screen.rstrip("\n").splitlines()
    return lines[-1].strip() if lines else ""


def test_replay_tui_in_tmux(terminal: Terminal, fixed: FixedStore) -> None:
    # wait for the end state (status and rows painted), never a frame in between
    # 44 runs: the 2 replays sit under their originals; the run's row (its group mark),
    # not the line under the table that shows the cursor's run whole
    text = terminal.wait_for(lambda s: "42 of 42 runs" in s and "▸ resnet50-imagenet-audit" in s)
    assert "DIVERGED" in text
    # the original's state from all its replays: latest completed verdict, 0 of 1 reproduced
    assert any(
        "DIVERGED" in line and "0/1" in line and "▸ resnet50" in line for line in text.splitlines()
    )
    terminal.keys("Right")  # the cursor's run (the newest): its replay shows under it
    text = terminal.wait_for(lambda s: "▾ resnet50" in s and "└ resnet50" in s)
    terminal.keys("Left")
    terminal.wait_for(lambda s: "▸ resnet50" in s and "└" not in s)

    terminal.keys("j", "j", "k", "y")  # j/k move the cursor; y copies the run id
    terminal.wait_for(lambda s: "copied run id" in s)

    terminal.keys("/")
    # the box has the focus when the footer shows its keys, not the table's (r Replay)
    terminal.wait_for(lambda s: _footer(s).startswith("/ Search") and "r Replay" not in _footer(s))
    terminal.keys("-l", "whisper")

    def whisper_rows(screen: str) -> list[str]:
        return [line for line in screen.splitlines() if line.startswith(" 01")]

    text = terminal.wait_for(
        lambda s: (
            "search “whisper”" in s
            and " of " in s
            and bool(whisper_rows(s))
            and all("whisper" in line for line in whisper_rows(s))
        )
    )
    assert whisper_rows(text)

    terminal.keys("Enter")  # leave the box for the table: its keys are back in the footer
    terminal.wait_for(lambda s: "r Replay" in _footer(s))
    terminal.keys("Enter")  # open the run under the cursor
    text = terminal.wait_for(lambda s: "Manifest" in s and "code" in s)
    assert "whisper" in text
    assert "started" in text
    terminal.keys("2")  # number keys pick tabs
    terminal.wait_for(lambda s: "fix:" in s or "no provenance gaps" in s.lower())
    terminal.keys("l")  # the log tail
    terminal.wait_for(lambda s: "l: this tab" in s or "no log stored for this run" in s)
    terminal.keys("1")
    terminal.wait_for(lambda s: "code" in s and "Manifest" in s)

    terminal.keys("Escape")
    terminal.wait_for(lambda s: "search “whisper”" in s)
    terminal.keys("d")
    text = terminal.wait_for(lambda s: "reproducible" in s and "recent drills" in s)
    assert "runs with critical gaps" in text

    terminal.keys("Escape")
    terminal.wait_for(lambda s: "search “whisper”" in s)
    terminal.keys("q")
    deadline = time.monotonic() + 10
    while terminal.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not terminal.alive(), "q did not quit the app"
