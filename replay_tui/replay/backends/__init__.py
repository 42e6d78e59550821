"""Replay backends: where and how a planned replay runs.

A backend is a registered thing, not a branch in the pipeline.  The pipeline
(``replay_tui.replay.runner``) plans, checks out, verifies and places data the same way
for every backend; a backend only says what it pins and prepares the executor that runs
the recorded command (the ``pull`` stage).  Cancelling is the executor's job: it polls
``should_cancel`` and stops what it started (a process group, a container, a Slurm job).

Each backend is a folder: ``backend.py`` holds the class, its other modules what it
runs with (``docker/engine.py``: the sandboxed container; ``slurm/engine.py``: the batch
job; ``podman/runtime.py``, ``apptainer/runtime.py``: those runtimes behind the seam of
``runtime.py``, what a replay asks of any container runtime).  A backend declares its
own settings (:class:`BackendOption`): the command line makes a flag of each, the TUI a
field, and :meth:`Backend.check_options` validates what was given.  A new backend (a
Kubernetes Job, Ray) is one folder with a class that satisfies
``replay_tui.replay.context.ReplayBackend`` (start from :class:`Backend`), plus one line
in ``_BUILTIN`` (or a call to :func:`register`).

The registry maps names to ``module:Class`` strings, and a backend's ``backend.py``
imports what it runs with only when it runs, so listing the names and reading the
options (the CLI's ``--backend`` choices and flags, the TUI's form) import nothing heavy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.errors import BadInput
from replay_tui.replay.backends.options import BackendOption, OptionValues

if TYPE_CHECKING:
    from replay_tui.replay.context import ReplayBackend
    from replay_tui.replay.plan import ReplayOptions
    from storage.store import RunStore

__all__ = ["Backend", "BackendOption", "OptionValues"]


_BUILTIN: dict[str, str] = {
    "docker": "replay_tui.replay.backends.docker.backend:DockerBackend",
    "local": "replay_tui.replay.backends.local.backend:LocalBackend",
    "slurm": "replay_tui.replay.backends.slurm.backend:SlurmBackend",
    "podman": "replay_tui.replay.backends.podman.backend:PodmanBackend",
    "apptainer": "replay_tui.replay.backends.apptainer.backend:ApptainerBackend",
}
_registry: dict[str, str | Callable[[], ReplayBackend]] = dict(_BUILTIN)
DEFAULT_BACKEND = "docker"


class Backend:
    """What a backend has unless it says otherwise: nothing pinned (it runs in whatever
    environment it finds, data linked into the checkout), no options of its own, nothing
    to check before a replay starts, its scratch folders in the system temp dir.  A
    backend class starts from this one."""

    name: str = ""
    summary: str = ""
    pins_environment: bool = False
    """The recorded image (by digest) is what runs."""
    needs_image: bool = False
    """A plan without an image digest is refused."""
    mounts_data: bool = False
    """Data is bind-mounted over the checkout (else linked into it)."""
    writes_on_this_host: bool = True
    """The run writes its outputs on this machine, where this host's inotify sees them
    closed (``capture.outputs.EarlyOutputs``); a scheduler's node does not."""
    options: tuple[BackendOption, ...] = ()
    """The settings this backend takes (its flags, its form fields)."""

    def check_options(self, options: OptionValues) -> None:
        """BadInput naming the flag (or variable) when a given value (or one read from
        the environment) is bad; nothing otherwise.  This one refuses names it does not
        declare; a backend with options of its own validates their values too."""
        known = {o.name for o in self.options}
        for name, _value in options:
            if name not in known:
                raise BadInput(f"the {self.name} backend has no option {name!r}")

    def image_problem(self, ref: str, client: Any = None) -> str | None:
        """Why the image ``ref`` cannot be run by this backend now (a sentence), or None.
        A backend that cannot tell from here (its runs pull on other machines) says None."""
        return None

    def scratch_base(self, store: RunStore, options: ReplayOptions) -> Path | None:
        """Where the worktree and temporary folders go: None, the system temp dir."""
        return None


def register(name: str, factory: str | Callable[[], ReplayBackend]) -> None:
    """Add a backend: ``factory`` is ``"module:Class"`` or a callable returning one."""
    _registry[name] = factory


def unregister(name: str) -> None:
    """Remove a backend :func:`register` added (a test's); a built-in one comes back."""
    _registry.pop(name, None)
    if name in _BUILTIN:
        _registry[name] = _BUILTIN[name]


def backend_names() -> tuple[str, ...]:
    """Every registered backend name whose module exists, in registration order."""
    return tuple(n for n, f in _registry.items() if not isinstance(f, str) or _module_exists(f))


def _module_exists(spec: str) -> bool:
    import importlib.util

    module = spec.partition(":")[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def get_backend(name: str) -> ReplayBackend:
    """The backend called ``name``, or BadInput listing the ones there are."""
    factory = _registry.get(name)
    if factory is None or name not in backend_names():
        raise BadInput(
            f"unknown replay backend {name!r}",
            "choose one of: " + ", ".join(backend_names()),
        )
    if isinstance(factory, str):
        module, _, cls = factory.partition(":")
        backend: ReplayBackend = getattr(importlib.import_module(module), cls)()
        return backend
    return factory()


def backend_choices() -> list[tuple[str, str]]:
    """(label, name) of every backend, for a choice list."""
    return [(f"{n} ({get_backend(n).summary})", n) for n in backend_names()]


def declared_options() -> dict[str, tuple[BackendOption, ...]]:
    """Each registered backend's options, by backend name (for flags and forms)."""
    return {n: tuple(get_backend(n).options) for n in backend_names()}
