"""The stored bytes of the bisect answer, drills, evidence results, records and the
other small results, pinned: every result written by ``to_dict`` hashes (as canonical
JSON, and as ``json.dumps`` in the order its keys are written, which ``--json`` prints)
to what the hand-written writers gave before the results moved onto ``storage.wire``,
and what has a reader reads back to itself."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from replay_tui.bisect.answer import (
    BisectResult,
    DifferingFactor,
    EnvChange,
    FloorSummary,
    GoodVsBad,
    ProbeJudgement,
    ProbeRecord,
    Untestable,
)
from replay_tui.bisect.factors import FactorDiff
from replay_tui.bisect.noise import Closeness, Distance
from replay_tui.evidence.annex import Fact, Item
from replay_tui.evidence.export import ExportResult
from replay_tui.evidence.stats import AbortedRate, MetricVariance, OpsSeen, Ratio, Spread, Stats
from replay_tui.evidence.verify import BundleCheck, Problem, StatementCheck
from replay_tui.gaps.registry import Gap
from replay_tui.importers import Outcome
from replay_tui.replay.drill import DrillItem, DrillReport, read_item
from replay_tui.replay.runner import ReplayOutcome
from replay_tui.replay.series import ReplayReport
from replay_tui.verdicts import Reproduction
from storage.canonical import dumps
from storage.records import GapCounts, ReplayFact, RunRecord


def _hashes(body: Any) -> tuple[str, str]:
    """The canonical bytes' sha256, and that of ``json.dumps`` in the written order."""
    canon = hashlib.sha256(dumps(body)).hexdigest()
    ordered = hashlib.sha256(json.dumps(body).encode()).hexdigest()
    return canon, ordered


def _write(obj: Any) -> Any:
    """``obj`` as it is written."""
    return obj.to_dict()


def _same_bytes(a: Any, b: Any) -> bool:
    """Equal, or (NaN being unequal to itself) written to the same bytes."""
    return bool(a == b) or dumps(_write(a)) == dumps(_write(b))


_CLOSE_NEAR = Closeness(near=True, basis="within noise")
_CLOSE_FAR = Closeness(near=False, basis="outside noise", step=40)
_JUDGED = ProbeJudgement(
    vs_good="DIVERGED",
    vs_bad="IDENTICAL",
    first_divergent_step=40,
    distance_to_good=Distance(metric_gap=0.5, weight_rel_l2=0.125),
    distance_to_bad=Distance(metric_gap=0.0, weight_rel_l2=0.0),
    near_good=_CLOSE_FAR,
    near_bad=_CLOSE_NEAR,
)
_OLD_JUDGED = ProbeJudgement(
    vs_good="DIVERGED",
    vs_bad=None,
    first_divergent_step=None,
    distance_to_good=Distance(metric_gap=math.inf, weight_rel_l2=2),
    distance_to_bad=None,
)
_PROBE_FULL = ProbeRecord(
    index=1,
    base="good",
    swapped=["seed", "image"],
    why="one factor at a time: seed alone",
    behaves="BAD",
    judgement=_JUDGED,
    replay_run="r" * 16,
    status="succeeded",
    error=None,
    duration_s=1.5,
    log_sha256="a" * 64,
    log="step 0 loss 1.0",
)
_PROBE_OLD = ProbeRecord(
    index=2,
    base="bad",
    swapped=[],
    why="confirmation",
    behaves="neither",
    judgement=_OLD_JUDGED,
    status="failed",
)
_PROBE_BARE = ProbeRecord(index=3, base="good", swapped=["config"], why="x", error="boom")
_FULL = BisectResult(
    good="g" * 16,
    bad="b" * 16,
    backend="docker",
    outcome="cause",
    causes=["seed"],
    cleared=["config"],
    partial=["data"],
    untestable=[Untestable(factor="image", reason="BAD recorded no image digest")],
    factors=[
        DifferingFactor(factor="seed", detail=("seed 1 -> 2",), testable=True),
        DifferingFactor(factor="hardware", detail=(), testable=False, reason="host"),
    ],
    probes=[_PROBE_FULL, _PROBE_OLD, _PROBE_BARE],
    noise_floor=FloorSummary(
        runs=4, floor=Distance(metric_gap=1, weight_rel_l2=math.nan), identical=False
    ),
    good_bad=GoodVsBad(
        verdict="DIVERGED",
        distance=Distance(metric_gap=2.5, weight_rel_l2=-math.inf),
        first_divergent_step=40,
        metric="loss",
    ),
    reason=None,
    confirmed=True,
    interaction=True,
    budget=16,
    budget_exhausted=True,
    times=3,
    env_diff=[
        EnvChange(factor="seed", what="randomness.seed", good=1, bad=2),
        EnvChange(factor="code", what="code.files", good=["x.py"], bad={"y": [1, 2.5]}),
    ],
    notes=["a note"],
    duration_s=3.25,
    bisect_id=9,
    floor_logs=["c" * 64],
    floor_log_texts=["the floor replay's output"],
)
_UNEXPLAINED = BisectResult(good="g", bad="b", backend="local", reason="nothing reproduces BAD")

