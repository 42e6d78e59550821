"""What the common training frameworks wrote, read after a run without being asked.

After the command ended, the run's output folders (the first folder of each artifact
glob) and the files the globs matched are searched for the files the frameworks write:
TensorBoard event files (``events.out.tfevents.*``), Lightning's ``metrics.csv`` and
``hparams.yaml`` (and the ``config.yaml`` LightningCLI saves beside them, which holds
``seed_everything`` and ``trainer.deterministic``), Hugging Face's ``trainer_state.json``
and ``training_args.bin``.  Each is read through :mod:`replay_tui.door` within its own
byte limit and a limit of points; a file the run did not write (left by an earlier run:
:mod:`replay_tui.capture.stale`) is not read.  Each reader imports its framework's
package only when a file of its kind was found.  What they give: metric histories by
step (settings such as ``logging_steps`` are never metrics), the program's own
configuration, the seed it set and whether it asked for deterministic algorithms.  A
file that gives no metric, or that is refused, is listed with why
(``outputs.metric_files_unread``): a gap names it.

A local run also says torch's determinism switches as its processes left them
(:mod:`~replay_tui.capture.frameworks.observe`): a plain Lightning script's
``Trainer(deterministic=True)`` is seen that way.  The SDK's switches win, then the
observed ones, then what a framework file says; ``determinism.source`` names where they
came from when the SDK did not say them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from replay_tui.capture.framework_files import kind_of as kind_of
from replay_tui.capture.metrics import MetricSeries

if TYPE_CHECKING:
    from replay_tui.capture.frameworks.observe import Observed

MAX_POINTS = 100_000
"""The most points one framework file may give (all its metrics together); a file with
more is refused, so a manifest stays within what the store takes."""
MAX_FILES = 64
"""The most framework files of each kind read for one run."""
FOLDERS_MAX = 10_000
"""The most folders walked under the run's output folders while looking for them."""

LIMITS: dict[str, int] = {
    "TensorBoard event file": 256 << 20,
    "Lightning metrics.csv": 64 << 20,
    "Lightning hparams.yaml": 1 << 20,
    "LightningCLI config.yaml": 1 << 20,
    "Hugging Face trainer_state.json": 64 << 20,
    "Hugging Face training_args.bin": 4 << 20,
}
"""The most bytes read of each kind of framework file."""

SKIPPED_KEYS = frozenset({"step", "epoch", "global_step", "time", "timestamp"})
"""Columns and keys that index a history, never metrics of their own."""


METRIC_KINDS = (
    "Hugging Face trainer_state.json",
    "Lightning metrics.csv",
    "TensorBoard event file",
)
"""Kinds that hold metrics, in the order a metric found in several is taken from."""


class TooMany(Exception):
    """More points than :data:`MAX_POINTS`."""


@dataclass
class FileMetrics:
    """One file's metric histories: per name, ``(step, value, wall time or None)``."""

    points: dict[str, list[tuple[int, float, float | None]]] = field(default_factory=dict)
    count: int = 0

    def add(self, name: str, step: int, value: float, wall: float | None = None) -> None:
        self.count += 1
        if self.count > MAX_POINTS:
            raise TooMany(f"more than {MAX_POINTS} points")
        self.points.setdefault(name, []).append((step, value, wall))


@dataclass
class Findings:
    """What the framework files of one run said."""

    files: dict[str, FileMetrics] = field(default_factory=dict)  # metric files read
    unread: dict[str, str] = field(default_factory=dict)  # path -> why it gave nothing
    config: dict[str, Any] = field(default_factory=dict)
    config_files: list[str] = field(default_factory=list)
    seed: int | None = None
    seed_from: str | None = None
    deterministic: bool | None = None
    deterministic_from: str | None = None  # the framework file that said it
    observed: Observed | None = None  # torch's switches as the run's processes left them
    refused: list[str] = field(default_factory=list)  # said beside the run's refusals

    @property
    def empty(self) -> bool:
        return not (self.files or self.unread or self.config or self.seed is not None)

    def series(
        self, taken: Iterable[str], started_epoch: float | None
    ) -> tuple[MetricSeries, dict[str, str]]:
        """The metrics the files give that ``taken`` (names already known from the SDK
        or the launcher's flags) lacks, one source per name (:data:`METRIC_KINDS`'s
        order, then by path), and per name the source kept: its path, or ``reported``
        where the SDK or the launcher's flags gave it."""
        known = set(taken)
        out = MetricSeries()
        sources: dict[str, str] = {}
        order = sorted(self.files, key=lambda p: (_rank(p), p))
        for path in order:
            for name, pts in self.files[path].points.items():
                if name in known:
                    sources.setdefault(name, "reported")
                    continue
                if name in sources:
                    continue  # an earlier source has it
                sources[name] = path
                for step, value, wall in pts:
                    t = None
                    if wall is not None and started_epoch is not None:
                        t = wall - started_epoch
                    out.add(name, step, value, t)
        return out, sources


