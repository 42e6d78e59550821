"""The terminal app: owns the dependencies, opens screens, turns worker failures into an error.

Screens do the work (in thread workers that post messages); they ask the app to open
other screens with the navigation messages of ``replay_tui.tui.messages``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.worker import Worker

from replay_tui.safety import escape_control
from replay_tui.tui import start_heap
from replay_tui.tui.messages import (
    OpenBisect,
    OpenComparison,
    OpenReplay,
    OpenRun,
    PickAndCompare,
    RunsPageShown,
    WorkerFailed,
)
from replay_tui.tui.screens.base import forward_failure
from replay_tui.tui.screens.runs import FirstPage, RunsScreen

# Only the runs browser is imported up front: it is the first frame. The other screens
# (and through them pydantic models, the replay pipeline, docker, git, torch) load when
# first opened, so start-up stays fast.
if TYPE_CHECKING:
    from replay_tui.replay.plan import ReplayOptions
    from replay_tui.tui.screens.drill import DrillScreen
    from replay_tui.tui.screens.replay import ReplayScreen


class Stoppable(Protocol):
    """A screen with work running that quitting cancels and waits for."""

    def action_cancel(self) -> None: ...

    async def wait_stopped(self) -> None: ...


@runtime_checkable
class HasRun(Protocol):
    """A screen about one run (the palette offers actions on it)."""

    def current_run(self) -> str | None: ...


class ReplayApp(App[None]):
    """Browse the run store, replay runs and read comparisons."""

    TITLE = "replay-tui"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]  # noqa: RUF012
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
        Binding("d", "dashboard", "Dashboard"),
        Binding("y", "copy_run_id", "Copy id", show=False),
    ]

    def __init__(
        self,
        store_path: Path,
        *,
        replay_options_factory: Callable[[], ReplayOptions] | None = None,
        notice: str | None = None,
    ) -> None:
        super().__init__()
        self.store_path = Path(store_path)
        self.replay_options_factory = replay_options_factory or _default_replay_options
        self.notice = notice
        self.sub_title = escape_control(str(self.store_path))  # a path given: escaped
        self._held_comparison: OpenComparison | None = None
        """A comparison a replay opened while the quit question was up (shown on "no")."""
        # the runs browser's first page is read while the app builds its first screen (a
        # store not yet written is left to the screen, which makes it)
        try:
            st = self.store_path.stat()
            written = S_ISREG(st.st_mode) and st.st_size > 0
        except OSError:
            written = False  # the screen opens it, and says what is wrong
        self._first_page = FirstPage(self.store_path) if written else None

    def on_mount(self) -> None:
        # Pushed rather than returned by get_default_screen, which skips the screen's CSS.
        first, self._first_page = self._first_page, None
        self.push_screen(RunsScreen(self.store_path, notice=self.notice, first_page=first))

    def on_runs_page_shown(self, message: RunsPageShown) -> None:
        start_heap.settle()  # the start is over: its heap leaves the collector's walks

    def on_unmount(self) -> None:
        start_heap.release()

    # -- failures --------------------------------------------------------------------

    def on_worker_failed(self, message: WorkerFailed) -> None:
        """The one place a failure in any worker becomes the error modal."""
        from replay_tui.tui.screens.modals import ErrorModal

        self.push_screen(ErrorModal(message.error, context=_what_failed(message.group)))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        forward_failure(self, event)  # the app's own workers, if any

    # -- navigation ------------------------------------------------------------------

    def on_open_run(self, message: OpenRun) -> None:
        from replay_tui.tui.screens.run_detail import RunDetailScreen

        self.push_screen(RunDetailScreen(self.store_path, message.run_id))

    def on_open_replay(self, message: OpenReplay) -> None:
        from replay_tui.tui.screens.replay import ReplayScreen

        self.push_screen(
            ReplayScreen(self.store_path, message.run_id, self.replay_options_factory())
        )

    def on_open_comparison(self, message: OpenComparison) -> None:
        from replay_tui.tui.screens.comparison import ComparisonScreen

        if self._asking_to_quit():
            # Pushed over the question, it would hide it (and its y would copy a run id):
            # the comparison waits for the answer.
            self._held_comparison = message
            return
        self.push_screen(
            ComparisonScreen(
                self.store_path,
                comparison_id=message.comparison_id,
                a_run=message.a_run,
                b_run=message.b_run,
            )
        )

    def on_open_bisect(self, message: OpenBisect) -> None:
        from replay_tui.tui.screens.bisect import BisectScreen

        b = message.bisect
        self.push_screen(BisectScreen(self.store_path, b.good, b.bad, stored=b))

    def on_pick_and_compare(self, message: PickAndCompare) -> None:
        from replay_tui.tui.screens.comparison import ComparisonScreen
        from replay_tui.tui.screens.picker import PickRunScreen

        run_id = message.run_id

        def picked(other: str | None) -> None:
            if other:
                # A is the run the compare started from (the picker's title says so)
                self.push_screen(
                    ComparisonScreen(self.store_path, a_run=run_id, b_run=other, ordered=True)
                )

        self.push_screen(PickRunScreen(self.store_path, exclude=run_id), picked)

    # -- quitting --------------------------------------------------------------------

    def running_replays(self) -> list[ReplayScreen]:
        if "replay_tui.tui.screens.replay" not in sys.modules:
            return []  # never opened: nothing can be running
        from replay_tui.tui.screens.replay import ReplayScreen

        return [s for s in self.screen_stack if isinstance(s, ReplayScreen) and s.replay_running]

    def running_drills(self) -> list[DrillScreen]:
        if "replay_tui.tui.screens.drill" not in sys.modules:
            return []  # never opened: nothing can be running
        from replay_tui.tui.screens.drill import DrillScreen

        return [s for s in self.screen_stack if isinstance(s, DrillScreen) and s.drill_running]

    def _asking_to_quit(self) -> bool:
        from replay_tui.tui.screens.modals import ConfirmModal

        return any(isinstance(s, ConfirmModal) and s.purpose == "quit" for s in self.screen_stack)

    async def action_quit(self) -> None:
        """Quit; with a replay or a drill running, ask first, then cancel it and wait until
        it has recorded itself as cancelled (never as a failed reproduction)."""
        drills = self.running_drills()
        running: list[Stoppable] = [*self.running_replays(), *drills]
        if not running:
            self.exit()
            return
        from replay_tui.tui.screens.modals import ConfirmModal

        if isinstance(self.screen, ConfirmModal):
            self.screen.dismiss(True)  # quit pressed again on the question: yes
            return

        def answer(yes: bool | None) -> None:
            held, self._held_comparison = self._held_comparison, None
            if yes:
                # what ended while the question was up has nothing left to cancel
                for screen in running:
                    screen.action_cancel()
                self.run_worker(self._exit_when_stopped(running), group="quit")
            elif held is not None:
                self.on_open_comparison(held)  # a replay ended meanwhile: show it now

        n, d = len(running), len(drills)
        what = " and ".join(
            f"{k} {word}{'s' if k > 1 else ''}"
            for k, word in ((n - d, "replay"), (d, "drill"))
            if k
        )
        self.push_screen(
            ConfirmModal(
                f"{what} {'are' if n > 1 else 'is'} running. Quit and cancel"
                f" {'them' if n > 1 else 'it'}? A cancelled replay is recorded as cancelled;"
                " it does not change the run's verdict.",
                yes="Quit",
                no="Keep running",
                purpose="quit",
            ),
            answer,
        )

    async def _exit_when_stopped(self, screens: list[Stoppable]) -> None:
        self.notify("cancelling before quitting…", timeout=30)
        for screen in screens:
            await screen.wait_stopped()
        self.exit()

    def screenshot_dir(self) -> Path:
        """Where the palette's Screenshot saves: $REPLAY_TUI_SCREENSHOTS, else a
        ``screenshots`` folder beside the store (made when missing, so a save never fails
        for want of a Downloads folder)."""
        import os

        env = os.environ.get("REPLAY_TUI_SCREENSHOTS")
        return Path(env) if env else self.store_path.parent / "screenshots"

    def deliver_screenshot(
        self,
        filename: str | None = None,
        path: str | None = None,
        time_format: str | None = None,
    ) -> str | None:
        if path is None:
            folder = self.screenshot_dir()
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                self.notify(
                    escape_control(f"cannot save a screenshot in {folder}: {e.strerror}"),
                    severity="error",
                    markup=False,
                )
                return None
            path = str(folder)
        return super().deliver_screenshot(filename, path, time_format)

    def export_run(self, run_id: str) -> None:
        """Export a run's evidence bundle into ``bundles/`` beside the store at once (signed
        when $REPLAY_TUI_SIGNING_KEY names a key), in a worker; a notification says what
        ``replay-tui export`` says.  The palette's command asks first
        (:meth:`action_export`)."""
        self.notify(
            f"exporting the evidence bundle of {escape_control(run_id[:13])}…", markup=False
        )
        self.run_worker(
            lambda: self._export(run_id), thread=True, group="export", exit_on_error=False
        )

    def _export(self, run_id: str) -> None:
        from replay_tui.evidence.words import describe_export
        from replay_tui.tui.screens.export import default_key, export_run_bundle, in_form_terms

        key = default_key()
        key_path = Path(key) if key else None
        res = export_run_bundle(self.store_path, run_id, None, key_path)
        lines = [in_form_terms(line) for line in describe_export(res, key_path)]
        self.call_from_thread(self.notify, "\n".join(lines), timeout=15)

    def action_export(self, run_id: str) -> None:
        """The export form: where to, signed with which key; then the CLI's words."""
        from replay_tui.tui.screens.export import ExportBundleScreen

        if not isinstance(self.screen, ExportBundleScreen):
            self.push_screen(ExportBundleScreen(self.store_path, run_id))

    def action_check_store(self) -> None:
        """Check the store's ledger and every stored hash, as `replay-tui verify-store`."""
        from replay_tui.tui.screens.storecheck import StoreCheckScreen

        if not isinstance(self.screen, StoreCheckScreen):
            self.push_screen(StoreCheckScreen(self.store_path))

    def action_copy_run_id(self) -> None:
        """Copy the id of the run the screen is about (the one under the cursor)."""
        run = _run_of(self.screen)
        if not run:
            self.notify("no run selected", severity="warning")
            return
        self.copy_to_clipboard(run)
        self.notify(f"copied run id {escape_control(run)}", markup=False)

    def action_dashboard(self) -> None:
        from replay_tui.tui.screens.dashboard import DashboardScreen

        if not isinstance(self.screen, DashboardScreen):
            self.push_screen(DashboardScreen(self.store_path))

    def action_help(self) -> None:
        from replay_tui.tui.screens.modals import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_verify_bundle(self) -> None:
        """Ask for a bundle folder (and a key) and verify it, as `replay-tui verify`."""
        from replay_tui.tui.screens.verify import VerifyBundleScreen

        if not isinstance(self.screen, VerifyBundleScreen):
            self.push_screen(VerifyBundleScreen(self.store_path))

    def action_drill(self) -> None:
        """The drill form: how many runs, which pick, which backend; then run it."""
        from replay_tui.tui.screens.drill import DrillScreen

        if not isinstance(self.screen, DrillScreen):
            self.push_screen(DrillScreen(self.store_path, self.replay_options_factory()))

    def action_home(self) -> None:
        while len(self.screen_stack) > 2 and not isinstance(self.screen, RunsScreen):
            self.pop_screen()

    def action_search(self) -> None:
        self.action_home()
        home = self.screen
        if isinstance(home, RunsScreen):
            home.action_focus_search()

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Runs", "The runs browser (home)", self.action_home)
        yield SystemCommand("Search runs", "Full-text search over the runs", self.action_search)
        yield SystemCommand(
            "Dashboard",
            "Reproducible run rate, hash match rate, drills, critical gaps",
            self.action_dashboard,
        )
        yield SystemCommand("Key map", "Every key of every screen", self.action_help)
        yield SystemCommand(
            "Verify bundle…",
            "Re-hash an evidence bundle and check its signature against a trusted key",
            self.action_verify_bundle,
        )
        yield SystemCommand(
            "Check store (verify-store)",
            "Walk the ledger and re-hash every stored fact, as `replay-tui verify-store`",
            self.action_check_store,
        )
        yield SystemCommand(
            "Start drill…",
            "Replay a pick of recorded runs, compare each, and store the drill",
            self.action_drill,
        )
        run = _run_of(screen)
        if run:
            yield SystemCommand(
                "Open run",
                f"Manifest, gaps, outputs and replays of {run[:13]}",
                lambda: self.post_message(OpenRun(run)),
            )
            yield SystemCommand(
                "Replay run",
                f"Replay {run[:13]} from its image and commit",
                lambda: self.post_message(OpenReplay(run)),
            )
            yield SystemCommand(
                "Compare run with another",
                f"Pick a run to compare with {run[:13]}",
                lambda: self.post_message(PickAndCompare(run)),
            )
            yield SystemCommand(
                "Export evidence bundle…",
                f"Write {run[:13]}'s evidence bundle: choose the folder and the signing key",
                lambda: self.action_export(run),
            )


def _default_replay_options() -> ReplayOptions:
    from replay_tui.replay.plan import ReplayOptions

    return ReplayOptions()


def _run_of(screen: Screen[object]) -> str | None:
    if isinstance(screen, RunsScreen):
        return screen.table.selected_run
    if isinstance(screen, HasRun):
        return screen.current_run()
    return None


def _what_failed(group: str) -> str:
    groups = {
        "runs-query": "Reading the runs failed",
        "runs-more": "Reading more runs failed",
        "detail": "Opening the run failed",
        "replay": "The replay failed",
        "comparison": "The comparison failed",
        "dashboard": "Reading the dashboard failed",
        "picker": "Reading the runs failed",
        "export": "Exporting the evidence bundle failed",
        "verify": "Verifying the bundle failed",
        "store-check": "Checking the store failed",
        "drill": "The drill failed",
    }
    return groups.get(group, "A background task failed")


def run_app(store_path: Path, *, notice: str | None = None) -> None:
    """Open the TUI on ``store_path`` (``notice``: a line shown above the runs)."""
    ReplayApp(store_path, notice=notice).run()
