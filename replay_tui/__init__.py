"""replay-tui: record, replay and audit ML training runs.

The SDK for training code is importable from here without pulling in the app:
``from replay_tui import seed_everything, deterministic, start_run``.  Nothing heavy is
imported until it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_SDK_NAMES = {
    "seed_everything",
    "deterministic",
    "start_run",
    "current_run",
    "Run",
    "worker_init_fn",
    "dataloader_generator",
    "mixed_precision",
}

if TYPE_CHECKING:
    from replay_tui.sdk import (
        Run,
        current_run,
        dataloader_generator,
        deterministic,
        mixed_precision,
        seed_everything,
        start_run,
        worker_init_fn,
    )

__all__ = [
    "Run",
    "__version__",
    "current_run",
    "dataloader_generator",
    "deterministic",
    "mixed_precision",
    "seed_everything",
    "start_run",
    "worker_init_fn",
]


def __getattr__(name: str) -> Any:
    if name in _SDK_NAMES:
        from replay_tui import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'replay_tui' has no attribute {name!r}")
