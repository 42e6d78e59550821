"""The runs browser (home screen): every run in the store, newest first, paged from SQL.

The first page of a query comes with the count of runs it matches; further pages are
fetched when the cursor nears the last row held.  The search box queries the FTS index
as the user types: the first key after a pause searches at once, keys that follow
within the throttle window are coalesced into one search at its end, and a newer query
cancels the worker of the older one (``exclusive=True``); pages of a stale query that
still arrive are dropped by generation number.

Replays sit under their originals (``g`` shows them in the list instead): an original
with replay runs is a group, opened with right, ``+`` or space and closed with left,
``-`` or space; the groups left open stay open across queries and refreshes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Self

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.content import Content
from textual.geometry import Region
from textual.timer import Timer
from textual.widgets import Checkbox, Header, Input, Select, Static
from textual.worker import Worker, WorkerState, get_current_worker

from replay_tui.tui.messages import (
    OpenReplay,
    OpenRun,
    PickAndCompare,
    RunsCounted,
    RunsGroup,
    RunsPage,
    RunsPageShown,
)
from replay_tui.tui.queries import (
    VERDICTS,
    RunsPageData,
    RunsView,
    SortKey,
    count_runs_view,
    load_runs_page,
    open_store,
    replays_under,
)
from replay_tui.tui.screens.base import AppScreen
from replay_tui.tui.widgets.footer import LeanFooter
from replay_tui.tui.widgets.fullrow import FullRow
from replay_tui.tui.widgets.runs_table import COLUMNS, SORTABLE, RunsTable
from replay_tui.tui.widgets.status import StatusLine
from replay_tui.tui.widgets.style import safe
from replay_tui.verdicts import NO_VERDICT_QUERY, NOT_REPLAYED
from storage.readmodel import end_read
from storage.store import RunQuery, RunStore, SearchReach

FIRST_PAGE = 64  # a 60-row terminal's worth; the next page follows as the cursor moves
PAGE = 300
LOOKAHEAD = 40
SEARCH_THROTTLE_S = 0.12
PAINT_WAIT_S = 0.5
"""How long a first page waits for the table to draw it before it counts as shown."""
DESCENDING_FIRST: frozenset[str] = frozenset({"started_at", "duration_s", "severity", "gaps"})
"""Sorts that start newest, longest, worst verdict, most gaps first."""

KIND_OPTIONS = [("all kinds", ""), ("original", "original"), ("replay", "replay")]
VERDICT_OPTIONS = [
    ("all verdicts", ""),
    *((v.lower(), v) for v in VERDICTS),
    (NOT_REPLAYED, NO_VERDICT_QUERY),
]


class SearchBox(Input):
    """The search input, without a screen layout per keystroke.

    ``Input`` sets its virtual size on every change of its text, and a virtual size asks
    for a layout of the whole screen: every widget re-rendered, about half of what a
    keystroke cost.  This box has a fixed size, so its new text needs only a repaint.
    """

    _typing = False

    def __init__(self, *, leave_to: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._leave_to = leave_to

    async def action_submit(self) -> None:
        """Enter: the search is submitted, and the focus leaves for the widget
        ``leave_to`` (a selector) now, while the key is handled: a key that came in
        with enter is that widget's (a ``Submitted`` handler would move it too late)."""
        await super().action_submit()
        self.screen.set_focus(self.screen.query_one(self._leave_to))

    def _watch_value(self, value: str) -> None:
        self._typing = True
        try:
            super()._watch_value(value)
        finally:
            self._typing = False

    def refresh(
        self,
        *regions: Region,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> Self:
        if self._typing and not self.styles.auto_dimensions:
            layout = False
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)


class BoxCheckbox(Checkbox):
    """A checkbox whose state shows by its shape, ``[x]`` on and ``[ ]`` off, not by its
    colour alone (a compact checkbox draws the same X either way)."""

    @property
    def _button(self) -> Content:
        return Content.styled(
            "[x]" if self.value else "[ ]", self.get_visual_style("toggle--button")
        )