def _rank(path: str) -> int:
    kind = kind_of(path)
    return METRIC_KINDS.index(kind) if kind in METRIC_KINDS else len(METRIC_KINDS)


def candidates(
    cwd: Path, patterns: Sequence[str], artifacts: Sequence[str], metrics_file: str | None
) -> list[str]:
    """The framework files under the run's output folders (the first folder of each
    glob that has one), among the artifacts, and the ``--metrics-file``, sorted."""
    from replay_tui.door import glob_parts, glob_under

    found: set[str] = {a for a in artifacts if kind_of(a)}
    roots: set[str] = set()
    for pat in patterns:
        parts = glob_parts(pat)
        if parts and len(parts) > 1 and not any(c in parts[0] for c in "*?["):
            roots.add(parts[0])
    for root in sorted(roots):
        for m in glob_under(cwd, (root, "**"), folders_max=FOLDERS_MAX):
            if m.what == "file" and kind_of(m.rel):
                found.add(m.rel)
    if metrics_file and kind_of(metrics_file):
        found.add(str(PurePosixPath(metrics_file)))
    per_kind: dict[str, int] = {}
    out = []
    for rel in sorted(found):
        k = kind_of(rel) or ""
        per_kind[k] = per_kind.get(k, 0) + 1
        if per_kind[k] <= MAX_FILES:
            out.append(rel)
    return out


def read_outputs(
    cwd: Path,
    patterns: Sequence[str],
    artifacts: Sequence[str],
    *,
    metrics_file: str | None = None,
    log_bytes: bytes = b"",
    before: Any = None,
    handoff: Path | None = None,
) -> Findings:
    """Read every framework file the run wrote (see the module's docstring).  ``before``:
    :func:`replay_tui.capture.stale.snapshot` taken before the run (files it left are
    skipped); ``handoff``: the run's handoff folder, where torch's observed state is."""
    from replay_tui.capture import stale
    from replay_tui.door import Refused

    f = Findings()
    for rel in candidates(cwd, patterns, artifacts, metrics_file):
        if before is not None and stale.stale_reason(cwd, rel, before) is not None:
            continue
        kind = kind_of(rel)
        assert kind is not None
        try:
            _read_one(cwd, rel, kind, f)
        except Refused as e:
            f.unread[rel] = f"refused: {e}"
            f.refused.append(str(e))
        except TooMany as e:
            why = f"{kind} {rel}: {e}"
            f.unread[rel] = f"refused: {why}"
            f.refused.append(why)
    if f.seed is None and log_bytes:
        from replay_tui.capture.frameworks.lightning import seed_from_log

        seed = seed_from_log(log_bytes)
        if seed is not None:
            f.seed, f.seed_from = seed, "the run's log (Seed set to N)"
    if handoff is not None:
        from replay_tui.capture.frameworks import observe

        f.observed, unread = observe.read(handoff)
        f.refused += unread
    return f


def _read_one(cwd: Path, rel: str, kind: str, f: Findings) -> None:
    from replay_tui.door import read_under

    limit = LIMITS[kind]
    if kind == "TensorBoard event file":
        from replay_tui.capture.frameworks.tensorboard import read_event_file

        _metrics(f, rel, read_event_file(cwd, rel, limit))
        return
    raw = read_under(cwd, rel, kind, limit=limit)
    if kind == "Lightning metrics.csv":
        from replay_tui.capture.frameworks.lightning import read_metrics_csv

        _metrics(f, rel, read_metrics_csv(raw, rel))
    elif kind == "Lightning hparams.yaml":
        from replay_tui.capture.frameworks.lightning import read_hparams

        _config(f, rel, read_hparams(raw, rel))
    elif kind == "LightningCLI config.yaml":
        from replay_tui.capture.frameworks.lightning import read_cli_config

        values = read_cli_config(raw, rel)
        _config(f, rel, values)
        seed = values.get("seed_everything")
        if type(seed) is int and 0 <= seed <= 2**53 - 1:
            f.seed, f.seed_from = seed, rel
        trainer = values.get("trainer")
        det = trainer.get("deterministic") if isinstance(trainer, dict) else None
        if det is True or det == "warn":  # Trainer(deterministic=True or "warn")
            f.deterministic, f.deterministic_from = True, rel
    elif kind == "Hugging Face trainer_state.json":
        from replay_tui.capture.frameworks.huggingface import read_trainer_state

        _metrics(f, rel, read_trainer_state(raw, rel))
    else:
        from replay_tui.capture.frameworks.huggingface import read_training_args

        args = read_training_args(raw, rel)
        _config(f, rel, args)
        seed = args.get("seed")
        if type(seed) is int and 0 <= seed <= 2**53 - 1:
            f.seed, f.seed_from = seed, rel
        if args.get("full_determinism") is True:
            f.deterministic, f.deterministic_from = True, rel
        elif args.get("full_determinism") is False and f.deterministic is None:
            f.deterministic = False


