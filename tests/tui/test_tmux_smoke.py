"""Smoke tests: the real ``replay-tui`` in a real terminal (tmux), driven by keys.

Each starts ``replay-tui --store S`` in a detached 120x36 tmux session and reads the
screen with ``capture-pane`` at each step, waiting (polling, with a deadline) for what
each key should show.  tmux is part of the test environment: without it they fail,
never skip.

- on the fixed store: reads a run's reproduction state from all its replays, moves with
  j/k, searches, opens a run, picks its tabs with number keys and ``l``, copies its id
  with ``y``, opens the dashboard, quits;
- the whole walk once, on a store of two real recorded runs of a tiny program (a pure
  Python loss curve drawn from the seed: well under a second a run) that differ in their
  seed: searches by a run-id prefix, compares the two, bisects them through the form (the
  local backend: real probes, a few seconds), reopens the stored bisect from the run's
  Bisects tab, exports the evidence bundle from the palette (the folder is written) and
  checks the store from the palette (intact).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.repos import commit_repo
from tests.support.app import FixedStore, cli_env


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

    def type(self, text: str) -> None:
        """``text`` as typed, character by character (never read as key names)."""
        tmux("send-keys", "-t", self.session, "-l", text)

    def alive(self) -> bool:
        return (
            subprocess.run(["tmux", "has-session", "-t", self.session], check=False).returncode == 0
        )

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 120.0) -> str:
        """The screen once ``predicate`` holds; a deadline, not a pause (once, under a load
        of 3+ on two cores, a picker's filter took longer than 30 s to show)."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"the screen never showed what was awaited; it shows:\n{text}")


def launch(store: Path) -> Iterator[Terminal]:
    """``replay-tui --store STORE`` in a new detached 120x36 tmux session, killed after.

    The command names its environment itself (a tmux server already running would hand
    the pane its own): this interpreter's ``python`` first on PATH (the local backend
    runs the recorded ``python``), no seed, store or signing key from the caller's."""
    assert shutil.which("tmux") is not None, "tmux is missing: apt-get install tmux"
    session = f"replay-tui-smoke-{uuid.uuid4().hex[:8]}"
    exe = Path(sys.executable).parent / "replay-tui"
    env = cli_env()
    env["TERM"] = "xterm-256color"
    unset = ("REPLAY_TUI_SEED", "PYTHONHASHSEED", "REPLAY_TUI_STORE", "REPLAY_TUI_SIGNING_KEY")
    command = shlex.join(
        [
            "env",
            *(arg for name in unset for arg in ("-u", name)),
            f"PATH={env['PATH']}",
            "TERM=xterm-256color",
            str(exe),
            "--store",
            str(store),
        ]
    )
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


@pytest.fixture
def terminal(fixed: FixedStore) -> Iterator[Terminal]:
    yield from launch(fixed.path)


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
    deadline = time.monotonic() + 60  # a deadline: under load, exit can take seconds
    while terminal.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not terminal.alive(), "q did not quit the app"


# -- the whole walk once, on real recorded runs -------------------------------------------

TINY = """\
import os, random
rng = random.Random(int(os.environ.get("REPLAY_TUI_SEED", "0")))
os.makedirs("out", exist_ok=True)
loss = 1.0
for step in range(20):
    loss = loss * 0.9 + rng.random() * 0.01
    print(f"step {step} loss {loss:.6f}", flush=True)
with open("out/model.txt", "w") as f:
    f.write(f"{loss:.6f}\\n")
"""
"""A tiny training: a loss curve drawn from the seed the launcher hands it."""
LOSS = r"step (?P<step>\d+) loss (?P<value>[0-9.eE+-]+)"


@dataclass(frozen=True)
class TinyRuns:
    store: Path
    first: str
    """Recorded with seed 1."""
    second: str
    """Recorded with seed 2: the same code, data and command, another loss curve."""


def _record_tiny(store: Path, repo: Path, seed: int) -> str:
    exe = Path(sys.executable).parent / "replay-tui"
    argv = [str(exe), "--store", str(store), "record", "--json", "--quiet"]
    argv += ["--seed", str(seed), "--artifact", "out/*", "--metric-regex", LOSS]
    argv += ["--metric-name", "loss", "--", "python", "tiny.py"]
    done = subprocess.run(
        argv, cwd=repo, env=cli_env(), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return str(json.loads(done.stdout)["run_id"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> TinyRuns:
    root = tmp_path_factory.mktemp("tmux-walk")
    repo = commit_repo(root / "repo", {"tiny.py": TINY}, "tiny", ignore="out/\n")
    store = root / "store" / "runs.db"
    first = _record_tiny(store, repo, 1)
    second = _record_tiny(store, repo, 2)
    assert first[:13] != second[:13]  # the prefixes the walk types name one run each
    return TinyRuns(store, first, second)


@pytest.fixture
def walk_terminal(tiny: TinyRuns) -> Iterator[Terminal]:
    yield from launch(tiny.store)


def _lines_with(screen: str, *parts: str) -> list[str]:
    return [line for line in screen.splitlines() if all(p in line for p in parts)]


def test_the_whole_walk_in_tmux(walk_terminal: Terminal, tiny: TinyRuns) -> None:
    """Search by id prefix, compare, bisect through the form, reopen the stored bisect,
    export the bundle and check the store: each step read off the real screen."""
    term = walk_terminal
    a, b = tiny.second[:13], tiny.first[:13]  # A (GOOD): the run searched; B: the one picked
    term.wait_for(lambda s: "2 of 2 runs" in s and bool(_lines_with(s, a)))

    # 1. search by a run-id prefix: only that run's row is left
    term.keys("/")
    term.wait_for(lambda s: _footer(s).startswith("/ Search") and "r Replay" not in _footer(s))
    term.type(a)
    text = term.wait_for(
        lambda s: f"search “{a}”" in s and "1 of 1 runs" in s and bool(_lines_with(s, f" {a}  "))
    )
    assert not _lines_with(text, b)

    # 2. compare it with the other run, picked by its prefix
    term.keys("Enter")  # from the box to the table
    term.wait_for(lambda s: "r Replay" in _footer(s))
    term.keys("c")
    term.wait_for(lambda s: "Compare with which run?" in s and f"(A: {a})" in s)
    term.type(b)
    term.wait_for(lambda s: bool(_lines_with(s, f" {b}  ")))
    # down: to the runs; enter, sent at once (the screen does not show the focus), picks
    # there: the focus moves as down is handled, so enter is the table's however late
    # the search typed is shown; shown late, the rows are an older search's, or none
    # ("01" matches no run), and enter picks from the search typed once it is shown
    term.keys("Down")
    term.keys("Enter")
    text = term.wait_for(lambda s: f"A {a}  vs  B {b}" in s and "b Bisect" in _footer(s))
    assert "not reproduced" in text and "the seed differs (2 vs 1)" in text

    # 3. bisect through its form: the one factor that differs, ticked; the local backend
    term.keys("b")
    text = term.wait_for(
        lambda s: (
            f"Bisect: GOOD {a}  vs  BAD {b}" in s
            and "the same in both: code, image, data, config, determinism, environment" in s
        )
    )
    (seed_row,) = _lines_with(text, "seed", "PYTHONHASHSEED=2 -> 1")
    assert "X" in seed_row.split("seed")[0]  # ticked
    assert "Start bisect" in text and "Cancel" in text
    term.keys("Tab")  # from the factors to the backend
    term.keys("Enter")  # its choices open
    term.wait_for(lambda s: bool(_lines_with(s, "slurm (image by digest")))
    term.keys("Down", "Enter")  # docker -> local
    term.wait_for(
        lambda s: (
            bool(_lines_with(s, "backend", "local (this host, no sandbox)"))
            and not _lines_with(s, "slurm (image by digest")
        )
    )
    term.keys("C-s")
    text = term.wait_for(lambda s: "CAUSE FOUND after" in s, timeout=90)
    assert f"Bisect: GOOD {a}  vs  BAD {b} · local backend" in text
    assert "the divergence follows the seed" in text
    assert "stored as bisect #1" in text

    # 4. the stored bisect again, from the run's Bisects tab
    term.keys("Escape")  # the comparison
    term.wait_for(lambda s: "b Bisect" in _footer(s))
    term.keys("Escape")  # the runs, the search kept
    term.wait_for(lambda s: f"search “{a}”" in s and "r Replay" in _footer(s))
    term.keys("Enter")  # open the run
    term.wait_for(lambda s: tiny.second in s and "Bisects (1)" in s)
    term.keys("7")
    text = term.wait_for(lambda s: "enter: open the bisect's answer" in s)
    assert _lines_with(text, "GOOD", b, "CAUSE FOUND", "seed")
    term.keys("Enter")
    text = term.wait_for(lambda s: f"Bisect #1: GOOD {a}  vs  BAD {b}" in s)
    assert "CAUSE FOUND after" in text and "the divergence follows the seed" in text
    term.keys("Escape")
    term.wait_for(lambda s: "Bisects (1)" in s and "Bisect #1:" not in s)

    # 5. export the run's evidence bundle from the palette: the folder is written
    bundles = tiny.store.parent / "bundles"
    term.keys("C-p")
    term.wait_for(lambda s: "🔎" in s)
    term.type("Export evidence bundle")
    term.wait_for(lambda s: f"Write {a}'s evidence bundle" in s)
    term.keys("Enter")
    text = term.wait_for(lambda s: f"Export the evidence bundle of {a}" in s and "Start" in s)
    assert _lines_with(text, "output folder", str(bundles / a))
    term.keys("Enter")  # Start has the focus
    text = term.wait_for(lambda s: f"exported run {tiny.second}" in s)
    assert "SHA256SUMS" in text
    (folder,) = bundles.glob(f"{a}-*")
    assert (folder / "SHA256SUMS").is_file() and (folder / "bisects.json").is_file()
    assert json.loads((folder / "bisects.json").read_text())["bisects"]
    term.keys("Escape")
    term.wait_for(lambda s: "Export the evidence bundle" not in s and "Bisects (1)" in s)

    # 6. check the store from the palette: intact
    term.keys("C-p")
    term.wait_for(lambda s: "🔎" in s)
    term.type("Check store")
    term.wait_for(lambda s: "Walk the ledger and re-hash every stored fact" in s)
    term.keys("Enter")
    text = term.wait_for(lambda s: "store intact: every link and every hash matches" in s)
    assert "Check the store (verify-store)" in text and "ledger head:" in text
    term.keys("Escape")
    term.wait_for(lambda s: "Check the store" not in s and "Bisects (1)" in s)

    term.keys("q")
    deadline = time.monotonic() + 60  # a deadline: under load, exit can take seconds
    while term.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not term.alive(), "q did not quit the app"
