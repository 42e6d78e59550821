"""What a bisect is asked to do (``BisectOptions``) and the checks on it: a model the
faces build (the CLI's flags, the TUI's bisect form) before ``ops.bisect`` runs it, so a
face needs none of the engine (``bisect.run``) to say what it wants."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from replay_tui.bisect.factors import FACTORS
from replay_tui.errors import BadInput
from replay_tui.replay.plan import ReplayOptions

DEFAULT_BUDGET = 16


@dataclass(frozen=True)
class BisectOptions:
    replay: ReplayOptions = dataclasses.field(default_factory=ReplayOptions)
    times: int | None = None  # GOOD's replays for the noise floor (None: from its settings)
    factors: tuple[str, ...] | None = None  # only these (default: every differing one)
    budget: int = DEFAULT_BUDGET
    parallel: int = 1  # probes at a time (one-factor probes run ahead concurrently)
    rtol: float | None = None
    atol: float | None = None


def check_factor_names(names: Sequence[str]) -> tuple[str, ...]:
    if not names:
        raise BadInput("--factors names no factor", "choose from: " + ", ".join(FACTORS))
    bad = [n for n in names if n not in FACTORS]
    if bad:
        raise BadInput(
            f"--factors: unknown factor {bad[0]!r}", "choose from: " + ", ".join(FACTORS)
        )
    return tuple(dict.fromkeys(names))
