"""Replay a run: choose the backend and options, watch the stages and the live log, cancel.

The replay runs in a thread worker that calls the replay use case
(``ops.replay.replay_and_judge``) with an ``on_event``
callback posting each event as a message, and a ``should_cancel`` that reads a
``threading.Event`` set by the cancel key (or by leaving the screen).  When the replay
ends the comparison opens on top of this screen.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Header, Input, Log, Select, Static
from textual.worker import get_current_worker

from replay_tui.ops.replay import replay_and_judge
from replay_tui.replay.context import ReplayEvent
from replay_tui.replay.plan import ReplayOptions
from replay_tui.tui.messages import OpenComparison, ReplayFinished, ReplayProgress
from replay_tui.tui.queries import ReplaySummary, open_store
from replay_tui.tui.screens.base import WORK_ESCAPE, WorkScreen
from replay_tui.tui.screens.drill import FoldingLog
from replay_tui.tui.screens.keys import VIM_BINDINGS, ScrollKeys
from replay_tui.tui.widgets.footer import LeanFooter
from replay_tui.tui.widgets.replay_options import ReplayOptionsForm, field
from replay_tui.tui.widgets.stages import StageBoard
from replay_tui.tui.widgets.style import Palette, safe, short
from replay_tui.verdicts import VERDICTS

GPU_MODES = [("auto (as recorded)", "auto"), ("all", "all"), ("none", "none")]
MAX_LOG_LINES = 10_000
STOPPED = ("CANCELLED", "INTERRUPTED")
"""How a replay stopped by a cancel (or a signal) ended: its compare stage is ■, not ✗."""


class ReplayScreen(ScrollKeys, WorkScreen):
    CSS_PATH = "replay.tcss"
    WORK_GROUP = "replay"
    CANCELLING = "cancelling… (stopping the run)"
    AUTO_FOCUS = "#start"
    BINDINGS: ClassVar[list[BindingType]] = [
        *WORK_ESCAPE,
        Binding("x", "cancel", "Cancel replay"),
        Binding("ctrl+s", "start", "Start", show=False),
        Binding("enter", "open_comparison", "Comparison"),
        *VIM_BINDINGS,
    ]

    def __init__(self, store_path: Path, run_id: str, options: ReplayOptions) -> None:
        super().__init__()
        self.store_path = store_path
        self.run_id = run_id
        self.options = options
        self.board = StageBoard()
        self.summary: ReplaySummary | None = None
        self._replica = ""

    def current_run(self) -> str | None:
        return self.run_id

    def scroll_target(self) -> Widget | None:
        """j / k / g / G scroll the replay's output once it runs."""
        return None if self.phase == "options" else self.query_one("#log", FoldingLog)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "open_comparison":
            return self.summary is not None and self.summary.last_comparison is not None
        return super().check_action(action, parameters)

    @property
    def replay_running(self) -> bool:
        return self.work_running

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(safe(f"Replay of run {self.run_id}"), id="title")
        with Vertical(id="form"):
            yield ReplayOptionsForm(
                self.options,
                fields=[
                    field(
                        "GPUs",
                        Select(
                            GPU_MODES,
                            id="gpus",
                            value=self.options.gpus,
                            allow_blank=False,
                            compact=True,
                        ),
                    ),
                    field(
                        "replays (noise floor)",
                        Input(
                            "",
                            placeholder="as needed",
                            id="times",
                            type="integer",
                            compact=True,
                            max_length=3,
                        ),
                    ),
                ],
                checks=[
                    Checkbox(
                        "go on if data hashes differ (a gap)",
                        self.options.force_data,
                        id="force-data",
                        compact=True,
                    ),
                    Checkbox(
                        "keep the checkout for inspection",
                        self.options.keep_workdir,
                        id="keep-workdir",
                        compact=True,
                    ),
                ],
            )
            yield Static(
                "the docker backend pulls the recorded image by digest, with no network;"
                " local replays in this host's environment (recorded as a gap)",
                id="form-help",
            )
            yield Button("Start replay", id="start", variant="primary")
        with Horizontal(id="progress"):
            with Vertical(id="stages-box"):
                yield Static("", id="replica")
                yield Static("", id="stages")
                yield Static("", id="outcome")
            yield FoldingLog(id="log", max_lines=MAX_LOG_LINES)
        yield LeanFooter()

    def on_mount(self) -> None:
        self.query_one("#progress").display = False
        self.query_one("#log", Log).border_title = "output"

    # -- starting --------------------------------------------------------------------

    def chosen_options(self) -> tuple[ReplayOptions, int | None]:
        """The options, and how many replays: None (left blank) is the adaptive rule of
        ``replay`` (once; three replicas when a noisy run with no floor is not within
        the tolerance)."""
        gpus = self.query_one("#gpus", Select).value
        times_text = self.query_one("#times", Input).value.strip()
        times = max(1, min(100, int(times_text))) if times_text.isdigit() else None
        options = replace(
            self.query_one(ReplayOptionsForm).chosen(self.options),
            gpus=gpus if gpus in ("auto", "all", "none") else self.options.gpus,
            force_data=self.query_one("#force-data", Checkbox).value,
            keep_workdir=self.query_one("#keep-workdir", Checkbox).value,
        )
        return options, times

    def action_start(self) -> None:
        if self.phase != "options":
            return
        options, times = self.chosen_options()
        problem = self.query_one(ReplayOptionsForm).problem(options)
        if problem is not None:  # a backend option the backend refuses: say so, stay
            self.notify(problem, title="Replay options", severity="error", markup=False)
            return
        self.show_progress(options)
        self._run(options, times)

    def show_progress(self, options: ReplayOptions) -> None:
        """Swap the options form for the stages and the log."""
        self.show_running(f"Replay of run {self.run_id} · {options.backend} backend")
        self._render_board()

    @work(thread=True, exclusive=True, exit_on_error=False, group="replay")
    def _run(self, options: ReplayOptions, times: int | None) -> None:
        should_cancel = self.should_cancel_for(get_current_worker())

        def on_event(event: ReplayEvent) -> None:
            self.post_message(ReplayProgress(event))

        with open_store(self.store_path) as store:
            done = replay_and_judge(
                store,
                self.run_id,
                options,
                times=times,
                on_event=on_event,
                should_cancel=should_cancel,
            )
        self.post_message(ReplayFinished(ReplaySummary.of(done)))

    # -- progress --------------------------------------------------------------------

    def on_replay_progress(self, message: ReplayProgress) -> None:
        message.stop()
        ev = message.event
        log = self.query_one("#log", FoldingLog)
        if ev.state == "log":
            log.add(ev.message)
            return
        if ev.stage == "replica":  # a new replica begins: the board starts over
            self.board.reset()
            self._replica = ev.message
            self.query_one("#replica", Static).update(safe(ev.message))
            log.add(f"── {ev.message}")
        elif ev.stage == "replay" and ev.state == "failed":
            self.board.fail(ev.message)
        else:
            self.board.apply(ev.stage, ev.state, ev.message)
            if ev.stage == "compare" and ev.state == "done" and ev.message not in VERDICTS:
                # compared, but not a verdict: a stopped replay's partial outputs (its
                # message says so); never a ✓ beside CANCELLED
                self.board.states["compare"] = (
                    "cancelled" if ev.message.startswith(STOPPED) else "failed"
                )
        if ev.state in ("note", "failed") and ev.message:
            log.add(f"[{ev.stage}] {ev.message}")
        self._render_board()

    def _render_board(self) -> None:
        self.query_one("#stages", Static).update(self.board.render(Palette.of(self.app)))

    def on_replay_finished(self, message: ReplayFinished) -> None:
        message.stop()
        s = self.summary = message.summary
        palette = Palette.of(self.app)
        if s.cancelled:
            self._set_phase("cancelled")
            self.board.fail("cancelled", state="cancelled")
        else:
            self._set_phase("done")
        t = Text()
        t.append("cancelled · " if s.cancelled else "done · ", style="bold")
        for i, r in enumerate(s.results):
            if i:
                t.append(" ")
            if r.status == "completed":
                t.append_text(palette.verdict(r.verdict or "ERROR"))
            else:  # an aborted replay: its partial outputs' verdict does not count
                t.append_text(palette.verdict(r.status.upper().replace("_", " ")))
                t.append(" not counted", style=palette.muted)
        if s.judgement == "NOT_JUDGED":  # ops.judgement: aborted, or no floor to judge by
            t.append(f" · not judged (exit {s.exit_code})", style=palette.muted)
        if s.results and s.results[-1].replay_run:
            t.append(f"  replay run {short(s.results[-1].replay_run, 13)}", style=palette.muted)
        if s.last_comparison is not None:
            t.append("\nenter: open the comparison · escape: back", style=palette.muted)
        self._outcome(t)
        self._render_board()
        if not s.cancelled and s.last_comparison is not None:
            self.post_message(OpenComparison(comparison_id=s.last_comparison))

    def show_failure(self, reason: str) -> None:
        self.board.fail(reason)
        self._render_board()

    # -- keys ------------------------------------------------------------------------

    def action_open_comparison(self) -> None:
        if self.summary is not None and self.summary.last_comparison is not None:
            self.post_message(OpenComparison(comparison_id=self.summary.last_comparison))