_DRILL_ITEMS = [
    DrillItem(
        run_id="r1",
        name="one",
        status="reproduced",
        verdict="IDENTICAL",
        replay_run="p1",
        replay_fact_id=4,
        reason=None,
        duration_s=2.5,
    ),
    DrillItem(
        run_id="r2",
        name="two",
        status="error",
        verdict=None,
        replay_run=None,
        replay_fact_id=None,
        reason="cancelled: by the user",
        duration_s=0.0,
        abort="cancelled",
    ),
    DrillItem(
        run_id="r3",
        name="three",
        status="error",
        verdict=None,
        replay_run=None,
        replay_fact_id=None,
        reason="no docker engine",
        duration_s=1,
    ),
]


def _stats(generated: str, without: Ratio | None) -> Stats:
    extra: dict[str, Any] = {} if without is None else {"without_image": without}
    return Stats(
        original_runs=5,
        replays=7,
        reproducible=Ratio(numerator=3, denominator=4),
        bit_identical=Ratio(numerator=1, denominator=4),
        aborted=AbortedRate(
            numerator=2, denominator=7, by_status={"cancelled": 1, "infra-error": 1}
        ),
        checkpoint_match=Ratio(numerator=0, denominator=0),
        metric_variance=MetricVariance(
            groups=2,
            max=0.25,
            mean=0.125,
            worst=[{"run_id": "r1", "metric": "loss", "variance": 0.25}],
        ),
        data_verified=Ratio(numerator=1, denominator=1),
        data_hashed=Ratio(numerator=2, denominator=3),
        nondeterministic=OpsSeen(total=4, runs=2, distinct=["aten::index_add_", "aten::scatter_"]),
        training_time_variance=Spread(groups=0, max=None, mean=None),
        training_time_cv_max=None,
        attested=Ratio(numerator=1, denominator=5),
        drills=Ratio(numerator=2, denominator=3),
        last_drill_at="2026-01-02T03:04:05.000Z",
        generated_at=generated,
        **extra,
    )


def _run_record(gaps: GapCounts | None, *, full: bool) -> RunRecord:
    return RunRecord(
        id="a" * 16,
        name="train",
        kind="original" if full else "replay",
        replay_of=None if full else "b" * 16,
        status="succeeded",
        exit_code=0 if full else None,
        started_at="2026-01-02T03:04:05.000Z",
        ended_at="2026-01-02T03:05:05.000Z" if full else None,
        duration_s=60.5 if full else None,
        commit="c" * 40 if full else None,
        branch="main" if full else None,
        dirty=False if full else None,
        repo_url="https://example.org/r.git" if full else None,
        image_ref="img:1" if full else None,
        image_digest="sha256:" + "d" * 64 if full else None,
        config_hash="e" * 64 if full else None,
        manifest_sha256="f" * 64,
        command="python train.py --lr 0.1",
        tags="team=ml" if full else "",
        gaps=gaps,
        last_verdict="IDENTICAL" if full else None,
        last_verdict_at="2026-01-03T00:00:00.000Z" if full else None,
        signed=full,
        ingested_at="2026-01-02T03:06:00.000Z",
    )


