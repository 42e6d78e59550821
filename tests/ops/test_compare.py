"""``ops.compare``: the one compare use case under the CLI and the TUI, over the fixed
store's real SQLite file and its real safetensors checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay_tui.ops.compare import compare_runs
from replay_tui.tui.queries import load_comparison
from storage.store import RunStore
from tests.helpers.replays import add_attempt
from tests.helpers.tui import settled_app
from tests.support.app import (
    ORIGINAL_ID,
    REPLAY_ID,
    SAME_ORIGINAL_ID,
    SAME_REPLAY_ID,
    FixedStore,
    build_fixed_store,
    comparison_shown,
    settle,
    sync,
    wait_until,
)


@pytest.fixture
def fixed(tmp_path: Path) -> FixedStore:
    return build_fixed_store(tmp_path / "fixed")


def _abort_replay(store: RunStore, status: str) -> None:
    """A later attempt of ORIGINAL that made REPLAY_ID and did not complete."""
    add_attempt(
        store,
        ORIGINAL_ID,
        status,
        replay_run=REPLAY_ID,
        backend="local",
        reason=f"{status} before the replay finished",
        duration_s=3.0,
        body={"reason": status},
        sets_verdict=False,
    )


def test_a_replay_compared_with_its_original_is_stored_and_sets_the_replays_badge(
    fixed: FixedStore,
) -> None:
    with RunStore(fixed.path) as s:
        before = len(s.facts("comparisons"))
        done = compare_runs(s, ORIGINAL_ID, REPLAY_ID)
        assert (done.a.run_id, done.b.run_id) == (ORIGINAL_ID, REPLAY_ID)
        assert done.verdict == done.comparison.verdict == "DIVERGED"
        assert (done.judgement, done.exit_code, done.aborted) == ("NOT_REPRODUCED", 1, None)
        assert done.comparison_id is not None and done.badge_run == REPLAY_ID
        assert len(s.facts("comparisons")) == before + 1
        assert s.comparison(done.comparison_id) == done.comparison.to_dict()
        assert s.latest_comparison(ORIGINAL_ID, REPLAY_ID) == done.comparison.to_dict()
        assert s.get_run(REPLAY_ID).last_verdict == "DIVERGED"


def test_a_reproduced_pair_exits_0(fixed: FixedStore) -> None:
    with RunStore(fixed.path) as s:
        done = compare_runs(s, SAME_ORIGINAL_ID[:14], SAME_REPLAY_ID[:14])  # prefixes
        assert (done.verdict, done.judgement, done.exit_code) == ("IDENTICAL", "REPRODUCED", 0)
        assert s.get_run(SAME_REPLAY_ID).last_verdict == "IDENTICAL"


def test_the_order_is_the_callers_or_the_reference_first(fixed: FixedStore) -> None:
    with RunStore(fixed.path) as s:
        badge = s.get_run(ORIGINAL_ID).last_verdict
        given = compare_runs(s, REPLAY_ID, ORIGINAL_ID)
        assert (given.a.run_id, given.b.run_id) == (REPLAY_ID, ORIGINAL_ID)
        # the original is no replay of its replay: no badge takes this verdict
        assert given.badge_run is None and s.get_run(ORIGINAL_ID).last_verdict == badge
        first = compare_runs(s, REPLAY_ID, ORIGINAL_ID, order="reference_first")
        assert (first.a.run_id, first.b.run_id) == (ORIGINAL_ID, REPLAY_ID)
        assert first.badge_run == REPLAY_ID
        assert s.comparison(first.comparison_id or 0)["a_run"] == ORIGINAL_ID


def test_keep_false_stores_nothing(fixed: FixedStore) -> None:
    with RunStore(fixed.path) as s:
        before = s.facts("comparisons")
        badge = s.get_run(REPLAY_ID).last_verdict
        done = compare_runs(s, SAME_ORIGINAL_ID, REPLAY_ID, keep=False)
        assert done.comparison_id is None and done.badge_run is None
        assert s.facts("comparisons") == before
        assert s.get_run(REPLAY_ID).last_verdict == badge


@pytest.mark.parametrize(
    ("status", "ended", "code"),
    [
        ("cancelled", "CANCELLED", 130),
        ("interrupted", "INTERRUPTED", 130),
        ("timed_out", "TIMED OUT", 3),
        ("infra-error", "INFRA-ERROR", 3),
    ],
)
def test_a_replay_that_did_not_complete_is_not_judged(
    fixed: FixedStore, status: str, ended: str, code: int
) -> None:
    with RunStore(fixed.path) as s:
        _abort_replay(s, status)
        done = compare_runs(s, ORIGINAL_ID, REPLAY_ID)
        assert done.verdict == "DIVERGED"  # what its partial outputs compared
        assert (done.judgement, done.exit_code) == ("NOT_JUDGED", code)
        assert done.aborted is not None
        assert (done.aborted.run_id, done.aborted.ended) == (REPLAY_ID, ended)
        assert done.aborted.exit_code == code
        # A is looked at too: the aborted replay on either side
        other = compare_runs(s, REPLAY_ID, SAME_ORIGINAL_ID, keep=False)
        assert other.aborted is not None and other.aborted.run_id == REPLAY_ID
        assert (other.judgement, other.exit_code) == ("NOT_JUDGED", code)


def test_the_tuis_comparison_says_an_aborted_replay_is_not_judged(fixed: FixedStore) -> None:
    """The TUI's comparison (computed now, or read back) carries the same rule."""
    with RunStore(fixed.path) as s:
        _abort_replay(s, "cancelled")
        computed = load_comparison(s, a_run=REPLAY_ID, b_run=ORIGINAL_ID, recompute=True)
        assert computed.computed and computed.comparison_id is not None
        assert (computed.a.run_id, computed.b.run_id) == (ORIGINAL_ID, REPLAY_ID)
        assert computed.not_judged is not None and computed.not_judged.exit_code == 130
        stored = load_comparison(s, comparison_id=fixed.diverged_comparison)
        assert not stored.computed
        assert stored.not_judged is not None and stored.not_judged.ended == "CANCELLED"
        clean = load_comparison(s, comparison_id=fixed.identical_comparison)
        assert clean.not_judged is None


@sync
async def test_the_comparison_screen_says_not_judged_for_an_aborted_replay(
    fixed: FixedStore,
) -> None:
    from replay_tui.tui.messages import OpenComparison
    from replay_tui.tui.screens.comparison import ComparisonScreen

    with RunStore(fixed.path) as s:
        _abort_replay(s, "interrupted")
    async with settled_app(fixed.path, (160, 40)) as (app, pilot):
        app.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        cmp = await comparison_shown(pilot)
        await settle(pilot)
        shown = str(cmp.query_one("#verdict").render())
        assert "NOT JUDGED" in shown and "(INTERRUPTED)" in shown
        app.post_message(OpenComparison(comparison_id=fixed.identical_comparison))

        def shown_identical() -> bool:
            screen = app.screen
            return (
                isinstance(screen, ComparisonScreen)
                and screen.view is not None
                and screen.view.comparison_id == fixed.identical_comparison
            )

        await wait_until(pilot, shown_identical)
        await settle(pilot)
        assert "NOT JUDGED" not in str(app.screen.query_one("#verdict").render())
