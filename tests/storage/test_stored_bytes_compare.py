"""The stored bytes of the compare package's results, pinned: every result written by
``to_dict`` (or a floor fact's ``to_row``) hashes to what the hand-written writers
gave before the results moved onto ``storage.wire``, and reads back to itself."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from replay_tui.compare.artifacts import ArtifactDiff
from replay_tui.compare.comparison import Comparison
from replay_tui.compare.environment import EnvironmentDiff, EnvRow, PackagesDiff
from replay_tui.compare.floor import (
    DeterminismCost,
    FloorRecord,
    FloorRef,
    NoiseFloorFact,
    Spread,
    StoredFloor,
)
from replay_tui.compare.metrics import MetricDiff
from replay_tui.compare.noise_floor_model import (
    MetricFloor,
    NoiseFloor,
    SkippedMetric,
    StepStat,
)
from replay_tui.compare.noise_params import NoiseParams
from replay_tui.compare.noise_results import (
    BandPoint,
    EndpointResult,
    EndpointTost,
    Equivalence,
    MetricBand,
    MetricSensitivity,
    NoiseJudgement,
    Sensitivity,
    TooWide,
    WeightsDiagnostic,
)
from replay_tui.compare.noise_self_check import LeftOut, SelfCheck
from replay_tui.compare.stored import comparison_from_dict
from replay_tui.compare.tensors import CheckpointDiff, TensorDiff
from replay_tui.compare.tolerance import Tolerance
from replay_tui.gaps import Gap
from storage.canonical import dumps
from storage.records import GapCounts
from storage.wire import Wire

BUNDLE = Path(__file__).parents[1] / "evidence" / "data" / "bundle-v1" / "comparison.json"


def _body(obj: Any) -> Any:
    """What the object stores: ``to_dict``, or a floor fact's ``to_row``."""
    write = getattr(obj, "to_dict", None) or obj.to_row
    return write()


def _sha(body: Any) -> str:
    return hashlib.sha256(dumps(body)).hexdigest()


# -- the noise rule's results ------------------------------------------------------------

E1 = EndpointResult(
    metric="loss",
    endpoint="final",
    status="ok",
    value=1.25,
    mean=1.2,
    sd=0.01,
    half_width=0.1,
    floored=False,
    ratio=0.5,
)
E2 = EndpointResult(
    metric="acc",
    endpoint="tail_mean",
    status="not_finite",
    value=math.inf,
    mean=0.8,
    sd=0.0,
    half_width=0.001,
    floored=True,
    ratio=None,
    state="outside_noise",
    step=0.01,
)
E3 = EndpointResult(
    metric="acc",
    endpoint="final",
    status="missing",
    value=None,
    mean=0.0,
    sd=0.0,
    half_width=1e-12,
    floored=True,
    ratio=None,
    state="missing",
)
BAND = MetricBand(
    metric="loss",
    status="leaves_band",
    t=4.302652729749464,
    leaves_band_at=20,
    points_compared=3,
    points_out=2,
    points=(
        BandPoint(step=10, mean=1.5, lo=1.4, hi=1.6, value=1.55),
        BandPoint(step=20, mean=1.3, lo=1.2, hi=1.4, value=math.inf),
        BandPoint(step=30, mean=1.2, lo=1.1, hi=1.3, value=None),
    ),
)
BAND_EMPTY = MetricBand(
    metric="acc",
    status="no_overlap",
    t=2.0,
    leaves_band_at=None,
    points_compared=0,
    points_out=0,
    points=(),
)
W_MEASURED = WeightsDiagnostic(
    status="measured", ratio=math.inf, candidate_median=0.5, replica_median=0.0
)
W_NONE = WeightsDiagnostic(
    status="not_measured", ratio=None, candidate_median=None, replica_median=None
)
TW_REL = TooWide(metric="loss", endpoint="final", margin=0.001, half_width=0.1, mean=1.2)
TW_ABS = TooWide(
    metric="acc", endpoint="tail_mean", margin=math.inf, half_width=0.1, mean=0.0, margin_abs=0.01
)
TOST_1 = EndpointTost(metric="loss", endpoint="final", margin=0.012, diff=0.05, se=0.02, p=0.0199)
TOST_2 = EndpointTost(metric="acc", endpoint="tail_mean", margin=0.01, diff=None, se=0.003, p=1.0)
EQ = Equivalence(margin=0.005, relative=True, alpha=0.05, p=0.0199, endpoints=(TOST_1, TOST_2))
EQ_EMPTY = Equivalence(margin=0.01, relative=False, alpha=0.01, p=0.00001, endpoints=())
MS_1 = MetricSensitivity(metric="loss", endpoint="final", half_width=0.1, mean=1.2)
MS_0 = MetricSensitivity(metric="acc", endpoint="tail_mean", half_width=0.001, mean=0.0)
SENS = Sensitivity(metrics=(MS_1, MS_0))
SENS_EMPTY = Sensitivity(metrics=())
J_FULL = NoiseJudgement(
    status="WITHIN_NOISE",
    k=3,
    alpha=0.05,
    tests=2,
    t_endpoint=math.inf,
    t_step=4.302652729749464,
    endpoints=(E1, E2),
    bands=(BAND, BAND_EMPTY),
    weights=W_MEASURED,
    too_wide=(TW_REL, TW_ABS),
    not_judged=("extra",),
    reasons=("within the noise", "second line"),
    equivalence=EQ,
    sensitivity=SENS,
)
J_BARE = NoiseJudgement(
    status="NO_METRICS",
    k=2,
    alpha=0.01,
    tests=0,
    t_endpoint=None,
    t_step=12.7,
    endpoints=(),
    bands=(),
    weights=W_NONE,
    too_wide=(),
    not_judged=(),
    reasons=(),
)
J_OUT = NoiseJudgement(
    status="OUTSIDE_NOISE",
    k=4,
    alpha=0.05,
    tests=1,
    t_endpoint=3.2,
    t_step=3.18,
    endpoints=(E3,),
    bands=(BAND_EMPTY,),
    weights=W_NONE,
    too_wide=(),
    not_judged=("step_time", "lr"),
    reasons=("acc: missing",),
    equivalence=EQ_EMPTY,
    sensitivity=SENS_EMPTY,
)