def _outcome(replay: bool) -> ReplayOutcome:
    # to_dict reads neither the original nor, without a replay, any manifest
    return ReplayOutcome(
        original=cast(Any, None),
        replay=None,
        verdict=None,
        comparison=None,
        exit_code=3,
        reason="no docker engine" if replay else None,
        replay_fact_id=None,
        duration_s=0.5,
        status="infra-error",
    )


# name -> (the instance, its reader or None)
CASES: dict[str, tuple[Any, Callable[[Any], Any] | None]] = {
    "distance": (Distance(metric_gap=0.5, weight_rel_l2=0.25), None),
    "distance-int": (Distance(metric_gap=1, weight_rel_l2=0.5), None),
    "closeness-near": (_CLOSE_NEAR, None),
    "closeness-far": (_CLOSE_FAR, None),
    "differing-factor": (
        DifferingFactor(factor="code", detail=("commit a -> b",), testable=True),
        None,
    ),
    "differing-factor-untestable": (
        DifferingFactor(factor="hardware", detail=(), testable=False, reason="host"),
        None,
    ),
    "untestable": (Untestable(factor="image", reason=None), None),
    "env-change": (
        EnvChange(factor="code", what="code.files", good=["x.py"], bad={"y": [1, 2.5]}),
        None,
    ),
    "floor-summary": (
        FloorSummary(runs=2, floor=Distance(metric_gap=0.0, weight_rel_l2=0.0), identical=True),
        None,
    ),
    "good-vs-bad": (
        GoodVsBad(
            verdict=None,
            distance=Distance(metric_gap=0.5, weight_rel_l2=0.1),
            first_divergent_step=None,
            metric=None,
        ),
        None,
    ),
    "probe-full": (_PROBE_FULL, None),
    "probe-bare": (_PROBE_BARE, None),
    "bisect-full": (_FULL, BisectResult.from_dict),
    "bisect-unexplained": (_UNEXPLAINED, BisectResult.from_dict),
    "factor-diff": (FactorDiff(name="seed", detail=["seed 1 -> 2"]), None),
    "factor-diff-untestable": (
        FactorDiff(name="hardware", detail=[], testable=False, reason="host"),
        None,
    ),
    "problem": (Problem(file="a.json", kind="changed", message="sha256 differs"), None),
    "statement-check": (
        StatementCheck(
            name="bom.cdx.json",
            predicate_type="https://cyclonedx.org/bom",
            present=True,
            checked=False,
            detail="unsigned",
        ),
        None,
    ),
    "bundle-check-bare": (BundleCheck(path=Path("/tmp/bundle")), None),
    "bundle-check-full": (
        BundleCheck(
            path=Path("/tmp/bundle"),
            files_checked=12,
            signed=True,
            key_id="k1",
            key_source="given",
            trusted=True,
            embedded_fingerprint="fp",
            ledger_head="h" * 64,
            run_id="r" * 16,
            verdict="IDENTICAL",
            replays=2,
            problems=[Problem(file="x", kind="missing", message="gone")],
            notes=["a note"],
            statements=[
                StatementCheck(
                    name="s", predicate_type="p", present=False, checked=False, detail="absent"
                )
            ],
        ),
        None,
    ),
    "ratio": (Ratio(numerator=3, denominator=4), None),
    "ratio-empty": (Ratio(numerator=0, denominator=0), None),
    "spread": (Spread(groups=2, max=0.5, mean=0.25), None),
    "spread-empty": (Spread(groups=0, max=None, mean=None), None),
    "stats": (_stats("2026-01-02T00:00:00Z", Ratio(numerator=1, denominator=5)), None),
    "stats-defaults": (_stats("", None), None),
    "fact": (Fact(member="manifest.json", field="code.commit", value="abc"), None),
    "fact-no-value": (Fact(member="gaps.json", field="gaps"), None),
    "item-answered": (
        Item(
            id="2a",
            ref="Annex IV 2(a)",
            asks="methods",
            facts=[Fact(member="m", field="f", value="v")],
        ),
        None,
    ),
    "item-partly": (
        Item(
            id="2b",
            ref="Annex IV 2(b)",
            asks="design",
            facts=[Fact(member="m", field="f")],
            cannot=["why"],
        ),
        None,
    ),
    "item-not": (Item(id="2c", ref="Annex IV 2(c)", asks="labels", cannot=["labelling"]), None),
    "export-result": (
        ExportResult(
            run_id="r" * 16,
            path=Path("/tmp/out"),
            files=9,
            signed=True,
            key_id="k1",
            verdict="IDENTICAL",
            statement_sha256="1" * 64,
            sums_sha256="2" * 64,
            bundle_id=3,
            ledger_head="3" * 64,
            verdict_text="IDENTICAL",
            model_signed=True,
        ),
        None,
    ),
    "export-result-bare": (
        ExportResult(
            run_id="r",
            path=Path("out"),
            files=1,
            signed=False,
            key_id=None,
            verdict=None,
            statement_sha256="1" * 64,
            sums_sha256="2" * 64,
            bundle_id=1,
        ),
        None,
    ),
    "drill-item-reproduced": (_DRILL_ITEMS[0], read_item),
    "drill-item-cancelled": (_DRILL_ITEMS[1], read_item),
    "drill-item-infra": (_DRILL_ITEMS[2], read_item),
    "drill-report": (
        DrillReport(
            pick="random",
            seed=42,
            since="2026-01-01T00:00:00.000Z",
            count=3,
            backend="docker",
            candidates=10,
            started_at="2026-01-02T00:00:00.000Z",
            items=list(_DRILL_ITEMS),
            ended_at="2026-01-02T01:00:00.000Z",
            cancelled=True,
            drill_id=5,
            ledger_head="4" * 64,
        ),
        None,
    ),
    "drill-report-empty": (
        DrillReport(
            pick="oldest",
            seed=None,
            since=None,
            count=1,
            backend="local",
            candidates=0,
            started_at="t",
        ),
        None,
    ),
    "replay-report-empty": (ReplayReport(original_id="o" * 16), None),
    "replay-report-aborted": (
        ReplayReport(
            original_id="o" * 16, outcomes=[_outcome(True), _outcome(False)], first_number=3
        ),
        None,
    ),
    "gap-counts": (GapCounts(critical=1, warning=2, info=3), GapCounts.from_dict),
    "gap-counts-zero": (GapCounts(), GapCounts.from_dict),
    "run-record-full": (_run_record(GapCounts(critical=0, warning=1, info=2), full=True), None),
    "run-record-bare": (_run_record(None, full=False), None),
    "replay-fact-full": (
        ReplayFact(
            id=1,
            created_at="2026-01-02T00:00:00.000Z",
            original_run="o" * 16,
            replay_run="p" * 16,
            backend="docker",
            status="completed",
            verdict="IDENTICAL",
            reason=None,
            duration_s=12.5,
            comparison_id=7,
            determinism="recorded",
        ),
        None,
    ),
    "replay-fact-bare": (
        ReplayFact(
            id=2,
            created_at="t",
            original_run="o",
            replay_run=None,
            backend=None,
            status="infra-error",
            verdict=None,
            reason="no engine",
            duration_s=None,
            comparison_id=None,
        ),
        None,
    ),
    "reproduction-empty": (Reproduction(), None),
    "reproduction": (
        Reproduction(
            verdict="IDENTICAL",
            completed=3,
            reproduced=2,
            aborted={"cancelled": 1, "timed_out": 0},
            experiments=1,
        ),
        None,
    ),
    "gap": (
        Gap(
            code="G001",
            severity="critical",
            field="image.digest",
            message="no digest",
            remediation="pin it",
        ),
        None,
    ),
    "import-outcome": (
        Outcome(
            source_run_id="s1",
            run_id="r" * 16,
            status="imported",
            name="n",
            gaps={"critical": 1},
            refused=("a", "b"),
        ),
        None,
    ),
    "import-outcome-bare": (
        Outcome(source_run_id="s2", run_id=None, status="skipped", reason="no metrics"),
        None,
    ),
}