def _metrics(f: Findings, rel: str, got: FileMetrics) -> None:
    if got.count == 0:
        f.unread[rel] = "no metric in it"
    else:
        f.files[rel] = got


def _config(f: Findings, rel: str, values: dict[str, Any]) -> None:
    for k, v in values.items():
        f.config.setdefault(k, v)
    f.config_files.append(rel)


def finite(v: Any) -> float | None:
    """``v`` as a finite float, or None (bools are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    x = float(v)
    return x if math.isfinite(x) else None


SEED_KEYS = ("seed", "random_seed", "random-seed", "rng_seed")
"""Command-line options taken for the run's seed (``--seed 42``) when nothing better
says it."""


def _epoch(ts: str | None) -> float | None:
    if not ts:
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _argv_seed(data: dict[str, Any]) -> int | None:
    cs = data.get("config_source") or {}
    view = cs.get("argv") if cs.get("source") == "sdk" else data.get("config")
    if not isinstance(view, dict):
        return None
    for k in SEED_KEYS:
        v = view.get(k)
        if type(v) is int and 0 <= v <= 2**53 - 1:
            return v
    return None


def apply_findings(
    data: dict[str, Any],
    found: Findings,
    reported: MetricSeries,
    inside: Any,
    handed_seed: int | None,
    started_at: str | None,
) -> None:
    """Fold what the framework files said into the manifest's ``data`` (as
    ``assemble.build_manifest`` built it): metrics the SDK and the launcher's flags did
    not give (``reported``, which the outputs were built from), each metric's source,
    the files that gave nothing, the framework's config beside the command line's (the
    SDK's own config wins), the seed the program set and its determinism switches (the
    SDK's, else as observed in its processes, else as a framework file set them, with
    ``determinism.source`` naming which).  A seed ``record --seed`` handed that the program's own
    record contradicts is kept as ``randomness.seed_handed`` (a gap), the program's as
    the seed."""
    series, sources = found.series(
        reported.history.keys() | reported.finals.keys(), _epoch(started_at)
    )
    if series.history or series.nonfinite:
        merged = MetricSeries(
            {k: list(v) for k, v in reported.history.items()},
            dict(reported.finals),
            {k: list(v) for k, v in reported.times.items()},
            {k: list(v) for k, v in reported.nonfinite.items()},
        )
        merged.merge(series)
        out = data["outputs"]
        out["metrics"] = merged.finals
        out["metric_history"] = {k: [list(p) for p in v] for k, v in merged.history.items()}
        out["metric_times"] = merged.timed()
        out["metric_nonfinite"] = merged.nonfinite
    if sources:
        data["outputs"]["metric_sources"] = dict(sorted(sources.items()))
    if found.unread:
        data["outputs"]["metric_files_unread"] = dict(sorted(found.unread.items()))
    cs = data.get("config_source")
    if found.config and not (cs and cs.get("source") == "sdk") and not data.get("config"):
        data["config"] = dict(found.config)
        data["config_source"] = {"source": "framework", "framework_files": found.config_files}
    elif found.config and not (cs and cs.get("source") == "sdk"):
        data["config"] = {**data["config"], **found.config}
        if cs is not None:
            cs["framework_files"] = found.config_files
    elif found.config and cs is not None:
        cs["framework_files"] = found.config_files
    r = data["randomness"]
    sdk_seed = inside.get("seed") if isinstance(inside, dict) else None
    if sdk_seed is None:
        program = found.seed if found.seed is not None else _argv_seed(data)
        if program is not None:
            r["seed"] = program
            if handed_seed is not None and handed_seed != program:
                r["seed_handed"] = handed_seed
    d = data["determinism"]
    sdk_said = isinstance(inside, dict) and bool(inside.get("determinism"))
    if sdk_said or d.get("deterministic_algorithms") is not None:
        return
    obs = found.observed
    if obs is not None and any(v is not None for v in obs.switches.values()):
        from replay_tui.capture.frameworks.observe import SOURCE

        for k, v in obs.switches.items():
            if v is not None and d.get(k) is None:
                d[k] = v
        d["source"] = SOURCE
    if found.deterministic is True and d.get("deterministic_algorithms") is None:
        d["deterministic_algorithms"] = True
        said = found.deterministic_from
        d["source"] = f"{d['source']}; deterministic_algorithms: {said}" if "source" in d else said