# -- noise floors ------------------------------------------------------------------------

MF_STEP = MetricFloor(
    name="acc",
    finals=(0.85, 0.86, 0.85),
    tail_steps=(10,),
    tail_means=(0.85, 0.86, 0.85),
    steps=(StepStat(step=0, mean=0.5, sd=0.01), StepStat(step=10, mean=0.8533, sd=0.005)),
    step=Fraction(1, 100),
)
MF_SMOOTH = MetricFloor(
    name="loss", finals=(1.81, 1.811, 1.809), tail_steps=(), tail_means=(), steps=()
)
FLOOR = NoiseFloor(
    k=3,
    labels=("r1", "r2", "r3"),
    tail_fraction=0.02,
    metrics=(MF_STEP, MF_SMOOTH),
    skipped=(
        SkippedMetric(name="lr", reason="not_in_every_replica"),
        SkippedMetric(name="step_time", reason="timing"),
    ),
    weights_pairwise=(0.1, 0.0, math.inf),
)
FLOOR_BARE = NoiseFloor(
    k=2, labels=("a", "b"), tail_fraction=0.5, metrics=(), skipped=(), weights_pairwise=None
)
FLOOR_REAL = NoiseFloor.from_replicas(
    [{"acc": {0: 0.50, 10: 0.85}}, {"acc": {0: 0.51, 10: 0.85}}, {"acc": {0: 0.50, 10: 0.85}}],
    [{"acc": 0.85, "loss": 1.5}, {"acc": 0.85, "loss": 1.6}, {"acc": 0.85, "loss": 1.55}],
    weights_pairwise=[0.001, 0.002, 0.003],
    labels=["r1", "r2", "r3"],
)

# -- floor facts -------------------------------------------------------------------------

LEFT_1 = LeftOut(label="r1", status="WITHIN_NOISE", failed=())
LEFT_2 = LeftOut(label="r2", status="OUTSIDE_NOISE", failed=("loss final outside", "acc tail"))
CHECK = SelfCheck(
    status="NOT_WELL_BEHAVED",
    k=4,
    failures=2,
    results=(LEFT_1, LEFT_2),
    message="2 of 4 replicas fall outside the others' noise",
)
CHECK_FEW = SelfCheck(
    status="TOO_FEW_REPLICAS", k=3, failures=0, results=(), message="needs at least 4"
)
SPREAD = Spread(
    replicas=3, max_metric_gap=0.01, max_weight_rel_l2=0.002, identical_groups=(2, 1), floor_id=7
)
SPREAD_BARE = Spread(replicas=2, max_metric_gap=0, max_weight_rel_l2=0.0, identical_groups=())
COST_GPU = DeterminismCost(
    deterministic_s=12.5, nondeterministic_s=10.0, measured_on="gpu", off_verdict="EQUIVALENT"
)
COST_CPU = DeterminismCost(
    deterministic_s=3, nondeterministic_s=3.0, measured_on="cpu", off_verdict=None
)
TOL = Tolerance()
TOL_REL = Tolerance(rtol=1e-4, atol=0.0, alpha=0.01, margin=0.005)
TOL_ABS = Tolerance(margin_abs=0.01)
RECORD = FloorRecord(
    floor=FLOOR,
    original_run="orig",
    replicas=FLOOR.labels,
    tolerance=TOL_REL,
    self_check=CHECK,
    spread=SPREAD,
)
RECORD_BARE = FloorRecord(floor=FLOOR_BARE, original_run=None, replicas=(), tolerance=None)
FACT_STORED = NoiseFloorFact(
    fact_id=3,
    run_id="orig",
    created_at="2026-01-01T00:00:00Z",
    times=3,
    kind="floor",
    record=RECORD,
    stored_body={"floor": {"version": 1}, "odd": [1, 2]},
    body_sha256="ab" * 32,
)
FACT_RECORD = NoiseFloorFact(
    fact_id=4, run_id="orig", created_at="t", times=3, kind="floor", record=RECORD
)
FACT_COST = NoiseFloorFact(
    fact_id=5, run_id="orig", created_at="t", times=2, kind="determinism", determinism=COST_GPU
)
FACT_OTHER = NoiseFloorFact(
    fact_id=6, run_id="orig", created_at="t", times=0, kind="other", problem="unreadable"
)
REF = FloorRef(
    fact_id=3,
    run_id="orig",
    created_at="t",
    replicas=("r1", "r2", "r3"),
    k=3,
    candidate="b",
    in_sample=False,
)
REF_SHA = FloorRef(
    fact_id=9,
    run_id="orig",
    created_at="",
    replicas=(),
    k=2,
    candidate="a",
    in_sample=True,
    body_sha256="cd" * 32,
)
STORED_FLOOR = StoredFloor(fact_id=3, run_id="orig", created_at="t", floor=FLOOR, self_check=None)
PARAMS = NoiseParams()
PARAMS_ABS = NoiseParams(alpha=0.01, margin_abs=0.02, exit_run=2, window=0)
PARAMS_REL = NoiseParams(margin=0.01, tail_fraction=0.5, rel_floor=0, abs_floor=0.0)

