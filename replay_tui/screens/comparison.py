"""Two runs side by side: the verdict, every field, artifact hashes, metrics, tensors, gaps.

The body is ``Comparison.to_dict()`` (read from the store, or computed in the worker
when the pair was never compared).  It is read defensively: a missing key shows as
``-`` rather than failing, so bodies written by older or newer versions still open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane

from replay_tui.messages import ComparisonLoaded
from replay_tui.screens.base import WORKBENCH_BINDINGS, AppScreen, WorkbenchKeys
from replay_tui.screens.queries import ComparisonView, load_comparison, open_store
from replay_tui.widgets.plot import LinePlot, Series
from replay_tui.widgets.style import Palette, number, plain, short
from replay_tui.widgets.verdict_banner import VerdictBanner

CLASS_MARK = {"same": " ", "numeric": "≠", "unknown": "?", "other": "~", "expected": "·"}
FIELD_ORDER = {"numeric": 0, "unknown": 1, "other": 2, "same": 3, "expected": 4}
CLASS_COLOUR = {"numeric": "error", "unknown": "warning", "other": "primary"}
MAX_TENSOR_ROWS = 300


def _list(body: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = body.get(key)
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


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
}


def artifact_result(x: dict[str, Any]) -> str:
    """One artifact row's outcome in words."""
    state = x.get("checkpoint")
    if state == "unavailable":
        return f"not compared: {x.get('error') or 'checkpoint unavailable'}"
    if isinstance(state, str) and state in CHECKPOINT_RESULT:
        return CHECKPOINT_RESULT[state]
    status = str(x.get("status", ""))
    return ARTIFACT_RESULT.get(status, status or "-")


def _strs(body: dict[str, Any], key: str) -> list[str]:
    value = body.get(key)
    return [str(x) for x in value] if isinstance(value, list) else []


