"""SLIs from the store, checked against a small store whose answers are worked out by hand."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from replay_tui.evidence.stats import compute_stats, write_prometheus
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import RunCli
from tests.helpers.replays import add_attempt

SHA = {k: k * 64 for k in "abcdef9"}  # fake but well-formed sha256 values


def _manifest(
    run_id: str,
    *,
    duration: float,
    metrics: dict[str, float] | None = None,
    checkpoints: dict[str, str] | None = None,
    data: list[tuple[str, str | None]] | None = None,
    ops: list[str] | None = None,
    status: str = "succeeded",
    replay_of: str | None = None,
    forced_data: bool = False,
    determinism: str = "recorded",
) -> dict[str, Any]:
    m: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id,
        "status": status,
        "started_at": "2026-01-01T00:00:00.000Z",
        "duration_s": float(duration),
        "argv": ["python", "train.py"],
        "data": [{"name": n, "path": f"data/{n}", "sha256": s} for n, s in data or []],
        "determinism": {"nondeterministic_ops": ops or []},
        "outputs": {
            "artifacts": [
                {"path": p, "sha256": s, "kind": "checkpoint"}
                for p, s in (checkpoints or {}).items()
            ]
            + [{"path": "train.log", "sha256": SHA["f"], "kind": "log"}],
            "metrics": metrics or {},
        },
    }
    if replay_of:
        m.update(
            kind="replay",
            replay_of=replay_of,
            replay={
                "backend": "local",
                "environment_pinned": False,
                "forced_data": forced_data,
                "determinism": determinism,
            },
        )
    return m


@pytest.fixture
def hand_store(store_path: Path) -> Path:
    """Four original runs (A, B, C, D), five replay facts, bundles and drills."""
    a = _manifest(
        "run-A-0001",
        duration=100,
        metrics={"loss": 1.0, "acc": 0.5, "throughput_samples_s": 900.0},
        checkpoints={"a.pt": SHA["a"], "b.pt": SHA["b"]},
        data=[("d1", SHA["d"]), ("d2", None)],
        ops=["aten::index_put_", "aten::scatter_add_"],
    )
    a1 = _manifest(
        "run-A1-rep1",
        duration=110,
        metrics={"loss": 1.0, "acc": 0.5, "throughput_samples_s": 1000.0},
        checkpoints={"a.pt": SHA["a"], "b.pt": SHA["9"]},
        replay_of="run-A-0001",
    )
    a2 = _manifest(
        "run-A2-rep2",
        duration=90,
        metrics={"loss": 1.5, "acc": 0.5},
        checkpoints={"a.pt": SHA["a"], "b.pt": SHA["b"]},
        replay_of="run-A-0001",
        forced_data=True,
    )
    a3 = _manifest(  # determinism switched off: an experiment, never counted
        "run-A3-off",
        duration=50,
        metrics={"loss": 9.0, "acc": 0.1},
        checkpoints={"a.pt": SHA["9"], "b.pt": SHA["9"]},
        replay_of="run-A-0001",
        determinism="off",
    )
    b = _manifest(
        "run-B-0001",
        duration=200,
        metrics={"loss": 2.0},
        checkpoints={"c.pt": SHA["c"]},
        ops=["aten::index_put_"],
    )
    b1 = _manifest(
        "run-B1-rep1",
        duration=220,
        metrics={"loss": 2.0},
        checkpoints={"c.pt": SHA["c"]},
        replay_of="run-B-0001",
    )
    c = _manifest("run-C-0001", duration=50, data=[("d3", SHA["e"])])
    d = _manifest("run-D-0001", duration=10, status="failed", ops=["aten::put_"])
    with RunStore(store_path) as s:
        s.ingest_many([(manifest_from_data(m), None, (), {}) for m in (a, a1, a2, a3, b, b1, c, d)])

        def replay(orig: str, rep: str | None, verdict: str | None, det: str = "recorded") -> None:
            add_attempt(
                s,
                orig,
                "succeeded" if rep else "error",
                replay_run=rep,
                backend="local",
                verdict=verdict,
                reason=None if rep else "no Docker engine",
                duration_s=None,
                body={"replay": {"determinism": det}} if rep else {"reason": "no Docker engine"},
            )

        replay("run-A-0001", "run-A1-rep1", "EQUIVALENT")
        replay("run-A-0001", "run-A2-rep2", "DIVERGED")
        replay("run-A-0001", "run-A3-off", "DIVERGED", det="off")
        replay("run-A-0001", None, None)  # a failed attempt after the last verdict
        replay("run-B-0001", "run-B1-rep1", "IDENTICAL")
        s.add_bundle("run-A-0001", "/b/a1", True, SHA["a"], {})
        s.add_bundle("run-A-0001", "/b/a2", True, SHA["a"], {})
        s.add_bundle("run-B-0001", "/b/b", False, None, {})
        for passed in (True, False, True):
            s.add_drill(passed, {"runs": []})
    return store_path


def expected(store: Path) -> dict[str, Any]:
    """Every figure, worked out by hand from the fixture above."""
    with RunStore(store) as s:
        last_drill = s.facts("drills")[-1]["created_at"]
    loss_a = [1.0, 1.0, 1.5]  # A, A1, A2 (A3 is determinism-off, left out)
    mean = sum(loss_a) / 3  # 7/6
    var_loss_a = sum((v - mean) ** 2 for v in loss_a) / 3  # = 1/18
    assert math.isclose(var_loss_a, 1 / 18)
    # groups: (A, loss) 1/18, (A, acc) 0, (B, loss) 0; throughput is a timing metric
    time_a = 200 / 3  # [100, 110, 90]: mean 100, deviations 0, 10, -10
    time_b = 100.0  # [200, 220]: mean 210, deviations -10, 10
    return {
        "original_runs": 4,
        "replays": 4,  # A1, A2, the failed attempt, B1 (A3 off)
        "reproducible_run_rate": {"value": 0.5, "numerator": 1, "denominator": 2},
        "aborted_replay_rate": {  # the attempt that hit "no Docker engine"
            "value": 0.25,
            "numerator": 1,
            "denominator": 4,
            "by_status": {"cancelled": 0, "interrupted": 0, "timed_out": 0, "infra-error": 1},
        },
        # A1: a.pt yes, b.pt no; A2: a.pt yes, b.pt yes; B1: c.pt yes
        "checkpoint_hash_match_rate": {"value": 0.8, "numerator": 4, "denominator": 5},
        "metric_variance": {"groups": 3, "max": 1 / 18, "mean": 1 / 54},
        "data_verification_rate": {"value": 0.5, "numerator": 1, "denominator": 2},
        "data_hashed_rate": {"value": 2 / 3, "numerator": 2, "denominator": 3},
        "nondeterministic_ops": {
            "total": 4,
            "runs": 3,
            "distinct": ["aten::index_put_", "aten::put_", "aten::scatter_add_"],
        },
        "training_time_variance_s2": {"groups": 2, "max": 100.0, "mean": (time_a + time_b) / 2},
        "training_time_cv_max": math.sqrt(time_a) / 100,
        "attested_run_rate": {"value": 0.25, "numerator": 1, "denominator": 4},
        "drill_pass_rate": {"value": 2 / 3, "numerator": 2, "denominator": 3},
        "last_drill_at": last_drill,
    }


def _close(actual: Any, want: Any, where: str = "") -> None:
    if isinstance(want, float):
        assert isinstance(actual, int | float) and math.isclose(actual, want), (where, actual)
    elif isinstance(want, dict):
        for k, v in want.items():
            _close(actual[k], v, f"{where}.{k}")
    else:
        assert actual == want, (where, actual, want)


def test_stats_match_the_hand_computed_answers(hand_store: Path) -> None:
    with RunStore(hand_store) as s:
        got = compute_stats(s).to_dict()
    _close(got, expected(hand_store))
    assert got["metric_variance"]["worst"][0] == {
        "run_id": "run-A-0001",
        "metric": "loss",
        "variance": pytest.approx(1 / 18),
    }


def test_stats_cli_json_and_text(cli: RunCli, hand_store: Path) -> None:
    r = cli("stats", "--json", store=hand_store)
    assert r.returncode == 0, r.stderr
    _close(json.loads(r.stdout), expected(hand_store))
    text = cli("stats", store=hand_store)
    assert text.returncode == 0
    assert "reproducible run rate       50.0%  (1 of 2 runs with a completed replay)" in text.stdout
    assert "aborted replay rate         25.0%  (1 of 4 replays tried), 1 infra-error" in text.stdout
    assert "attested (signed) run rate  25.0%  (1 of 4 original runs)" in text.stdout
    assert "drill pass rate             66.7%  (2 of 3 drills)" in text.stdout


def _parse(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(path.read_text()):
        assert fam.type == "gauge" and fam.documentation
        for sample in fam.samples:
            out[sample.name] = sample.value
    return out


def test_prometheus_file_parses_and_carries_the_figures(cli: RunCli, hand_store: Path) -> None:
    prom = hand_store.parent / "textfile" / "replay_tui.prom"
    r = cli("stats", "--prometheus", prom, store=hand_store)
    assert r.returncode == 2 and "does not exist" in r.stderr  # a typo'd folder: not made
    assert not prom.parent.exists()
    prom.parent.mkdir()  # the node exporter's textfile folder
    r = cli("stats", "--prometheus", prom, store=hand_store)
    assert r.returncode == 0, r.stderr
    got = _parse(prom)
    want = {
        "replay_tui_original_runs": 4,
        "replay_tui_replays": 4,
        "replay_tui_reproducible_run_ratio": 0.5,
        "replay_tui_bit_identical_run_ratio": 0.5,  # run B IDENTICAL; run A DIVERGED
        "replay_tui_replayed_runs": 2,
        "replay_tui_aborted_replay_ratio": 0.25,
        "replay_tui_aborted_replays": 1,
        "replay_tui_checkpoint_hash_match_ratio": 0.8,
        "replay_tui_checkpoints_compared": 5,
        "replay_tui_metric_variance_max": 1 / 18,
        "replay_tui_metric_variance_mean": 1 / 54,
        "replay_tui_data_verification_ratio": 0.5,
        "replay_tui_data_hashed_ratio": 2 / 3,
        "replay_tui_nondeterministic_ops": 4,
        "replay_tui_runs_with_nondeterministic_ops": 3,
        "replay_tui_training_time_variance_max_seconds2": 100,
        "replay_tui_training_time_variance_mean_seconds2": (200 / 3 + 100) / 2,
        "replay_tui_training_time_cv_max": math.sqrt(200 / 3) / 100,
        "replay_tui_attested_run_ratio": 0.25,
        "replay_tui_drill_pass_ratio": 2 / 3,
        "replay_tui_drills": 3,
    }
    for name, value in want.items():
        assert math.isclose(got[name], value), (name, got[name], value)
    assert got["replay_tui_last_drill_timestamp_seconds"] > 1.7e9
    assert set(got) == {*want, "replay_tui_last_drill_timestamp_seconds"}


def test_prometheus_write_is_atomic_replace(hand_store: Path, tmp_path: Path) -> None:
    prom = tmp_path / "textfile" / "replay_tui.prom"
    prom.parent.mkdir()
    with RunStore(hand_store) as s:
        stats = compute_stats(s)
    write_prometheus(stats, prom)
    before = os.stat(prom).st_ino
    with prom.open() as reader:  # a collector mid-read keeps the complete old file
        write_prometheus(stats, prom)
        assert "replay_tui_drills 3.0" in reader.read()
    assert os.stat(prom).st_ino != before  # replaced by rename, never rewritten in place
    assert [p.name for p in prom.parent.iterdir()] == ["replay_tui.prom"]  # no temp file left


def test_empty_store_gives_no_rates_and_nan_gauges(store_path: Path, tmp_path: Path) -> None:
    with RunStore(store_path) as s:
        st = compute_stats(s)
    d = st.to_dict()
    assert d["original_runs"] == 0 and d["reproducible_run_rate"]["value"] is None
    assert d["drill_pass_rate"] == {"value": None, "numerator": 0, "denominator": 0}
    assert d["metric_variance"] == {"groups": 0, "max": None, "mean": None, "worst": []}
    prom = tmp_path / "e.prom"
    write_prometheus(st, prom)
    got = _parse(prom)
    assert math.isnan(got["replay_tui_reproducible_run_ratio"])
    assert got["replay_tui_original_runs"] == 0


def test_aborted_replays_never_override_a_completed_verdict(store_path: Path) -> None:
    """Three IDENTICAL replays, then one cancelled (its partial outputs compared INCOMPLETE),
    one interrupted and one that hit an infrastructure error: the run stays IDENTICAL, the
    reproducible rate stays 100 %, and the aborted ones have their own SLI."""
    from replay_tui.verdicts import counts_as_evidence, summarize

    orig = _manifest("run-E-0001", duration=10, metrics={"loss": 1.0})
    reps = [
        _manifest(f"run-E{i}-rep", duration=10, metrics={"loss": 1.0}, replay_of="run-E-0001")
        for i in range(4)
    ]
    with RunStore(store_path) as s:
        s.ingest_many([(manifest_from_data(m), None, (), {}) for m in (orig, *reps)])
        attempts = [
            ("completed", "IDENTICAL", "run-E0-rep"),
            ("completed", "IDENTICAL", "run-E1-rep"),
            ("completed", "IDENTICAL", "run-E2-rep"),
            ("cancelled", "INCOMPLETE", "run-E3-rep"),
            ("interrupted", None, None),
            ("infra-error", None, None),
        ]
        for status, verdict, rep in attempts:
            add_attempt(
                s,
                "run-E-0001",
                status,
                replay_run=rep,
                backend="local",
                verdict=verdict,
                body={"replay": {"determinism": "recorded"}},
                sets_verdict=counts_as_evidence(status, verdict),
            )
        assert s.get_run("run-E-0001").last_verdict == "IDENTICAL"
        got = compute_stats(s).to_dict()
        summary = summarize(s.replay_outcomes(["run-E-0001"])["run-E-0001"])
    assert got["reproducible_run_rate"] == {"value": 1.0, "numerator": 1, "denominator": 1}
    assert got["aborted_replay_rate"]["numerator"] == 3
    assert got["aborted_replay_rate"]["denominator"] == 6
    assert got["aborted_replay_rate"]["by_status"] == {
        "cancelled": 1,
        "interrupted": 1,
        "timed_out": 0,
        "infra-error": 1,
    }
    assert summary.text() == "IDENTICAL 3/3, 1 cancelled, 1 infra-error, 1 interrupted"
    assert summary.text(wide=False) == "IDENTICAL 3/3"


def test_cancelled_replays_and_drills_are_in_no_rate(hand_store: Path) -> None:
    """A cancelled replay's partial outputs and a cancelled drill are neither evidence nor
    failure: the checkpoint, data and drill rates stay as they were (the aborted SLI
    counts the replay)."""
    with RunStore(hand_store) as s:
        before = compute_stats(s).to_dict()
        add_attempt(  # its replay run's checkpoints do not match the original's
            s,
            "run-A-0001",
            "cancelled",
            replay_run="run-A2-rep2",
            backend="local",
            verdict="INCOMPLETE",
            reason="cancelled",
            duration_s=None,
            body={"replay": {"determinism": "recorded"}},
            sets_verdict=False,
        )
        s.add_drill(False, {"runs": [], "cancelled": True})
        after = compute_stats(s).to_dict()
    for key in ("checkpoint_hash_match_rate", "data_verification_rate", "drill_pass_rate"):
        assert after[key] == before[key], key
    aborted = after["aborted_replay_rate"]["numerator"]
    assert aborted == before["aborted_replay_rate"]["numerator"] + 1


def test_within_noise_counts_as_reproduced_but_not_bit_identical(store_path: Path) -> None:
    """A run reproduced within its noise counts in the reproducible rate and not in the
    bit-identical rate beside it; an IDENTICAL one counts in both."""
    ms = [
        _manifest("run-N-0001", duration=10, metrics={"loss": 1.0}),
        _manifest("run-N1-rep1", duration=10, metrics={"loss": 1.0001}, replay_of="run-N-0001"),
        _manifest("run-I-0001", duration=10, metrics={"loss": 2.0}),
        _manifest("run-I1-rep1", duration=10, metrics={"loss": 2.0}, replay_of="run-I-0001"),
    ]
    with RunStore(store_path) as s:
        s.ingest_many([(manifest_from_data(m), None, (), {}) for m in ms])
        for orig, rep, verdict in (
            ("run-N-0001", "run-N1-rep1", "WITHIN_NOISE"),
            ("run-I-0001", "run-I1-rep1", "IDENTICAL"),
        ):
            add_attempt(
                s,
                orig,
                "completed",
                replay_run=rep,
                backend="local",
                verdict=verdict,
                duration_s=None,
                body={"replay": {"determinism": "recorded"}},
            )
        st = compute_stats(s)
    assert (st.reproducible.numerator, st.reproducible.denominator) == (2, 2)
    assert (st.bit_identical.numerator, st.bit_identical.denominator) == (1, 2)
    assert "bit-identical run rate      50.0%  (1 of 2" in st.text()