PINNED: dict[str, tuple[str, str]] = {
    "bisect-full": (
        "5b5ba07f9b288dc42164913126f6970ccce4baf0c10668cd656821acad7e4dfe",
        "f15cf2baec9c5869cd394266bf9b6ea6ca31901d5690972dac32719800eaa262",
    ),
    "bisect-unexplained": (
        "7a29d54f849a87cf7ab6954ebc787bc0d7c773149344be0cbced32e12b882f74",
        "d8d6af7a54816188ea6c5910caf2dfe9dc15c7c9c5783a9c7ddc50b1b1bd27f1",
    ),
    "bundle-check-bare": (
        "71a697a7eae185a9596f540853d13e3090899cab9c10b8d787f344305e94a941",
        "d9ff9724a910bef4edc01ea92fc602080a31e5d63d0476c70426685e57861337",
    ),
    "bundle-check-full": (
        "38518652d0298f8d9dd9b50ab5c03afaa8e78915f111a91f5bb473d355deac19",
        "78655bcd876c4d8a8f228daf72a427baf34d164f43f0ea2595dbdcd1d9aa8cef",
    ),
    "closeness-far": (
        "611a562f89fde079ebbd0fbb765af57e16bb4fa06caa39fb24681070c87621d4",
        "d19a861217e3a6d9d1ebad281ef725e88af7f8cec6528362d2623544c1e6375d",
    ),
    "closeness-near": (
        "53644e7f6f92f214dfde8dbbe4243f6754bb36c6694ad31ab8638936b6579d4b",
        "5503a46c52e7ad51065cc97c90ef27ca675c84af0e824cb653fa9b21d7f78966",
    ),
    "differing-factor": (
        "234403509096d50e5f2ef6e6e4cb9668cda062a2d09c722be977222b5a1d9ae0",
        "942a29b03dc2d04161b54467eb75ff6e33a55a31462e29580aebe6ab4c34c7fb",
    ),
    "differing-factor-untestable": (
        "b12cf0581153bb7a664772716ec7ceaef9e7b69be0bbbf2b31272462e7b95e38",
        "203aa64183c9b81f59e9205ef9fe90b026daaaf3e5a428f663bd0beda0c4299d",
    ),
    "distance": (
        "9fa1c42a5f5e7efa1a7454e987c2a75a6fb7c42040a88298ade8bb3eb4677583",
        "2f6b84fd8dcb13b01845020b9785211091dc4e806d8b55a083713b08d6ed6804",
    ),
    "distance-int": (
        "990b4240e693f153ef55799da0a0d440d9a25bf2a6ca428b94d828e2c4ce1d22",
        "36fd1884451a2d790232c8086553ea4a658cd4dc19cbe58e5f43e886a0fcb8fb",
    ),
    "drill-item-cancelled": (
        "db8c66aded882437cf2a286eab067d1a591f58babe48f5a9eca71f68000f2244",
        "f072aef0906d0fd5c2230c58527a97a6edb453e5ef3ce8bc03a4421c0fd87378",
    ),
    "drill-item-infra": (
        "c2a988a936e20a5afa61fc866a08c9117b593d64a478d27034721c2fd41e074c",
        "2cdfdd975f92faaaeb74249522ec730ded0f21e6c5900d867a7ca41ecfbfcbbf",
    ),
    "drill-item-reproduced": (
        "9909b77a8bfb0524186942ce7c269c50fe5d707151e64f72bd41a9882c5a9525",
        "2a5ce16459471f7a74d56885345220ee223467bcbd9e135a2ea0f6d40d290acb",
    ),
    "drill-report": (
        "4a1409de33add1ac122eff8b69d9f11adfe17963ed2ab97c7e00bdea46e430db",
        "3c610efb864271c08b0628b24e136425a53b7d4c8a197a1e2ae9e408ce8e540e",
    ),
    "drill-report-empty": (
        "3e20fcead9ecda59b9d409b46c6f8ab25649e8333cc1aaf12ed8710446f54f4c",
        "21cc680c0a894df74b709aab086a1ceae33ec7ec9b5daa18b8f4b96e3144aa62",
    ),
    "env-change": (
        "cd8b9b1ededb2e111206cb8f35d137ab33a17b56e1e99f36e688f7e34cd1b3dc",
        "138c0a7cdf1aa60af57a5bb1473196bb7fd5b46ba8a576774c9caeb00e2c82c5",
    ),
    "export-result": (
        "98cb35b22e1270d1d54cc738a1d9392145a77d588af22d5843c37a76d43a1a4f",
        "e569938c1aadf6716c5cf5c0a97c2d99ea46e42fcc8523f4beccc40d24dd9239",
    ),
    "export-result-bare": (
        "759a2d8edf81d397edf828b253e250207d7b6514c72f84dedcf2b1ece7ba41ab",
        "5b6afcedca1a49c65642e0a2d2cde51b75cacbae3b30535a9674bee81930a5ee",
    ),
    "fact": (
        "34ebf10e6355ddbab707dc3bdcc9cf3243c7940613f2ceb936477161fcb2b5e3",
        "d2bdcb39d1da2b37b82cd8a031fee723ef4933cc8d9aa3a173f0e066471a143b",
    ),
    "fact-no-value": (
        "cc5d1c6e1911ebeaa05fd2acaac379b71339b87a7d64bbde69be233531747c02",
        "b63cdfb60c1ffb062aea38c57fa1d412c750c4a1ed7af4b9df5000cbc5b57e32",
    ),
    "factor-diff": (
        "f0aee38ba7d4248f9fbdf03e215c0bfd855174110b02c840fae9a2903c2b7ddc",
        "064a4da14e82c03f4900387c7092ee1d139aa35c7bacd8cd8dc09e408ac22205",
    ),
    "factor-diff-untestable": (
        "b12cf0581153bb7a664772716ec7ceaef9e7b69be0bbbf2b31272462e7b95e38",
        "203aa64183c9b81f59e9205ef9fe90b026daaaf3e5a428f663bd0beda0c4299d",
    ),
    "floor-summary": (
        "228a1a08ba0b599a4574d0faa041bec8e1204430e5caf127de64dd73f87fdeea",
        "f5340b92bb2ae0b6df3d1a1e9f1799b764f2ff8a36b12dab190aba6b17816775",
    ),
    "gap": (
        "f34a885935bf1b003877c2c5ec9ce0bb8f477294a61d4b94453c474ba384de1d",
        "6d959109ae85c86c8a3d3ffb8b707cf61636865c9aad43e8504bf1599a536f24",
    ),
    "gap-counts": (
        "13efe1ce4abfa75c615b47262162e0b50be11a110f4664b6736c68001a2bb75f",
        "78542f0b9486445f0ce38a301f0825485d19bbc4284e29586fb49223292064f3",
    ),
    "gap-counts-zero": (
        "489661a5fa0dd4439c9db3424e33e3feea87b0986787adab8c91cc730d8e6424",
        "aff4241d1ad4fab425692940f7843f36521ef5d4a33fbf281d91388649f30733",
    ),
    "good-vs-bad": (
        "49b7854be8f025f6103a5ef84218a6f2cf9e803926c73188d909dd4b8842173c",
        "f43f9e1c989b4bcaf6caf8ab4b9c43ccaa5c8dc7ead1ac4cee7f5747944dfe68",
    ),
    "import-outcome": (
        "7c232341a375abbe4d8be23defc431424b6e23a40bbbaae1f93dc9a10d8cfb4c",
        "551fb6c9c147c6e501fa75493dae6fdd7ee8a56b893c04bcec542901ed60fa96",
    ),
    "import-outcome-bare": (
        "f78feeb244b8878af72f4e344ddbf49b3758d06246de27cf047046276fea8dd5",
        "d3b217866166fd6705a58ea8fbbce129c71b165acbc36b36c2338ae64426e325",
    ),
    "item-answered": (
        "948dc6bd6aa40d462a9bc62d84b1c0bea42a843feee55fa3a08c59b305094a77",
        "1f21756ec32df5779e28a789b28ba5702529c0dfcdca0b5800970fe6dc6b5d68",
    ),
    "item-not": (
        "7fcf8290f919095378b8accd57404104b1bf3a430d64aa466a7bce75a8737f20",
        "8fbaab90dbf82744c9b16247ee75115cc4912118ec65d0dd09dddd9df31e3772",
    ),
    "item-partly": (
        "b349a2146ed59c348390189ab4c97681701bbceda9afd7ddf20a696ee46b2660",
        "69daab6ba0e10ec187a95653cb04a58bd8b170ccc90187e961da191ea8ad39f6",
    ),
    "probe-bare": (
        "4146bdbc374382e3d07d542ef353f606e28da558880c0c315b3e70fb17593547",
        "0ec6f62b6601364a020c467c1fe54d0c7aeeaebb731b6121afd275ac0af047ec",
    ),
    "probe-full": (
        "44f2ba90b4d5f5ee1da85286488de4335ed899d126e87584371e4913a1a9e767",
        "8bbdb254bf0ab0c26ef152275bf103560d2fe9e616d1bf272c2fef3cdeec9dac",
    ),
    "problem": (
        "4aabccb90d7888862319bf0b41360a3f8af4f27af95c032ca1db6fd20ab2a32a",
        "1f0226400821f0afd53953d32bd5a38f891976f0230248dd414530f0685a32f6",
    ),
    "ratio": (
        "6fd77072efe48a62b4d44ba55699f9580c53c3a9e76b54afd53f16331fa30037",
        "9d5ebc6aa061abadb8c829f5146656e3b885aa1c8b9a25684b27e1af18fabadb",
    ),
    "ratio-empty": (
        "478acd5f72db92c4fa2bc4363c0862899642b268fa803981df128468d8e044ea",
        "cd3f77752707e6456e06298deda17a1aca5225004a2e8eac6f88b54abc48203d",
    ),
    "replay-fact-bare": (
        "9bbcdfdd14f6e5714fd4c543319db5865a5b1384f88c46c88afdbab669240637",
        "ad9801c5f9903aae0975a2912b4fd7980d06fc6dd1f134fbc490905e385a4c5c",
    ),
    "replay-fact-full": (
        "78b893c591c914334678a5964786c6c4c15867d8959d34d88355844bc2ce3244",
        "fbd56a4d1cf5d8fdb25308b9755c20e2ee6298cd7d7a4e3a86dfa38fca492cea",
    ),
    "replay-report-aborted": (
        "d1c99d43c8f19e791902f2c5bd08a2282d22c2fd663c9b71ad43faf2bf831d2f",
        "5c453b3ba190bec2072a90ed0661ab8a3833efcdf4af3c99888aca92ae64e211",
    ),
    "replay-report-empty": (
        "7774eb3ce1147e698d89292dc51d890c24297e7c1f16ef01b060477e6634e878",
        "c591fa8edcaaa7e74a4899e733c46de0f66dfe0f001420f295c9539be55b7a77",
    ),
    "reproduction": (
        "bb4ac77c34121e6f0e1df2b978947981efce78282cd4f75dfc09a75042d57cae",
        "518f8fc3ac50a6068f1f5a489645279e41a6cdee86c83021f7b5292a0914b520",
    ),
    "reproduction-empty": (
        "980e609f8462108bed482d7704d57bf9b0174a78d551e819a23d78ebe1c4915f",
        "af79ad7224f0d0372e134ba5698171d81a69148a01aa03220f8228e759e7d6d6",
    ),
    "run-record-bare": (
        "afb06471da726cf3e6c9b21d56c056d7145da0419faa0fd578681ec45143cd28",
        "8e6df175adab55d9fa50024338ab7e4a46cf3501b2d4bbb50b13a6e675a8e188",
    ),
    "run-record-full": (
        "5d08c857645df669cbee5c490b832cd736ed80bfdeb07dc5df7a065e493c504d",
        "e90d959e713f7314062be40c703859ca612901fd7f23dc905da9a6c3500b4ffb",
    ),
    "spread": (
        "a2ebbfc2f37b90444e285086c9ce78a8a815d1e2cb0118a695a7a501e35cc372",
        "65daa0fb96fc3914a08716e4b22f0db1a69224fa7528a6c6bc612f61f814cced",
    ),
    "spread-empty": (
        "de98ae20ca689cc301bd5733fe7be44f18f1ad6f7d0e9937c225ece369a10e68",
        "cc42b5280b6b418908217da0d0e13116f48306e7c9a15fb204faa0d9c7577c62",
    ),
    "statement-check": (
        "6cf86545ecf4a9dac54de1720811442dc722109a4594dc5f4da7065e105acd1d",
        "29f1a0f9917e9b71957fa6fc54358d3e6243c5ef851ac22bedf36bf7aee2edf7",
    ),
    "stats": (
        "499f5966f9edef88223dcf12553ef181d5df6355fd22412468dc4e78717fbb68",
        "4defce8d5afb8c2bf7d93f6a4b666e6dd932e63c1d607eb73c2372acb50659fa",
    ),
    "stats-defaults": (
        "a1686ee8bdc7cbc40e98c15a7a691b9db0a15bb0bfe087978dc4acbdbdace0a4",
        "16657cfbc8188ac7a166cc6a5b131d25fa8ed95487ebd6ebaa4be499878e106c",
    ),
    "untestable": (
        "e92e269eb76341b41c89ed2902fc917711bf6880d3522e51852a18b22a5b0c24",
        "c5d3d8de3730d477ce6caf6fad556992c63faa8e53f829f2ec3eefc1863a0821",
    ),
}
"""Each case's canonical hash and written-order hash, as the hand-written writers gave."""


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_written_bytes_are_pinned(name: str) -> None:
    obj, _ = CASES[name]
    assert _hashes(_write(obj)) == PINNED[name]


