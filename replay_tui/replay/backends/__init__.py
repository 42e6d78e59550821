"""Replay backends: where and how a planned replay runs.

A backend is a registered thing, not a branch in the pipeline.  The pipeline
(``replay_tui.replay.runner``) plans, checks out, verifies and places data the same way
for every backend; a backend only says what it pins and prepares the executor that runs
the recorded command (the ``pull`` stage).  Cancelling is the executor's job: it polls
``should_cancel`` and stops what it started (a process group, a container, a Slurm job).

A new backend (a Kubernetes Job, Ray) is one module with a class that satisfies
``replay_tui.replay.context.ReplayBackend``, plus one line in ``_BUILTIN`` (or a call
to :func:`register`).
The registry maps names to ``module:Class`` strings so that listing the names (for the
CLI's ``--backend`` choices, the TUI's options) imports nothing heavy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from replay_tui.errors import BadInput

if TYPE_CHECKING:
    from replay_tui.replay.context import ReplayBackend


_BUILTIN: dict[str, str] = {
    "docker": "replay_tui.replay.backends.docker:DockerBackend",
    "local": "replay_tui.replay.backends.local:LocalBackend",
    "slurm": "replay_tui.replay.backends.slurm:SlurmBackend",
}
_registry: dict[str, str | Callable[[], ReplayBackend]] = dict(_BUILTIN)
DEFAULT_BACKEND = "docker"


def register(name: str, factory: str | Callable[[], ReplayBackend]) -> None:
    """Add a backend: ``factory`` is ``"module:Class"`` or a callable returning one."""
    _registry[name] = factory


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
