"""Base classes of the app's screens: a failed worker ends in the app's error modal.

``Worker.StateChanged`` is posted to the node that ran the worker and does not bubble,
so every screen forwards failures to the app, which turns each into an error modal.
"""

from __future__ import annotations

from typing import TypeVar

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