@pytest.mark.parametrize("name", sorted(n for n, (_, r) in CASES.items() if r is not None))
def test_what_is_read_back_is_itself(name: str) -> None:
    obj, read = CASES[name]
    assert read is not None
    body = json.loads(json.dumps(_write(obj)))
    back = read(body)
    assert _same_bytes(back, obj)
    assert dumps(_write(back)) == dumps(_write(obj))


_THIN = {"good": "g", "bad": "b", "probes": [{"probe": 1}, "x"]}
_ODD = {
    "good": "g",
    "bad": "b",
    "backend": "local",
    "outcome": "maybe",
    "causes": ["code", 3],
    "untestable": [{"reason": "no factor"}, {"factor": "image", "reason": None}, 7],
    "factors": [{"detail": []}, {"factor": "code", "detail": ["a", 3], "testable": "yes"}],
    "probes": [
        {
            "probe": True,
            "base": "good",
            "swapped": "seed",
            "vs_good": "DIVERGED",
            "distance_to_good": {"metric_gap": 1, "weight_rel_l2": "x"},
            "closeness": {"good": {"near": True, "basis": "within noise"}},
            "duration_s": "slow",
            "log_sha256": "not a sha",
        },
        {
            "probe": 2,
            "distance_to_bad": {"metric_gap": 0, "weight_rel_l2": 0.5},
            "closeness": {"good": {"near": False, "step": 4}, "bad": {"near": True}},
        },
    ],
    "noise_floor": {"runs": 2},
    "good_vs_bad": {"metric_gap": 1, "weight_rel_l2": 2, "first_divergent_step": 1.5},
    "confirmed": "yes",
    "budget": "x",
    "env_diff": [{"factor": "code", "what": "code.commit"}, {}],
    "duration_s": True,
    "bisect_id": "9",
    "floor_logs": ["zz", "c" * 64, 5],
}