# -- the comparison ----------------------------------------------------------------------

ROW_SAME = EnvRow(path="python", a="3.12", b="3.12", cls="same")
ROW_ABSENT = EnvRow(path="gpu.driver", a=None, b={"v": [1, 2.5]}, cls="unknown", present_a=False)
PKGS = PackagesDiff(
    count_a=3, count_b=4, added=("numpy",), removed=(), changed=(("torch", "2.1", "2.2"),)
)
PKGS_SAME = PackagesDiff(count_a=0, count_b=0, added=(), removed=(), changed=())
ENV = EnvironmentDiff(rows=(ROW_SAME, ROW_ABSENT), packages=PKGS)
ENV_BARE = EnvironmentDiff(rows=(), packages=None)
T_EQ = TensorDiff(name="w", status="equal")
T_FULL = TensorDiff(
    name="layer.bias",
    status="differs",
    dtype_a="float32",
    dtype_b="float16",
    shape_a=(3, 4),
    shape_b=(),
    numel=12,
    max_abs_diff=math.inf,
    rel_l2=math.nan,
    n_unequal=5,
    within_tolerance=False,
    value_a="1",
    value_b="2",
    note="n",
    state="outside_noise",
)
CKPT = CheckpointDiff(
    a="a.pt",
    b="b.pt",
    rtol=1e-5,
    atol=1e-8,
    tensors=(T_EQ, T_FULL),
    n_equal=1,
    n_close=0,
    n_differ=1,
    n_mismatch=1,
    only_a=("x",),
    only_b=(),
    worst=(T_FULL,),
    same_tensors=False,
    within_tolerance=False,
    bytes_compared=1024,
    metadata=(T_EQ,),
)
CKPT_BARE = CheckpointDiff(
    a="a",
    b="b",
    rtol=0.0,
    atol=0.0,
    tensors=(),
    n_equal=0,
    n_close=0,
    n_differ=0,
    n_mismatch=0,
    only_a=(),
    only_b=(),
    worst=(),
    same_tensors=True,
    within_tolerance=True,
)
MD_FULL = MetricDiff(
    name="loss",
    a=1.0,
    b=2.5,
    abs_diff=math.inf,
    rel_diff=math.nan,
    final_bitwise_equal=False,
    final_within_tol=False,
    bitwise_equal=False,
    within_tol=False,
    timing=False,
    has_history=True,
    steps_compared=10,
    steps_only_a=2,
    steps_only_b=1,
    example_steps_only_a=(1, 2),
    example_steps_only_b=(3,),
    first_step_differs=4,
    first_step_out_of_tol=5,
    a_at_out_of_tol=1.5,
    b_at_out_of_tol=-2.0,
    history_max_abs_diff=0.25,
    missing=("history step 3",),
    state="diverged",
)
MD_INF = MetricDiff(
    name="acc",
    a=math.inf,
    b=math.nan,
    abs_diff=math.nan,
    rel_diff=None,
    final_bitwise_equal=False,
    final_within_tol=False,
    bitwise_equal=False,
    within_tol=True,
    timing=False,
    has_history=False,
    a_at_out_of_tol=-math.inf,
    missing=("b",),
)
"""Its raw finals are not finite: only a comparison (which makes its body strict) writes it."""
MD_BARE = MetricDiff(
    name="step_time",
    a=None,
    b=None,
    abs_diff=None,
    rel_diff=None,
    final_bitwise_equal=None,
    final_within_tol=None,
    bitwise_equal=True,
    within_tol=True,
    timing=True,
    has_history=False,
)
ART_FULL = ArtifactDiff(
    path="ckpt/last.pt",
    status="differs",
    kind_a="checkpoint",
    kind_b="checkpoint",
    sha256_a="aa",
    sha256_b="bb",
    size_a=10,
    size_b=11,
    tensor_sha256_a="ta",
    tensor_sha256_b="tb",
    checkpoint="out_of_tolerance",
    tensors=CKPT,
    note="n",
    error="e",
    stale_a="s",
    stale_b="t",
    volatile="logs/*",
    state="diverged",
)
ART_BARE = ArtifactDiff(path="log.txt", status="only_a")
GAP = Gap(
    code="NO_SEED", severity="warning", field="seed", message="no seed", remediation="seed it"
)
COMP_BARE = Comparison(
    a_run="A",
    b_run="B",
    verdict="IDENTICAL",
    reasons=(),
    missing=(),
    artifacts=(),
    metrics=(),
    environment=ENV_BARE,
    gaps=(),
    gap_counts={},
    rtol=1e-5,
    atol=1e-8,
)
COMP_FULL = Comparison(
    a_run="A",
    b_run="B",
    verdict="WITHIN_NOISE",
    reasons=("r1", "r2"),
    missing=("m",),
    artifacts=(ART_FULL, ART_BARE),
    metrics=(MD_FULL, MD_BARE),
    environment=ENV,
    gaps=(GAP,),
    gap_counts={"a": GapCounts(critical=1), "pair": GapCounts(info=2)},
    rtol=1e-4,
    atol=0.0,
    a_status="succeeded",
    b_status="failed",
    b_replays_a=True,
    probable_causes=("NO_SEED",),
    alpha=0.01,
    margin=0.005,
    noise=J_FULL,
    floor=REF_SHA,
    shared_causes=("DETERMINISM_OFF",),
)
COMP_NOISE_NO_FLOOR = Comparison(
    a_run="A",
    b_run="B",
    verdict="DIVERGED",
    reasons=("x",),
    missing=(),
    artifacts=(),
    metrics=(MD_INF, MD_BARE),
    environment=ENV_BARE,
    gaps=(),
    gap_counts={"b": GapCounts()},
    rtol=1e-5,
    atol=1e-8,
    noise=J_OUT,
)

