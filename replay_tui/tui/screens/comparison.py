"""Two runs side by side: the verdict, every field, artifact hashes, metrics, tensors, gaps.

The comparison is the typed :class:`~replay_tui.compare.comparison.Comparison`, read back
from the store (``replay_tui.compare.stored``: fields older bodies lack take their
defaults) or computed in the worker when the pair was never compared.

Why one module of about 800 lines: it is one screen, its five tabs filled from one
comparison.  Each item's state and its words come from the domain (``compare.states``,
the noise rule's ``short_claims``) and the widgets from ``tui/widgets/``; what is left here
is which row goes in which tab.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Header, Static, TabbedContent, TabPane

from replay_tui.compare.comparison import TOLERANCE_RULE
from replay_tui.compare.noise_rule import short_claims
from replay_tui.compare.states import PASSING, words
from replay_tui.compare.states import counts as state_counts
from replay_tui.safety import escape_control
from replay_tui.tui.messages import ComparisonLoaded
from replay_tui.tui.queries import ComparisonView, load_comparison, open_store
from replay_tui.tui.screens.base import WORKBENCH_BINDINGS, AppScreen
from replay_tui.tui.screens.keys import TOP_BOTTOM, TabKeys
from replay_tui.tui.widgets.footer import LeanFooter
from replay_tui.tui.widgets.plot import LinePlot, Series
from replay_tui.tui.widgets.style import (
    Palette,
    cut,
    fit,
    number,
    plain,
    safe,
    short,
    state_mark,
    state_style,
)
from replay_tui.tui.widgets.verdict_banner import VerdictBanner
from replay_tui.verdicts import MEANING

FULL = 100_000  # a value shown whole under the fields table (bounded all the same)
PACKAGES_ROW = "packages (diff)"
CLASS_MARK = {"same": " ", "numeric": "≠", "unknown": "?", "other": "~", "expected": "·"}
FIELD_ORDER = {"numeric": 0, "unknown": 1, "other": 2, "same": 3, "expected": 4}
CLASS_COLOUR = {"numeric": "error", "unknown": "warning", "other": "primary"}
MAX_TENSOR_ROWS = 300
SEVERITIES = ("critical", "warning", "info")
NARROW = 100

if TYPE_CHECKING:
    from rich.style import Style

    from replay_tui.bisect.options import BisectOptions
    from replay_tui.compare.artifacts import ArtifactDiff
    from replay_tui.compare.metrics import MetricDiff
    from replay_tui.gaps import Gap

CHECKPOINT_RESULT = {
    "same_tensors": "same tensors, different container",
    "close": "tensors within tolerance",
    "out_of_tolerance": "tensors outside tolerance",
}
ARTIFACT_RESULT = {
    "match": "same sha256",
    "differs": "bytes differ",
    "only_a": "only in A",
    "only_b": "only in B",
    "unhashed": "not hashed",
    "stale": "written by neither run (stale)",
}


def artifact_result(x: ArtifactDiff) -> str:
    """One artifact row's outcome in words: its state (``compare.states``), then what
    was seen."""
    seen = _artifact_seen(x)
    if x.state not in ("within_noise", "outside_noise", "volatile"):
        return seen  # the words say it (same sha256, bytes differ, only in B ...)
    return f"{words(x.state)}: {seen}"


def _artifact_seen(x: ArtifactDiff) -> str:
    state = x.checkpoint
    if state == "unavailable":
        return f"not compared: {x.error or 'checkpoint unavailable'}"
    if state is not None and state in CHECKPOINT_RESULT:
        return CHECKPOINT_RESULT[state]
    if x.status in ("only_a", "only_b") and (x.stale_a or x.stale_b):
        return f"only {'A' if x.status == 'only_a' else 'B'} wrote it; the other's is stale"
    return ARTIFACT_RESULT.get(x.status, x.status or "-")


def _sha_cell(
    sha: str | None, stale: str | None, wide: bool, width: int, style: Style | str, palette: Palette
) -> Text:
    """One side's sha256, or "stale" for a file that side did not write."""
    if stale:
        return Text("stale", style=palette.fg("warning"))
    return safe(sha if wide and sha else short(sha, width), style=style)


