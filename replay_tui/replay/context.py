"""What the replay stages share: events, the context object, and the backend protocol.

The pipeline (``replay_tui.replay.runner``) runs one function per stage over a
:class:`ReplayContext`; a backend (``replay_tui.replay.backends``) is anything that
satisfies :class:`ReplayBackend`.  This module sits below both, so neither imports the
other's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from replay_tui.capture.executor import ExecResult, Executor
from replay_tui.capture.metrics import MetricSeries
from replay_tui.capture.outputs import EarlyOutputs
from replay_tui.capture.probes import PythonEnv
from replay_tui.capture.stale import Before
from replay_tui.replay.checkout import Worktree
from replay_tui.replay.debris import Claim
from replay_tui.replay.plan import ReplayOptions, ReplayPlan
from storage.manifest import RunManifest
from storage.store import RunStore

if TYPE_CHECKING:
    from replay_tui.replay.backends.options import BackendOption, OptionValues


@dataclass(frozen=True)
class ReplayEvent:
    stage: str
    state: str  # start / done / failed / log / note
    message: str = ""


OnEvent = Callable[[ReplayEvent], None]


@dataclass
class Prepared:
    """What the ``pull`` stage hands to the ``run`` stage."""

    executor: Executor
    message: str  # the pull stage's "done" line
    image: dict[str, Any] | None = None  # what the replay manifest records of the image
    notes: list[str] = field(default_factory=list)


class ReplayBackend(Protocol):
    name: str
    summary: str  # a few words for the TUI's choice list
    pins_environment: bool  # the recorded image (by digest) is what runs
    needs_image: bool  # a plan without an image digest is refused
    mounts_data: bool  # data is bind-mounted over the checkout (else linked into it)
    options: tuple[BackendOption, ...]  # its own settings: CLI flags, TUI fields

    def check_options(self, options: OptionValues) -> None:
        """BadInput naming the flag or variable when a value of its options is bad."""
        ...

    def image_problem(self, ref: str, client: Any = None) -> str | None:
        """Why the image ``ref`` cannot be run now (a sentence), or None."""
        ...

    def scratch_base(self, store: RunStore, options: ReplayOptions) -> Path | None:
        """Where the worktree and temporary folders go (None: the system temp dir).

        A backend whose runs happen on another machine puts them on a shared filesystem.
        """
        ...

    def prepare(self, ctx: ReplayContext) -> Prepared:
        """The ``pull`` stage: make the executor for ``ctx.plan`` (pull the image...)."""
        ...

    def python_env(self, ctx: ReplayContext) -> PythonEnv:
        """What the replay manifest records of the interpreter that ran."""
        ...


@dataclass
class ReplayContext:
    """What the stages share: the plan, the backend, and what each stage left behind."""

    store: RunStore
    plan: ReplayPlan
    backend: ReplayBackend
    tmp: Path
    repo_location: Path | None
    on_event: OnEvent
    should_cancel: Callable[[], bool]
    docker_client: Any
    t0: float
    persist: bool = True
    claim: Claim | None = None  # the scratch folder's owner file
    worktree: Worktree | None = None
    diff: bytes | None = None
    verified_data: list[dict[str, Any]] = field(default_factory=list)
    forced_data: bool = False
    placed_data: set[str] = field(default_factory=set)  # data paths placed in the checkout
    cwd: Path | None = None
    stale_before: Before | None = None  # the output folders before the run
    early: EarlyOutputs | None = None  # outputs read as soon as the run closed them
    prepared: Prepared | None = None
    result: ExecResult | None = None
    series: MetricSeries = field(default_factory=MetricSeries)
    handoff: Path | None = None
    log_path: Path | None = None
    replay: RunManifest | None = None
    replay_info: dict[str, Any] = field(default_factory=dict)

    def emit(self, stage: str, state: str, message: str = "") -> None:
        self.on_event(ReplayEvent(stage, state, message))