def store_stamp(path: Path) -> tuple[int, ...]:
    """The store file and its write-ahead log as (size, mtime) pairs: any commit, by
    this process or another, changes one of them."""
    stamp: list[int] = []
    for suffix in ("", "-wal"):
        try:
            st = Path(str(path) + suffix).stat()
        except OSError:
            stamp += [0, 0]
            continue
        # an empty log (made by a reader opening the store) holds no write
        stamp += [st.st_size, st.st_mtime_ns] if st.st_size else [0, 0]
    return tuple(stamp)


class FirstPage:
    """The runs browser's first page, read in a thread while the app starts.

    The app starts it when it is constructed, so the query (opening the store, reading
    the page and what its rows show) runs beside the building of the first screen; the
    screen's ``on_mount`` then shows the rows in the first frame it paints, with no
    worker, message and second frame in between.  It is used only if it is ready, for
    the view the screen opens with, and if the store has not changed since it was read;
    otherwise the screen queries as for any other page (and reports what fails).
    """

    def __init__(self, store_path: Path) -> None:
        self.store_path = store_path
        self.view = RunsView(RunQuery())
        self._page: RunsPageData | None = None
        self._stamp: tuple[int, ...] = ()
        self._done = threading.Event()
        threading.Thread(target=self._read, name="runs-first-page", daemon=True).start()

    def _read(self) -> None:
        try:
            self._stamp = store_stamp(self.store_path)
            with RunStore(self.store_path) as store:
                try:
                    self._page = load_runs_page(
                        store, self.view, limit=FIRST_PAGE, offset=0, expanded=frozenset()
                    )
                finally:
                    end_read(store)
        except Exception:  # the screen queries again and reports it
            self._page = None
        finally:
            self._done.set()

    def take(self, view: RunsView, expanded: frozenset[str]) -> RunsPageData | None:
        """The page, if it is ready and still what ``view`` shows."""
        if view != self.view or expanded or not self._done.wait(FIRST_PAGE_WAIT_S):
            return None
        if store_stamp(self.store_path) != self._stamp:
            return None
        return self._page


FIRST_PAGE_WAIT_S = 0.2
"""How long the runs screen, mounting, waits for the page read while the app started
(the thread finishes in a few ms once the event loop lets it run); then it queries."""

SEARCH_HINT = "/ search: run id, name, command, commit, image, tags"
SEARCH_HINT_SHORT = "/ search runs"


