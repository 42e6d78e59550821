"""Replay attempts written straight into a store, for the tests that need a run's history
of replays without running one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storage.store import RunStore


def add_attempt(
    store: RunStore,
    original_run: str,
    status: str,
    *,
    body: Mapping[str, Any],
    replay_run: str | None = None,
    backend: str = "docker",
    verdict: str | None = None,
    reason: str | None = None,
    duration_s: float | None = 1.0,
    comparison_id: int | None = None,
    sets_verdict: bool | None = None,
) -> int:
    """``store.add_replay`` of one attempt of ``original_run`` that ended ``status``: by
    default a docker attempt of a second, without a replay run, verdict, reason or
    comparison, whose badge rule is the store's own (``sets_verdict`` None)."""
    return store.add_replay(
        original_run,
        replay_run=replay_run,
        backend=backend,
        status=status,
        verdict=verdict,
        reason=reason,
        duration_s=duration_s,
        comparison_id=comparison_id,
        body=body,
        sets_verdict=sets_verdict,
    )
