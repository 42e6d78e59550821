"""One run: its manifest in sections, its gaps, its outputs, its replays, the tail of its
log, the uncommitted diff it was recorded with and the bisects it took part in: what an
investigation needs without leaving the app.  1-7 pick a tab and move into it, j/k/g/G
move or scroll there, y copies the run id."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import DataTable, Header, Static, TabbedContent, TabPane

from replay_tui.safety import escape_control
from replay_tui.tui.messages import (
    OpenBisect,
    OpenComparison,
    OpenReplay,
    PickAndCompare,
    RunDetailLoaded,
)
from replay_tui.tui.queries import RunDetail, load_run_detail, open_store
from replay_tui.tui.screens.base import WORKBENCH_BINDINGS, AppScreen
from replay_tui.tui.screens.keys import TOP_BOTTOM, TabKeys
from replay_tui.tui.widgets.footer import LeanFooter
from replay_tui.tui.widgets.plot import (
    DASHED_GLYPH,
    SOLID_GLYPH,
    LinePlot,
    Series,
    overlay_spread,
)
from replay_tui.tui.widgets.sections import (
    SECTIONS,
    gaps_renderable,
    human_size,
    section_rows,
    section_table,
)
from replay_tui.tui.widgets.style import Palette, duration, number, safe, short, when
from storage.records import ReplayFact

WIDE = 120
NARROW = 100
TAB_PADDING = 2
"""The cells a tab takes beside its label (one each side)."""


class RunDetailScreen(TabKeys, AppScreen[None]):
    CSS_PATH = "run_detail.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("r", "replay", "Replay"),
        Binding("c", "compare", "Compare"),
        Binding("o", "original", "Vs original"),
        Binding("l", "show_tab('tab-log')", "Log"),
        *WORKBENCH_BINDINGS,
        *TOP_BOTTOM,
    ]

    def __init__(self, store_path: Path, run_id: str) -> None:
        super().__init__()
        self.store_path = store_path
        self.run_id = run_id
        self.detail: RunDetail | None = None
        self._wide_layout = False

    def current_run(self) -> str | None:
        return self.run_id

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(safe(f"loading run {self.run_id}…"), id="summary")
        with TabbedContent(id="tabs"):
            with TabPane("Manifest", id="tab-manifest"):
                yield VerticalScroll(id="sections")
            with TabPane("Gaps", id="tab-gaps"), VerticalScroll():
                yield Static(id="gaps-body")
            with TabPane("Outputs", id="tab-outputs"), VerticalScroll(id="outputs"):
                yield Static("artifacts", classes="heading")
                yield DataTable(id="artifacts", cursor_type="row", zebra_stripes=True)
                yield Static("metrics", classes="heading")
                yield Vertical(id="metrics")
            with TabPane("Replays", id="tab-replays"), Vertical():
                yield DataTable(id="replays", cursor_type="row", zebra_stripes=True)
                yield Static("", id="replay-full")
                yield Static("", id="replays-help")
            with TabPane("Log", id="tab-log"), Vertical():
                yield Static("", id="log-source")
                with VerticalScroll(id="log-box"):
                    yield Static("", id="log-body")
            with TabPane("Diff", id="tab-diff"), VerticalScroll(id="diff-box"):
                yield Static("", id="diff-body")
            with TabPane("Bisects", id="tab-bisects"), Vertical():
                yield DataTable(id="bisects", cursor_type="row", zebra_stripes=True)
                yield Static("", id="bisect-full")
                yield Static("", id="bisects-help")
        yield LeanFooter()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "original":  # footer bindings only where they apply
            return self.detail is not None and self.detail.record.replay_of is not None
        return True

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="detail")
    def _load(self) -> None:
        with open_store(self.store_path) as store:
            detail = load_run_detail(store, self.run_id)
        self.post_message(RunDetailLoaded(detail))

    def reload(self) -> None:
        self._load()

    def on_screen_resume(self) -> None:
        if self.detail is not None:
            self._load()  # a replay or comparison may have added facts

    async def on_run_detail_loaded(self, message: RunDetailLoaded) -> None:
        message.stop()
        shown = self.detail
        d = self.detail = message.detail
        self.run_id = d.record.id
        palette = Palette.of(self.app)
        self.query_one("#summary", Static).update(self._summary(d, palette))
        if shown is None or shown.record.manifest_sha256 != d.record.manifest_sha256:
            # A manifest never changes: a reload (back from a replay) refills the rest only.
            await self._fill_sections(d, palette)
            self.query_one("#gaps-body", Static).update(gaps_renderable(d.gaps, palette))
            await self._fill_outputs(d, palette)
            self._fill_log(d, palette)
            self._fill_diff(d, palette)
        self._fill_replays(d, palette)
        self._fill_bisects(d, palette)
        self.refresh_bindings()
        self._label_tabs(d)

    def _label_tabs(self, d: RunDetail) -> None:
        """The tabs' labels with their counts, shorter below ``NARROW`` columns so that
        every label shows whole (the tab bar would crop the last), and shorter still
        where even those do not fit the terminal's width."""
        width = self.app.size.width
        narrow = width < NARROW
        tabs = self.query_one(TabbedContent)
        critical = sum(g.severity == "critical" for g in d.gaps)
        arts, metrics = len(d.manifest.outputs.artifacts), len(d.manifest.outputs.metrics)
        n_bisects = len(d.bisects)
        labels = {
            "tab-manifest": "Manifest",
            "tab-gaps": (
                f"Gaps ({len(d.gaps)} · {critical}{'c' if narrow else ' critical'})"
                if critical
                else f"Gaps ({len(d.gaps)})"
            ),
            "tab-outputs": (
                f"Outputs ({arts}/{metrics})" if narrow else f"Outputs ({arts} / {metrics})"
            ),
            "tab-replays": f"Replays ({len(d.replays)})",
            "tab-log": "Log",
            "tab-diff": "Diff" if d.diff is not None else "Diff (-)" if narrow else "Diff (none)",
            "tab-bisects": f"Bisects ({n_bisects})" if n_bisects else "Bisects",
        }
        spelled = f"Outputs ({arts} artifacts · {metrics} metrics)"  # what 2 / 3 count
        if not narrow and _tabs_width({**labels, "tab-outputs": spelled}) <= width:
            labels["tab-outputs"] = spelled
        if _tabs_width(labels) > width:
            gaps = f"Gaps {len(d.gaps)}·{critical}c" if critical else f"Gaps {len(d.gaps)}"
            labels.update(
                {
                    "tab-gaps": gaps,
                    "tab-outputs": f"Out {arts}/{metrics}",
                    "tab-replays": f"Replays {len(d.replays)}",
                    "tab-diff": "Diff" if d.diff is not None else "Diff -",
                    "tab-bisects": f"Bisects {n_bisects}" if n_bisects else "Bisects",
                }
            )
        for pane, label in labels.items():
            if pane != "tab-manifest":
                tabs.get_tab(pane).label = label

    # -- rendering -------------------------------------------------------------------

    def _summary(self, d: RunDetail, palette: Palette) -> Text:
        r, m = d.record, d.manifest
        t = Text()  # every string here is the manifest's or the store's: escaped
        t.append(escape_control(r.id), style="bold")
        if r.name:
            t.append(f"  {escape_control(r.name)}", style=palette.fg("accent", bold=True))
        t.append("\n")
        t.append(f"{escape_control(r.kind)} · ")
        t.append_text(palette.status(r.status))
        t.append(f" (exit {r.exit_code}) · started {when(r.started_at)} · {duration(r.duration_s)}")
        if r.replay_of:
            t.append(f" · replay of {short(r.replay_of, 13)}", style=palette.fg("primary"))
            if m.replay:
                t.append(f" ({escape_control(m.replay.backend)})", style=palette.muted)
        t.append("\nverdict ")
        rep = d.reproduction
        if rep is not None and (rep.verdict or rep.aborted):
            if rep.verdict:
                t.append_text(palette.verdict(rep.verdict))
                t.append(f" {rep.reproduced} of {rep.completed} completed replays reproduced")
            else:
                t.append("no completed replay", style=palette.muted)
            extra = [
                f"{n} {escape_control(s.replace('_', ' '))}" for s, n in sorted(rep.aborted.items())
            ]
            if extra:
                t.append(f" ({', '.join(extra)}: not counted)", style=palette.muted)
        elif r.last_verdict:
            t.append_text(palette.verdict(r.last_verdict))
        else:
            t.append("not replayed", style=palette.muted)
        t.append(" · gaps ")
        counts = {s: sum(g.severity == s for g in d.gaps) for s in ("critical", "warning", "info")}
        t.append_text(palette.gap_counts(counts["critical"], counts["warning"], counts["info"]))
        t.append(f" · manifest {short(r.manifest_sha256, 16)}", style=palette.muted)
        if r.signed:
            t.append(" · signed", style=palette.fg("success"))
        return t

    async def _fill_sections(self, d: RunDetail, palette: Palette) -> None:
        box = self.query_one("#sections", VerticalScroll)
        await box.remove_children()
        self._wide_layout = wide = self.app.size.width >= WIDE
        panels: list[tuple[int, Static]] = []
        for name in SECTIONS:
            rows = section_rows(d.manifest, name)
            paths = [path for _, path, _ in rows]
            section_gaps = [
                g
                for g in d.gaps
                if g.field.split(".")[0].split("[")[0] == name
                or any(g.field == p or g.field.startswith((p + ".", p + "[")) for p in paths)
            ]
            w = Static(section_table(rows, d.gaps, palette, wide=wide), classes="section")
            w.border_title = name
            if any(g.severity == "critical" for g in section_gaps):
                w.add_class("-critical")
            elif section_gaps:
                w.add_class("-warning")
            panels.append((len(rows) + 2, w))
        if not wide:
            await box.mount_all([w for _, w in panels])
            return
        # Two columns, each section to the shorter one (in manifest order).
        columns: list[list[Static]] = [[], []]
        heights = [0, 0]
        for height, w in panels:
            i = 0 if heights[0] <= heights[1] else 1
            columns[i].append(w)
            heights[i] += height
        await box.mount(Horizontal(Vertical(*columns[0]), Vertical(*columns[1]), classes="columns"))

    async def on_resize(self) -> None:
        if self.detail is not None:
            self._label_tabs(self.detail)
        if self.detail is not None and (self.app.size.width >= WIDE) != self._wide_layout:
            await self._fill_sections(self.detail, Palette.of(self.app))

    async def _fill_outputs(self, d: RunDetail, palette: Palette) -> None:
        arts = self.query_one("#artifacts", DataTable)
        arts.clear(columns=True)
        arts.add_columns("path", "kind", "sha256", "size", "tensor sha256")
        wide = self.app.size.width >= 160
        for a in d.manifest.outputs.artifacts:
            sha = (
                Text(a.sha256 if wide else short(a.sha256, 16))
                if a.sha256
                else safe(f"stale: {a.stale}", style=palette.severity("warning"))
                if a.stale
                else Text("not hashed", style=palette.severity("critical"))
            )
            arts.add_row(
                safe(a.path),
                safe(a.kind, style=palette.muted),
                sha,
                Text(human_size(a.size_bytes)),
                Text(short(a.tensor_sha256, 16), style=palette.muted),
            )
        if not d.manifest.outputs.artifacts:
            arts.add_row(Text("no artifacts recorded", style=palette.muted), "", "", "", "")
        box = self.query_one("#metrics", Vertical)
        await box.remove_children()
        outputs = d.manifest.outputs
        names = sorted(set(outputs.metrics) | set(outputs.metric_history))
        rows: list[Widget] = []
        for name in names:
            final = outputs.metrics.get(name)
            hist = outputs.metric_history.get(name, [])
            label = safe(name, style="bold")
            label.append(f"\n{number(final)}")
            own = [(float(s), float(v)) for s, v in hist]
            replays = d.replay_histories.get(name, [])
            if hist:
                label.append("\n")
                if replays:  # the line styles tell the run's history from the replays'
                    label.append(f"{SOLID_GLYPH} ", style=palette.fg("primary"))
                label.append(f"{len(hist)} steps", style=palette.muted)
            if replays:  # the run and all its completed replays: the noise floor
                label.append(f" {DASHED_GLYPH}", style=palette.fg("warning"))
                label.append(f" +{len(replays)} replays", style=palette.muted)
                spread = overlay_spread([own, *replays])
                label.append(f"\nspread {number(spread)}", style=palette.muted)
            series = [
                Series(name, own),
                *(Series(f"replay {i + 1}", r) for i, r in enumerate(replays)),
            ]
            times = [outputs.metric_times.get(name), *d.replay_times.get(name, [])]
            row = Horizontal(
                Static(label, classes="metric-label"),
                LinePlot(series, times=times, classes="spark"),
                classes="metric",
            )
            rows.append(row)
        if not rows:
            rows.append(Static(Text("no metrics recorded", style=palette.muted)))
        await box.mount_all(rows)

    def _fill_replays(self, d: RunDetail, palette: Palette) -> None:
        table = self.query_one("#replays", DataTable)
        table.clear(columns=True)
        table.add_columns(
            "#", "when", "backend", "status", "verdict", "replay run", "took", "reason"
        )
        for i, r in enumerate(d.replays, 1):  # numbered per run, oldest first (as `show`)
            table.add_row(
                Text(str(i)),
                Text(when(r.created_at)),
                safe(r.backend or "-"),
                palette.status(r.status),
                _verdict_cell(r, palette),
                Text(short(r.replay_run, 13)),
                Text(duration(r.duration_s)),
                safe(r.reason or "", style=palette.muted),
                key=str(r.id),
            )
        help_text = "enter: open the comparison · r: replay again"
        if not d.replays:
            help_text = "not replayed yet · r: replay this run"
            if d.record.kind == "replay":
                help_text = "this run is a replay · o: compare with its original"
        self.query_one("#replays-help", Static).update(help_text)
        self._show_replay_row(table.cursor_row)

    def _fill_bisects(self, d: RunDetail, palette: Palette) -> None:
        """The bisects the run took part in, oldest first (numbered as ``show`` lists
        them): when, what this run was (GOOD or BAD), the other run, what it found."""
        table = self.query_one("#bisects", DataTable)
        table.clear(columns=True)
        table.add_columns("#", "when", "this run", "other run", "outcome", "causes", "probes")
        for i, b in enumerate(d.bisects, 1):
            cause = b.outcome == "cause"
            table.add_row(
                Text(str(i)),
                Text(when(b.created_at)),
                Text(b.role_of(d.record.id)),
                Text(short(b.other(d.record.id), 13)),
                Text(
                    "CAUSE FOUND" if cause else "UNEXPLAINED",
                    style=palette.fg("success" if cause else "warning", bold=True),
                ),
                safe(", ".join(b.causes) or "-"),
                Text(str(b.probes_run)),
                key=str(b.id),
            )
        help_text = "enter: open the bisect's answer"
        if not d.bisects:
            help_text = (
                "no bisect of this run · on a comparison of two runs, b bisects them"
                " (A good, B bad)"
            )
        self.query_one("#bisects-help", Static).update(Text(help_text, style=palette.muted))
        self._show_bisect_row(table.cursor_row)

    @on(DataTable.RowHighlighted, "#bisects")
    def _bisect_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_bisect_row(event.cursor_row)

    def _show_bisect_row(self, row: int) -> None:
        """Under the bisects, the highlighted one's verdict line and the other run whole."""
        full = self.query_one("#bisect-full", Static)
        bisects = self.detail.bisects if self.detail is not None else []
        if not 0 <= row < len(bisects):
            full.update("")
            return
        b = bisects[row]
        palette = Palette.of(self.app)
        t = Text()
        t.append("good ", style=palette.fg("accent"))
        t.append(f"{escape_control(b.good)}  ")
        t.append("bad ", style=palette.fg("accent"))
        t.append(f"{escape_control(b.bad)}\n")
        t.append(escape_control(b.result.verdict_line()))
        full.update(t)

    @on(DataTable.RowSelected, "#bisects")
    def _bisect_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self.detail is None:
            return
        for b in self.detail.bisects:
            if str(b.id) == event.row_key.value:
                self.post_message(OpenBisect(b))
                return

    @on(DataTable.RowHighlighted, "#replays")
    def _replay_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_replay_row(event.cursor_row)

    def _show_replay_row(self, row: int) -> None:
        """Under the replays, the highlighted one's replay run and reason whole (a narrow
        table leaves them out of view, the run id shortened)."""
        full = self.query_one("#replay-full", Static)
        replays = self.detail.replays if self.detail is not None else []
        if not 0 <= row < len(replays):
            full.update("")
            return
        fact = replays[row]
        palette = Palette.of(self.app)
        t = Text()
        for label, value in (("replay run", fact.replay_run), ("reason", fact.reason)):
            if value:
                t.append(f"{label} ", style=palette.fg("accent"))
                t.append(f"{escape_control(value)}  ")
        t.rstrip()
        full.update(t)

    def _fill_log(self, d: RunDetail, palette: Palette) -> None:
        source = self.query_one("#log-source", Static)
        body = self.query_one("#log-body", Static)
        if not d.log_tail:
            source.update(Text("no log stored for this run", style=palette.muted))
            body.update("")
            return
        source.update(Text(f"{d.log_source} · l: this tab", style=palette.muted))
        text = Text()
        error = palette.fg("error")
        for line in d.log_tail.splitlines():  # the run's own output: escaped
            bad = line.startswith(("Traceback", "  File ")) or "Error" in line.split(":")[0]
            text.append(escape_control(line) + "\n", style=error if bad else "")
        body.update(text)
        self.query_one("#log-box", VerticalScroll).scroll_end(animate=False)

    def _fill_diff(self, d: RunDetail, palette: Palette) -> None:
        body = self.query_one("#diff-body", Static)
        m = d.manifest
        if d.diff is None:
            why = (
                f"the diff {short(m.code.diff_sha256, 12)} is missing from the store"
                if m.code.diff_sha256
                else "the code had no uncommitted changes"
                if m.code.dirty is False
                else "no uncommitted diff was stored with this run"
            )
            body.update(Text(why, style=palette.muted))
            return
        from rich.syntax import Syntax

        dark = self.app.current_theme.dark if self.app.current_theme else True
        body.update(
            Syntax(
                escape_control(d.diff, keep_newlines=True),
                "diff",
                theme="monokai" if dark else "default",
                line_numbers=False,
                word_wrap=False,
            )
        )

    # -- actions ---------------------------------------------------------------------

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self.focus_tab_content()  # as a number key does: l then j scrolls the log

    @on(DataTable.RowSelected, "#replays")
    def _replay_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self.detail is None:
            return
        found = [
            (i, r) for i, r in enumerate(self.detail.replays, 1) if str(r.id) == event.row_key.value
        ]
        if not found:
            return
        number, fact = found[0]
        if fact.comparison_id is not None:
            self.post_message(OpenComparison(comparison_id=fact.comparison_id))
        else:
            self.notify(
                f"replay {number} has no comparison: {escape_control(fact.reason or 'it failed')}",
                severity="warning",
                markup=False,
            )

    def action_back(self) -> None:
        self.dismiss()

    def action_replay(self) -> None:
        if self.detail is not None and self.detail.record.kind == "replay":
            original = self.detail.record.replay_of
            self.notify(
                f"this run is a replay; replaying its original {short(original, 13)}",
                markup=False,
            )
            if original:
                self.post_message(OpenReplay(original))
            return
        self.post_message(OpenReplay(self.run_id))

    def action_compare(self) -> None:
        self.post_message(PickAndCompare(self.run_id))

    def action_original(self) -> None:
        if self.detail is not None and self.detail.record.replay_of:
            self.post_message(
                OpenComparison(a_run=self.detail.record.replay_of, b_run=self.detail.record.id)
            )


def _verdict_cell(fact: ReplayFact, palette: Palette) -> Text:
    """A replay's verdict when it completed; an aborted one shows its status instead."""
    from replay_tui.verdicts import is_completed

    if is_completed(fact.status):
        return palette.verdict(fact.verdict)
    word = (fact.status or "error").upper().replace("_", " ")
    return palette.verdict(word)


def _tabs_width(labels: dict[str, str]) -> int:
    """The cells a tab bar of ``labels`` takes."""
    return sum(len(label) + TAB_PADDING for label in labels.values())
