"""A modal that runs one worker and shows what it came to as lines: the store check, the
bundle verification, the export form.

The result is a ``Static`` (``#result``) in a scrolling box (``#result-box``) that
j / k / g / G scroll.  The worker runs in the group :attr:`ResultModal.WORK_GROUP`;
when it raises, :class:`~replay_tui.tui.screens.base.AppModal` hands the failure to the
app's error modal and the result line says it too (``FAILED: reason``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, Input, Static
from textual.worker import Worker, WorkerState

from replay_tui.safety import escape_control
from replay_tui.tui.screens.base import AppModal, failure_reason
from replay_tui.tui.screens.keys import ScrollKeys
from replay_tui.tui.widgets.style import Palette, safe


class ResultModal(ScrollKeys, AppModal[None]):
    """A modal with a result box its worker's answer goes to (see the module)."""

    WORK_GROUP: ClassVar[str] = "work"
    FAILED: ClassVar[str] = "failed"
    """The result line's words when the worker raised: ``could not check``..."""

    def __init__(self) -> None:
        super().__init__()
        self.running = False
        """The worker runs (a second start waits for it)."""

    def compose_result(self) -> ComposeResult:
        with VerticalScroll(id="result-box"):
            yield Static("", id="result")

    def scroll_target(self) -> Widget | None:
        """j / k / g / G scroll the result (a field being typed in keeps its letters)."""
        return self.query_one("#result-box", VerticalScroll)

    def _result(self, text: Text) -> None:
        self.query_one("#result", Static).update(text)

    def show_lines(self, lines: Iterable[tuple[str, Style | str]]) -> None:
        """The result: each line in its style."""
        t = Text()
        for line, style in lines:  # a line may quote a bundle's or the store's words
            t.append(escape_control(line) + "\n", style=style)
        t.rstrip()
        self._result(t)

    def required_text(self, field_id: str, missing: str) -> str:
        """The field's text; empty, the result says ``missing`` and the field takes the
        focus."""
        field = self.query_one(field_id, Input)
        text = field.value.strip()
        if not text:
            self._result(Text(missing, style=Palette.of(self.app).fg("warning")))
            field.focus()
        return text

    def path_field(self, field_id: str) -> Path | None:
        """The path the field names (``~`` expanded); None when it is empty."""
        text = self.query_one(field_id, Input).value.strip()
        return Path(text).expanduser() if text else None

    def work_failed(self) -> None:
        """What a failed worker leaves (the result line says why): not running."""
        self.running = False

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # AppModal's handler runs too and hands the failure to the app's error modal.
        if event.worker.group != self.WORK_GROUP or event.state != WorkerState.ERROR:
            return
        self.work_failed()
        reason = failure_reason(event.worker.error)
        self._result(safe(f"{self.FAILED}: {reason}", style=Palette.of(self.app).fg("error")))

    @on(Button.Pressed, "#close")
    def _close_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_close()

    def action_close(self) -> None:
        self.dismiss()
