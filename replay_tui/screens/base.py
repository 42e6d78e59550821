"""Base classes of the app's screens: a failed worker ends in the app's error modal.

``Worker.StateChanged`` is posted to the node that ran the worker and does not bubble,
so every screen forwards failures to the app, which turns each into an error modal.
"""

from __future__ import annotations

from typing import TypeVar

from textual.binding import Binding, BindingType
from textual.message_pump import MessagePump
from textual.screen import ModalScreen, Screen
from textual.worker import Worker, WorkerState

from replay_tui.messages import WorkerFailed

ResultT = TypeVar("ResultT")


def forward_failure(node: MessagePump, event: Worker.StateChanged) -> None:
    worker = event.worker
    if event.state == WorkerState.ERROR and worker.error is not None:
        node.post_message(WorkerFailed(worker.error, worker.group))


class AppScreen(Screen[ResultT]):
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        forward_failure(self, event)


class AppModal(ModalScreen[ResultT]):
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        forward_failure(self, event)


WORKBENCH_BINDINGS: list[BindingType] = [
    *(Binding(str(n), f"tab({n})", f"Tab {n}", show=False) for n in range(1, 10)),
    Binding("j", "cursor('down')", "Down", show=False),
    Binding("k", "cursor('up')", "Up", show=False),
]
"""Keys people bring from k9s and lazygit: 1-9 pick a tab, j/k move the cursor."""


class WorkbenchKeys:
    """Actions for :data:`WORKBENCH_BINDINGS` (mixed into a screen with tabs)."""

    def action_tab(self, n: int) -> None:
        from textual.widgets import TabbedContent, TabPane  # not needed by the first frame

        screen = self
        assert isinstance(screen, Screen)
        tabs = screen.query(TabbedContent).first(TabbedContent)
        panes = [p for p in tabs.query(TabPane) if p.id]
        if 1 <= n <= len(panes):
            tabs.active = str(panes[n - 1].id)

    def action_cursor(self, way: str) -> None:
        screen = self
        assert isinstance(screen, Screen)
        move = getattr(screen.focused, f"action_cursor_{way}", None)
        if callable(move):
            move()