class ComparisonScreen(TabKeys, AppScreen[None]):
    CSS_PATH = "comparison.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("f", "toggle_fields", "Only differences"),
        *WORKBENCH_BINDINGS,
        *TOP_BOTTOM,
        Binding("b", "bisect", "Bisect (A good, B bad)"),
        Binding("n", "noise_view", "Noise: distance from mean"),
    ]

    def __init__(
        self,
        store_path: Path,
        *,
        comparison_id: int | None = None,
        a_run: str | None = None,
        b_run: str | None = None,
        ordered: bool = False,
    ) -> None:
        super().__init__()
        self.store_path = store_path
        self.comparison_id = comparison_id
        self.a_run = a_run
        self.b_run = b_run
        self.ordered = ordered
        """The user chose which run is A (the picker): A is not swapped for the earlier."""
        self.view: ComparisonView | None = None
        self.only_differences = False
        self._full_values: dict[str, tuple[str, str]] = {}
        """Per row of the fields table: both values whole, for the line under it."""
        self.labels: tuple[str, str] = ("A", "B")
        self._counts: dict[str, tuple[int, int]] = {}
        """What each tab's label counts (its ``_fill_*`` sets it)."""

    def current_run(self) -> str | None:
        """The run ``y`` copies (and the palette acts on): the original of a replay's
        comparison, else B."""
        if self.labels[0] == "original":
            return self.a_run or self.b_run
        return self.b_run or self.a_run

    @property
    def verdict(self) -> str | None:
        return None if self.view is None else self.view.comparison.verdict

    def compose(self) -> ComposeResult:
        yield Header()
        yield VerdictBanner("comparing…", id="verdict")
        yield Static("", id="reasons")
        with TabbedContent(id="tabs"):
            with TabPane("Fields", id="tab-fields"), Vertical(id="fields-box"):
                yield DataTable(id="fields", cursor_type="row", zebra_stripes=True)
                with VerticalScroll(id="field-full-box"):  # a long value scrolls, never cut
                    yield Static("", id="field-full")
            with TabPane("Artifacts", id="tab-artifacts"), VerticalScroll(id="artifacts-box"):
                yield DataTable(id="artifacts", cursor_type="row", zebra_stripes=True)
                yield Static("", id="artifact-full")
                yield Vertical(id="tensors")
            with TabPane("Metrics", id="tab-metrics"), Vertical(id="metrics-box"):
                yield DataTable(id="metrics", cursor_type="row", zebra_stripes=True)
                yield Static("", id="plot-title")
                yield LinePlot(id="plot")
            with TabPane("Gaps", id="tab-gaps"), VerticalScroll():
                yield Static("", id="gaps")
            with TabPane("Reasons", id="tab-reasons"), VerticalScroll():
                yield Static("", id="all-reasons")
        yield LeanFooter()

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="comparison")
    def _load(self) -> None:
        with open_store(self.store_path) as store:
            view = load_comparison(
                store,
                comparison_id=self.comparison_id,
                a_run=self.a_run,
                b_run=self.b_run,
                ordered=self.ordered,
            )
        self.post_message(ComparisonLoaded(view))

    async def on_comparison_loaded(self, message: ComparisonLoaded) -> None:
        message.stop()
        v = self.view = message.view
        self.a_run, self.b_run = v.a.run_id, v.b.run_id
        if v.comparison_id is not None:  # compared now: stored, so found again by its id
            self.comparison_id = v.comparison_id
        palette = Palette.of(self.app)
        c = v.comparison
        replay = c.b_replays_a or v.b.replay_of == v.a.run_id
        self.labels = ("original", "replay") if replay else ("A", "B")
        sub = (
            f"{self.labels[0]} {short(v.a.run_id, 13)}  vs  "
            f"{self.labels[1]} {short(v.b.run_id, 13)}"
            f" · rtol {number(c.rtol)} · atol {number(c.atol)}"
            + (
                f" · α {number(c.alpha)} · noise floor of {c.floor.k} replicas"
                if c.floor is not None
                else ""
            )
            + (
                f" · compared now, stored as #{v.comparison_id}"
                if v.computed and v.comparison_id is not None
                else ""
            )
        )
        compact = self.app.size.height < 30
        tiny = self.app.size.height < 24  # 60x20: the header keeps to 4 rows of 20
        # what the noise rule claims beside the verdict: the smallest change a
        # WITHIN_NOISE could have seen, and the equivalence claim of a declared margin
        claim = short_claims(c.noise)
        if claim and not tiny:
            sub = f"{cut(claim, self.app.size.width - 6) if compact else claim}\n{sub}"
        if v.not_judged is not None:  # ops.compare: an aborted replay's partial outputs
            nj = v.not_judged
            sub = (
                f"NOT JUDGED: {short(nj.run_id, 13)} is a replay that did not complete"
                f" ({nj.ended}); this comparison is no verdict on reproduction\n{sub}"
            )
        if c.verdict in MEANING:  # the verdict in words: WITHIN_NOISE is not IDENTICAL
            head = c.headline  # DIVERGED: its first reason, in the same words
            if claim and tiny:
                head = f"{head} · {claim}"
            sub = f"{cut(head, self.app.size.width - 6) if compact else head}\n{sub}"
        if tiny:
            sub = sub.splitlines()[0]  # the headline alone
        banner = self.query_one(VerdictBanner)
        banner.show(c.verdict, sub, compact=compact, tiny=tiny)  # escapes
        # What the manifests already explain a divergence by leads (no seed recorded...).
        reasons = [f"probable cause: {x}" for x in c.probable_causes] + list(c.reasons)
        shown = reasons[:1] if tiny else reasons[:2] if compact else reasons[:4]
        text = Text(no_wrap=True, overflow="ellipsis")
        for r in shown:  # a reason quotes the manifests' values: escaped
            text.append("• ", style=palette.muted)
            if tiny and len(reasons) > len(shown):  # the count leads: the reason is cut
                text.append(f"(+{len(reasons) - len(shown)}, Reasons tab) ", style=palette.muted)
            text.append(escape_control(r) + "\n")
        if len(reasons) > len(shown) and not tiny:
            text.append(f"… {len(reasons) - len(shown)} more (Reasons tab)", style=palette.muted)
        text.rstrip()
        self.query_one("#reasons", Static).update(text)
        self._fill_fields(palette)
        await self._fill_artifacts(palette)
        self._fill_metrics(palette)
        self._fill_gaps(palette)
        self._fill_reasons(palette)
        self.refresh_bindings()  # bisect is offered only for two originals

    # -- fields ----------------------------------------------------------------------

    def _fill_fields(self, palette: Palette) -> None:
        assert self.view is not None
        c = self.view.comparison
        # What differs first (the classes that can change numbers lead), then the rest.
        rows = sorted(c.environment.rows, key=lambda r: FIELD_ORDER.get(r.cls, 9))
        gap_fields = {g.field for g in c.gaps}
        table = self.query_one("#fields", DataTable)
        table.clear(columns=True)
        wide = self.app.size.width >= 160
        # the longest field (and its gap mark), up to a third of the screen or 38
        longest = max((len(r.path) + 2 for r in rows), default=len(PACKAGES_ROW))
        field_width = min(longest, 38 if wide else max(24, self.app.size.width // 3))
        # The screen less the scrollbar and each column's padding, shared by the values
        # (a 64-digit hash whole at 200 columns); a value wider ends in an ellipsis.
        value_width = max(12, min(80, (self.app.size.width - 11 - field_width) // 2))
        table.add_column("", width=1, key="mark")
        table.add_column("field", width=field_width, key="field")
        table.add_column(self.labels[0], width=value_width, key="a")
        table.add_column(self.labels[1], width=value_width, key="b")
        self._full_values = {}
        packages = c.environment.packages
        shown = 0
        for row in rows:
            cls = row.cls
            if self.only_differences and cls in ("same", "expected"):
                continue
            path = row.path
            colour = CLASS_COLOUR.get(cls)
            style = (
                palette.fg(colour, bold=cls == "numeric")
                if colour
                else (palette.muted if cls in ("expected",) else "")
            )
            gap = any(
                path == f or path.startswith(f + ".") or f.startswith(path) for f in gap_fields if f
            )
            mark = Text(CLASS_MARK.get(cls, " "), style=style)
            field = fit(safe(("● " if gap else "") + path, style=style), field_width)
            a = "missing" if not row.present_a else plain(row.a, 200)
            b = "missing" if not row.present_b else plain(row.b, 200)
            cell_a = fit(safe(a, style=style), value_width)
            cell_b = fit(safe(b, style=style), value_width)
            if path in self._full_values:  # a path listed twice: its first row shows whole
                table.add_row(mark, field, cell_a, cell_b)
                shown += 1
                continue
            table.add_row(mark, field, cell_a, cell_b, key=path)
            self._full_values[path] = (
                "missing" if not row.present_a else plain(row.a, FULL),
                "missing" if not row.present_b else plain(row.b, FULL),
            )
            shown += 1
        if packages is not None and not packages.same:
            a_text = f"{packages.count_a} packages"
            b_text = f"{packages.count_b} packages"
            detail = []
            if packages.changed:
                detail.append(
                    "changed: " + ", ".join(f"{n} {va}→{vb}" for n, va, vb in packages.changed[:6])
                )
            if packages.added:
                detail.append(f"only in {self.labels[1]}: " + ", ".join(packages.added[:6]))
            if packages.removed:
                detail.append(f"only in {self.labels[0]}: " + ", ".join(packages.removed[:6]))
            style = palette.fg("error", bold=True)
            table.add_row(
                Text("≠", style=style),
                fit(Text(PACKAGES_ROW, style=style), field_width),
                fit(Text(a_text, style=style), value_width),
                fit(safe(b_text + "; " + "; ".join(detail), style=style), value_width),
                key=PACKAGES_ROW,
            )
            every = [f"changed: {n} {va}→{vb}" for n, va, vb in packages.changed]
            every += [f"only in {self.labels[1]}: {n}" for n in packages.added]
            every += [f"only in {self.labels[0]}: {n}" for n in packages.removed]
            self._full_values[PACKAGES_ROW] = (a_text, f"{b_text}; " + "; ".join(every))
            shown += 1
        if not shown:
            table.add_row("", Text("no differing fields", style=palette.muted), "", "")
        box = self.query_one("#field-full-box", VerticalScroll)
        box.styles.max_height = 3 if self.app.size.height < 30 else 6
        self._show_full_value(table.cursor_row)
        # The label counts what "only differences" shows (differences that can matter, and
        # the package diff); the expected ones (ids, times) are counted apart.
        classes = [r.cls for r in rows]
        differing = sum(k not in ("same", "expected") for k in classes)
        differing += 1 if packages is not None and not packages.same else 0
        expected = classes.count("expected")
        self._counts["fields"] = (differing, expected)
        self._label_tabs()

    def _label_tabs(self) -> None:
        """Each tab's label with its counts; narrower than ``NARROW`` columns, the fields
        tab leaves out the expected differences so that every label shows whole."""
        tabs = self.query_one(TabbedContent)
        if "fields" in self._counts:
            differing, expected = self._counts["fields"]
            narrow = self.app.size.width < NARROW
            tabs.get_tab("tab-fields").label = f"Fields ({differing} ≠" + (
                f" · {expected} expected)" if expected and not narrow else ")"
            )
        if "artifacts" in self._counts:
            matched, total = self._counts["artifacts"]
            tabs.get_tab("tab-artifacts").label = f"Artifacts ({matched}/{total} ✓)"
        if "metrics" in self._counts:
            within, judged = self._counts["metrics"]
            tabs.get_tab("tab-metrics").label = f"Metrics ({within}/{judged} ✓)"
        if "gaps" in self._counts:
            total, critical = self._counts["gaps"]
            narrow = self.app.size.width < NARROW
            crit = f" · {critical}{'c' if narrow else ' critical'}" if critical else ""
            tabs.get_tab("tab-gaps").label = f"Gaps ({total}{crit})"

    def on_resize(self) -> None:
        if self.view is not None:  # the value columns and the labels fit the new width
            palette = Palette.of(self.app)
            self._fill_fields(palette)
            self._fill_artifact_table(palette)

    def _show_full_value(self, row: int) -> None:
        """Under the table, the row's field and both values whole (the cells cut them)."""
        table = self.query_one("#fields", DataTable)
        full = self.query_one("#field-full", Static)
        key = table.ordered_rows[row].key.value if 0 <= row < table.row_count else None
        values = self._full_values.get(str(key)) if key is not None else None
        if values is None:
            full.update("")
            return
        palette = Palette.of(self.app)
        t = Text()
        t.append(escape_control(str(key)), style="bold")
        for label, value in zip(self.labels, values, strict=True):
            t.append(f"  {label}: ", style=palette.muted)
            t.append(escape_control(value))
        full.update(t)
        self.query_one("#field-full-box", VerticalScroll).scroll_home(animate=False)

    @on(DataTable.RowHighlighted, "#fields")
    def _field_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_full_value(event.cursor_row)

    def action_toggle_fields(self) -> None:
        self.only_differences = not self.only_differences
        if self.view is not None:
            self._fill_fields(Palette.of(self.app))
        self.notify("only differing fields" if self.only_differences else "all fields", timeout=2)

    # -- artifacts -------------------------------------------------------------------

    async def _fill_artifacts(self, palette: Palette) -> None:
        assert self.view is not None
        arts = self.view.comparison.artifacts
        self._fill_artifact_table(palette)
        box = self.query_one("#tensors", Vertical)
        await box.remove_children()
        widgets: list[Static | DataTable[Text]] = []
        for x in arts:
            diff = x.tensors
            if diff is None or diff.same_tensors:
                continue
            head = safe(f"tensors of {x.path}: ", style="bold")
            head.append(
                f"{diff.n_differ} differ, {diff.n_close} close,"
                f" {diff.n_mismatch} shape/dtype mismatch,"
                f" {diff.n_equal} equal",
            )
            only_a, only_b = diff.only_a, diff.only_b
            if only_a or only_b:
                head.append(
                    f"; {len(only_a)} only in {self.labels[0]},"
                    f" {len(only_b)} only in {self.labels[1]}"
                )
            widgets.append(Static(head, classes="tensor-head"))
            t: DataTable[Text] = DataTable(
                cursor_type="row", zebra_stripes=True, classes="tensor-table"
            )
            t.add_column("", width=1)
            t.add_columns("tensor", "status", "dtype", "shape", "max |Δ|", "rel L2", "unequal")
            tensors = sorted(
                diff.tensors, key=lambda d: (d.status == "equal", d.within_tolerance is True)
            )
            for d in tensors[:MAX_TENSOR_ROWS]:
                tstyle = state_style(palette, d.state)
                dtype = d.dtype_a or "-"
                if d.dtype_b != d.dtype_a:
                    dtype += f"→{d.dtype_b}"
                shape = plain(None if d.shape_a is None else list(d.shape_a))
                if d.shape_b != d.shape_a:
                    shape += f" → {plain(None if d.shape_b is None else list(d.shape_b))}"
                unequal = d.n_unequal
                t.add_row(  # a tensor's name, dtype and status are the checkpoint's
                    state_mark(palette, d.state),
                    safe(d.name),
                    safe(f"{words(d.state)} ({d.status})", style=tstyle),
                    safe(dtype),
                    safe(shape),
                    Text(number(d.max_abs_diff)),
                    Text(number(d.rel_l2)),
                    Text("-" if unequal is None else f"{unequal}/{plain(d.numel)}"),
                )
            widgets.append(t)
        if widgets:
            await box.mount_all(widgets)

    def _fill_artifact_table(self, palette: Palette) -> None:
        """The artifacts, a row each.  Both hashes take a column each where they fit
        (whole from 160 columns, else as wide as their header: never "sha256 origi");
        narrower than ``NARROW``, the table leaves them out to fit the screen, and the
        lines under it show the highlighted row's two hashes whole."""
        assert self.view is not None
        arts = self.view.comparison.artifacts
        table = self.query_one("#artifacts", DataTable)
        table.clear(columns=True)
        width = self.app.size.width
        wide, hashes = width >= 160, width >= NARROW
        heads = [f"sha256 {label}" for label in self.labels]
        sha_a, sha_b = (64 if wide else max(12, len(h)) for h in heads)
        table.add_column("", width=1, key="mark")
        table.add_column("path", key="path")
        table.add_column("kind", key="kind")
        table.add_column("result", key="result")
        if hashes:
            table.add_column(heads[0], width=sha_a, key="a")
            table.add_column(heads[1], width=sha_b, key="b")
        for x in arts:  # the mark and colour are the state the comparison gave it
            diff_style = state_style(palette, x.state)
            passing = x.state in PASSING
            cells = [
                state_mark(palette, x.state),
                safe(x.path),
                safe(x.kind_a or x.kind_b or "-", style=palette.muted),
                safe(artifact_result(x), style=palette.muted if passing else diff_style),
            ]
            if hashes:
                cells.append(_sha_cell(x.sha256_a, x.stale_a, wide, sha_a, diff_style, palette))
                cells.append(_sha_cell(x.sha256_b, x.stale_b, wide, sha_b, diff_style, palette))
            table.add_row(*cells)
        if not arts:
            empty = Text("no artifacts on either side", style=palette.muted)
            table.add_row("", empty, *([""] * (len(table.columns) - 2)))
        self._counts["artifacts"] = state_counts([x.state for x in arts])
        self._label_tabs()
        self._show_artifact_row(table.cursor_row)

    # -- metrics ---------------------------------------------------------------------

    def _fill_metrics(self, palette: Palette) -> None:
        assert self.view is not None
        metrics = self.view.comparison.metrics
        table = self.query_one("#metrics", DataTable)
        table.clear(columns=True)
        table.add_column("", width=1, key="mark")
        for key, label in (
            ("name", "metric"),
            ("a", self.labels[0]),
            ("b", self.labels[1]),
            ("abs", "|Δ|"),
            ("rel", "rel Δ"),
            ("first", "first ≠ step"),
            ("out", "leaves tol at"),
            ("state", "judged"),
        ):
            table.add_column(label, key=key)
        for m in metrics:  # the mark and colour are the state the comparison gave it
            mark = Text("t", style=palette.muted) if m.timing else state_mark(palette, m.state)
            style = state_style(palette, m.state)
            table.add_row(
                mark,
                safe(m.name, style=style),
                Text(number(m.a)),
                Text(number(m.b)),
                Text(number(m.abs_diff), style=style),
                Text(number(m.rel_diff), style=style),
                Text(number(m.first_step_differs)),
                Text(number(m.first_step_out_of_tol), style=style),
                Text(words(m.state), style=style or palette.muted),
                key=m.name,
            )
        if not metrics:
            table.add_row("", Text("no metrics on either side", style=palette.muted), *[""] * 7)
        self._counts["metrics"] = state_counts([m.state for m in metrics])
        self._label_tabs()
        first = next(
            (m for m in metrics if m.first_step_out_of_tol is not None),
            self._longest_history(metrics),
        )
        if first is not None:
            self._plot(first.name)
            table.move_cursor(row=[m.name for m in metrics].index(first.name))
        else:
            self._plot(None)

    def _longest_history(self, metrics: tuple[MetricDiff, ...]) -> MetricDiff | None:
        """The metric with the longest history on either side (the default to plot)."""
        assert self.view is not None
        a, b = self.view.a.outputs.metric_history, self.view.b.outputs.metric_history

        def length(m: MetricDiff) -> tuple[bool, int]:
            # a judged metric before a timing one
            return (m.judged, max(len(a.get(m.name, [])), len(b.get(m.name, []))))

        return max(metrics, key=length, default=None)

    def _plot(self, name: str | None) -> None:
        assert self.view is not None
        a, b = self.view.a, self.view.b
        plot = self.query_one("#plot", LinePlot)
        title = self.query_one("#plot-title", Static)
        if name is None:
            plot.set_data([])
            title.update("")
            return
        metric = next((m for m in self.view.comparison.metrics if m.name == name), None)
        noise = self.view.comparison.noise
        band = noise.band(name) if noise is not None else None
        leaves = band.leaves_band_at if band is not None else None
        out_of_tol = metric.first_step_out_of_tol if metric else None
        marker = (
            leaves
            if band is not None
            else out_of_tol
            if out_of_tol is not None
            else (metric.first_step_differs if metric else None)
        )
        ha = [(float(s), float(v)) for s, v in a.outputs.metric_history.get(name, [])]
        hb = [(float(s), float(v)) for s, v in b.outputs.metric_history.get(name, [])]
        plot.set_data(
            [Series(self.labels[0], ha), Series(self.labels[1], hb)],
            marker=None if marker is None else float(marker),
            times=[a.outputs.metric_times.get(name), b.outputs.metric_times.get(name)],
            band=[(float(p.step), p.lo, p.hi) for p in band.points] if band else None,
        )
        self._plot_title(name, metric, band is not None, marker, out_of_tol, ha or hb)
        self.refresh_bindings()  # n: only with a band

    def _plot_title(
        self,
        name: str,
        metric: MetricDiff | None,
        banded: bool,
        marker: float | None,
        out_of_tol: int | None,
        histories: object,
    ) -> None:
        """The plot's title: the name and its state, the marked step first (it survives
        80 columns), then the legend; under it, where the band's half-width was raised to
        the numerical floor, that in words."""
        assert self.view is not None
        plot = self.query_one("#plot", LinePlot)
        title = self.query_one("#plot-title", Static)
        palette = Palette.of(self.app)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{escape_control(name)}", style="bold")
        if metric is not None and metric.state is not None and not metric.timing:
            t.append(f" {words(metric.state)}", style=state_style(palette, metric.state) or "")
        if plot.showing_distance:
            t.append(" − replicas' mean", style="bold")
        t.append(": ")
        if banded and marker is None:
            t.append("inside the noise band  ", style=palette.muted)
        elif marker is not None:
            kind = (
                "leaves noise band"
                if banded
                else "leaves tolerance"
                if out_of_tol is not None
                else "first differs"
            )
            t.append(f"┃ {kind} at step {number(marker)}  ", style=palette.fg("error", bold=True))
        elif histories and metric is not None and metric.bitwise_equal:
            t.append("histories bitwise equal  ", style=palette.muted)
        t.append_text(plot.legend())  # B dashed, A solid: told apart without colour
        noise = self.view.comparison.noise
        floored = noise is not None and any(e.floored for e in noise.endpoints if e.metric == name)
        if floored and noise is not None:
            from replay_tui.compare.noise_rule import floored_words

            first = next(e for e in noise.endpoints if e.metric == name and e.floored)
            label = "final" if first.endpoint == "final" else "tail mean"
            t.append(f"\n{label}: {floored_words(first)}", style=palette.muted)
        elif banded and not plot.showing_distance:
            t.append("\nn: the distance from the replicas' mean", style=palette.muted)
        title.update(t)

    def action_noise_view(self) -> None:
        """Show the plotted metric as its distance from the replicas' mean, the band as
        ±h around zero (and back)."""
        plot = self.query_one("#plot", LinePlot)
        if not plot.has_band:
            self.notify("no noise band for this metric: no floor judged it", timeout=3)
            return
        plot.distance = not plot.distance
        plot.refresh()
        table = self.query_one("#metrics", DataTable)
        row = table.cursor_row
        if self.view is not None and 0 <= row < len(self.view.comparison.metrics):
            keep = plot.distance
            self._plot(self.view.comparison.metrics[row].name)
            plot.distance = keep

    @on(DataTable.RowHighlighted, "#artifacts")
    def _artifact_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_artifact_row(event.cursor_row)

    def _show_artifact_row(self, row: int) -> None:
        """Under the artifacts, the highlighted one's path, result and both sha256 whole
        (a narrow table shortens the hashes and leaves them out of view)."""
        full = self.query_one("#artifact-full", Static)
        arts = self.view.comparison.artifacts if self.view is not None else ()
        if not 0 <= row < len(arts):
            full.update("")
            return
        x = arts[row]
        palette = Palette.of(self.app)
        t = Text()
        t.append(escape_control(x.path), style="bold")
        t.append(f"  {escape_control(artifact_result(x))}", style=palette.muted)
        for label, sha, stale in (
            (self.labels[0], x.sha256_a, x.stale_a),
            (self.labels[1], x.sha256_b, x.stale_b),
        ):
            t.append(f"\n{label}: ", style=palette.muted)
            t.append(f"stale ({escape_control(stale)})" if stale else escape_control(sha or "-"))
        full.update(t)

    @on(DataTable.RowHighlighted, "#metrics")
    def _metric_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.view is not None and event.row_key.value is not None:
            self._plot(str(event.row_key.value))

    # -- gaps and reasons ------------------------------------------------------------

    def _fill_gaps(self, palette: Palette) -> None:
        """The gaps of the pair (what explains a divergence between the two runs), then
        each run's own (``replay_tui.gaps``: a seed not recorded is a gap of the run, not of
        the pair); B's own leave out those it shares with A."""
        from replay_tui.gaps import evaluate

        assert self.view is not None
        c = self.view.comparison
        a_label, b_label = self.labels
        own_a = evaluate(self.view.a)
        shared = {(g.code, g.field) for g in own_a}
        own_b_all = evaluate(self.view.b)
        own_b = [g for g in own_b_all if (g.code, g.field) not in shared]
        t = Text()
        for label, gaps in ((a_label, own_a), (b_label, own_b_all)):
            t.append(f"{label}: ", style="bold")
            t.append_text(
                palette.gap_counts(*(sum(g.severity == s for g in gaps) for s in SEVERITIES))
            )
            t.append("   ")
        t.append("\n\n")
        t.append(f"between the two runs ({len(c.gaps)})", style="bold")
        if c.gaps:
            t.append(": expected causes of divergence\n\n", style="bold")
            self._gap_items(t, c.gaps, palette)
        else:
            t.append("\nnone: same hardware, drivers and packages\n\n", style=palette.muted)
        t.append(f"{a_label}'s own gaps ({len(own_a)})\n", style="bold")
        if own_a:
            t.append("\n")
            self._gap_items(t, own_a, palette)
        else:
            t.append("none found in its manifest\n\n", style=palette.muted)
        n_shared = len(own_b_all) - len(own_b)
        t.append(f"{b_label}'s own gaps ({len(own_b_all)})", style="bold")
        if n_shared:
            t.append(
                f"  {n_shared} shared with {a_label} (above)"
                + (f", {len(own_b)} of its own" if own_b else ", none of its own"),
                style=palette.muted,
            )
        t.append("\n")
        if own_b:
            t.append("\n")
            self._gap_items(t, own_b, palette)
        elif not own_b_all:
            t.append("none found in its manifest", style=palette.muted)
        t.rstrip()
        self.query_one("#gaps", Static).update(t)
        every = [*c.gaps, *own_a, *own_b]
        self._counts["gaps"] = (len(every), sum(g.severity == "critical" for g in every))
        self._label_tabs()

    @staticmethod
    def _gap_items(t: Text, gaps: Sequence[Gap], palette: Palette) -> None:
        for g in gaps:
            colour = {"critical": "error", "warning": "warning"}.get(g.severity, "primary")
            t.append(f" {g.severity.upper():<8} ", style=palette.badge(colour))
            t.append(f" {escape_control(g.code)}", style="bold")
            t.append(f"  {escape_control(g.field)}\n", style=palette.muted)
            t.append(f"{escape_control(g.message)}\n")
            t.append("fix: ", style=palette.fg("success", bold=True))
            t.append(f"{escape_control(g.remediation)}\n\n")

    def _fill_reasons(self, palette: Palette) -> None:
        assert self.view is not None
        c = self.view.comparison
        t = Text()
        t.append("verdict ", style="bold")
        t.append_text(palette.verdict(c.verdict))
        t.append(
            f"\ntolerance: {TOLERANCE_RULE} (rtol {number(c.rtol)}, atol {number(c.atol)})",
            style=palette.muted,
        )
        for title, items in (
            ("probable causes (what differs between the two runs)", c.probable_causes),
            ("shared by both runs (not what tells them apart)", c.shared_causes),
            ("reasons", c.reasons),
            ("missing", c.missing),
        ):
            if not items:
                continue
            t.append(f"\n\n{title}\n", style="bold")
            for r in items:
                t.append("• ", style=palette.muted)
                t.append(escape_control(r) + "\n")
        t.rstrip()
        self.query_one("#all-reasons", Static).update(t)

    def action_back(self) -> None:
        self.dismiss()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "noise_view":  # offered only for a metric the floor gave a band
            plots = self.query(LinePlot)
            return bool(plots) and plots.first().has_band
        if action == "bisect":  # bisect replays A with B's factors: two originals only
            v = self.view
            return v is not None and v.a.kind != "replay" and v.b.kind != "replay"
        return True

    def action_bisect(self) -> None:
        """Which difference makes B diverge from A: the bisect form, then (Start) replay A
        with B's factors swapped in."""
        if self.a_run and self.b_run:
            from replay_tui.replay.plan import ReplayOptions
            from replay_tui.tui.screens.bisect import BisectFormScreen

            factory = getattr(self.app, "replay_options_factory", None)
            options = factory() if factory else ReplayOptions()
            form = BisectFormScreen(self.store_path, self.a_run, self.b_run, options)
            self.app.push_screen(form, self._start_bisect)

    def _start_bisect(self, options: BisectOptions | None) -> None:
        """The form's answer: None (cancelled) starts nothing."""
        if options is not None and self.a_run and self.b_run:
            from replay_tui.tui.screens.bisect import BisectScreen

            self.app.push_screen(BisectScreen(self.store_path, self.a_run, self.b_run, options))
