"""Start a reproduction drill from the TUI: how many runs, which, on which backend; watch
it run; read what each picked run came to.

The drill is ``replay_tui.ops.drill.run_drill`` (what ``replay-tui drill`` calls), run in a
thread worker with an ``on_event`` callback posting each event as a message and a
``should_cancel`` that reads a ``threading.Event`` set by the cancel key (or by leaving
the screen).  A cancelled drill is still stored, with what each picked run came to (a
replay stopped by the cancel is an error, never a failed reproduction).  The backend
choices come from the backend registry.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, cast

from rich.cells import cell_len
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import (
    Button,
    DataTable,
    Header,
    Input,
    Label,
    Log,
    ProgressBar,
    Select,
    Static,
)
from textual.worker import get_current_worker

from replay_tui.replay.plan import ReplayOptions
from replay_tui.safety import escape_control
from replay_tui.tui.messages import OpenComparison
from replay_tui.tui.screens.base import WORK_ESCAPE, WorkScreen
from replay_tui.tui.screens.keys import VIM_BINDINGS, ScrollKeys
from replay_tui.tui.widgets.footer import LeanFooter
from replay_tui.tui.widgets.replay_options import ReplayOptionsForm, field
from replay_tui.tui.widgets.style import Palette, duration, safe, short

if TYPE_CHECKING:
    from replay_tui.ops.drill import DrillReport
    from replay_tui.replay.context import ReplayEvent

Pick = Literal["random", "oldest", "unverified"]
PICKS: list[tuple[str, Pick]] = [
    ("random (seeded, recorded)", "random"),
    ("oldest first", "oldest"),
    ("never or longest unverified", "unverified"),
]
RESULT = {"reproduced": "reproduced", "not_reproduced": "not reproduced", "error": "error"}
RESULT_COLOUR = {"reproduced": "success", "not_reproduced": "error", "error": "warning"}
MAX_LOG_LINES = 10_000
MAX_COUNT = 1000
RUN_STARTED = re.compile(r"run (\d+) of (\d+): ")


class FoldingLog(Log):
    """A log (the drill's events, a replay's output): a line wider than the log goes on
    under itself (indented), never cut at the edge (folded again to a new width); the
    log keeps to its end as lines come (and as it shrinks) unless the user scrolled up,
    and again once they scroll back down to the end."""

    DEFAULT_CSS = "FoldingLog { overflow-x: auto; }"  # folded: no horizontal scrollbar

    def __init__(self, *, id: str | None = None, max_lines: int = MAX_LOG_LINES) -> None:
        super().__init__(max_lines=max_lines, highlight=False, id=id)
        self.following = True
        """At the end: new lines scroll into view."""
        self._raw: deque[tuple[str, str]] = deque(maxlen=max_lines)
        self._folded_at = 0

    @property
    def fold_width(self) -> int:
        """The width lines are folded to: the log's, less a vertical scrollbar's."""
        return self.content_size.width - self.styles.scrollbar_size_vertical

    def add(self, line: str, *, indent: str = "") -> None:
        """Write ``line``, folded to the width (its continuations start ``indent``...).
        A line is a run's or a container's output: it is escaped here, for every caller
        (Textual's ``Log`` passes ESC and the C1 range to the terminal as they are)."""
        line = escape_control(line)
        self._raw.append((line, indent))
        if self._folded_at > 0:  # laid out: else the first resize writes it
            self.write_lines(fold(line, self._folded_at, indent + "  "), scroll_end=self.following)

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.max_scroll_y:  # a scroll the user made up, or back to the end
            self.following = round(new_value) >= self.max_scroll_y

    def on_resize(self) -> None:
        width = self.fold_width
        if width > 0 and width != self._folded_at:
            following, self._folded_at = self.following, width
            self.clear()
            self.write_lines(
                [p for line, indent in self._raw for p in fold(line, width, indent + "  ")],
                scroll_end=False,
            )
            self.following = following
        if self.following:  # the results above it grew: still show the last lines
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True)


def fold(line: str, width: int, indent: str) -> list[str]:
    """``line`` in pieces of at most ``width`` cells, the ones after the first indented."""
    width = max(width, len(indent) + 8)
    out: list[str] = []
    rest, lead = line, ""
    while True:
        room, n = width - cell_len(lead), 0
        while n < len(rest) and room - cell_len(rest[n]) >= 0:
            room -= cell_len(rest[n])
            n += 1
        out.append(lead + rest[:n])
        rest, lead = rest[n:], indent
        if not rest:
            return out


