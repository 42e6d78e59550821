"""Small modal screens: the error shown for any failed worker, the key map, a yes/no."""

from __future__ import annotations

import traceback
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Collapsible, Static

from replay_tui.errors import ReplayTuiError
from replay_tui.safety import escape_control
from replay_tui.tui.screens.keys import VIM_BINDINGS, ScrollKeys
from replay_tui.tui.widgets.style import safe
from storage.manifest import ManifestError
from storage.store import StoreError

KEYMAP: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "everywhere",
        (
            ("?", "this key map (? q or escape closes it)"),
            ("d", "dashboard"),
            ("ctrl+p", "command palette (verify a bundle, start a drill…)"),
            ("escape", "back"),
            ("y", "copy the run id"),
            ("j / k", "down / up a list, a text or a log (the dashboard: up / down)"),
            ("g / G", "its top / bottom (runs, dashboard: home / end; g groups, refreshes)"),
            ("1-9", "pick a tab (run, comparison) and move into it: enter, j, G act there"),
            ("q / ctrl+c", "quit (asks first while a replay or a drill runs)"),
        ),
    ),
    (
        "lists",
        (
            ("up / down", "move (j / k too)"),
            ("pgup / pgdn", "a page up / down"),
            ("home / ctrl+home", "the first row"),
            ("end / ctrl+end", "the last row"),
            ("left / right", "scroll a wide list sideways"),
            ("enter", "open the row"),
        ),
    ),
    (
        "runs",
        (
            ("/", "search (a run id or its start, name, command, commit, image, tags)"),
            ("enter", "open the run"),
            ("r", "replay the run"),
            ("c", "compare with another run"),
            ("s / S", "sort by the next column (verdict: worst first) / reverse"),
            ("right + / left -", "open / close a run's replays (under it, ▸ ▾)"),
            ("space", "open or close the replays under a run"),
            ("g", "replays under their runs / in the list (↻ marks a replay)"),
            ("escape", "clear the search and filters"),
            ("pgdn / ctrl+end", "more runs load as the cursor nears the end"),
            ("click a header", "sort by that column"),
        ),
    ),
    (
        "run",
        (
            ("r", "replay"),
            ("c", "compare with another run"),
            ("o", "a replay: compare with its original"),
            ("l", "the log tail (a failed run's traceback)"),
            ("enter", "on a replay: open its comparison"),
            ("7", "the bisects this run took part in (enter: open one's answer)"),
        ),
    ),
    (
        "compare (pick a run)",
        (
            ("type", "a run id prefix, or words to search"),
            ("down", "from the search to the runs"),
            ("enter", "compare with the highlighted run"),
            ("escape", "cancel"),
        ),
    ),
    (
        "replay",
        (
            ("enter / ctrl+s", "start"),
            ("x / escape", "cancel a running replay"),
            ("enter", "when done: open the comparison"),
            ("j / k / g / G", "scroll the output: down / up / top / bottom"),
        ),
    ),
    (
        "drill",
        (
            ("enter / ctrl+s", "start"),
            ("x / escape", "cancel a running drill (what it ran is stored)"),
            ("enter", "when done: open the highlighted run's comparison"),
            ("j / k / g / G", "the results (else the events): down / up / top / bottom"),
        ),
    ),
    (
        "comparison",
        (
            ("f", "fields: only differences / all"),
            ("up / down", "metrics: pick the history to plot"),
            ("b", "bisect: which difference makes B diverge (A good, B bad; two originals)"),
            ("n", "metrics: the distance from the replicas' mean, the band as ±h (and back)"),
        ),
    ),
    (
        "bisect",
        (
            ("enter / ctrl+s", "the form b opens: start (escape: cancel, nothing starts)"),
            ("x / escape", "cancel a running bisect"),
            ("l", "the output of the probe under the cursor (kept in the store)"),
            ("escape", "when done: back (the answer is stored: the run's Bisects tab)"),
        ),
    ),
    (
        "dashboard",
        (
            ("g", "refresh the figures"),
            ("enter", "open the run, or the replay's comparison"),
        ),
    ),
    (
        "plot (tab to it: its keys show in the footer)",
        (
            ("l", "y axis: log scale / linear"),
            ("z", "zoom to the step where the series diverge / back"),
            ("w", "x axis: wall time / step (where every run recorded its times)"),
        ),
    ),
    (
        "verify a bundle (ctrl+p)",
        (
            ("ctrl+s", "verify"),
            ("escape", "close"),
            ("j / k / g / G", "scroll the result (out of the fields)"),
        ),
    ),
    (
        "export a bundle, check the store (ctrl+p)",
        (
            ("ctrl+s", "export: start"),
            ("c", "check the store again"),
            ("y", "copy the ledger head (the anchor to keep outside the store)"),
            ("escape / enter", "close (enter: the store check's)"),
            ("j / k / g / G", "scroll the result (out of the fields)"),
        ),
    ),
    (
        "signs (what the short marks say)",
        (
            ("IDENTICAL 1/1 +1", "1 of 1 completed replays reproduced; +1 attempt not completed"),
            ("▸ ▾ └ ↻", "a run with replays (closed / open); a replay under it; a replay"),
            ("0c 1w 2i", "gaps: critical, warning, info"),
            ("● field", "a field with a provenance gap (its colour: how severe; Gaps tab)"),
            ("Outputs (2 / 3)", "2 artifacts and 3 metrics recorded (narrow: Out 2/3)"),
            ("Fields (4 ≠)", "4 fields differ that can matter (f: only those)"),
            ("≠", "a field differs and can change numbers"),
            ("~", "a field differs; no effect on numbers expected"),
            ("?", "a field unknown on one side (a comparison's fields)"),
            ("·", "a field expected to differ (ids, times)"),
            (
                "Artifacts (2/4 ✓)",
                "2 of 4 judged artifacts reproduced (identical, within tolerance or within noise)",
            ),
            ("Metrics (3/4 ✓)", "3 of 4 judged metrics reproduced (t: timing, not judged)"),
            ("✓ ≈ ✗ ?", "identical or within tolerance / within noise / outside / missing"),
            ("~ ·", "an artifact declared volatile (listed) / not judged (a log's bytes)"),
            ("· ▶ ✓ ✗ ■", "a replay's stage: pending / running / done / failed / cancelled"),
            ("[x] / [ ]", "the runs' critical-gaps box on (only runs with one) / off"),
        ),
    ),
    (
        "questions and errors",
        (
            ("y / n", "answer a question yes / no"),
            ("escape", "a question: no"),
            ("enter / escape", "close an error"),
        ),
    ),
)


