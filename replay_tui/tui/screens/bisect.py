"""Bisect two compared runs: A is GOOD, B is BAD; live probe progress, then the answer.

The bisect runs in a thread worker (``run_bisect``) whose ``on_event`` posts each event
as a message; the cancel key (or leaving the screen) sets a ``threading.Event`` that the
pipeline polls.  The answer is the verdict line, the probe table (probe, factors
swapped, behaves like, vs GOOD, vs BAD, first divergent step) and what differs in the
blamed factor.  A bisect the store holds (``stored``: from a run's Bisects tab) opens on
the same answer, read from its stored body; nothing runs.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Log, Static

from replay_tui.replay.runner import ReplayEvent
from replay_tui.safety import escape_control
from replay_tui.tui.queries import open_store
from replay_tui.tui.screens.base import AppScreen
from replay_tui.tui.widgets.style import short, when

if TYPE_CHECKING:
    from replay_tui.tui.queries import StoredBisect

MAX_LOG_LINES = 5000


def headline(body: dict[str, Any]) -> tuple[str, bool]:
    """``CAUSE FOUND after 2 probe(s)`` (or UNEXPLAINED), and whether a cause was found."""
    cause = body.get("outcome") == "cause"
    word = "CAUSE FOUND" if cause else "UNEXPLAINED"
    return f"{word} after {body.get('probes_run', 0)} probe(s)", cause


class BisectProgress(Message):
    def __init__(self, event: ReplayEvent) -> None:
        super().__init__()
        self.event = event


class BisectDone(Message):
    def __init__(self, body: dict[str, Any] | None, error: str | None, exit_code: int) -> None:
        super().__init__()
        self.body = body
        self.error = error
        self.exit_code = exit_code


class BisectScreen(AppScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back_or_cancel", "Back / cancel"),
        Binding("x", "cancel", "Cancel bisect"),
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
        backend: str = "docker",
        *,
        stored: StoredBisect | None = None,
    ) -> None:
        super().__init__()
        self.store_path = store_path
        self.good = good
        self.bad = bad
        self.backend = backend
        self.stored = stored
        """A bisect the store holds: shown as it finished, nothing runs."""
        # running -> cancelling -> done / failed / cancelled
        self.phase = "done" if stored is not None else "running"
        self.body: dict[str, Any] | None = None
        self._cancel = threading.Event()
        self._probes_started = 0

    def current_run(self) -> str | None:
        return self.bad

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return self.phase == "running"
        return True

    def compose(self) -> ComposeResult:
        yield Header()
        title = f"Bisect: GOOD {short(self.good, 13)}  vs  BAD {short(self.bad, 13)}"
        if self.stored is not None:
            title = f"Bisect #{self.stored.id}: GOOD {short(self.good, 13)}"
            title += f"  vs  BAD {short(self.bad, 13)} · {when(self.stored.created_at)}"
        yield Static(Text(title), id="bisect-title")
        yield Static("starting…" if self.stored is None else "", id="bisect-status")
        yield Static("", id="bisect-answer")
        yield DataTable(id="bisect-probes", cursor_type="row", zebra_stripes=True)
        yield Log(id="bisect-log", max_lines=MAX_LOG_LINES)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#bisect-probes", DataTable)
        for name in ("#", "run", "factors swapped", "behaves like", "vs GOOD", "vs BAD", "1st div"):
            table.add_column(name, key=name)
        if self.stored is not None:
            self.query_one("#bisect-log", Log).write_line(
                f"stored bisect #{self.stored.id} ({self.stored.created_at});"
                " the probes' live output is not kept"
            )
            self._show_answer(self.stored.body)
            return
        self._run()

    @work(thread=True, exclusive=True, exit_on_error=False, group="bisect")
    def _run(self) -> None:
        from replay_tui.bisect.run import BisectOptions, run_bisect
        from replay_tui.errors import ReplayTuiError
        from replay_tui.replay.plan import ReplayOptions

        def on_event(ev: ReplayEvent) -> None:
            self.post_message(BisectProgress(ev))

        try:
            with open_store(self.store_path) as store:
                result = run_bisect(
                    store,
                    self.good,
                    self.bad,
                    BisectOptions(replay=ReplayOptions(backend=self.backend)),
                    on_event=on_event,
                    should_cancel=self._cancel.is_set,
                )
            self.post_message(BisectDone(result.to_dict(), None, result.exit_code))
        except KeyboardInterrupt:
            self.post_message(BisectDone(None, "cancelled", 130))
        except ReplayTuiError as e:
            self.post_message(BisectDone(None, e.message, e.exit_code))

    def on_bisect_progress(self, message: BisectProgress) -> None:
        message.stop()
        ev = message.event
        log = self.query_one("#bisect-log", Log)
        if ev.stage == "bisect":
            log.write_line(f"== {ev.message}")
            if ev.state in ("start", "note"):
                self.query_one("#bisect-status", Static).update(Text(ev.message))
            if ev.state == "done" and ev.message.startswith("probe "):
                self.query_one("#bisect-status", Static).update(Text(ev.message))
        elif ev.state == "log":
            log.write_line(f"  | {ev.message}")
        else:
            log.write_line(f"[{ev.stage:>8}] {ev.state:<6} {ev.message}".rstrip())

    def on_bisect_done(self, message: BisectDone) -> None:
        message.stop()
        status = self.query_one("#bisect-status", Static)
        if message.body is None:
            self.phase = "cancelled" if message.exit_code == 130 else "failed"
            status.update(Text(f"bisect {self.phase}: {message.error}", style="bold red"))
            self.refresh_bindings()
            return
        self.phase = "done"
        self._show_answer(message.body)

    def _show_answer(self, body: dict[str, Any]) -> None:
        """The answer: the headline, the verdict line, what differs, the probe table."""
        self.body = body
        line, cause = headline(body)
        self.query_one("#bisect-status", Static).update(
            Text(line, style="bold green" if cause else "bold yellow")
        )
        answer = self.query_one("#bisect-answer", Static)
        # what differs comes from the manifests: untrusted text, control characters shown
        text = Text(escape_control(str(body.get("verdict", ""))) + "\n")
        for u in body.get("untestable") or []:
            text.append(escape_control(f"untestable: {u.get('factor')}: {u.get('reason')}") + "\n")
        for row in (body.get("env_diff") or [])[:10]:
            line = f"{row.get('what')}: {row.get('good')} -> {row.get('bad')}"
            text.append(escape_control(line) + "\n")
        text.rstrip()
        stored = body.get("bisect_id")
        if self.stored is None and isinstance(stored, int):  # just finished: where it is kept
            text.append(
                f"\nstored as bisect #{stored}: the Bisects tab (7) of either run shows it"
                " again, as does `replay-tui show RUN`",
                style="dim",
            )
        answer.update(text)
        table = self.query_one("#bisect-probes", DataTable)
        table.clear()
        for p in body.get("probes") or []:
            table.add_row(
                str(p.get("probe")),
                "GOOD" if p.get("base") == "good" else "BAD",
                "+".join(p.get("swapped") or []) or "-",
                str(p.get("behaves_like") or "-"),
                str(p.get("vs_good") or "-"),
                str(p.get("vs_bad") or "-"),
                "-" if p.get("first_divergent_step") is None else str(p["first_divergent_step"]),
            )
        self.refresh_bindings()

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
