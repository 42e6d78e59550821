"""Check the store from the TUI, as ``replay-tui verify-store`` does: walk the ledger,
re-hash every stored fact, and say what the CLI says.

The check is ``replay_tui.ops.evidence.verify_store`` (the same
``RunStore.verify`` the CLI runs, and its lines), in a thread worker: it reads every
fact of the store.  The ledger head it prints is the anchor to note down outside the
store (``verify-store --anchor``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Static

from replay_tui.tui.screens.keys import VIM_BINDINGS
from replay_tui.tui.screens.result_modal import ResultModal
from replay_tui.tui.widgets.style import Palette, safe

if TYPE_CHECKING:
    from replay_tui.ops.evidence import StoreCheck


class StoreCheckScreen(ResultModal):
    """Checks the store when it opens; shows the result in the CLI's words."""

    WORK_GROUP = "store-check"
    FAILED = "could not check"
    CSS_PATH = "storecheck.tcss"
    AUTO_FOCUS = "#close"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close"),
        Binding("enter", "close", "Close", show=False),
        Binding("c", "check", "Check again"),
        Binding("y", "copy_head", "Copy ledger head"),
        *VIM_BINDINGS,
    ]

    @dataclass
    class Checked(Message):
        check: StoreCheck

    def __init__(self, store_path: Path) -> None:
        super().__init__()
        self.store_path = store_path
        self.check: StoreCheck | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Check the store (verify-store)", id="title")
            yield Static(safe(self.store_path), id="path")
            yield from self.compose_result()
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
        from replay_tui.ops.evidence import verify_store

        self.post_message(self.Checked(verify_store(self.store_path).check))

    def on_store_check_screen_checked(self, message: Checked) -> None:
        message.stop()
        self.running = False
        chk = self.check = message.check
        outcome_style = Palette.of(self.app).fg("success" if chk.ok else "error", bold=True)
        last = len(chk.lines) - 1

        def outcome(i: int, line: str) -> bool:
            return i == last if chk.ok else not line.startswith(("checked", "ledger head"))

        self.show_lines(
            (line, outcome_style if outcome(i, line) else "") for i, line in enumerate(chk.lines)
        )

    @on(Button.Pressed, "#again")
    def _again_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_check()

    def action_copy_head(self) -> None:
        head = self.check.head if self.check is not None else None
        if head:
            self.app.copy_to_clipboard(head)
            self.notify(f"copied ledger head {head[:24]}…")
