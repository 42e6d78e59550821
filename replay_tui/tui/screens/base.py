"""Base classes of the app's screens: a failed worker ends in the app's error modal.

``Worker.StateChanged`` is posted to the node that ran the worker and does not bubble,
so every screen forwards failures to the app, which turns each into an error modal.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import ClassVar, TypeVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.message_pump import MessagePump
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Static
from textual.worker import Worker, WorkerCancelled, WorkerState
from textual.worker import WorkerFailed as WorkerRaised

from replay_tui.tui.messages import WorkerFailed
from replay_tui.tui.widgets.style import Palette, safe

ResultT = TypeVar("ResultT")


def failure_reason(error: BaseException | None) -> str:
    """What a failed worker's error says (a ``ReplayTuiError``'s message, else its text)."""
    return getattr(error, "message", None) or str(error)


def forward_failure(node: MessagePump, event: Worker.StateChanged) -> None:
    worker = event.worker
    if event.state == WorkerState.ERROR and worker.error is not None:
        node.post_message(WorkerFailed(worker.error, worker.group))


class AppScreen(Screen[ResultT]):
    def __init__(
        self, name: str | None = None, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(name, id, classes)
        self._width_classes()

    def _width_classes(self) -> None:
        """The app's width and height classes (``-narrow``, ``-wide``) from the start.
        Textual sets them at the screen's first resize, after its first frame was laid
        out for no class; the runs screen shows its rows in that frame, which would then
        be laid out again, and the toolbar move."""
        try:
            app = self.app
        except Exception:  # made outside a running app: Textual sets them at its resize
            return
        width, height = app.size
        horizontal = self.HORIZONTAL_BREAKPOINTS
        vertical = self.VERTICAL_BREAKPOINTS
        for size, points in (
            (width, app.HORIZONTAL_BREAKPOINTS if horizontal is None else horizontal),
            (height, app.VERTICAL_BREAKPOINTS if vertical is None else vertical),
        ):
            for name in self._get_breakpoint_classes(size, points or []):
                self.set_class(True, name, update=False)

    @property
    def work_due(self) -> bool:
        """Work a timer of this screen will start soon (a throttled search): not a
        message yet, so a wait for the app to be quiet asks here too.  None by default."""
        return False

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
        # not needed by the first frame
        from textual.widgets import TabbedContent, TabPane, Tabs

        screen = self
        assert isinstance(screen, Screen)
        tabs = screen.query(TabbedContent).first(TabbedContent)
        panes = [p for p in tabs.query(TabPane) if p.id]
        if 1 <= n <= len(panes):
            target = panes[n - 1]
            focused = screen.focused
            if focused is not None and target not in focused.ancestors_with_self:
                in_pane = any(p in focused.ancestors for p in panes)
                if in_pane:
                    # The pane that hides would hand the focus to a visible sibling of
                    # the focused widget (the metrics table's plot), and focusing a
                    # widget in a pane switches back to that pane: the tab bar takes it.
                    screen.set_focus(tabs.query(Tabs).first(Tabs))
            tabs.active = str(target.id)

    def action_cursor(self, way: str) -> None:
        screen = self
        assert isinstance(screen, Screen)
        move = getattr(screen.focused, f"action_cursor_{way}", None)
        if callable(move):
            move()


WORK_ESCAPE: list[BindingType] = [
    # while the work runs (check_action); the footer shows x for it (one key an action)
    Binding("escape", "cancel", "Cancel", show=False),
    Binding("escape", "back", "Back"),  # otherwise: the footer says "esc Back"
]
"""Escape on a :class:`WorkScreen`: cancels the running work, else goes back."""


class WorkScreen(AppScreen[None]):
    """A screen that runs one long, cancellable worker (a replay, a drill): a form, then
    ``running`` -> ``cancelling`` -> ``done`` / ``cancelled`` / ``failed``.

    The worker (group :attr:`WORK_GROUP`) calls a domain function with
    :meth:`should_cancel_for` as its ``should_cancel``; ``x`` (or escape, or leaving the
    screen) sets the cancel flag.  A subclass has a form (``#form``, with a ``#start``
    button that calls its :meth:`action_start`), a ``#title``, the progress that takes
    the form's place (``#progress``) and an ``#outcome`` (a ``Static``), and says what a
    failure shows in :meth:`show_failure`.
    """

    WORK_GROUP: ClassVar[str] = "work"
    CANCELLING: ClassVar[str] = "cancelling…"

    def __init__(self) -> None:
        super().__init__()
        self.phase = "options"
        self._cancel = threading.Event()

    @property
    def work_running(self) -> bool:
        return self.phase in ("running", "cancelling")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel":
            return self.work_running
        if action == "back":
            return not self.work_running
        if action == "start":
            return self.phase == "options"
        return True

    def should_cancel_for(self, worker: Worker[object]) -> Callable[[], bool]:
        """The ``should_cancel`` of the work the worker runs (call it in the worker)."""
        cancel = self._cancel
        return lambda: cancel.is_set() or worker.is_cancelled

    async def wait_stopped(self) -> None:
        """Until the worker has ended (and recorded what happened)."""
        for worker in [w for w in self.workers if w.group == self.WORK_GROUP]:
            # it ends either way: a failure is shown (and recorded) by its own path
            with contextlib.suppress(WorkerCancelled, WorkerRaised):
                await worker.wait()

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        self.refresh_bindings()

    @on(Button.Pressed, "#start")
    def _start_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_start()

    def action_start(self) -> None:
        """Start the work the form says (the subclass's)."""

    def show_running(self, title: str) -> None:
        """Swap the form for the progress, the title saying what runs."""
        self._set_phase("running")
        self.query_one("#form").display = False
        self.query_one("#progress").display = True
        self.query_one("#title", Static).update(safe(title))
        self._outcome(Text("running… x or escape cancels"))

    def _outcome(self, text: Text) -> None:
        self.query_one("#outcome", Static).update(text)

    def show_failure(self, reason: str) -> None:
        """What the screen shows when the worker fails (the outcome line by default)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # AppScreen's handler runs too (Textual calls each class's) and hands the failure
        # to the app's error modal.
        if event.worker.group != self.WORK_GROUP or event.state != WorkerState.ERROR:
            return
        self._set_phase("failed")
        reason = failure_reason(event.worker.error)
        self.show_failure(reason)
        # a failure's words may quote the run's argv or output: escaped
        self._outcome(safe(f"failed: {reason}", style=Palette.of(self.app).fg("error")))

    def action_cancel(self) -> None:
        if self.phase == "running":
            self._set_phase("cancelling")
            self._cancel.set()
            self._outcome(Text(self.CANCELLING))

    def action_back(self) -> None:
        self.dismiss()

    def on_unmount(self) -> None:
        self._cancel.set()