class ComparisonScreen(WorkbenchKeys, AppScreen[None]):
    CSS_PATH = "comparison.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("f", "toggle_fields", "Only differences"),
        *WORKBENCH_BINDINGS,
        Binding("b", "bisect", "Bisect (A good, B bad)"),
    ]

    def __init__(
        self,
        store_path: Path,
        *,
        comparison_id: int | None = None,
        a_run: str | None = None,
        b_run: str | None = None,
    ) -> None:
        super().__init__()
        self.store_path = store_path
        self.comparison_id = comparison_id
        self.a_run = a_run
        self.b_run = b_run
        self.view: ComparisonView | None = None
        self.only_differences = False
        self.labels: tuple[str, str] = ("A", "B")

    def current_run(self) -> str | None:
        return self.b_run or self.a_run

    @property
    def verdict(self) -> str | None:
        return None if self.view is None else str(self.view.body.get("verdict") or "") or None

    def compose(self) -> ComposeResult:
        yield Header()
        yield VerdictBanner("comparing…", id="verdict")
        yield Static("", id="reasons")
        with TabbedContent(id="tabs"):
            with TabPane("Fields", id="tab-fields"):
                yield DataTable(id="fields", cursor_type="row", zebra_stripes=True)
            with TabPane("Artifacts", id="tab-artifacts"), VerticalScroll(id="artifacts-box"):
                yield DataTable(id="artifacts", cursor_type="row", zebra_stripes=True)
                yield Vertical(id="tensors")
            with TabPane("Metrics", id="tab-metrics"), Vertical(id="metrics-box"):
                yield DataTable(id="metrics", cursor_type="row", zebra_stripes=True)
                yield Static("", id="plot-title")
                yield LinePlot(id="plot")
            with TabPane("Gaps", id="tab-gaps"), VerticalScroll():
                yield Static("", id="gaps")
            with TabPane("Reasons", id="tab-reasons"), VerticalScroll():
                yield Static("", id="all-reasons")
        yield Footer()

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="comparison")
    def _load(self) -> None:
        with open_store(self.store_path) as store:
            view = load_comparison(
                store, comparison_id=self.comparison_id, a_run=self.a_run, b_run=self.b_run
            )
        self.post_message(ComparisonLoaded(view))

    async def on_comparison_loaded(self, message: ComparisonLoaded) -> None:
        message.stop()
        v = self.view = message.view
        self.a_run, self.b_run = v.a.run_id, v.b.run_id
        palette = Palette.of(self.app)
        body = v.body
        replay = bool(body.get("b_replays_a")) or v.b.replay_of == v.a.run_id
        self.labels = ("original", "replay") if replay else ("A", "B")
        sub = (
            f"{self.labels[0]} {short(v.a.run_id, 13)}  vs  "
            f"{self.labels[1]} {short(v.b.run_id, 13)}"
            f" · rtol {number(body.get('rtol'))} · atol {number(body.get('atol'))}"
            + (" · computed now (not stored)" if v.computed else "")
        )
        compact = self.app.size.height < 30
        self.query_one(VerdictBanner).show(str(body.get("verdict") or "?"), sub, compact=compact)
        reasons = _strs(body, "reasons")
        shown = reasons[:2] if compact else reasons[:4]
        text = Text(no_wrap=True, overflow="ellipsis")
        for r in shown:
            text.append("• ", style=palette.muted)
            text.append(r + "\n")
        if len(reasons) > len(shown):
            text.append(f"… {len(reasons) - len(shown)} more (Reasons tab)", style=palette.muted)
        text.rstrip()
        self.query_one("#reasons", Static).update(text)
        self._fill_fields(palette)
        await self._fill_artifacts(palette)
        self._fill_metrics(palette)
        self._fill_gaps(palette)
        self._fill_reasons(palette)

    # -- fields ----------------------------------------------------------------------

    def _fill_fields(self, palette: Palette) -> None:
        assert self.view is not None
        body = self.view.body
        env = body.get("environment") if isinstance(body.get("environment"), dict) else {}
        # What differs first (the classes that can change numbers lead), then the rest.
        rows = sorted(
            _list(env or {}, "rows"), key=lambda r: FIELD_ORDER.get(str(r.get("class")), 9)
        )
        gap_fields = {str(g.get("field", "")) for g in _list(body, "gaps")}
        table = self.query_one("#fields", DataTable)
        table.clear(columns=True)
        wide = self.app.size.width >= 160
        value_width = 60 if wide else 26
        table.add_column("", width=1, key="mark")
        table.add_column("field", width=38 if wide else 24, key="field")
        table.add_column(self.labels[0], width=value_width, key="a")
        table.add_column(self.labels[1], width=value_width, key="b")
        packages = (env or {}).get("packages")
        shown = 0
        for row in rows:
            cls = str(row.get("class", "same"))
            if self.only_differences and cls in ("same", "expected"):
                continue
            path = str(row.get("path", ""))
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
            field = Text(("● " if gap else "") + path, style=style)
            a = "missing" if row.get("present_a") is False else plain(row.get("a"), 200)
            b = "missing" if row.get("present_b") is False else plain(row.get("b"), 200)
            table.add_row(mark, field, Text(a, style=style), Text(b, style=style))
            shown += 1
        if isinstance(packages, dict) and (
            packages.get("added") or packages.get("removed") or packages.get("changed")
        ):
            changed = [c for c in packages.get("changed") or [] if isinstance(c, dict)]
            a_text = f"{packages.get('count_a', '-')} packages"
            b_text = f"{packages.get('count_b', '-')} packages"
            detail = []
            if changed:
                detail.append(
                    "changed: "
                    + ", ".join(f"{c.get('name')} {c.get('a')}→{c.get('b')}" for c in changed[:6])
                )
            if packages.get("added"):
                detail.append(
                    f"only in {self.labels[1]}: " + ", ".join(map(str, packages["added"][:6]))
                )
            if packages.get("removed"):
                detail.append(
                    f"only in {self.labels[0]}: " + ", ".join(map(str, packages["removed"][:6]))
                )
            style = palette.fg("error", bold=True)
            table.add_row(
                Text("≠", style=style),
                Text("packages (diff)", style=style),
                Text(a_text, style=style),
                Text(b_text + "; " + "; ".join(detail), style=style),
            )
            shown += 1
        if not shown:
            table.add_row("", Text("no differing fields", style=palette.muted), "", "")
        # The label counts what "only differences" shows (differences that can matter, and
        # the package diff); the expected ones (ids, times) are counted apart.
        classes = [str(r.get("class", "same")) for r in rows]
        differing = sum(c not in ("same", "expected") for c in classes)
        differing += (
            1
            if isinstance(packages, dict)
            and (packages.get("added") or packages.get("removed") or packages.get("changed"))
            else 0
        )
        expected = classes.count("expected")
        tabs = self.query_one(TabbedContent)
        tabs.get_tab("tab-fields").label = f"Fields ({differing} ≠" + (
            f" · {expected} expected)" if expected else ")"
        )

    def action_toggle_fields(self) -> None:
        self.only_differences = not self.only_differences
        if self.view is not None:
            self._fill_fields(Palette.of(self.app))
        self.notify("only differing fields" if self.only_differences else "all fields", timeout=2)

    # -- artifacts -------------------------------------------------------------------

    async def _fill_artifacts(self, palette: Palette) -> None:
        assert self.view is not None
        arts = _list(self.view.body, "artifacts")
        table = self.query_one("#artifacts", DataTable)
        table.clear(columns=True)
        wide = self.app.size.width >= 160
        sha_w = 64 if wide else 12
        table.add_column("", width=1, key="mark")
        table.add_column("path", key="path")
        table.add_column("kind", key="kind")
        table.add_column("result", key="result")
        table.add_column(f"sha256 {self.labels[0]}", width=sha_w, key="a")
        table.add_column(f"sha256 {self.labels[1]}", width=sha_w, key="b")
        matched = 0
        for x in arts:
            status = str(x.get("status", ""))
            ok: bool | None = True if status == "match" else None if status == "unhashed" else False
            if x.get("checkpoint") == "same_tensors":
                ok = True
            matched += status == "match"
            sha_a, sha_b = x.get("sha256_a"), x.get("sha256_b")
            diff_style = "" if status == "match" else palette.fg("error")
            table.add_row(
                palette.mark(ok, yes="✓", no="✗"),
                Text(str(x.get("path", "-"))),
                Text(str(x.get("kind_a") or x.get("kind_b") or "-"), style=palette.muted),
                Text(artifact_result(x), style=palette.muted if ok else ""),
                Text(sha_a if wide and sha_a else short(sha_a, sha_w), style=diff_style),
                Text(sha_b if wide and sha_b else short(sha_b, sha_w), style=diff_style),
            )
        if not arts:
            table.add_row(
                "", Text("no artifacts on either side", style=palette.muted), "", "", "", ""
            )
        tabs = self.query_one(TabbedContent)
        tabs.get_tab("tab-artifacts").label = f"Artifacts ({matched}/{len(arts)} ✓)"
        box = self.query_one("#tensors", Vertical)
        await box.remove_children()
        widgets: list[Static | DataTable[Text]] = []
        for x in arts:
            diff = x.get("tensors")
            if not isinstance(diff, dict) or diff.get("same_tensors"):
                continue
            head = Text(f"tensors of {x.get('path')}: ", style="bold")
            head.append(
                f"{diff.get('n_differ', 0)} differ, {diff.get('n_close', 0)} close,"
                f" {diff.get('n_mismatch', 0)} shape/dtype mismatch,"
                f" {diff.get('n_equal', 0)} equal",
            )
            only_a, only_b = diff.get("only_a") or [], diff.get("only_b") or []
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
            tensors = [d for d in diff.get("tensors") or [] if isinstance(d, dict)]
            tensors.sort(
                key=lambda d: (d.get("status") == "equal", d.get("within_tolerance") is True)
            )
            for d in tensors[:MAX_TENSOR_ROWS]:
                status = str(d.get("status", ""))
                within = d.get("within_tolerance")
                ok2: bool | None = (
                    True if status == "equal" else bool(within) if within is not None else None
                )
                dtype = str(d.get("dtype_a") or "-")
                if d.get("dtype_b") != d.get("dtype_a"):
                    dtype += f"→{d.get('dtype_b')}"
                shape = plain(d.get("shape_a"))
                if d.get("shape_b") != d.get("shape_a"):
                    shape += f" → {plain(d.get('shape_b'))}"
                unequal = d.get("n_unequal")
                t.add_row(
                    palette.mark(ok2),
                    Text(str(d.get("name", "-"))),
                    Text(status, style="" if ok2 else palette.fg("error")),
                    Text(dtype),
                    Text(shape),
                    Text(number(d.get("max_abs_diff"))),
                    Text(number(d.get("rel_l2"))),
                    Text("-" if unequal is None else f"{unequal}/{d.get('numel', '-')}"),
                )
            widgets.append(t)
        if widgets:
            await box.mount_all(widgets)

    # -- metrics ---------------------------------------------------------------------

    def _fill_metrics(self, palette: Palette) -> None:
        assert self.view is not None
        metrics = _list(self.view.body, "metrics")
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
        ):
            table.add_column(label, key=key)
        within = 0
        for m in metrics:
            timing = bool(m.get("timing"))
            ok: bool | None = None if timing else bool(m.get("within_tol", False))
            within += bool(ok)
            mark = Text("t", style=palette.muted) if timing else palette.mark(ok)
            style = "" if ok or timing else palette.fg("error")
            table.add_row(
                mark,
                Text(str(m.get("name", "-")), style=style),
                Text(number(m.get("a"))),
                Text(number(m.get("b"))),
                Text(number(m.get("abs_diff")), style=style),
                Text(number(m.get("rel_diff")), style=style),
                Text(number(m.get("first_step_differs"))),
                Text(
                    number(m.get("first_step_out_of_tol")),
                    style=palette.fg("error") if m.get("first_step_out_of_tol") is not None else "",
                ),
                key=str(m.get("name")),
            )
        if not metrics:
            table.add_row(
                "", Text("no metrics on either side", style=palette.muted), "", "", "", "", "", ""
            )
        judged = sum(not m.get("timing") for m in metrics)
        tabs = self.query_one(TabbedContent)
        tabs.get_tab("tab-metrics").label = f"Metrics ({within}/{judged} ✓)"
        first = next(
            (m for m in metrics if m.get("first_step_out_of_tol") is not None),
            self._longest_history(metrics),
        )
        if first is not None:
            self._plot(str(first.get("name")))
            names = [str(m.get("name")) for m in metrics]
            if first.get("name") in names:
                table.move_cursor(row=names.index(str(first.get("name"))))
        else:
            self._plot(None)

    def _longest_history(self, metrics: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The metric with the longest history on either side (the default to plot)."""
        assert self.view is not None
        a, b = self.view.a.outputs.metric_history, self.view.b.outputs.metric_history

        def length(m: dict[str, Any]) -> tuple[bool, int]:
            name = str(m.get("name"))  # a judged metric before a timing one
            return (not m.get("timing"), max(len(a.get(name, [])), len(b.get(name, []))))

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
        metric = next((m for m in _list(self.view.body, "metrics") if m.get("name") == name), {})
        marker = metric.get("first_step_out_of_tol")
        if marker is None:
            marker = metric.get("first_step_differs")
        ha = [(float(s), float(v)) for s, v in a.outputs.metric_history.get(name, [])]
        hb = [(float(s), float(v)) for s, v in b.outputs.metric_history.get(name, [])]
        plot.set_data(
            [Series(self.labels[0], ha), Series(self.labels[1], hb)],
            marker=float(marker) if isinstance(marker, int | float) else None,
        )
        palette = Palette.of(self.app)
        t = Text()
        t.append(f"{name}: ", style="bold")
        t.append(f"━ {self.labels[0]}", style=plot.get_component_rich_style("lineplot--a"))
        t.append("  ")
        t.append(f"━ {self.labels[1]}", style=plot.get_component_rich_style("lineplot--b"))
        t.append("  ")
        t.append("━ both", style=plot.get_component_rich_style("lineplot--both"))
        if isinstance(marker, int | float):
            kind = (
                "leaves tolerance"
                if metric.get("first_step_out_of_tol") is not None
                else "first differs"
            )
            t.append(f"  ┃ {kind} at step {number(marker)}", style=palette.fg("error", bold=True))
        elif ha or hb:
            t.append(
                "  histories bitwise equal" if metric.get("bitwise_equal") else "",
                style=palette.muted,
            )
        title.update(t)

    @on(DataTable.RowHighlighted, "#metrics")
    def _metric_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.view is not None and event.row_key.value is not None:
            self._plot(str(event.row_key.value))

    # -- gaps and reasons ------------------------------------------------------------

    def _fill_gaps(self, palette: Palette) -> None:
        assert self.view is not None
        body = self.view.body
        gaps = _list(body, "gaps")
        t = Text()
        counts = body.get("gap_counts") if isinstance(body.get("gap_counts"), dict) else {}
        for side, label in (("a", self.labels[0]), ("b", self.labels[1])):
            c = (counts or {}).get(side)
            if isinstance(c, dict):
                t.append(f"{label}: ", style="bold")
                t.append_text(
                    palette.gap_counts(c.get("critical"), c.get("warning"), c.get("info"))
                )
                t.append("   ")
        if t.plain:
            t.append("\n\n")
        if not gaps:
            t.append(
                "no gaps between the two runs: same hardware, drivers and packages",
                style=palette.muted,
            )
        t.append(
            "gaps between the two runs (expected causes of divergence):\n\n" if gaps else "",
            style="bold",
        )
        for g in gaps:
            sev = str(g.get("severity", "info"))
            colour = {"critical": "error", "warning": "warning"}.get(sev, "primary")
            t.append(f" {sev.upper():<8} ", style=palette.badge(colour))
            t.append(f" {g.get('code', '')}", style="bold")
            t.append(f"  {g.get('field', '')}\n", style=palette.muted)
            t.append(f"{g.get('message', '')}\n")
            t.append("fix: ", style=palette.fg("success", bold=True))
            t.append(f"{g.get('remediation', '')}\n\n")
        t.rstrip()
        self.query_one("#gaps", Static).update(t)
        self.query_one(TabbedContent).get_tab("tab-gaps").label = f"Gaps ({len(gaps)})"

    def _fill_reasons(self, palette: Palette) -> None:
        assert self.view is not None
        body = self.view.body
        t = Text()
        t.append("verdict ", style="bold")
        t.append_text(palette.verdict(str(body.get("verdict") or "?")))
        rule = body.get("tolerance_rule")
        if rule:
            t.append(
                f"\ntolerance: {rule} (rtol {number(body.get('rtol'))},"
                f" atol {number(body.get('atol'))})",
                style=palette.muted,
            )
        for title, key in (("reasons", "reasons"), ("missing", "missing")):
            items = _strs(body, key)
            if not items:
                continue
            t.append(f"\n\n{title}\n", style="bold")
            for r in items:
                t.append("• ", style=palette.muted)
                t.append(r + "\n")
        t.rstrip()
        self.query_one("#all-reasons", Static).update(t)

    def action_back(self) -> None:
        self.dismiss()

    def action_bisect(self) -> None:
        """Which difference makes B diverge from A: replay A with B's factors swapped in."""
        if self.a_run and self.b_run:
            from replay_tui.screens.bisect import BisectScreen

            options = getattr(self.app, "replay_options_factory", None)
            backend = options().backend if options else "docker"
            self.app.push_screen(BisectScreen(self.store_path, self.a_run, self.b_run, backend))