class RunsScreen(AppScreen[None]):
    """Browse, search, sort and filter the runs of the store."""

    CSS_PATH = "runs.tcss"
    AUTO_FOCUS = "#runs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "focus_search", "Search"),
        Binding("r", "replay", "Replay"),
        Binding("c", "compare", "Compare"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("S", "reverse_sort", "Reverse", show=False),
        Binding("g", "toggle_grouping", "Group replays", show=False),
        Binding("escape", "clear_search", "Clear filters"),
    ]
    LIVE_REFRESH_S = 2.0
    """How often the store file is looked at for writes by another process."""

    def __init__(
        self, store_path: Path, *, notice: str | None = None, first_page: FirstPage | None = None
    ) -> None:
        super().__init__()
        self.store_path = store_path
        self.notice = notice
        self._first_page = first_page
        """Read while the app started (:class:`FirstPage`): taken by the first query."""
        self._view = RunsView(RunQuery())
        self._expanded: set[str] = set()
        self._generation = 0
        self._total: int | None = None
        self._everything: int | None = None
        self._next_offset = 0
        self._exhausted = False
        self._loading_more = False
        self._pending_search = ""
        self._last_search_at = 0.0
        self._search_timer: Timer | None = None
        self._shown_generation = -1
        self._first_reach: SearchReach | None = None
        """What the shown query's search matched, read with its first page."""
        self._restore: str | None = None
        self._stamp: tuple[int, ...] = ()
        self._filters_mounted = False

    # -- widgets ---------------------------------------------------------------------

    @property
    def table(self) -> RunsTable:
        return self.query_one("#runs", RunsTable)

    @property
    def search_box(self) -> Input:
        return self.query_one("#search", Input)

    @property
    def _query(self) -> RunQuery:
        return self._view.query

    @property
    def query_state(self) -> RunQuery:
        """The query the table shows (filters, search and direction; no paging)."""
        return self._view.query

    @property
    def sort_key(self) -> SortKey:
        """What the table is sorted by (``query_state.descending``: which way)."""
        return self._view.sort

    @property
    def grouped(self) -> bool:
        """Replays shown under their originals (else in the list)."""
        return self._view.grouped

    @property
    def total(self) -> int | None:
        return self._total

    def compose(self) -> ComposeResult:
        yield Header()
        if self.notice:
            yield Static(safe(self.notice), id="notice")
        with Horizontal(id="toolbar"):
            yield SearchBox(leave_to="#runs", placeholder=SEARCH_HINT, id="search", compact=True)
            # the filters come once the first page is painted (_mount_filters): their
            # place is kept so that nothing moves when they do
            yield Static(id="filters-pending")
        table = RunsTable(id="runs")
        yield table
        yield FullRow(table, whole=self._whole_values, id="full-row")
        yield StatusLine("opening the store…", id="status")
        yield LeanFooter()

    def on_mount(self) -> None:
        self.table.set_sort_columns(
            self._view.sort, self._query.descending, width=self.app.size.width
        )
        # before the first page is read or taken: a write after this is seen by the poll
        self._stamp = self._store_stamp()
        self._reload()
        self.set_interval(self.LIVE_REFRESH_S, self._poll_store)  # another process writes

    def on_resize(self, event: events.Resize) -> None:
        self.table.refit(event.size.width)  # columns re-fit at once, not at the next sort
        self.call_after_refresh(self._fit_search_hint)  # once the toolbar has its new width

    def _fit_search_hint(self) -> None:
        """The search hint whole, or its short form: never cut mid-word."""
        search = self.query_one("#search", Input)
        width = search.content_size.width
        hint = SEARCH_HINT if len(SEARCH_HINT) <= width else SEARCH_HINT_SHORT
        if search.placeholder != hint:
            search.placeholder = hint
        self.query_one("#full-row", FullRow).follow()  # what the narrower columns now cut or hide

    # -- querying --------------------------------------------------------------------

    def _reload(self, *, view: RunsView | None = None, **changes: object) -> None:
        """Apply ``changes`` to the query (or show ``view``) and show its first page."""
        if changes or view is not None:
            before = self._clear_key_shown()
            self._view = view or replace(
                self._view,
                query=replace(self._query, **changes),  # type: ignore[arg-type]
            )
            if self._clear_key_shown() != before:
                # the footer's "Clear filters" comes or goes; otherwise leave the footer
                # alone (refreshing the bindings recomposes it: a layout per keystroke)
                self.refresh_bindings()
        self._generation += 1
        self._total = self._everything = None
        self._first_reach = None
        self._next_offset = 0
        self._exhausted = False
        self._loading_more = False
        self.workers.cancel_group(self, "runs-more")
        self.workers.cancel_group(self, "runs-count")
        expanded = frozenset(self._expanded)
        first, self._first_page = self._first_page, None
        page = first.take(self._view, expanded) if first is not None else None
        if page is not None:  # read while the app started: shown in the first frame
            self.post_message(_page_message(self._generation, 0, page))
        else:
            self._load_first(self._view, self._generation, expanded)
        self._update_status(loading=True)

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs-query")
    def _load_first(self, view: RunsView, generation: int, expanded: frozenset[str]) -> None:
        worker = get_current_worker()
        with open_store(self.store_path) as store:
            page = load_runs_page(store, view, limit=FIRST_PAGE, offset=0, expanded=expanded)
            if worker.is_cancelled:
                return
            self.post_message(_page_message(generation, 0, page))

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs-count")
    def _count(self, view: RunsView, generation: int, reach: SearchReach | None) -> None:
        """Count the matches once the first page is painted: the count (a scan of the
        matches) never competes with the paint, and a query typed over before its page
        showed is never counted.  ``reach``: what the first page's search matched (a
        search that is the only filter is not counted again)."""
        if get_current_worker().is_cancelled or generation != self._generation:
            return
        with open_store(self.store_path) as store:
            total, everything = count_runs_view(store, view, reach)
        if not get_current_worker().is_cancelled:
            self.post_message(RunsCounted(generation, total, everything))

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs-more")
    def _load_more(
        self, view: RunsView, generation: int, offset: int, expanded: frozenset[str]
    ) -> None:
        worker = get_current_worker()
        with open_store(self.store_path) as store:
            page = load_runs_page(store, view, limit=PAGE, offset=offset, expanded=expanded)
        if not worker.is_cancelled:
            self.post_message(_page_message(generation, offset, page))

    @work(thread=True, exit_on_error=False, group="runs-group")
    def _load_group(self, generation: int, run_id: str) -> None:
        with open_store(self.store_path) as store:
            records = replays_under(store, run_id)
        self.post_message(RunsGroup(generation, run_id, records))

    def on_runs_page(self, message: RunsPage) -> None:
        message.stop()
        if message.generation != self._generation:
            return
        first = message.offset == 0
        if first:
            self._first_reach = message.reach
        self.table.show_page(
            message.records,
            replace=first,
            reproduction=message.reproduction,
            replay_runs=message.replay_runs,
            children=message.children,
            grouped=self._view.top_level,
        )
        if first:
            # in the frame that draws the rows (the grid's RowHighlighted comes after it)
            self.query_one("#full-row", FullRow).follow()
        if first and self._restore is not None:
            if self.table.record(self._restore) is not None:
                self.table.move_cursor(row=self.table.get_row_index(self._restore))
            self._restore = None
        asked = FIRST_PAGE if first else PAGE
        self._next_offset = message.offset + len(message.records)
        self._exhausted = len(message.records) < asked
        self._loading_more = False
        if self._exhausted and self._total is None:
            self._total = self._next_offset
        self._update_status()
        if first:
            generation = message.generation
            shown = partial(self._page_shown, generation)
            if self.is_current:
                self.table.call_after_paint(shown)
                self.set_timer(PAINT_WAIT_S, shown)  # should the table never draw it
            else:
                self.call_after_refresh(shown)
        elif self.table.cursor_row >= self.table.row_count - LOOKAHEAD:
            self._maybe_load_more()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # AppScreen's handler runs too (Textual calls each class's): the error modal
        if event.state == WorkerState.ERROR:
            self._mount_filters()  # a query failed: the filters need no page to come

    def _mount_filters(self) -> None:
        """The kind and verdict selects and the critical-gaps box, in the place kept for
        them.  Mounted after the first page is painted, not composed with it: the three
        stock widgets (a select is an overlay list as well) cost about a sixth of the
        start, and the runs table is what a user opens the program to see."""
        if self._filters_mounted or not self.is_attached:
            return
        self._filters_mounted = True
        pending = self.query_one("#filters-pending", Static)
        with self.app.batch_update():
            self.query_one("#toolbar", Horizontal).mount(
                Select(KIND_OPTIONS, id="kind", value="", allow_blank=False, compact=True),
                Select(VERDICT_OPTIONS, id="verdict", value="", allow_blank=False, compact=True),
                BoxCheckbox("critical gaps", id="critical", compact=True),
                before=pending,
            )
            pending.remove()

    def _page_shown(self, generation: int) -> None:
        self._mount_filters()
        if generation == self._generation and generation != self._shown_generation:
            self._shown_generation = generation
            # a full first page: there may be more; grouped: how many runs the groups hold
            if self._total is None or self._view.top_level:
                self._count(self._view, generation, self._first_reach)
            self.post_message(RunsPageShown(generation, self.table.row_count, self._total))

    def on_runs_group(self, message: RunsGroup) -> None:
        message.stop()
        if message.generation == self._generation and message.run_id in self._expanded:
            self.table.open_group(message.run_id, message.records)

    def on_runs_counted(self, message: RunsCounted) -> None:
        message.stop()
        if message.generation == self._generation:
            self._total = message.total
            self._everything = message.everything
            self._update_status()

    def _maybe_load_more(self) -> None:
        if self._loading_more or self._exhausted:
            return
        self._loading_more = True
        self._load_more(self._view, self._generation, self._next_offset, frozenset(self._expanded))

    def _update_status(self, *, loading: bool = False) -> None:
        q = self._query
        shown = self.table.top_level_count
        if loading:
            text = "searching…" if q.search else "loading…"
        elif self._total is None:
            text = f"{shown:,} runs (counting…)"
        else:
            text = f"{shown:,} of {self._total:,} runs"
            if self._everything is not None and self._everything != self._total:
                text += f" ({self._everything:,} with their replays)"  # the dashboard's count
            elif self._total == 0 and _filtering(q):
                text += " (escape clears the search and filters)"
        label = next(c.label for c in COLUMNS if c.order == self._view.sort)
        parts = [text]  # what narrows the list first: a narrow screen cuts from the end
        if q.search:
            parts.append(f"search “{q.search}”")
        if q.kind:
            parts.append(q.kind)
        if q.verdict:
            parts.append(NOT_REPLAYED if q.verdict == NO_VERDICT_QUERY else q.verdict)
        if q.has_critical:
            parts.append("critical gaps only")
        parts.append(f"sorted by {label.lower()} {'▼' if q.descending else '▲'}")
        if self._view.top_level:
            parts.append("replays under their originals")
        self.query_one("#status", StatusLine).text = " · ".join(parts)

    @property
    def work_due(self) -> bool:
        """A search typed within the throttle window waits for its end (a timer)."""
        return self._search_timer is not None

    # -- events ----------------------------------------------------------------------

    @on(Input.Changed, "#search")
    def _search_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._pending_search = event.value
        if self._search_timer is not None:
            return  # a search is already due at the end of the window: it takes this text
        wait = self._last_search_at + SEARCH_THROTTLE_S - time.monotonic()
        if wait <= 0:
            self._fire_search()
        else:
            self._search_timer = self.set_timer(wait, self._fire_search)

    def _fire_search(self) -> None:
        self._search_timer = None
        self._last_search_at = time.monotonic()
        text = self._pending_search.strip() or None
        if text != self._query.search:
            self._reload(search=text)

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self._search_timer is not None:
            self._search_timer.stop()
            self._fire_search()  # (the box has given the focus to the table: SearchBox)

    @on(Select.Changed, "#kind")
    def _kind_changed(self, event: Select.Changed) -> None:
        event.stop()
        value = event.value if isinstance(event.value, str) and event.value else None
        if value != self._query.kind:
            self._reload(kind=value)

    @on(Select.Changed, "#verdict")
    def _verdict_changed(self, event: Select.Changed) -> None:
        event.stop()
        value = event.value if isinstance(event.value, str) and event.value else None
        if value != self._query.verdict:
            self._reload(verdict=value)

    @on(Checkbox.Changed, "#critical")
    def _critical_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        if event.value != self._query.has_critical:
            self._reload(has_critical=event.value)

    @on(RunsTable.RowHighlighted, "#runs")
    def _row_highlighted(self, event: RunsTable.RowHighlighted) -> None:
        event.stop()
        self.query_one(
            "#full-row", FullRow
        ).follow()  # the row's cut values, whole, under the table
        if event.cursor_row >= event.grid.row_count - LOOKAHEAD:
            self._maybe_load_more()

    def _whole_values(self, run_id: str) -> dict[str, str]:
        """The runs table's values whole: the id, commit and image it shortens."""
        # the name cell may carry the group's mark before it: the name alone is whole
        return self.table.whole_values(run_id)

    @on(RunsTable.RowSelected, "#runs")
    def _row_selected(self, event: RunsTable.RowSelected) -> None:
        event.stop()
        self.post_message(OpenRun(event.row_key))

    @on(RunsTable.HeaderSelected, "#runs")
    def _header_selected(self, event: RunsTable.HeaderSelected) -> None:
        event.stop()
        order = next((c.order for c in COLUMNS if c.key == event.column_key), None)
        if order is not None:
            self.sort_by(order)

    @on(RunsTable.GroupToggled, "#runs")
    def _group_toggled(self, event: RunsTable.GroupToggled) -> None:
        event.stop()
        if event.open:
            self._expanded.add(event.run_id)
            self._load_group(self._generation, event.run_id)
        else:
            self._expanded.discard(event.run_id)
            self.table.close_group(event.run_id)

    # -- actions ---------------------------------------------------------------------

    def sort_by(self, order: SortKey, descending: bool | None = None) -> None:
        """Sort by a column; the same column again flips the direction."""
        if descending is None:
            if order == self._view.sort:
                descending = not self._query.descending
            else:
                descending = order in DESCENDING_FIRST
        self.table.set_sort_columns(order, descending, width=self.app.size.width)
        view = replace(self._view, sort=order, query=replace(self._query, descending=descending))
        self._reload(view=view)

    def action_cycle_sort(self) -> None:
        i = SORTABLE.index(self._view.sort) if self._view.sort in SORTABLE else -1
        self.sort_by(SORTABLE[(i + 1) % len(SORTABLE)], None)

    def action_reverse_sort(self) -> None:
        self.sort_by(self._view.sort, not self._query.descending)

    def action_toggle_grouping(self) -> None:
        """Replays under their originals, or in the list as runs of their own."""
        self._restore = self.table.selected_run
        self._reload(view=replace(self._view, grouped=not self._view.grouped))

    def action_focus_search(self) -> None:
        # At once (focus() waits a turn): keys typed right after "/" belong to the box.
        self.set_focus(self.search_box)

    def action_clear_search(self) -> None:
        """Clear the search and every filter (kind, verdict, critical gaps)."""
        if self.search_box.value:
            self.search_box.value = ""
        if self._filters_mounted:  # else none of them can have been set
            self.query_one("#kind", Select).value = ""
            self.query_one("#verdict", Select).value = ""
            self.query_one("#critical", Checkbox).value = False
        self.set_focus(self.table)  # at once: a key typed right after escape is the table's

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_search":  # shown in the footer only while something filters
            return self._clear_key_shown()
        return True

    def _clear_key_shown(self) -> bool:
        if _filtering(self._query):
            return True
        box = self.query("#search").first(Input) if self.is_mounted else None
        return box is not None and (box.has_focus or bool(box.value))

    # -- live refresh ------------------------------------------------------------------

    def _store_stamp(self) -> tuple[int, ...]:
        return store_stamp(self.store_path)

    def _poll_store(self) -> None:
        """Show the query again when the store changed, unless more than the first page
        is paged in (a reload would throw the reader back to the top): then the next
        return to this screen reloads it."""
        stamp = self._store_stamp()
        if stamp == self._stamp:
            return
        if self.app.screen is not self or self._shown_generation < 0 or self._loading_more:
            return
        if self.table.top_level_count > FIRST_PAGE:
            return
        self._stamp = stamp
        self._restore = self.table.selected_run  # refresh where the cursor is
        self._reload()

    def action_open_run(self) -> None:
        run = self.table.selected_run
        if run:
            self.post_message(OpenRun(run))

    def action_replay(self) -> None:
        run = self.table.selected_run
        record = self.table.record(run) if run else None
        if record is not None and record.kind == "replay" and record.replay_of:
            self.notify(
                f"{run:.13} is a replay: replaying its original {record.replay_of:.13}",
                markup=False,
            )
            run = record.replay_of
        if run:
            self.post_message(OpenReplay(run))

    def action_compare(self) -> None:
        run = self.table.selected_run
        if run:
            self.post_message(PickAndCompare(run))

    def on_screen_resume(self) -> None:
        # Back from a replay or a comparison: verdicts may have changed.  Show the
        # query again with the cursor on the same run when it is still in the first page.
        if self._shown_generation >= 0:
            self._restore = self.table.selected_run
            self._reload()


def _filtering(q: RunQuery) -> bool:
    return bool(q.search or q.kind or q.verdict or q.has_critical)


def _page_message(generation: int, offset: int, page: RunsPageData) -> RunsPage:
    return RunsPage(
        generation,
        offset,
        page.records,
        page.reproduction,
        replay_runs=page.replay_runs,
        children=page.children,
        reach=page.reach,
    )
