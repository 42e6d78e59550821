"""Check the store from the TUI, as ``replay-tui verify-store`` does: walk the ledger,
re-hash every stored fact, and say what the CLI says.

The check is ``replay_tui.evidence.storecheck.check_store`` (the same
``RunStore.verify`` the CLI runs, and its lines), in a thread worker: it reads every
fact of the store.  The ledger head it prints is the anchor to note down outside the
store (``verify-store --anchor``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Static
from textual.worker import Worker, WorkerState

from replay_tui.tui.screens.base import AppModal
from replay_tui.tui.screens.keys import VIM_BINDINGS, ScrollKeys
from replay_tui.tui.widgets.style import Palette

if TYPE_CHECKING:
    from replay_tui.evidence.storecheck import StoreCheck


class StoreCheckScreen(ScrollKeys, AppModal[None]):
    """Checks the store when it opens; shows the result in the CLI's words."""

    CSS_PATH = "storecheck.tcss"
    AUTO_FOCUS = "#close"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("enter", "close", "Close", show=False),
        Binding("c", "check", "Check again"),
        Binding("y", "copy_head", "Copy ledger head"),
        *VIM_BINDINGS,
    ]

    class Checked(Message):
        def __init__(self, check: StoreCheck) -> None:
            super().__init__()
            self.check = check

    def __init__(self, store_path: Path) -> None:
        super().__init__()
        self.store_path = store_path
        self.check: StoreCheck | None = None
        self.running = False

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Check the store (verify-store)", id="title")
            yield Static(Text(str(self.store_path)), id="path")
            with VerticalScroll(id="result-box"):
                yield Static("", id="result")
            yield Static(
                "the ledger head is the anchor to keep outside the store"
                " (verify-store --anchor SEQ:HASH checks against it) · y copies it",
                id="help",
            )
            with Horizontal(id="buttons"):
                yield Button("Close", id="close", variant="primary", compact=True)
                yield Button("Check again", id="again", compact=True)

    def on_mount(self) -> None:
        self.action_check()

    def action_check(self) -> None:
        if self.running:
            return
        self.running = True
        self.check = None
        self._result(Text("checking every link of the ledger and every stored hash…"))
        self._check()

    @work(thread=True, exclusive=True, exit_on_error=False, group="store-check")
    def _check(self) -> None:
        from replay_tui.evidence.storecheck import check_store

        self.post_message(self.Checked(check_store(self.store_path)))

    def on_store_check_screen_checked(self, message: Checked) -> None:
        message.stop()
        self.running = False
        chk = self.check = message.check
        palette = Palette.of(self.app)
        t = Text()
        last = len(chk.lines) - 1
        for i, line in enumerate(chk.lines):
            outcome = i == last if chk.ok else not line.startswith(("checked", "ledger head"))
            style = palette.fg("success" if chk.ok else "error", bold=True) if outcome else ""
            t.append(line + "\n", style=style)
        t.rstrip()
        self._result(t)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # AppModal's handler runs too and hands the failure to the app's error modal.
        if event.worker.group != "store-check" or event.state != WorkerState.ERROR:
            return
        self.running = False
        error = event.worker.error
        reason = getattr(error, "message", None) or str(error)
        self._result(Text(f"could not check: {reason}", style=Palette.of(self.app).fg("error")))

    @on(Button.Pressed, "#close")
    def _close_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss()

    @on(Button.Pressed, "#again")
    def _again_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_check()

    def action_copy_head(self) -> None:
        head = self.check.head if self.check is not None else None
        if head:
            self.app.copy_to_clipboard(head)
            self.notify(f"copied ledger head {head[:24]}…")

    def scroll_target(self) -> Widget | None:
        """j / k / g / G scroll the result (a field being typed in keeps its letters)."""
        return self.query_one("#result-box", VerticalScroll)

    def _result(self, text: Text) -> None:
        self.query_one("#result", Static).update(text)

    def action_close(self) -> None:
        self.dismiss()