READ_PINNED = {
    "thin": (
        "047e71dae3a482081a99f707a3776266f977e9febfe2f99152746057648a928c",
        "65291bc2be3d360e29f8feda9cefa729f722347514275aefae3cb27dde9275a2",
    ),
    "odd": (
        "9e4326c8fb3ed46d6ef36a429ffce3f49faa3fa1ab5428e94be2f57fc4f2f81a",
        "77b75cdacf3a178985754da27647a2b5de0ca4cf27f747c1552e0341632c2329",
    ),
}
"""What an older or damaged bisect body reads as (``from_dict`` then ``to_dict``): it
still opens, what it lacks or holds in another shape taking the default."""


@pytest.mark.parametrize("name", sorted(READ_PINNED))
def test_an_old_or_damaged_bisect_body_reads_as_it_did(name: str) -> None:
    body = {"thin": _THIN, "odd": _ODD}[name]
    assert _hashes(BisectResult.from_dict(body).to_dict()) == READ_PINNED[name]


def test_an_odd_stored_drill_item_reads_as_it_did() -> None:
    odd = {"status": "error", "reason": "timed_out: 60 s", "run_id": 5, "duration_s": True}
    assert read_item({**odd, "replay_fact_id": False, "verdict": 3}) == DrillItem(
        run_id="5",
        name="",
        status="error",
        verdict=None,
        replay_run=None,
        replay_fact_id=None,
        reason="timed_out: 60 s",
        duration_s=1.0,
        abort="timed_out",
    )
    assert read_item({"status": 7}) is None
    assert read_item({"run_id": "r"}) is None
