"""Bisect two compared runs: A is GOOD, B is BAD; live probe progress, then the answer.

The bisect runs in a thread worker (``run_bisect``) whose ``on_event`` posts each event
as a message; the cancel key (or leaving the screen) sets a ``threading.Event`` that the
pipeline polls.  The answer is the verdict line, the probe table (probe, factors
swapped, behaves like, vs GOOD, vs BAD, first divergent step) and what differs in the
blamed factor.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Log, Static

from replay_tui.replay.runner import ReplayEvent
from replay_tui.screens.base import AppScreen
from replay_tui.screens.queries import open_store
from replay_tui.widgets.style import short

MAX_LOG_LINES = 5000


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

    def __init__(self, store_path: Path, good: str, bad: str, backend: str = "docker") -> None:
        super().__init__()
        self.store_path = store_path
        self.good = good
        self.bad = bad
        self.backend = backend
        self.phase = "running"  # running -> cancelling -> done / failed / cancelled
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
        yield Static(
            Text(f"Bisect: GOOD {short(self.good, 13)}  vs  BAD {short(self.bad, 13)}"),
            id="bisect-title",
        )
        yield Static("starting…", id="bisect-status")
        yield Static("", id="bisect-answer")
        yield DataTable(id="bisect-probes", cursor_type="row", zebra_stripes=True)
        yield Log(id="bisect-log", max_lines=MAX_LOG_LINES)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#bisect-probes", DataTable)
        for name in ("#", "run", "factors swapped", "behaves like", "vs GOOD", "vs BAD", "1st div"):
            table.add_column(name, key=name)
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
        answer = self.query_one("#bisect-answer", Static)
        if message.body is None:
            self.phase = "cancelled" if message.exit_code == 130 else "failed"
            status.update(Text(f"bisect {self.phase}: {message.error}", style="bold red"))
            self.refresh_bindings()
            return
        self.phase = "done"
        self.body = body = message.body
        status.update(
            Text(
                f"{'CAUSE FOUND' if body.get('outcome') == 'cause' else 'UNEXPLAINED'}"
                f" after {body.get('probes_run', 0)} probe(s)",
                style="bold green" if body.get("outcome") == "cause" else "bold yellow",
            )
        )
        text = Text(str(body.get("verdict", "")) + "\n")
        for u in body.get("untestable") or []:
            text.append(f"untestable: {u.get('factor')}: {u.get('reason')}\n")
        for row in (body.get("env_diff") or [])[:10]:
            text.append(f"{row.get('what')}: {row.get('good')} -> {row.get('bad')}\n")
        text.rstrip()
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
