"""Pick a run (to compare with another): a search box over the newest runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import Input, Static
from textual.worker import get_current_worker

from replay_tui.tui.messages import PickerRuns
from replay_tui.tui.queries import find_runs, open_store
from replay_tui.tui.screens.base import AppModal
from replay_tui.tui.widgets.fullrow import FullRow
from replay_tui.tui.widgets.runs_table import RunsTable
from replay_tui.tui.widgets.style import safe, short

PICKER_ROWS = 200
DIALOG_MIN = 80
"""The dialog's least width (the terminal's at most): its table then holds ID, NAME,
VERDICT, GAPS and STATUS whole at 80 columns."""


def table_width(screen_width: int) -> int:
    """The width to fit the table's columns to: the dialog's (90% of the screen, at least
    ``DIALOG_MIN``) less its border and padding, as the runs screen's is the screen's."""
    dialog = min(screen_width, max(DIALOG_MIN, screen_width * 9 // 10))
    return dialog - 4


class PickTable(RunsTable):
    """The picker's runs.  Enter asks the screen first (``wait``): before the search
    typed is shown it picks once that search is; a click picks the row clicked."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "pick", "Compare", show=False)]

    def __init__(self, wait: Callable[[], bool], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._wait = wait

    def action_pick(self) -> None:
        if not self._wait():
            self.action_select()


class PickRunScreen(AppModal[str | None]):
    """Returns the chosen run id, or None."""

    CSS_PATH = "picker.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("down", "focus_table", "Runs", show=False),
    ]

    def __init__(self, store_path: Path, *, exclude: str | None = None) -> None:
        super().__init__()
        self.store_path = store_path
        self.exclude = exclude
        self._generation = 0
        self._shown = 0
        """The generation of the search whose runs the table shows."""
        self._searched = ""
        """The text of the latest search (generation ``_generation``)."""
        self._pick_for: str | None = None
        """Enter came before the search for what was typed was shown: the text whose
        search to pick the first run of once it is (typing on cancels it)."""

    @property
    def table(self) -> PickTable:
        return self.query_one("#pick-runs", PickTable)

    @property
    def box(self) -> Input:
        return self.query_one("#pick-search", Input)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            title = "Compare with which run?"
            if self.exclude:
                title += f"  (A: {short(self.exclude, 13)})"
            yield Static(safe(title), id="title")
            yield Input(
                placeholder="run id prefix, or search name, command, commit, image, tags",
                id="pick-search",
                compact=True,
            )
            table = PickTable(lambda: self._pick_when_shown(self.box.value), id="pick-runs")
            yield table
            yield FullRow(table, whole=table.whole_values, id="pick-full")
            yield Static("enter: compare · escape: cancel", id="pick-help")

    def on_mount(self) -> None:
        self.table.set_sort_columns("started_at", True, width=table_width(self.app.size.width))
        self._search("")
        self.box.focus()

    def on_resize(self, event: events.Resize) -> None:
        self.table.refit(table_width(event.size.width))
        self.query_one("#pick-full", FullRow).follow()  # what the columns now cut or hide

    def _search(self, text: str) -> None:
        self._generation += 1
        self._searched = text
        self._load(text, self._generation)

    @work(thread=True, exclusive=True, exit_on_error=False, group="picker")
    def _load(self, text: str, generation: int) -> None:
        worker = get_current_worker()
        with open_store(self.store_path) as store:
            records = find_runs(store, text, PICKER_ROWS)
        if not worker.is_cancelled:
            self.post_message(PickerRuns(generation, records))

    def on_picker_runs(self, message: PickerRuns) -> None:
        message.stop()
        if message.generation == self._generation:
            records = [r for r in message.records if r.id != self.exclude]
            self.table.show_page(records, replace=True)
            self._shown = message.generation
            self.query_one("#pick-full", FullRow).follow()  # the new rows' cut values
            if self._pick_for is not None and self._pick_for == self._searched:
                self._pick_for = None
                self._pick_first()

    @on(Input.Changed, "#pick-search")
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        if self._pick_for is not None and self.box.value != self._pick_for:
            self._pick_for = None  # typed on after enter: what enter meant is gone
        # A change can come after an enter typed after it (it is posted to the box's
        # queue behind the keys already there): its search runs, the pick stays.
        self._search(event.value)

    @on(Input.Submitted, "#pick-search")
    def _submitted(self, event: Input.Submitted) -> None:
        """Enter in the search box picks the highlighted (first) matching run: at once
        if the search typed is shown, else as soon as it is (a quick typist's enter)."""
        event.stop()
        if not self._pick_when_shown(event.value):
            self._pick_first()

    def _pick_when_shown(self, text: str) -> bool:
        """Enter, with ``text`` typed: False when the table shows the search for it (the
        pick is from the rows shown); else the pick waits for that search, and True.
        Until then the table shows an older search's rows, or none (``01`` matches no
        run that ``01a2`` does), so an enter there would pick the wrong run, or none."""
        if self._shown == self._generation and self._searched == text:
            return False
        self._pick_for = text
        return True

    def _pick_first(self) -> None:
        run = self.table.selected_run
        if run is not None:
            self.dismiss(run)
        else:  # nothing matches: the focus goes to the (empty) runs, as down would
            self.action_focus_table()

    @on(RunsTable.RowSelected, "#pick-runs")
    def _selected(self, event: RunsTable.RowSelected) -> None:
        event.stop()
        self.dismiss(event.row_key)

    def action_focus_table(self) -> None:
        # At once (focus() waits a turn): an enter typed right after down is the table's.
        self.set_focus(self.table)

    def action_cancel(self) -> None:
        self.dismiss(None)
