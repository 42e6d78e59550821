"""Bisect two compared runs: A is GOOD, B is BAD; a form, live probe progress, the answer.

``b`` on a comparison opens :class:`BisectFormScreen`: the factors to swap, the probe
budget, the probes at a time, GOOD's noise-floor replays, and the replay options (the
backend and its own options, a timeout per probe, allow-CPU: the replay forms' widget).
The factors offered are those that differ between GOOD and BAD (``diff_factors``, read
in a worker when the form opens), each ticked, with what differs; the ones the same in
both are named on a line under them, not offered.  Start hands a ``BisectOptions`` back
(escape or Cancel hands back None: nothing starts), and :class:`BisectScreen` runs the
bisect with it.

The bisect runs in a thread worker (``bisect_runs``) whose ``on_event`` posts each event
as a message; the cancel key (or leaving the screen) sets a ``threading.Event`` that the
pipeline polls.  The log pane shows the stages and each probe's answer, not the probes'
own output (the store keeps it).  The answer is the verdict line, the probe table (the
command's columns, ``verdict.PROBE_COLUMNS``: probe, the run it copies, factors swapped,
near or far from GOOD and from BAD and what said so, behaves like, the step where it
leaves GOOD) and what differs in the blamed factor; ``l`` shows the output the store
kept of the probe under the cursor.  A bisect the store holds (``stored``: from a run's
Bisects tab) opens on the same answer, its stored body read back into the same
``BisectResult``; nothing runs.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import (
    Button,
    DataTable,
    Footer,
    Header,
    Input,
    Label,
    Log,
    SelectionList,
    Static,
)
from textual.widgets.selection_list import Selection

from replay_tui.bisect import FACTORS
from replay_tui.replay.context import ReplayEvent
from replay_tui.safety import escape_control
from replay_tui.tui.queries import open_store
from replay_tui.tui.screens.base import AppScreen
from replay_tui.tui.widgets.replay_options import ReplayOptionsForm, field
from replay_tui.tui.widgets.style import safe, short, when

if TYPE_CHECKING:
    from replay_tui.bisect.answer import BisectResult
    from replay_tui.bisect.factors import FactorReport
    from replay_tui.bisect.options import BisectOptions
    from replay_tui.replay.plan import ReplayOptions
    from replay_tui.tui.queries import StoredBisect

MAX_LOG_LINES = 5000


def headline(result: BisectResult) -> tuple[str, bool]:
    """``CAUSE FOUND after 2 probe(s)`` (or UNEXPLAINED), and whether a cause was found."""
    cause = result.outcome == "cause"
    word = "CAUSE FOUND" if cause else "UNEXPLAINED"
    return f"{word} after {result.probes_run} probe(s)", cause


class BisectProgress(Message):
    def __init__(self, event: ReplayEvent) -> None:
        super().__init__()
        self.event = event


class BisectDone(Message):
    def __init__(self, result: BisectResult | None, error: str | None, exit_code: int) -> None:
        super().__init__()
        self.result = result
        self.error = error
        self.exit_code = exit_code


class FactorsRead(Message):
    """Which factors differ between GOOD and BAD (None: not known, ``error`` says why)."""

    def __init__(self, report: FactorReport | None, error: str | None = None) -> None:
        super().__init__()
        self.report = report
        self.error = error


def factor_prompt(name: str, detail: list[str]) -> Text:
    """A factor as the form offers it: its name, then the first thing that differs (from
    the manifests: untrusted text, control characters shown), cut to one line."""
    text = safe(f"{name:<12}", style="bold", no_wrap=True, overflow="ellipsis", end="")
    if detail:
        text.append(escape_control(detail[0]), style="dim")
    return text


def factors_note(report: FactorReport) -> str:
    """The line under the offered factors: the ones the same in both (the topology only
    when a run was started through a distributed launcher), and the hardware when it
    differs (a replay cannot swap it)."""
    named = [f for f in FACTORS if f != "topology" or report.launched]
    same = [f for f in named if report.get(f) is None]
    parts: list[str] = []
    if len(same) == len(named):
        parts.append("none of the factors a replay can swap differs")
    elif same:
        parts.append("the same in both: " + ", ".join(same))
    if report.get("hardware") is not None:
        parts.append("the hardware differs: a replay cannot swap it")
    return "; ".join(parts)


class BisectFormScreen(AppScreen["BisectOptions | None"]):
    """What a bisect of GOOD and BAD tries, how much, where: dismissed with the
    ``BisectOptions`` Start makes, or None (escape, Cancel).

    Until the factors that differ are read (a worker, on mount), every factor is
    offered, ticked: Start then swaps every one that differs, as the command does."""

    AUTO_FOCUS = "#factors"
    """The top of the form (a short terminal scrolls to what has the focus)."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "start", "Start"),
    ]
    DEFAULT_CSS = """
    BisectFormScreen #bisect-form-title { height: 1; padding: 0 1; background: $panel;
        text-style: bold; }
    BisectFormScreen #bisect-form { height: auto; max-height: 1fr; padding: 0 2; }
    BisectFormScreen .label { width: 24; color: $text-muted; }
    BisectFormScreen #factors-label { height: 1; color: $text-muted; margin-top: 1; }
    BisectFormScreen #factors { height: auto; max-height: 9; width: 1fr; max-width: 76; }
    BisectFormScreen #factors-note { height: auto; color: $text-muted; margin-bottom: 1; }
    BisectFormScreen #budget, BisectFormScreen #parallel, BisectFormScreen #times {
        width: 22; }
    BisectFormScreen #form-help { color: $text-muted; margin-top: 1; }
    BisectFormScreen ReplayOptionsForm .field { margin-bottom: 0; }
    BisectFormScreen #buttons { height: 1; padding: 0 2; margin-top: 1; }
    BisectFormScreen #buttons Button { margin-right: 2; }
    """

    def __init__(self, store_path: Path, good: str, bad: str, options: ReplayOptions) -> None:
        super().__init__()
        self.store_path = store_path
        self.good = good
        self.bad = bad
        self.options = options
        self.report: FactorReport | None = None
        """Which factors differ, once read (None until then, or when it could not be)."""
        self.offered: tuple[str, ...] = FACTORS
        """The factors the list offers: every one until the differing ones are read."""

    def current_run(self) -> str | None:
        return self.bad

    def compose(self) -> ComposeResult:
        from replay_tui.bisect.options import DEFAULT_BUDGET

        yield Header()
        yield Static(
            Text(f"Bisect: GOOD {short(self.good, 13)}  vs  BAD {short(self.bad, 13)}"),
            id="bisect-form-title",
        )
        with VerticalScroll(id="bisect-form"):
            yield Label(
                "factors that differ, to swap (the others are held at GOOD's)",
                id="factors-label",
            )
            yield SelectionList[str](*((f, f, True) for f in FACTORS), id="factors", compact=True)
            yield Static("reading which factors differ…", id="factors-note")
            yield ReplayOptionsForm(
                self.options,
                fields=[
                    field(
                        "probes at most",
                        Input(str(DEFAULT_BUDGET), id="budget", type="integer", compact=True),
                    ),
                    field(
                        "probes at a time",
                        Input("1", id="parallel", type="integer", compact=True, max_length=2),
                    ),
                    field(
                        "GOOD's replays (noise)",
                        Input(
                            id="times",
                            type="integer",
                            placeholder="auto (1 or 3)",
                            compact=True,
                            max_length=2,
                        ),
                    ),
                ],
                timeout_label="timeout per probe (s)",
                allow_cpu_label="allow CPU runs of GPU-recorded runs (a gap)",
            )
            yield Static(
                "replays GOOD with BAD's factors swapped in, one at a time, then the"
                " smallest set: which difference makes BAD diverge (`replay-tui bisect`)",
                id="form-help",
            )
        with Horizontal(id="buttons"):  # under the form, never scrolled away
            yield Button("Start bisect", id="start", variant="primary", compact=True)
            yield Button("Cancel", id="cancel", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self._read_factors()

    @work(thread=True, exclusive=True, exit_on_error=False, group="bisect-form")
    def _read_factors(self) -> None:
        from replay_tui.bisect.factors import diff_factors
        from replay_tui.errors import ReplayTuiError
        from storage.manifest import ManifestError
        from storage.store import StoreError

        try:
            with open_store(self.store_path) as store:
                good = store.manifest(store.resolve(self.good))
                bad = store.manifest(store.resolve(self.bad))
        except (ReplayTuiError, ManifestError, StoreError, OSError) as e:
            self.post_message(FactorsRead(None, str(e)))
            return
        self.post_message(FactorsRead(diff_factors(good, bad)))

    def on_factors_read(self, message: FactorsRead) -> None:
        message.stop()
        note = self.query_one("#factors-note", Static)
        report = message.report
        if report is None:  # every factor stays offered: the bisect says what differs
            note.update(safe(f"could not read which factors differ: {message.error}"))
            return
        self.report = report
        differing = [d for d in report.differing if d.name in FACTORS]
        self.offered = tuple(d.name for d in differing)
        factors = self.query_one("#factors", SelectionList)
        factors.clear_options()
        factors.add_options(
            [Selection(factor_prompt(d.name, d.detail), d.name, True) for d in differing]
        )
        factors.display = bool(differing)
        note.update(Text(factors_note(report)))

    def chosen(self) -> BisectOptions:
        """The bisect options the form says (a bad number: its default, clamped as the
        command line's ranges are)."""
        from replay_tui.bisect.options import DEFAULT_BUDGET, BisectOptions

        def number(widget_id: str, low: int, high: int) -> int | None:
            text = self.query_one(f"#{widget_id}", Input).value.strip()
            return max(low, min(high, int(text))) if text.isdigit() else None

        picked = set(self.query_one("#factors", SelectionList).selected)
        factors = tuple(f for f in FACTORS if f in picked)
        replay = self.query_one(ReplayOptionsForm).chosen(self.options)
        return BisectOptions(
            replay=replay,
            times=number("times", 1, 20),
            # every factor offered: the bisect's default (every one that differs)
            factors=None if set(factors) == set(self.offered) else factors,
            budget=number("budget", 1, 1000) or DEFAULT_BUDGET,
            parallel=number("parallel", 1, 64) or 1,
            rtol=replay.tolerance.rtol,
            atol=replay.tolerance.atol,
        )

    def problem(self, options: BisectOptions) -> str | None:
        if self.report is not None and not self.offered:
            return "no factor a replay can swap differs between GOOD and BAD: nothing to bisect"
        if options.factors == ():
            return "choose at least one factor to swap"
        return self.query_one(ReplayOptionsForm).problem(options.replay)

    @on(Button.Pressed, "#start")
    def _start_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_start()

    @on(Button.Pressed, "#cancel")
    def _cancel_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_cancel()

    @on(Input.Submitted, "#bisect-form Input")
    def _field_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    def action_start(self) -> None:
        options = self.chosen()
        problem = self.problem(options)
        if problem is not None:
            self.notify(problem, title="Bisect options", severity="error", markup=False)
            return
        self.dismiss(options)

    def action_cancel(self) -> None:
        self.dismiss(None)


class BisectScreen(AppScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back_or_cancel", "Back / cancel"),
        Binding("x", "cancel", "Cancel bisect"),
        Binding("l", "probe_log", "Probe log"),
    ]
    DEFAULT_CSS = """
    BisectScreen #bisect-title { padding: 0 1; text-style: bold; }
    BisectScreen #bisect-status { padding: 0 1; height: auto; }
    BisectScreen #bisect-answer { padding: 0 1; height: auto; }
    BisectScreen #bisect-probes { height: auto; max-height: 14; }
    BisectScreen #bisect-log { height: 1fr; }
    """

    def __init__(
        self,
        store_path: Path,
        good: str,
        bad: str,
        options: BisectOptions | None = None,
        *,
        stored: StoredBisect | None = None,
    ) -> None:
        super().__init__()
        self.store_path = store_path
        self.good = good
        self.bad = bad
        self.options = options
        """What the bisect runs with (the form's; None: the defaults, on docker)."""
        self.stored = stored
        """A bisect the store holds: shown as it finished, nothing runs."""
        # running -> cancelling -> done / failed / cancelled
        self.phase = "done" if stored is not None else "running"
        self.result: BisectResult | None = None
        """The answer shown: the bisect's, once it finished, or the stored one."""
        self._cancel = threading.Event()
        self._probes_started = 0

    def current_run(self) -> str | None:
        return self.bad

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return self.phase == "running"
        if action == "probe_log":
            return self.result is not None and self.result.logs_stored() > 0
        return True

    def compose(self) -> ComposeResult:
        yield Header()
        title = f"Bisect: GOOD {short(self.good, 13)}  vs  BAD {short(self.bad, 13)}"
        if self.stored is not None:
            title = f"Bisect #{self.stored.id}: GOOD {short(self.good, 13)}"
            title += f"  vs  BAD {short(self.bad, 13)} · {when(self.stored.created_at)}"
        elif self.options is not None:
            title += f" · {self.options.replay.backend} backend"
        yield Static(safe(title), id="bisect-title")
        yield Static("starting…" if self.stored is None else "", id="bisect-status")
        yield Static("", id="bisect-answer")
        yield DataTable(id="bisect-probes", cursor_type="row", zebra_stripes=True)
        yield Log(id="bisect-log", max_lines=MAX_LOG_LINES)
        yield Footer()

    def on_mount(self) -> None:
        from replay_tui.bisect.answer import PROBE_COLUMNS

        table = self.query_one("#bisect-probes", DataTable)
        for name in PROBE_COLUMNS:
            table.add_column(name, key=name)
        if self.stored is not None:
            kept = self.stored.result.logs_stored()
            self.query_one("#bisect-log", Log).write_line(
                f"stored bisect #{self.stored.id} ({self.stored.created_at});"
                + (
                    f" {kept} probe output(s) kept: l shows the one under the cursor"
                    if kept
                    else " the probes' output was not kept"
                )
            )
            self._show_answer(self.stored.result)
            return
        self._run()

    @work(thread=True, exclusive=True, exit_on_error=False, group="bisect")
    def _run(self) -> None:
        from replay_tui.errors import ReplayTuiError
        from replay_tui.ops.bisect import bisect_runs

        def on_event(ev: ReplayEvent) -> None:
            self.post_message(BisectProgress(ev))

        try:
            with open_store(self.store_path) as store:
                result = bisect_runs(
                    store,
                    self.good,
                    self.bad,
                    self.options,
                    on_event=on_event,
                    should_cancel=self._cancel.is_set,
                ).result
            self.post_message(BisectDone(result, None, result.exit_code))
        except KeyboardInterrupt:
            self.post_message(BisectDone(None, "cancelled", 130))
        except ReplayTuiError as e:
            self.post_message(BisectDone(None, e.message, e.exit_code))

    def on_bisect_progress(self, message: BisectProgress) -> None:
        message.stop()
        ev = message.event
        log = self.query_one("#bisect-log", Log)
        said = escape_control(ev.message)  # a probe's output and argv: untrusted
        if ev.stage == "bisect":
            log.write_line(f"== {said}")
            if ev.state in ("start", "note"):
                self.query_one("#bisect-status", Static).update(Text(said))
            if ev.state == "done" and ev.message.startswith("probe "):
                self.query_one("#bisect-status", Static).update(Text(said))
        elif ev.state == "log":
            return  # a probe's own output: kept in the store, shown on request (l)
        else:
            log.write_line(escape_control(f"[{ev.stage:>8}] {ev.state:<6} {said}".rstrip()))

    def on_bisect_done(self, message: BisectDone) -> None:
        message.stop()
        status = self.query_one("#bisect-status", Static)
        if message.result is None:
            self.phase = "cancelled" if message.exit_code == 130 else "failed"
            status.update(safe(f"bisect {self.phase}: {message.error}", style="bold red"))
            self.refresh_bindings()
            return
        self.phase = "done"
        self._show_answer(message.result)

    def _show_answer(self, result: BisectResult) -> None:
        """The answer: the headline, the verdict line, what differs, the probe table."""
        self.result = result
        line, cause = headline(result)
        self.query_one("#bisect-status", Static).update(
            safe(line, style="bold green" if cause else "bold yellow")
        )
        answer = self.query_one("#bisect-answer", Static)
        # what differs comes from the manifests: untrusted text, control characters shown
        text = Text(escape_control(result.verdict_line()) + "\n")
        for u in result.untestable:
            text.append(escape_control(f"untestable: {u.factor}: {u.reason}") + "\n")
        for c in result.env_diff[:10]:
            text.append(escape_control(f"{c.what}: {c.good} -> {c.bad}") + "\n")
        text.rstrip()
        stored = result.bisect_id
        if self.stored is None and stored is not None:  # just finished: where it is kept
            text.append(
                f"\nstored as bisect #{stored}: the Bisects tab (7) of either run shows it"
                " again, as does `replay-tui show RUN`",
                style="dim",
            )
        answer.update(text)
        table = self.query_one("#bisect-probes", DataTable)
        table.clear()
        for p in result.probes:  # a stored bisect's body: Text (no markup), escaped
            table.add_row(*(safe(c) for c in p.cells()), key=str(p.index))
        self.refresh_bindings()

    def action_probe_log(self) -> None:
        """The output the store kept of the probe under the cursor, in the log pane."""
        result = self.result
        if result is None:
            return
        table = self.query_one("#bisect-probes", DataTable)
        if not result.probes or table.row_count == 0:
            return
        probe = result.probes[min(max(table.cursor_row, 0), len(result.probes) - 1)]
        self._show_log(result, probe.index)

    @work(thread=True, exclusive=True, exit_on_error=False, group="bisect-log")
    def _show_log(self, result: BisectResult, index: int) -> None:
        from replay_tui.errors import ReplayTuiError
        from replay_tui.ops.bisect import probe_output
        from storage.store import StoreError

        try:
            with open_store(self.store_path) as store:
                text = probe_output(store, result, index)
        except (ReplayTuiError, StoreError, OSError) as e:
            self.app.call_from_thread(self._write_log, index, None, str(e))
            return
        self.app.call_from_thread(self._write_log, index, text, None)

    def _write_log(self, index: int, text: str | None, error: str | None) -> None:
        log = self.query_one("#bisect-log", Log)
        log.clear()
        if error is not None:
            log.write_line(escape_control(f"probe {index}: its output could not be read: {error}"))
            return
        if text is None:
            log.write_line(f"probe {index}: no output kept")
            return
        log.write_line(f"== output of probe {index}")
        for line in text.splitlines():  # the program's output: untrusted
            log.write_line(f"  | {escape_control(line)}")

    def action_cancel(self) -> None:
        if self.phase == "running":
            self.phase = "cancelling"
            self._cancel.set()
            self.query_one("#bisect-status", Static).update(Text("cancelling…"))
            self.refresh_bindings()

    def action_back_or_cancel(self) -> None:
        if self.phase == "running":
            self.action_cancel()
            return
        if self.phase == "cancelling":
            return
        self.app.pop_screen()
