"""Provenance gaps: what weakens the claim that a run can be reproduced.

A gap is a rule over one manifest, or over a pair of manifests (original and replay, or
any two runs being compared), with a stable code, a severity, the field it concerns, a
one-line message and a remediation.  Codes are part of the JSON contract: never reuse or
rename one.

The rules live in ``run_rules`` (one manifest) and ``pair_rules`` (two); they join the
registry (``registry``: ``Gap``, ``@rule``, ``@pair_rule``) when this package is imported.
"""

from __future__ import annotations

from collections.abc import Sequence

from replay_tui.gaps import pair_rules, run_rules
from replay_tui.gaps.registry import (
    PAIR_RULES,
    RULES,
    SEVERITY_ORDER,
    Gap,
    PairRule,
    Rule,
    Severity,
    pair_rule,
    rule,
)
from replay_tui.safety import escape_control
from storage.manifest import RunManifest
from storage.records import GapCounts

__all__ = [
    "CAUSES",
    "PAIR_RULES",
    "RULES",
    "SEVERITY_ORDER",
    "Gap",
    "PairRule",
    "Rule",
    "Severity",
    "evaluate",
    "evaluate_pair",
    "gap_counts",
    "gap_lines",
    "pair_rule",
    "pair_rules",
    "probable_causes",
    "rule",
    "run_rules",
    "shared_causes",
]


# Own gaps of the reference run that explain a divergence, in the words an auditor reads.
CAUSES: dict[str, str] = {
    "SEED_UNKNOWN": "no seed recorded",
    "SEED_SOURCE_UNKNOWN": "a random generator not known to be seeded",
    "NONDETERMINISTIC_OPS": "nondeterministic ops ran",
    "DETERMINISM_OFF": "deterministic mode was off",
    "DETERMINISM_UNKNOWN": "determinism settings not recorded",
    "CUDNN_BENCHMARK_ON": "cuDNN benchmark mode picks kernels per run",
    "CUBLAS_WORKSPACE_UNSET": "CUBLAS_WORKSPACE_CONFIG unset",
    "PYTHONHASHSEED_UNSET": "PYTHONHASHSEED unset",
    "DATA_NO_HASH": "data not hashed: it may have changed",
    "CODE_DIRTY_NO_DIFF": "uncommitted changes not stored",
    "CODE_DIRTY_UNKNOWN": "whether the code had uncommitted changes is unknown",
    "IMAGE_NONE": "no container image: the environment is not pinned",
    "IMAGE_TAG_ONLY": "image by tag only: it may have moved",
    "RUN_NOT_SUCCEEDED": "the original run did not succeed",
    "COMMAND_FILE_UNTRACKED": "the command's file is not in the recorded commit",
}


def probable_causes(
    original: Sequence[Gap], pair: Sequence[Gap], other: Sequence[Gap] | None = None
) -> list[str]:
    """What already explains a divergence before any tensor is read, and only what
    differs between the two runs: the pair's critical gaps (a different seed, data,
    config), then each run's own gaps that make its outcome unreproducible (no seed
    recorded...) when the other run does not share them, most severe first.  ``other``
    None: the other run's gaps are not known, and the original's are listed as before."""
    out = [f"{g.message} ({g.code})" for g in pair if g.severity == "critical"]
    theirs = {(g.code, g.field) for g in other} if other is not None else set()
    mine = {(g.code, g.field) for g in original}
    seen: set[str] = set()
    sides: list[tuple[str, Sequence[Gap], set[tuple[str, str]]]] = [("", original, theirs)]
    if other is not None:
        sides = [("A only: ", original, theirs), ("B only: ", other, mine)]
    for label, gaps, shared in sides:
        for g in gaps:
            key = (g.code, g.field)
            if g.code not in CAUSES or g.severity == "info" or key in shared:
                continue
            if label + g.code in seen:
                continue
            seen.add(label + g.code)
            out.append(f"{label}{CAUSES[g.code]} ({g.code}, {g.field})")
    return out


def shared_causes(original: Sequence[Gap], other: Sequence[Gap]) -> list[str]:
    """The gaps both runs have that would explain a divergence from a third run (no
    seed recorded, deterministic mode off...): shared, so not what differs between these
    two."""
    theirs = {(g.code, g.field) for g in other}
    seen: set[str] = set()
    out = []
    for g in original:
        key = (g.code, g.field)
        if g.code in CAUSES and g.severity != "info" and key in theirs and g.code not in seen:
            seen.add(g.code)
            out.append(f"{CAUSES[g.code]} ({g.code}, {g.field}): in both runs")
    return out


def _sorted(gaps: list[Gap]) -> list[Gap]:
    return sorted(gaps, key=lambda g: (SEVERITY_ORDER[g.severity], g.code, g.field))


def evaluate(m: RunManifest) -> list[Gap]:
    """Every gap of one manifest, most severe first."""
    return _sorted([g for r in RULES for g in r(m)])


def evaluate_pair(a: RunManifest, b: RunManifest) -> list[Gap]:
    """Gaps that explain expected divergence between two runs."""
    return _sorted([g for r in PAIR_RULES for g in r(a, b)])


def gap_counts(m: RunManifest) -> GapCounts:
    gaps = evaluate(m)
    return GapCounts(
        critical=sum(g.severity == "critical" for g in gaps),
        warning=sum(g.severity == "warning" for g in gaps),
        info=sum(g.severity == "info" for g in gaps),
    )


def gap_lines(gaps: Sequence[Gap], *, indent: str = "", fix: bool = True) -> list[str]:
    """Each gap as ``[SEVERITY] CODE (field)``, its message and (``fix``) remediation."""
    pad = indent + " " * 11
    out: list[str] = []
    for g in gaps:
        out.append(f"{indent}[{g.severity.upper():8}] {g.code}  ({g.field})")
        out.append(f"{pad}{g.message}")
        if fix:
            out.append(f"{pad}fix: {g.remediation}")
    return [escape_control(line) for line in out]
