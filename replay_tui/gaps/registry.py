"""The gap registry: what a gap is, its severities, and the two lists the rules join.

A one-manifest rule registers with ``@rule`` (``run_rules``), a rule over two manifests
with ``@pair_rule`` (``pair_rules``); ``replay_tui.gaps`` evaluates them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from storage.manifest import RunManifest
from storage.wire import Wire

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Gap(Wire):
    code: str
    severity: Severity
    field: str
    message: str
    remediation: str


Rule = Callable[[RunManifest], Iterator[Gap]]
PairRule = Callable[[RunManifest, RunManifest], Iterator[Gap]]
RULES: list[Rule] = []
PAIR_RULES: list[PairRule] = []


def rule(fn: Rule) -> Rule:
    RULES.append(fn)
    return fn


def pair_rule(fn: PairRule) -> PairRule:
    PAIR_RULES.append(fn)
    return fn