PINNED: dict[str, tuple[Any, str]] = {
    "E1": (E1, "2177bc3b76bdd222efe4891a4fdd5b467abb8457c50053c12be9d4bc42264742"),
    "E2": (E2, "d782ebd271442977b4bdba7c9408772f2e0d7981cf14ce4c9e41a84973f0e9d8"),
    "E3": (E3, "292b07d626365a71b12bb5893b7d9e4e1f10ea3b93bab551210c3526f14ee014"),
    "BAND": (BAND, "91823859dc4f75255f61c139143a8765d5959173a8bf1d2b5d248ea2c293bf1d"),
    "BAND_EMPTY": (BAND_EMPTY, "aa4f9557dba3f503a08d04dbddde625ed5f938acb333809effe6d83ce46f82c1"),
    "W_MEASURED": (W_MEASURED, "a3485074b7d381ea42a4f341c70c20ed22c3de66564ac8f4fd5107fa41d1b193"),
    "W_NONE": (W_NONE, "38e77ad643817a81d3eba56a44dfcc6d5cc25385e51712e5a0dd66d78ea9f88e"),
    "TW_REL": (TW_REL, "c812715d89c23112fe798aad059dfe11bc6580e3f8fd9f905c7174fb79bf0fdb"),
    "TW_ABS": (TW_ABS, "af1a3b749610ec978fe0f116207ce6294535f2451e0e7e9863a947ddaffdd933"),
    "TOST_1": (TOST_1, "dc39bc3a9dec6f58677efde885cd4e8818dd59e71e3e59e7292872bfccd2f2b3"),
    "TOST_2": (TOST_2, "f39c495a69ddf7af7baf401d84da75465bd740dddedb88ebfa7b5592f3c9f19d"),
    "EQ": (EQ, "e6b65e45c6fdcb68eeef3471dd03379aeb54c8061cf9a1494e8f45acc503186e"),
    "EQ_EMPTY": (EQ_EMPTY, "3265146d1ba915ba0a70a95590eb98243119a7e3f96fd00c3fbc8ad5ece56df5"),
    "MS_1": (MS_1, "c91761d9d19258a18fb965ae0db0172671527bf831191741c20f0f42ea25a6a3"),
    "MS_0": (MS_0, "423b0854099222808cd6ff79ed0ab6978c78494de2b815995d748044a1b7e1db"),
    "SENS": (SENS, "131a2e69495f84e5f309c060311bce3a020909d35fd32085bc9aaf53f2243ba3"),
    "SENS_EMPTY": (SENS_EMPTY, "5a8b581f38e632a77f2280bdc0937d4e0267dc9532198ffdd705bf4d8c6c740b"),
    "J_FULL": (J_FULL, "088ce9bc36d066f9bfdcb91e7ad728617423af444a592aa5da577e3d2496490a"),
    "J_BARE": (J_BARE, "654adf2bca5ab97abcd516e539baafe7b80a7fc9357c2b693ee0449ebb5fce71"),
    "J_OUT": (J_OUT, "50e08f2f0ccc809cd5f1d0b2e89ae31a4a6ac39e223b658265cb467d56a76725"),
    "MF_STEP": (MF_STEP, "c3b4c0d1293b76e10ee1f92efe6679be0afabbe3ab47eae5b3f6957b18fb65aa"),
    "MF_SMOOTH": (MF_SMOOTH, "e1ea8d513e56f07f2c17da379d5eae656314158093218874d85cdd4e4530006e"),
    "FLOOR": (FLOOR, "a21dc7b0e3d8e00180fb8ff89c745603fdfb38d252f906af5459aa82f785d7d4"),
    "FLOOR_BARE": (FLOOR_BARE, "bab929c7142d402e9705c5f931ea1ecd3978887741a5e9fc61b4cc7f4b875b9e"),
    "FLOOR_REAL": (FLOOR_REAL, "f1b6b678b47b1838c70b48dc8affaa51ad7b30301979c94028ac6cea16daf3c5"),
    "LEFT_1": (LEFT_1, "aead3f6a7f214c0f6f93aa952e3f2b71579b944236b129a5bc4a8a70a42ea7f9"),
    "LEFT_2": (LEFT_2, "c76b1d0c7fe9cc29c7ad5eba3642070eed6b850bf639418190b2173d0b1c8b0a"),
    "CHECK": (CHECK, "7bb784db353682a9f62f775c0591f6fa13e0034bfa078314bcbf3abbdc8533c7"),
    "CHECK_FEW": (CHECK_FEW, "374a621ef08a912b2c2ef0c81ab7ff964cade51bcb13a4f4aa60c95abeef35b3"),
    "SPREAD": (SPREAD, "dda1381d9b26a17d3c6606a223f816452e7bab0720c0319afd5f9e402070bff4"),
    "SPREAD_BARE": (
        SPREAD_BARE,
        "7a5f60830bd2819eeee45bdd7f7198440c46bf1b83dc76c282bb879e6f8ec9a9",
    ),
    "COST_GPU": (COST_GPU, "890e89c2d435b9ac17ab9f9c40b3aea2c4a49943e95c93621693fe5e524ca465"),
    "COST_CPU": (COST_CPU, "81595ff0d1c3b6a0b1cbbd1cf2aaf141ed4103fd78929a6575ca9375835e647b"),
    "TOL": (TOL, "613dad754bc896e3c0483cd4743f9d8840434cd43114e386a508d79afafd9e01"),
    "TOL_REL": (TOL_REL, "4f05ca66cf9afc5810ac4d05c86cf08343b6d8926b3fa8379b4180fa90c0224c"),
    "TOL_ABS": (TOL_ABS, "2aff7f258fa5b7958e933523ea2cdb5f54b357d3f48358625cd822db5f42fe5c"),
    "RECORD": (RECORD, "ac574bb1e5f2f962b8d1b97821b941955e86eac2071e9a5a47f2c742e5118410"),
    "RECORD_BARE": (
        RECORD_BARE,
        "4e30241d0bf7203bf1ac5e4b339ec05b4fcbb9eb4653e39b3ea989ce3237e85b",
    ),
    "FACT_STORED": (
        FACT_STORED,
        "9e9408c3968c3f5d3ee38d9de35e701c647d8f3105be9659c26f56f734b0fe77",
    ),
    "FACT_RECORD": (
        FACT_RECORD,
        "59b9e4eb77a922d175c6b1254d473608e00c1b0a7372ea351d8fc70fd4b2f1d3",
    ),
    "FACT_COST": (FACT_COST, "a6e4be074cf83e57fe8a253307194449ef4e712c1685079710032333563a5589"),
    "FACT_OTHER": (FACT_OTHER, "1c1c56d7c758745a1f141aa4fa6c75d35af8c7892f8c29eb54bcc79cae59d9dc"),
    "REF": (REF, "cabffafb297735db8636e49e38955f59fe4c9972f49814a01ea1a279b3d5b055"),
    "REF_SHA": (REF_SHA, "d86301fbaea297a65410a7001811576739f7108b0a72772dcfb7fc02c023088e"),
    "PARAMS": (PARAMS, "aa7c3a50e9cd04c6829879b5201a2e4500066bbfb26888abf4f85cecaf7fa1fe"),
    "PARAMS_ABS": (PARAMS_ABS, "acbbe65fc3beffab06d3793c6ff5882dc3a2343d7378dfeed56c4074a6da8fd9"),
    "PARAMS_REL": (PARAMS_REL, "f4600d179efefebe752957a554adb9eeccbf3a05d6df019c9d664d820c442be9"),
    "ROW_SAME": (ROW_SAME, "2c2e0f37cf3fab96f7e0dafbbb7d7d537e358ae5fe907d17ce59e65ee367ad74"),
    "ROW_ABSENT": (ROW_ABSENT, "e265aaba63232744832c69cd4c2619e840bc77d61d1cf17d383bf9fa65111495"),
    "PKGS": (PKGS, "cf0b89303ac0f646ae8093004fb84384a9a215ab4311f2448bf3abc0df3ac7d1"),
    "PKGS_SAME": (PKGS_SAME, "f933ac1d7ab82330e0403589c106bc11ac8aec4c89454412f6e7a3ff917f509e"),
    "ENV": (ENV, "be9021e645a5dc3c13ed0ef820e08a08633998f92f698167af0c6464b316d54e"),
    "ENV_BARE": (ENV_BARE, "28d1d2aff50853a5b4ea43103a1eddde64f66f20396179ade22214ea6a075ed1"),
    "T_EQ": (T_EQ, "0a01932a9458c2426dfc80fdf7f3b0d7118c523d99f909af87005ff44b172a18"),
    "T_FULL": (T_FULL, "926987048ec7e002a0d64d653b2636cd0b65ee9b6c75cfd0999f88d9f43c8a41"),
    "CKPT": (CKPT, "937043c9942c1cd6d720a722bf52061e9bb623669ea7c6083b911996922c10dc"),
    "CKPT_BARE": (CKPT_BARE, "cc3e0080a4e967a3ecab800e473be463948dc670c39cbe23b148732d4a36ad1c"),
    "MD_FULL": (MD_FULL, "d8358c51a5e5066cdf678a70e0de9087257793ec9173f70ba8377fe62e1abf53"),
    "MD_BARE": (MD_BARE, "25041134e71fc51a9f1ddb2e4718ea9c13b5437359e4f9acd9a2ebc4c305ee41"),
    "ART_FULL": (ART_FULL, "ab4ac984824e969cf4c58654f74f2accaa151d31badd94168a796a6f9c65057e"),
    "ART_BARE": (ART_BARE, "bffe6073c780b3887d440e1d68be13877cc1732d07b35d0f010fcf903a992c07"),
    "COMP_BARE": (COMP_BARE, "3f0e907de694c20eb5e868b9bfdc4c12ea993b06465dc57521da3848cb441236"),
    "COMP_FULL": (COMP_FULL, "757cad355844b1c98eecd40864e4de4ed556a544b852e890e16c76d9ad49d244"),
    "COMP_NOISE_NO_FLOOR": (
        COMP_NOISE_NO_FLOOR,
        "1f2fbc3632b45c28f2582787ebd62272d03f03b1353fe15f8fd6956d65bca723",
    ),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_stored_bytes_are_pinned(name: str) -> None:
    obj, pinned = PINNED[name]
    assert _sha(_body(obj)) == pinned


ORDER: dict[str, str] = {
    "E1": "0523e27e345d852958efadddea7b26e50c1c6badd0dba506fcbdec3e23f4a245",
    "E2": "6c621b3e2fa2d0e7c408b175d30a7762780665f0e56abbc574c27755769cd737",
    "E3": "67fbd8f654a5252cdda80c292684e859431975a075909a9f9c9bf94b9232283d",
    "BAND": "25605a110e3075511aebddea534f669229dbd78c6effd1f8e742e8c7f407bff9",
    "BAND_EMPTY": "ce6fe7cbcf0a79da354505eca17aeb3a20c4d5bf5fabb23c42bbbcb30a375a3a",
    "W_MEASURED": "4402af145ed640c29359a6f0cabf93d6e7dc5d6e2c3b143a9a808b3c376eddda",
    "W_NONE": "f923a4f4055a62e257c1f731f956dca06c6b35d6c959c2577e5937332d9849a8",
    "TW_REL": "851fd7ed6372df5dfd8f6b25e39acf16c8a03bfa4fa8d40b9816d322b5272eab",
    "TW_ABS": "a1374680e780bbfe11a950b70e23d400e2a259d22cc9c8a05fec34ca23360249",
    "TOST_1": "825ef15868c9a6ec503d6115b7444df3f1701a692a7e33cdc3f1f5efc1038f40",
    "TOST_2": "0977016f452decd5e404a4c1271a718a8f7ecee662b02a8800840e332ede08fd",
    "EQ": "7b71cf106bb9a53327ed41eeec3a6c90ebca2b638d576db19170b4de2faa4ac5",
    "EQ_EMPTY": "f31c3674b61b0eb7ab4e23352cce5ae6b45c9e8e26a41cc90f81cd1f6f23e01d",
    "MS_1": "1e13976ad929d70fa0f8eeb00da812990e8304201171bd707af56287794013f4",
    "MS_0": "c34cbaabdc8f0454ed6a00f1ba81a5605ed2e8f543a421b85c7926d3e93b09b5",
    "SENS": "ace88c46de9a633d96bf177c830167ff12edd1efb40e865044ed8319bfdeb1cb",
    "SENS_EMPTY": "2185103de6da483813f8af40788bb3b742e4b8f3e4a6c176e4e4d561462a5739",
    "J_FULL": "71f8fd5e479755568b3a24e8021a133c90aaa4aa900fad0ad7e5d410c82d3da1",
    "J_BARE": "46b0776433aec7d58675de3611a11c40ee6a1ed09e0ed3648a246bb8859ee06b",
    "J_OUT": "8384a81cb0cec36328b1cf2ebc3e6cf339ae268061cfb1c5105d14ceceb74563",
    "MF_STEP": "8c334062cc0cd99eff8b370cedf0cecb84f9c09cdbf33c703ec75b06ee276393",
    "MF_SMOOTH": "7de7c871bb8dc5a3e3ff1f6d6e8072f8f06da7d51ecefbc26c68273ce9aeb8c0",
    "FLOOR": "5ec3c3272679ad4957b7e509007347062d90c1ae1db9ea8f189c49bf4746d56b",
    "FLOOR_BARE": "ccba7c704be26570246fa3124a0f6b230c8323a5f9af4bd86b982b2ba33d9075",
    "FLOOR_REAL": "034265e8f9e0fb5757e93ac4d7dcdf967753d11a005910e48bdae7754e2857cf",
    "LEFT_1": "1948ffdd8a0e44f90a1dfbd127a9ee0653bfc9068d51343d7323da01accb6c8e",
    "LEFT_2": "9c6e9a465b04839e7a7836627c578cefc89c5bbd5b4b3bee1851f0b5edfab372",
    "CHECK": "a4c1048225061e9b812ca854f4be1da5df8b26ad1a412fbe9017320393a29f3b",
    "CHECK_FEW": "eb397a86c8fce8af8f0d4aa7ad3e97acfe9406c25c023753b8a167b6d1e51a28",
    "SPREAD": "61aa2cba2534efbd626194401a5196a911eb64b941c856f45e12e6a68e5bc7f0",
    "SPREAD_BARE": "ec22196779b54401b2b52ea8969765cdac1a331724e7314c6ddab0358401e324",
    "COST_GPU": "7975fea424e62dc3e359585ac7b79111db129ce144a92ced33d457c7541f8755",
    "COST_CPU": "8bf32e8a149fa4a8669d50839469cdf59fb00b597064d6e884898f8525678fe9",
    "TOL": "26709112497d0327c854da6103c5b0479aa5a53edd4ea66ad50f6e165e202e33",
    "TOL_REL": "4708719578b0aaef93c8970862d571de6a83fb4595a5216eac578a003494942a",
    "TOL_ABS": "287ed7ca0663707d0ed75053c740c972f943b0e44b56954590a286c9dc4e4e09",
    "RECORD": "efc356a39e17403c85d16ac500ef64991df06e5183b3d82b0b8ae2d3fc5efac3",
    "RECORD_BARE": "1d72fa25104309fee4b4c702cad50cfa3c078cd50dab12b182f9f5c32a0ddb71",
    "FACT_STORED": "769016fed1429b5adcca53bc81c544b478de88c404ed0e172baa733d885c7efe",
    "FACT_RECORD": "e1176633afe5e44a0a332e8bf7768b4d8c21358aa2d84aa2b9e9c5ff8112fcac",
    "FACT_COST": "161cac4da5d4e30714e905b2ef0f0f6d378a25feae4dca7230313f269cd88d96",
    "FACT_OTHER": "f5d20934281add2d61ad2736aa8d44dfe34f2f805d6732593dc86e3b18318d7d",
    "REF": "d3db1251ee9ec3ba13ef12e1b3c1fd256ec94d7c012a42d9c25e158dc31c7667",
    "REF_SHA": "17e2777bc452bb7942035430659c557bf97182654cae3c4b5c49346d54b30ae1",
    "PARAMS": "9f834535028a2176cb5bd8742ed5cb2887dc7a7644a34ddf01af2a59719996c5",
    "PARAMS_ABS": "4bdad1e42a4351088cd5987704ef254f484cc9e5a7d6d2a532ebff7476e0c330",
    "PARAMS_REL": "d876b449eb8e5ec82f41c78cd179a80044320e78a97c77f6cdcd232912c8170a",
    "ROW_SAME": "c12701eb68b510acbba4b1872054ef725c1c1f5f0d5850801ad8e1906e0d442a",
    "ROW_ABSENT": "67a65b8172134ab6032dc35e43877c4d13083bc3781809e6717887cffc563e51",
    "PKGS": "9656fca26ac94f01594c91da5451a80a745b20dc20271737ab7650875fbf8584",
    "PKGS_SAME": "a23eb4e017fe9090b1c7e212a74c62f6015ff1ac32f90a18dfc04807332a8f8a",
    "ENV": "47a29aeac679caf7fa8aafeb71cf11d4c737470b800dee6bba6cb3afacab45b5",
    "ENV_BARE": "2ec7c39037d6b5b0abbd580700b7870fbfb36021e76938169c00ea477529e6d6",
    "T_EQ": "8730f1298e9d31d8d348a48e032e278d379532a869d76135ff0644552dc7a372",
    "T_FULL": "c470dca9b6bfac0925891a1d8167ad5c7f45fdc1b0733c129e2a7d43e1083bae",
    "CKPT": "47e30a77f5e4f6baab7e4baad846bc86917621e1c2d1a19bc35e44fd61985192",
    "CKPT_BARE": "499c9b13cedfaf138d74d43b224cab3aaee163aa03b10c272e3de545cd2c2fd0",
    "MD_FULL": "609b1ca7fcf045018a1822e6acd281b87166ce41d13d3540b4a1a9f5b9418463",
    "MD_BARE": "8d1e4c87db625600e839edbe0e4b280d6a0396eee774a31fa28d7b5a17bcf6f8",
    "ART_FULL": "bddf051ded121a0f99c52ade56c3ed6e918b2dd0444ec7150d2fcdabcaa4f346",
    "ART_BARE": "fe50ef71090734e4681a0846360d6232c748a52adf177c22acdea2771beff94d",
    "COMP_BARE": "e5791b5f7e422b5979753a1525ac817cbe3c6773e51ab88e693b745459fe0928",
    "COMP_FULL": "3b432259a6ecfac234d8cf0f912a7fb7d31e4fed8a0f740eb7a9006f7eb047aa",
    "COMP_NOISE_NO_FLOOR": "71966590780f8e91fb0b95968fff35a8d586123487df37d9859a6975cb87ba6b",
}
"""The hash of each body as ``json.dumps`` writes it (keys in the order ``to_dict`` gives
them, which ``--json`` prints): the order the hand-written writers gave."""


@pytest.mark.parametrize("name", sorted(ORDER))
def test_the_order_of_keys_is_pinned(name: str) -> None:
    obj = PINNED[name][0]
    assert hashlib.sha256(json.dumps(_body(obj)).encode()).hexdigest() == ORDER[name]


def _same_bytes(read: Callable[[Any], Any], obj: Any) -> None:
    """``read`` of the stored body gives the object back (by its re-dumped bytes where
    a NaN makes ``==`` fail) and the same bytes."""
    body = json.loads(dumps(_body(obj)))
    back = read(body)
    assert dumps(_body(back)) == dumps(_body(obj))
    if "nan" not in dumps(_body(obj)).decode():
        assert back == obj


READERS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "BAND": (BAND, MetricBand.from_dict),
    "BAND_EMPTY": (BAND_EMPTY, MetricBand.from_dict),
    "W_MEASURED": (W_MEASURED, WeightsDiagnostic.from_dict),
    "W_NONE": (W_NONE, WeightsDiagnostic.from_dict),
    "TW_REL": (TW_REL, TooWide.from_dict),
    "TW_ABS": (TW_ABS, TooWide.from_dict),
    "TOST_1": (TOST_1, EndpointTost.from_dict),
    "TOST_2": (TOST_2, EndpointTost.from_dict),
    "EQ": (EQ, Equivalence.from_dict),
    "EQ_EMPTY": (EQ_EMPTY, Equivalence.from_dict),
    "MS_1": (MS_1, MetricSensitivity.from_dict),
    "SENS": (SENS, Sensitivity.from_dict),
    "SENS_EMPTY": (SENS_EMPTY, Sensitivity.from_dict),
    "J_FULL": (J_FULL, NoiseJudgement.from_dict),
    "J_BARE": (J_BARE, NoiseJudgement.from_dict),
    "J_OUT": (J_OUT, NoiseJudgement.from_dict),
    "FLOOR": (FLOOR, NoiseFloor.from_dict),
    "FLOOR_BARE": (FLOOR_BARE, NoiseFloor.from_dict),
    "FLOOR_REAL": (FLOOR_REAL, NoiseFloor.from_dict),
    "CHECK": (CHECK, SelfCheck.from_dict),
    "CHECK_FEW": (CHECK_FEW, SelfCheck.from_dict),
    "SPREAD": (SPREAD, Spread.from_dict),
    "SPREAD_BARE": (SPREAD_BARE, Spread.from_dict),
    "COST_GPU": (COST_GPU, DeterminismCost.from_dict),
    "COST_CPU": (COST_CPU, DeterminismCost.from_dict),
    "TOL": (TOL, Tolerance.from_dict),
    "TOL_REL": (TOL_REL, Tolerance.from_dict),
    "TOL_ABS": (TOL_ABS, Tolerance.from_dict),
    "RECORD": (RECORD, FloorRecord.from_dict),
    "RECORD_BARE": (RECORD_BARE, FloorRecord.from_dict),
    "REF": (REF, FloorRef.from_dict),
    "REF_SHA": (REF_SHA, FloorRef.from_dict),
    "PARAMS": (PARAMS, NoiseParams.from_dict),
    "PARAMS_ABS": (PARAMS_ABS, NoiseParams.from_dict),
    "PARAMS_REL": (PARAMS_REL, NoiseParams.from_dict),
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_stored_bodies_read_back(name: str) -> None:
    obj, read = READERS[name]
    _same_bytes(read, obj)


def test_a_floor_fact_reads_back_as_it_was_stored() -> None:
    fact = {"id": 4, "created_at": "t", "times": 3, "body": json.loads(dumps(_body(RECORD)))}
    back = NoiseFloorFact.from_row("orig", fact)
    assert back.kind == "floor" and back.record == RECORD
    assert dumps(_body(back)) == dumps(fact)
    cost = {
        "id": 5,
        "created_at": "t",
        "times": 2,
        "body": json.loads(dumps(_body(FACT_COST)["body"])),
    }
    back = NoiseFloorFact.from_row("orig", cost)
    assert back.kind == "determinism" and back.determinism == COST_GPU


def test_a_stored_floor_names_itself_as_before() -> None:
    assert (
        _sha(STORED_FLOOR.to_ref())
        == "df199259ab7f20badc6e62090188283704a29a0ad9d4ba35668be3281212e09f"
    )


def test_the_bundle_comparison_reads_back_to_its_own_bytes() -> None:
    stored = json.loads(BUNDLE.read_text())
    for item in stored["comparisons"]:
        body = item["comparison"]
        assert dumps(comparison_from_dict(body).to_dict()) == dumps(body)
    assert _sha(stored) == "e446539105482ca314e18acfa9f52a8fe1a3bed66c513d7d13de0969a317469e"


@pytest.mark.parametrize(
    "obj",
    [
        COMP_BARE,
        COMP_NOISE_NO_FLOOR,
        # the stored reader keeps a checkpoint's metadata leaves as they were stored
        # (objects, not TensorDiffs), so this one's checkpoint has none
        replace(COMP_FULL, artifacts=(replace(ART_FULL, tensors=replace(CKPT, metadata=())),)),
    ],
)
def test_a_comparison_reads_back_to_its_own_bytes(obj: Comparison) -> None:
    body = json.loads(dumps(obj.to_dict()))
    assert dumps(comparison_from_dict(body).to_dict()) == dumps(body)


INVALID_STATE = {"MD_FULL", "ART_FULL", "COMP_FULL"}
"""These hold the state ``diverged``, which no item has (``compare.states``): the old
writers wrote it as given, and the wire models' reading refuses it."""


@pytest.mark.parametrize(
    "name",
    sorted(n for n, (o, _) in PINNED.items() if isinstance(o, Wire) and n not in INVALID_STATE),
)
def test_every_wire_model_reads_its_own_body_back(name: str) -> None:
    obj = PINNED[name][0]
    _same_bytes(type(obj).from_dict, obj)


@pytest.mark.parametrize("name", sorted(INVALID_STATE))
def test_a_state_no_item_has_is_refused(name: str) -> None:
    obj = PINNED[name][0]
    with pytest.raises(ValueError, match=r"state: expected one of identical"):
        type(obj).from_dict(json.loads(dumps(obj.to_dict())))
