"""Service-level indicators of reproducibility, computed from the store.

Definitions (every figure is over *original* runs and the replays run from this store;
replays with determinism switched off are experiments and never count):

- reproducible run rate: of original runs with a completed replay, the share whose latest
  completed replay's verdict is reproduced (IDENTICAL, EQUIVALENT, or WITHIN_NOISE of the
  run's own noise floor).  Cancelled, interrupted, timed-out and infrastructure-failed
  replays never count here (``replay_tui.verdicts``).
- bit-identical run rate: of the same runs, the share whose latest completed replay is
  IDENTICAL (the stricter figure beside it).
- aborted replay rate: of replays tried, the share that did not complete (cancelled,
  interrupted, timed out, infrastructure error), with the count per status.
- checkpoint hash match rate: over (replay, checkpoint of its original with a sha256)
  pairs, the share where the replay wrote a file of the same path and sha256.
- metric variance: population variance of a metric's final value over an original run
  and its succeeded replays (timing metrics excluded), one figure per (run, metric) that
  has at least two values; reported as the largest and the mean.
- data verification rate: of replays that ran, of runs with data inputs, the share whose
  every input matched its recorded hash (not ``--force-data``).  Beside it, the data hashed
  rate: the share of original runs' data inputs recorded with a content hash.
- nondeterministic ops: ops seen at run time in original runs (total, runs, distinct).
- training time variance: population variance of the duration (s^2) over an original run
  and its succeeded replays; largest and mean, and the largest coefficient of variation.
- attested run rate: share of original runs with a signed evidence bundle.
- drill pass rate: share of drills that passed.

A rate with nothing to count is ``None`` (JSON ``null``, Prometheus ``NaN``).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from replay_tui.compare.metrics import is_timing_metric
from replay_tui.verdicts import ABORTED, is_bit_identical, is_reproduced, summarize
from storage import readmodel
from storage.store import RunStore
from storage.wire import Wire, wire


@dataclass(frozen=True)
class Ratio(Wire):
    """A share: written with its value first (None when there is nothing to count)."""

    WIRE_EXTRA = ("value",)
    WIRE_ORDER = ("value",)

    numerator: int
    denominator: int

    @property
    def value(self) -> float | None:
        return self.numerator / self.denominator if self.denominator else None

    def text(self, of: str) -> str:
        if not self.denominator:
            return f"-  (no {of})"
        share = 100 * self.numerator / self.denominator
        return f"{share:.1f}%  ({self.numerator} of {self.denominator} {of})"


@dataclass(frozen=True)
class AbortedRate(Ratio):
    """The aborted replay rate, with the count of each status that aborted."""

    by_status: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Spread(Wire):
    """Per-group variances summarised: how many groups, the largest, the mean."""

    groups: int
    max: float | None
    mean: float | None

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        if not values:
            return cls(groups=0, max=None, mean=None)
        return cls(groups=len(values), max=max(values), mean=statistics.fmean(values))


@dataclass(frozen=True)
class MetricVariance(Spread):
    """The metric variance, with the (run, metric) pairs that vary most."""

    worst: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class OpsSeen(Wire):
    """Nondeterministic ops seen at run time in original runs: in all, in how many runs,
    and which."""

    total: int
    runs: int
    distinct: list[str]


@dataclass(frozen=True)
class Stats(Wire):
    original_runs: int
    replays: int
    reproducible: Ratio = field(metadata=wire(key="reproducible_run_rate"))
    bit_identical: Ratio = field(metadata=wire(key="bit_identical_run_rate"))
    aborted: AbortedRate = field(metadata=wire(key="aborted_replay_rate"))
    checkpoint_match: Ratio = field(metadata=wire(key="checkpoint_hash_match_rate"))
    metric_variance: MetricVariance
    data_verified: Ratio = field(metadata=wire(key="data_verification_rate"))
    data_hashed: Ratio = field(metadata=wire(key="data_hashed_rate"))
    nondeterministic: OpsSeen = field(metadata=wire(key="nondeterministic_ops"))
    training_time_variance: Spread = field(metadata=wire(key="training_time_variance_s2"))
    training_time_cv_max: float | None
    attested: Ratio = field(metadata=wire(key="attested_run_rate"))
    drills: Ratio = field(metadata=wire(key="drill_pass_rate"))
    last_drill_at: str | None
    without_image: Ratio = field(
        default_factory=lambda: Ratio(numerator=0, denominator=0),
        metadata=wire(key="runs_without_image"),
    )
    """Succeeded original runs recorded without an image, of all succeeded original runs
    (``readmodel.WITHOUT_IMAGE``: a drill on a pinned backend leaves the same runs out)."""
    generated_at: str = field(default="")

    @property
    def aborted_by_status(self) -> dict[str, int]:
        return self.aborted.by_status

    @property
    def worst_metrics(self) -> list[dict[str, Any]]:
        return self.metric_variance.worst

    @property
    def nondeterministic_ops(self) -> int:
        return self.nondeterministic.total

    @property
    def runs_with_nondeterministic_ops(self) -> int:
        return self.nondeterministic.runs

    @property
    def distinct_nondeterministic_ops(self) -> list[str]:
        return self.nondeterministic.distinct

    def text(self) -> str:
        def g(x: float | None) -> str:
            return "-" if x is None else f"{x:.4g}"

        mv, tv = self.metric_variance, self.training_time_variance
        rows = [
            ("original runs", str(self.original_runs)),
            ("replays", str(self.replays)),
            ("reproducible run rate", self.reproducible.text("runs with a completed replay")),
            ("bit-identical run rate", self.bit_identical.text("runs with a completed replay")),
            (
                "aborted replay rate",
                self.aborted.text("replays tried")
                + "".join(
                    f", {n} {s.replace('_', ' ')}" for s, n in self.aborted_by_status.items() if n
                ),
            ),
            ("checkpoint hash match rate", self.checkpoint_match.text("checkpoints compared")),
            ("metric variance", f"max {g(mv.max)}, mean {g(mv.mean)}  ({mv.groups} run-metrics)"),
            ("data verification rate", self.data_verified.text("replays with data")),
            ("data hashed rate", self.data_hashed.text("data inputs")),
            (
                "nondeterministic ops",
                f"{self.nondeterministic_ops} in {self.runs_with_nondeterministic_ops} run(s)"
                + (
                    f": {', '.join(self.distinct_nondeterministic_ops[:5])}"
                    if self.distinct_nondeterministic_ops
                    else ""
                ),
            ),
            (
                "training time variance",
                f"max {g(tv.max)} s², mean {g(tv.mean)} s², max CV {g(self.training_time_cv_max)}"
                f"  ({tv.groups} runs)",
            ),
            ("attested (signed) run rate", self.attested.text("original runs")),
            (
                "drill pass rate",
                self.drills.text("drills")
                + (f", last {self.last_drill_at}" if self.last_drill_at else ""),
            ),
            (
                "runs without an image",
                self.without_image.text("succeeded original runs")
                + ("; a pinned drill leaves them out" if self.without_image.numerator else ""),
            ),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _pvariance(values: list[float]) -> float:
    return statistics.pvariance(values) if len(values) > 1 else 0.0


def compute_stats(store: RunStore) -> Stats:
    from storage.ledger import utc_now

    with readmodel.snapshot(store):
        facts = readmodel.sli_facts(store)
    return stats_from(facts, utc_now())


def stats_from(f: readmodel.SliFacts, now: str) -> Stats:
    """The SLIs from the store's raw counts (``storage.readmodel.sli_facts``)."""
    # every counted replay per original run: the latest completed verdict, the aborted
    sums = [summarize(x) for x in f.replay_outcomes.values()]
    judged = [x for x in sums if x.verdict is not None]
    reproducible = Ratio(
        numerator=sum(is_reproduced(x.verdict) for x in judged), denominator=len(judged)
    )
    bit_identical = Ratio(
        numerator=sum(is_bit_identical(x.verdict) for x in judged), denominator=len(judged)
    )
    by_status = {st: sum(x.aborted.get(st, 0) for x in sums) for st in ABORTED}
    aborted = AbortedRate(
        numerator=sum(by_status.values()),
        denominator=sum(x.attempts for x in sums),
        by_status=by_status,
    )
    metric_values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for orig, finals in f.finals.items():
        for name, final in finals:
            if not is_timing_metric(name):
                metric_values[(orig, name)].append(final)
    metric_var = {k: _pvariance(v) for k, v in metric_values.items() if len(v) > 1}
    worst = sorted(metric_var.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    time_groups = {k: v for k, v in f.durations.items() if len(v) > 1}
    time_var = [_pvariance(v) for v in time_groups.values()]
    cvs = [
        statistics.pstdev(v) / statistics.fmean(v)
        for v in time_groups.values()
        if statistics.fmean(v) > 0
    ]
    mv = Spread.of(list(metric_var.values()))
    return Stats(
        original_runs=f.original_runs,
        replays=f.replays,
        reproducible=reproducible,
        bit_identical=bit_identical,
        aborted=aborted,
        checkpoint_match=Ratio(numerator=f.checkpoints_matched, denominator=f.checkpoints_compared),
        metric_variance=MetricVariance(
            groups=mv.groups,
            max=mv.max,
            mean=mv.mean,
            worst=[{"run_id": r, "metric": m, "variance": v} for (r, m), v in worst],
        ),
        data_verified=Ratio(numerator=f.replays_data_verified, denominator=f.replays_with_data),
        data_hashed=Ratio(numerator=f.data_inputs_hashed, denominator=f.data_inputs),
        nondeterministic=OpsSeen(
            total=f.nondeterministic_ops,
            runs=f.runs_with_nondeterministic_ops,
            distinct=f.distinct_nondeterministic_ops,
        ),
        training_time_variance=Spread.of(time_var),
        training_time_cv_max=max(cvs) if cvs else None,
        attested=Ratio(numerator=f.signed_originals, denominator=f.original_runs),
        drills=Ratio(numerator=f.drills_passed, denominator=f.drills),
        last_drill_at=f.last_drill_at,
        generated_at=now,
        without_image=Ratio(numerator=f.succeeded_without_image, denominator=f.succeeded_originals),
    )


# -- Prometheus ---------------------------------------------------------------------------

PREFIX = "replay_tui_"


def _nan(x: float | None) -> float:
    return float("nan") if x is None else x


def prometheus_samples(s: Stats) -> list[tuple[str, str, float]]:
    """``(name, help, value)`` of every gauge written for the textfile collector."""
    last = (
        datetime.fromisoformat(s.last_drill_at.replace("Z", "+00:00")).timestamp()
        if s.last_drill_at
        else None
    )
    return [
        ("original_runs", "Original (non-replay) runs in the store.", s.original_runs),
        ("replays", "Replays run from this store (determinism as recorded).", s.replays),
        (
            "reproducible_run_ratio",
            "Share of replayed runs whose latest completed replay reproduced (IDENTICAL,"
            " EQUIVALENT, or WITHIN_NOISE of the run's own noise floor).",
            _nan(s.reproducible.value),
        ),
        (
            "bit_identical_run_ratio",
            "Share of replayed runs whose latest completed replay is IDENTICAL (bit for bit).",
            _nan(s.bit_identical.value),
        ),
        ("replayed_runs", "Original runs with a completed replay.", s.reproducible.denominator),
        (
            "aborted_replay_ratio",
            "Share of replays that did not complete (cancelled, interrupted, timed out,"
            " infrastructure error); they never count as not reproduced.",
            _nan(s.aborted.value),
        ),
        ("aborted_replays", "Replays that did not complete.", s.aborted.numerator),
        (
            "checkpoint_hash_match_ratio",
            "Share of replayed checkpoints whose sha256 equals the original's.",
            _nan(s.checkpoint_match.value),
        ),
        (
            "checkpoints_compared",
            "Replay/checkpoint pairs behind the match ratio.",
            s.checkpoint_match.denominator,
        ),
        (
            "metric_variance_max",
            "Largest variance of a final metric over a run and its replays.",
            _nan(s.metric_variance.max),
        ),
        (
            "metric_variance_mean",
            "Mean variance of final metrics over runs and their replays.",
            _nan(s.metric_variance.mean),
        ),
        (
            "data_verification_ratio",
            "Share of replays whose data inputs all matched their recorded hashes.",
            _nan(s.data_verified.value),
        ),
        (
            "data_hashed_ratio",
            "Share of original runs' data inputs recorded with a content hash.",
            _nan(s.data_hashed.value),
        ),
        (
            "nondeterministic_ops",
            "Nondeterministic ops seen at run time, summed over original runs.",
            s.nondeterministic_ops,
        ),
        (
            "runs_with_nondeterministic_ops",
            "Original runs that ran at least one nondeterministic op.",
            s.runs_with_nondeterministic_ops,
        ),
        (
            "training_time_variance_max_seconds2",
            "Largest variance of training time (s^2) over a run and its replays.",
            _nan(s.training_time_variance.max),
        ),
        (
            "training_time_variance_mean_seconds2",
            "Mean variance of training time (s^2) over runs and their replays.",
            _nan(s.training_time_variance.mean),
        ),
        (
            "training_time_cv_max",
            "Largest coefficient of variation of training time over a run and its replays.",
            _nan(s.training_time_cv_max),
        ),
        (
            "attested_run_ratio",
            "Share of original runs with a signed evidence bundle.",
            _nan(s.attested.value),
        ),
        ("drill_pass_ratio", "Share of reproduction drills that passed.", _nan(s.drills.value)),
        ("drills", "Reproduction drills recorded.", s.drills.denominator),
        (
            "last_drill_timestamp_seconds",
            "Unix time of the latest reproduction drill.",
            _nan(last),
        ),
    ]


def write_prometheus(s: Stats, path: Path) -> None:
    """Write the text exposition format atomically (temporary file, then rename)."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    registry = CollectorRegistry()
    for name, doc, value in prometheus_samples(s):
        Gauge(PREFIX + name, doc, registry=registry).set(value)
    if not path.parent.is_dir():  # a typo'd folder is not made (as export does not)
        from replay_tui.errors import BadInput

        raise BadInput(f"--prometheus {path}: the folder {path.parent} does not exist")
    from replay_tui.door import output_target

    output_target(path, "--prometheus")  # /dev/full stays a device (written beside, renamed)
    try:
        write_to_textfile(str(path), registry)
    except OSError as e:
        from replay_tui.errors import BadInput

        raise BadInput(f"--prometheus {path}: cannot write it ({e.strerror or e})") from None