def describe(error: BaseException) -> tuple[str, str | None]:
    """A one-line message and a hint for an exception from a worker."""
    if isinstance(error, ReplayTuiError):
        return error.message, error.hint
    if isinstance(error, ManifestError | StoreError):
        return str(error), None
    return f"{type(error).__name__}: {error}", None


class ErrorModal(ModalScreen[None]):
    """A failure in a worker: what happened, what to do, and the traceback folded away."""

    CSS_PATH = "modals.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss_error", "Close"),
        Binding("enter", "dismiss_error", "Close", show=False),
    ]

    def __init__(self, error: BaseException, *, context: str = "") -> None:
        super().__init__()
        self.error = error
        self.context = context

    def compose(self) -> ComposeResult:
        message, hint = describe(self.error)
        with Vertical(id="dialog"):
            # an error's words may quote a manifest's value or a run's output: escaped
            yield Static(safe(self.context or "Something failed"), id="title")
            yield Static(safe(message), id="message")
            if hint:
                yield Static(safe(f"hint: {hint}"), id="hint")
            with Collapsible(title="details", collapsed=True), VerticalScroll(id="trace"):
                trace = "".join(traceback.format_exception(self.error)).rstrip()
                yield Static(Text(escape_control(trace, keep_newlines=True)))
            yield Button("Close", id="close", variant="error")

    def on_mount(self) -> None:
        self.query_one("#close", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss()

    def action_dismiss_error(self) -> None:
        self.dismiss()


class HelpScreen(ScrollKeys, ModalScreen[None]):
    """The key map (j / k / g / G scroll it, as pgup / pgdn and home / end do)."""

    CSS_PATH = "modals.tcss"
    AUTO_FOCUS = "#dialog"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("question_mark", "close", "Close", show=False),
        Binding("q", "close", "Close", show=False),
        *VIM_BINDINGS,
    ]

    def scroll_target(self) -> Widget | None:
        return self.query_one("#dialog", VerticalScroll)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static("Keys", id="title")
            for section, keys in KEYMAP:
                table = Table.grid(padding=(0, 2))
                table.add_column(style="bold", width=18)
                table.add_column()
                for key, what in keys:
                    table.add_row(Text(key), Text(what))  # [x] is no markup
                yield Static(section, classes="section-title")
                yield Static(table, classes="keys")

    def action_close(self) -> None:
        self.dismiss()


class ConfirmModal(ModalScreen[bool]):
    """A yes/no question; ``y`` / ``n`` answer it, escape is no."""

    CSS_PATH = "modals.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "No", show=False),
    ]

    def __init__(
        self, question: str, *, yes: str = "Yes", no: str = "No", purpose: str = ""
    ) -> None:
        super().__init__()
        self.question = question
        self.purpose = purpose
        """What the question is for (``"quit"``: the app's quit question)."""
        self.yes, self.no = yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(safe(self.question), id="question")
            with Horizontal(id="buttons"):
                yield Button(f"{self.yes} (y)", id="yes", variant="warning")
                yield Button(f"{self.no} (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
