"""Replay attempts written straight into a store, for the tests that need a run's history
of replays without running one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from replay_tui.replay.runner import compare_and_store
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


def add_compared_replay(store: RunStore, original_run: str, replay_run: str) -> tuple[str, int]:
    """Compares the stored ``replay_run`` with ``original_run`` for real
    (``compare_and_store``) and records a succeeded docker attempt of twelve seconds that
    links them; returns the comparison's verdict and id."""
    a, b = store.manifest(original_run), store.manifest(replay_run)
    verdict, _, cid = compare_and_store(store, a, b)
    add_attempt(
        store,
        a.run_id,
        "succeeded",
        replay_run=b.run_id,
        verdict=verdict,
        duration_s=12.0,
        comparison_id=cid,
        body={"replay": {"determinism": "recorded"}, "verdict": verdict},
    )
    return verdict, cid
