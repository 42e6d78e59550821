"""``--slurm-*`` flags for the commands that replay (``replay``, ``drill``).

Each flag overrides its ``REPLAY_TUI_SLURM_*`` variable; the command receives them as
``backend_options`` (name/value pairs for ``ReplayOptions.backend_options``).  Given with
another backend they are refused (exit 2) rather than silently ignored.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click

from replay_tui.errors import BadInput

F = TypeVar("F", bound=Callable[..., Any])

FLAGS: tuple[tuple[str, str, type, str], ...] = (
    ("partition", "--slurm-partition", str, "Slurm partition [REPLAY_TUI_SLURM_PARTITION]."),
    ("account", "--slurm-account", str, "Slurm account [REPLAY_TUI_SLURM_ACCOUNT]."),
    ("qos", "--slurm-qos", str, "Slurm QOS [REPLAY_TUI_SLURM_QOS]."),
    (
        "time_limit",
        "--slurm-time",
        str,
        "Job time limit in Slurm's form, e.g. 30 or 2:00:00 [REPLAY_TUI_SLURM_TIME].",
    ),
    (
        "sbatch_args",
        "--slurm-sbatch-args",
        str,
        "Extra sbatch arguments, one shell-quoted string [REPLAY_TUI_SLURM_SBATCH_ARGS].",
    ),
    (
        "max_in_flight",
        "--slurm-max-in-flight",
        int,
        "Jobs of this command queued or running at once; 0: no limit"
        " [REPLAY_TUI_SLURM_MAX_IN_FLIGHT].",
    ),
    (
        "spool",
        "--slurm-spool",
        str,
        "Folder the compute nodes share with this host for job files, checkouts and outputs"
        " (default: slurm-spool beside the store) [REPLAY_TUI_SLURM_SPOOL].",
    ),
)


def slurm_flags(fn: F) -> F:
    """Add the ``--slurm-*`` flags; the command gets them as ``backend_options``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        pairs = []
        for name, _flag, _type, _help in FLAGS:
            value = kwargs.pop(f"slurm_{name}", None)
            if value is not None:
                pairs.append((name, str(value)))
        return fn(*args, backend_options=tuple(pairs), **kwargs)

    decorated: Any = wrapper
    for name, flag, kind, text in reversed(FLAGS):
        decorated = click.option(flag, f"slurm_{name}", type=kind, default=None, help=text)(
            decorated
        )
    return decorated  # type: ignore[no-any-return]


def check_backend(backend: str, backend_options: tuple[tuple[str, str], ...]) -> None:
    """Refuse ``--slurm-*`` flags with a backend other than slurm, and bad values (flags
    or ``REPLAY_TUI_SLURM_*``) before anything is stored."""
    if backend_options and backend != "slurm":
        flag = next(f for n, f, _t, _h in FLAGS if n == backend_options[0][0])
        raise BadInput(f"{flag} applies to --backend slurm only (got --backend {backend})")
    if backend == "slurm":
        from replay_tui.replay.backends.slurm import slurm_options
        from replay_tui.replay.plan import ReplayOptions

        slurm_options(ReplayOptions(backend=backend, backend_options=backend_options))
