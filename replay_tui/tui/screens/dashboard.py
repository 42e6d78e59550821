"""The dashboard: how reproducible the store's runs are, and what needs attention."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Digits, Footer, Header, Static

from replay_tui.tui.messages import DashboardLoaded, OpenComparison, OpenRun
from replay_tui.tui.queries import DashboardStats, load_dashboard, open_store
from replay_tui.tui.screens.base import AppScreen
from replay_tui.tui.widgets.style import Palette, safe, short, when
from replay_tui.verdicts import outcome_word


def _pct(rate: float | None) -> str:
    return "--" if rate is None else f"{round(rate * 100):d}"


class Card(Vertical):
    """A headline number with a title and a caption."""

    def __init__(self, title: str, *, id: str) -> None:
        super().__init__(id=id, classes="card")
        self.border_title = title

    def compose(self) -> ComposeResult:
        yield Digits("--", classes="value")
        yield Static("", classes="caption")

    def show(self, value: str, caption: str | Text, *, tone: str = "") -> None:
        self.query_one(Digits).update(value)
        self.query_one(".caption", Static).update(caption)
        for t in ("good", "bad", "warn"):
            self.set_class(t == tone, f"-{t}")


def _n(count: int, noun: str) -> str:
    """``1 replay``, ``2 replays``."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _tone(rate: float | None) -> str:
    if rate is None:
        return ""
    return "good" if rate >= 0.95 else "warn" if rate >= 0.7 else "bad"


class DashboardScreen(AppScreen[None]):
    CSS_PATH = "dashboard.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("g", "reload", "Refresh"),
    ]

    def __init__(self, store_path: Path) -> None:
        super().__init__()
        self.store_path = store_path
        self.stats: DashboardStats | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="cards"):
            yield Card("reproducible", id="card-repro")
            yield Card("hash match", id="card-hash")
            yield Card("runs", id="card-runs")
            yield Card("critical gaps", id="card-critical")
        with VerticalScroll(id="lists"):
            with Vertical(id="left"):
                yield Static("recent drills", classes="heading", id="drills-title")
                yield DataTable(id="drills", cursor_type="row", zebra_stripes=True)
                yield Static("recent replays", classes="heading")
                yield DataTable(id="recent", cursor_type="row", zebra_stripes=True)
            with Vertical(id="right"):
                yield Static("runs with critical gaps", classes="heading", id="critical-title")
                yield DataTable(id="critical", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self._load()

    def on_screen_resume(self) -> None:
        if self.stats is not None:
            self._load()

    def action_reload(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="dashboard")
    def _load(self) -> None:
        with open_store(self.store_path) as store:
            stats = load_dashboard(store)
        self.post_message(DashboardLoaded(stats))

    def on_dashboard_loaded(self, message: DashboardLoaded) -> None:
        message.stop()
        s = self.stats = message.stats
        palette = Palette.of(self.app)
        repro = s.reproducible.rate
        self.query_one("#card-repro", Card).show(
            _pct(repro),
            f"% of {_n(s.reproducible.whole, 'replayed run')} reproduce"
            + (
                f" · {s.bit_identical.part:,} bit-identical"
                if s.reproducible.part != s.bit_identical.part
                else ""
            )
            + (f" · {s.aborted.part:,} aborted, not counted" if s.aborted.part else "")
            if s.reproducible.whole
            else "no run replayed yet",
            tone=_tone(repro),
        )
        match = s.artifact_match.rate
        self.query_one("#card-hash", Card).show(
            _pct(match),
            f"% of {s.artifact_match.whole:,} replayed checkpoints: same sha256"
            if s.artifact_match.whole
            else "no checkpoint replayed yet",
            tone=_tone(match),
        )
        self.query_one("#card-runs", Card).show(
            str(s.total_runs),
            f"{_n(s.originals, 'original')} · {_n(s.replay_runs, 'replay')}"
            + (f" · {s.aborted.part:,} aborted" if s.aborted.part else ""),
        )
        originals = s.critical_originals
        self.query_one("#card-critical", Card).show(
            str(s.critical_total),
            "runs with a critical gap"
            + (
                f" ({_n(originals, 'original')}, {_n(s.critical_total - originals, 'replay')})"
                if originals is not None and originals != s.critical_total
                else ""
            ),
            tone="bad" if s.critical_total else "good",
        )
        drills = s.drills
        self.query_one("#drills-title", Static).update(
            f"recent drills ({drills.part} of {drills.whole} passed)"
            if drills.whole
            else "recent drills"
        )
        self._fill_drills(s, palette)
        self._fill_recent(s, palette)
        self._fill_critical(s, palette)

    def _fill_drills(self, s: DashboardStats, palette: Palette) -> None:
        table = self.query_one("#drills", DataTable)
        table.clear(columns=True)
        table.add_columns("when", "", "drill", "verdicts")
        for d in s.recent_drills:
            line = d.summary()
            badges = Text()
            for v in d.words[:8]:
                badges.append_text(palette.verdict(v))
                badges.append(" ")
            table.add_row(
                Text(when(d.created_at)),
                palette.mark(None if d.cancelled else d.passed, unknown="·"),
                safe(f"cancelled · {line}" if d.cancelled else line),
                badges,
            )
        if not s.recent_drills:
            table.add_row(
                "", "", Text("no drills yet: replay-tui drill --count N", style=palette.muted), ""
            )

    def _fill_recent(self, s: DashboardStats, palette: Palette) -> None:
        table = self.query_one("#recent", DataTable)
        table.clear(columns=True)
        table.add_columns("when", "original run", "backend", "verdict", "reason")
        for r in s.recent_replays:
            table.add_row(
                Text(when(r.created_at)),
                Text(short(r.original_run, 13)),
                safe(r.backend or "-"),
                palette.verdict(outcome_word(r.status, r.verdict)),
                safe(r.reason or "", style=palette.muted),
                key=f"replay-{r.id}",
            )
        if not s.recent_replays:
            table.add_row("", Text("no replays yet", style=palette.muted), "", "", "")

    def _fill_critical(self, s: DashboardStats, palette: Palette) -> None:
        self.query_one("#critical-title", Static).update(
            f"runs with critical gaps ({s.critical_total:,})"
        )
        table = self.query_one("#critical", DataTable)
        table.clear(columns=True)
        table.add_columns("id", "name", "gaps", "verdict")
        for r in s.critical_runs:
            g = r.gaps
            table.add_row(
                Text(short(r.id, 13)),
                safe(r.name or "-", no_wrap=True, overflow="ellipsis"),
                palette.gap_counts(
                    g.critical if g else None, g.warning if g else None, g.info if g else None
                ),
                palette.verdict(r.last_verdict),
                key=r.id,
            )
        if not s.critical_runs:
            table.add_row(
                "", Text("none: every run has its critical facts", style=palette.muted), "", ""
            )

    @on(DataTable.RowSelected, "#critical")
    def _critical_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value:
            self.post_message(OpenRun(str(event.row_key.value)))

    @on(DataTable.RowSelected, "#recent")
    def _recent_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self.stats is None or not event.row_key.value:
            return
        rid = str(event.row_key.value).removeprefix("replay-")
        fact = next((r for r in self.stats.recent_replays if str(r.id) == rid), None)
        if fact is not None and fact.comparison_id is not None:
            self.post_message(OpenComparison(comparison_id=fact.comparison_id))
        elif fact is not None and fact.original_run:
            self.post_message(OpenRun(fact.original_run))

    def action_back(self) -> None:
        self.dismiss()
