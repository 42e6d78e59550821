"""``ops.replay``: the one replay use case under the CLI and the TUI.  Real replays on
the local backend of a run recorded by the real launcher (``record_gated_run``: quick
while its gate file exists, minutes once it is gone, so a cancel lands mid-run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay_tui.ops.judgement import aborted_exit, judgement_of
from replay_tui.ops.replay import replay_and_judge
from replay_tui.replay.plan import ReplayOptions
from replay_tui.replay.runner import ReplayEvent
from replay_tui.tui.queries import ReplaySummary
from storage.store import RunStore
from tests.support.app import cli_env, record_gated_run


@pytest.fixture
def gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, Path]:
    monkeypatch.setenv("PATH", cli_env()["PATH"])  # the recorded ``python``: this one
    return record_gated_run(tmp_path)


def test_a_replay_that_reproduces_is_judged_and_stored(gated: tuple[Path, str, Path]) -> None:
    store, run_id, _ = gated
    with RunStore(store) as s:
        done = replay_and_judge(s, run_id[:12], ReplayOptions(backend="local"))
        assert done.original_id == run_id
        assert (done.judgement, done.not_judged, done.exit_code) == ("REPRODUCED", None, 0)
        assert not done.stopped
        [one] = done.attempts
        assert one.status == "completed" and one.counted and one.verdict == "IDENTICAL"
        assert one.replay_run is not None and done.last_comparison == one.comparison_id
        assert one.comparison_id is not None
        assert s.comparison(one.comparison_id)["verdict"] == "IDENTICAL"
        [fact] = s.replays_of(run_id)
        assert (fact.replay_run, fact.verdict, fact.status) == (
            one.replay_run,
            "IDENTICAL",
            "completed",
        )
        assert s.get_run(run_id).last_verdict == "IDENTICAL"
        # the TUI's replay screen shows this outcome
        summary = ReplaySummary.of(done)
        assert summary.judgement == "REPRODUCED" and not summary.cancelled
        assert summary.last_comparison == one.comparison_id


def test_a_cancelled_replay_is_not_judged_with_exit_130(gated: tuple[Path, str, Path]) -> None:
    store, run_id, gate = gated
    gate.unlink()  # the program now runs for minutes
    stepped: list[str] = []

    def on_event(ev: ReplayEvent) -> None:
        if ev.state == "log" and ev.message.startswith("step "):
            stepped.append(ev.message)

    with RunStore(store) as s:
        done = replay_and_judge(
            s,
            run_id,
            ReplayOptions(backend="local"),
            on_event=on_event,
            should_cancel=lambda: bool(stepped),  # once the run is running
        )
        assert stepped
        assert (done.judgement, done.not_judged, done.exit_code) == ("NOT_JUDGED", "aborted", 130)
        assert done.stopped
        [one] = done.attempts
        assert one.status == "cancelled" and not one.counted and one.exit_code == 130
        [fact] = s.replays_of(run_id)
        assert fact.status == "cancelled"
        assert s.get_run(run_id).last_verdict is None  # never the badge
        summary = ReplaySummary.of(done)
        assert summary.cancelled and summary.judgement == "NOT_JUDGED"
        assert summary.results[0].status == "cancelled"


@pytest.mark.parametrize(
    ("code", "judged"),
    [
        (0, ("REPRODUCED", None)),
        (1, ("NOT_REPRODUCED", None)),
        (4, ("NOT_JUDGED", "no_floor")),
        (130, ("NOT_JUDGED", "aborted")),
        (3, ("NOT_JUDGED", "aborted")),
    ],
)
def test_what_an_exit_code_amounts_to(code: int, judged: tuple[str, str | None]) -> None:
    assert judgement_of(code) == judged


def test_a_stopped_replay_exits_130_one_that_could_not_run_3() -> None:
    assert [aborted_exit(w) for w in ("CANCELLED", "INTERRUPTED")] == [130, 130]
    assert [aborted_exit(w) for w in ("TIMED OUT", "INFRA-ERROR")] == [3, 3]