class DrillScreen(ScrollKeys, WorkScreen):
    CSS_PATH = "drill.tcss"
    WORK_GROUP = "drill"
    CANCELLING = "cancelling… (stopping the current replay)"
    AUTO_FOCUS = "#count"
    """The first field a drill is set by; enter in a field starts it (as Start does)."""
    BINDINGS: ClassVar[list[BindingType]] = [
        *WORK_ESCAPE,
        Binding("x", "cancel", "Cancel drill"),
        Binding("ctrl+s", "start", "Start", show=False),
        *VIM_BINDINGS,
    ]

    @dataclass
    class Progress(Message):
        """One event of the drill: a run begins, a replay stage, a line of output."""

        event: ReplayEvent

    @dataclass
    class Finished(Message):
        report: DrillReport

    def __init__(self, store_path: Path, options: ReplayOptions) -> None:
        super().__init__()
        self.store_path = store_path
        self.options = options
        self.report: DrillReport | None = None
        self.count = 0
        self.started_runs = 0

    @property
    def drill_running(self) -> bool:
        return self.work_running

    def scroll_target(self) -> Widget | None:
        """j / k / g / G: the results once there are any, else the drill's events."""
        if self.phase == "options":
            return None
        results = self.query_one("#results", DataTable)
        return results if results.row_count else self.query_one("#log", FoldingLog)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Reproduction drill", id="title")
        with Vertical(id="form"):
            with Horizontal(classes="field"):
                yield Label("runs to replay", classes="label")
                yield Input("3", id="count", type="integer", compact=True, max_length=4)
            with Horizontal(classes="field"):
                yield Label("pick", classes="label")
                yield Select(PICKS, id="pick", value="random", allow_blank=False, compact=True)
            yield ReplayOptionsForm(
                self.options,
                fields=[
                    field(
                        "seed (random pick)",
                        Input(
                            id="seed",
                            type="integer",
                            placeholder="drawn, and recorded",
                            compact=True,
                        ),
                    )
                ],
                timeout_label="timeout per run (s)",
            )
            yield Static(
                "replays a pick of the store's succeeded original runs, compares each with"
                " its original and stores the drill (`replay-tui drill` does the same);"
                " it passes only when every picked run reproduces",
                id="form-help",
            )
            yield Button("Start drill", id="start", variant="primary")
        with Vertical(id="progress"):
            yield Static("", id="now")
            yield ProgressBar(id="bar", show_eta=False)
            yield DataTable(id="results", cursor_type="row", zebra_stripes=True)
            yield Static("", id="result-full")
            yield Static("", id="outcome")
            yield FoldingLog(id="log")
        yield LeanFooter()

    def on_mount(self) -> None:
        self.query_one("#progress").display = False
        self.query_one("#log", Log).border_title = "drill events"

    # -- starting --------------------------------------------------------------------

    def chosen(self) -> tuple[int, Pick, int | None, ReplayOptions]:
        """The count, the pick, the seed and the replay options the form says."""
        count_text = self.query_one("#count", Input).value.strip()
        count = max(1, min(MAX_COUNT, int(count_text))) if count_text.isdigit() else 3
        pick = self.query_one("#pick", Select).value
        seed_text = self.query_one("#seed", Input).value.strip()
        seed = int(seed_text) if seed_text.isdigit() else None
        options = self.query_one(ReplayOptionsForm).chosen(self.options)
        chosen_pick = cast(Pick, pick) if pick in ("random", "oldest", "unverified") else "random"
        return count, chosen_pick, seed, options

    @on(Input.Submitted, "#form Input")
    def _field_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    def action_start(self) -> None:
        if self.phase != "options":
            return
        count, pick, seed, options = self.chosen()
        problem = self.query_one(ReplayOptionsForm).problem(options)
        if problem is not None:  # a backend option the backend refuses: say so, stay
            self.notify(problem, title="Drill options", severity="error", markup=False)
            return
        self.show_progress(count, options)
        self._run(count, pick, seed, options)

    def show_progress(self, count: int, options: ReplayOptions) -> None:
        """Swap the form for the progress, the results and the events."""
        self.show_running(f"Reproduction drill · up to {count} run(s) · {options.backend} backend")
        self.count = count
        self.query_one("#bar", ProgressBar).update(total=count, progress=0)
        self.query_one("#now", Static).update("picking runs…")
        table = self.query_one("#results", DataTable)
        table.clear(columns=True)
        table.add_columns("run", "result", "verdict", "took", "name", "reason", "replay run")

    @work(thread=True, exclusive=True, exit_on_error=False, group="drill")
    def _run(self, count: int, pick: Pick, seed: int | None, options: ReplayOptions) -> None:
        from replay_tui.ops.drill import run_drill
        from replay_tui.tui.queries import open_store

        should_cancel = self.should_cancel_for(get_current_worker())

        def on_event(event: ReplayEvent) -> None:
            self.post_message(self.Progress(event))

        with open_store(self.store_path) as store:
            report = run_drill(
                store,
                count=count,
                pick=pick,
                seed=seed,
                options=options,
                on_event=on_event,
                should_cancel=should_cancel,
            ).report
        self.post_message(self.Finished(report))

    # -- progress --------------------------------------------------------------------

    def on_drill_screen_progress(self, message: Progress) -> None:
        # escape_control: the run's output is untrusted
        message.stop()
        ev = message.event
        log = self.query_one("#log", FoldingLog)
        text = escape_control(ev.message)
        if ev.state == "log":
            log.add(f"  | {text}", indent="  | ")
            return
        started = RUN_STARTED.match(text) if ev.stage == "drill" else None
        if started:  # "run 2 of 3: RUN_ID": the one before it is done
            self.started_runs = int(started[1])
            self.count = int(started[2])  # fewer candidates than asked: fewer runs
            self.query_one("#now", Static).update(Text(text))  # escaped above
            bar = self.query_one("#bar", ProgressBar)
            bar.update(total=self.count, progress=self.started_runs - 1)
        log.add(f"[{ev.stage}] {ev.state} {text}".rstrip())

    def on_drill_screen_finished(self, message: Finished) -> None:
        message.stop()
        rep = self.report = message.report
        palette = Palette.of(self.app)
        # a cancel that lands in the last run stops it, but the drill still counts as run
        cancelled = rep.cancelled or self._cancel.is_set()
        self._set_phase("cancelled" if cancelled else "done")
        self.query_one("#bar", ProgressBar).update(total=self.count, progress=len(rep.items))
        self.query_one("#now", Static).update(
            Text(f"{len(rep.items)} of {self.count} run(s) replayed")
        )
        table = self.query_one("#results", DataTable)
        for i in rep.items:
            table.add_row(
                Text(short(i.run_id, 13)),
                Text(RESULT[i.status], style=palette.fg(RESULT_COLOUR[i.status])),
                _item_cell(palette, i.word),
                Text(duration(i.duration_s)),
                safe(i.name or "-"),
                safe(i.reason or "", style=palette.muted),
                Text(short(i.replay_run, 13)),
                key=i.run_id,
            )
        self._show_result_row(table.cursor_row)
        reproduced = sum(i.status == "reproduced" for i in rep.items)
        word = rep.outcome if rep.cancelled else "CANCELLED" if cancelled else rep.outcome
        colour = "warning" if cancelled else "success" if rep.passed else "error"
        t = Text()
        t.append(f" {word} ", style=palette.badge(colour))
        seed = f", seed {rep.seed}" if rep.seed is not None else ""
        t.append(
            f" drill #{rep.drill_id}: {reproduced} of {len(rep.items)} reproduced"
            f" (pick {rep.pick}{seed}, {rep.candidates} candidate run(s), exit code"
            f" {rep.exit_code})"
        )
        if rep.ledger_head:
            t.append(f"\nledger head {escape_control(rep.ledger_head)}", style=palette.muted)
        compared = any(i.replay_run for i in rep.items)
        t.append(
            "\nenter: open the run's comparison · escape: back" if compared else "\nescape: back",
            style=palette.muted,
        )
        self._outcome(t)
        if rep.items:
            table.focus()  # the form that had the focus is gone: enter opens a row

    @on(DataTable.RowSelected, "#results")
    def _result_selected(self, event: DataTable.RowSelected) -> None:
        """A picked run's comparison with its replay (what its verdict was judged by)."""
        event.stop()
        items = self.report.items if self.report is not None else []
        item = next((i for i in items if i.run_id == event.row_key.value), None)
        if item is None:
            return
        if item.replay_run:
            self._open_comparison(item.run_id, item.replay_run, item.replay_fact_id)
        else:
            why = item.reason or "its replay did not run"
            self.notify(
                f"{short(item.run_id, 13)} was not compared: {escape_control(why)}",
                severity="warning",
                markup=False,
            )

    @work(thread=True, exit_on_error=False, group="drill-comparison")
    def _open_comparison(self, run_id: str, replay_run: str, fact_id: int | None) -> None:
        """The comparison the drill stored with the run's replay (its fact names it);
        else the latest of the pair."""
        from replay_tui.tui.queries import open_store

        cid = None
        if fact_id is not None:
            with open_store(self.store_path) as store:
                facts = store.replays_of(run_id)
            cid = next((f.comparison_id for f in facts if f.id == fact_id), None)
        if cid is not None:
            self.post_message(OpenComparison(comparison_id=cid))
        else:
            self.post_message(OpenComparison(a_run=run_id, b_run=replay_run))

    @on(DataTable.RowHighlighted, "#results")
    def _result_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_result_row(event.cursor_row)

    def _show_result_row(self, row: int) -> None:
        """Under the results, the highlighted run's values whole (a narrow table cuts
        the name and leaves the reason and the replay run out of view)."""
        full = self.query_one("#result-full", Static)
        items = self.report.items if self.report is not None else []
        if not 0 <= row < len(items):
            full.update("")
            return
        item = items[row]
        palette = Palette.of(self.app)
        t = Text()
        for label, value in (
            ("run", item.run_id),
            ("name", item.name),
            ("reason", item.reason),
            ("replay run", item.replay_run),
        ):
            if value:
                t.append(f"{label} ", style=palette.fg("accent"))
                t.append(f"{escape_control(value)}  ")
        t.rstrip()
        full.update(t)

    def show_failure(self, reason: str) -> None:
        self.query_one("#now", Static).update("")


def _item_cell(palette: Palette, word: str) -> Text:
    """A drill run's verdict, or how its replay ended (CANCELLED...: ``DrillItem.word``)."""
    return palette.verdict(word) if word != "-" else Text("-", style=palette.muted)
