"""One state per judged item, decided once, in the comparison.

Every artifact, tensor, metric and noise endpoint of a comparison carries one of these
states (``ItemState``).  The comparison sets them (``assign_states``, called by
``compare_runs``) and stores them in its body as an optional ``state`` key; every face
(the TUI's marks and tab counts, the CLI's tables, the report's cells, ``--json``) shows
the state it finds and never judges an item again.  A body stored before states existed
has none: ``with_states`` fills them by the same rule, for showing only (the stored
bytes are not touched).

- ``identical``: bit for bit (a checkpoint whose tensors are the same counts: only its
  zip container differs).
- ``within_tolerance``: not identical, within the fixed tolerance (rtol, atol).
- ``within_noise``: beyond the tolerance, within the run's measured noise (the noise
  rule judged the candidate and every endpoint passed).
- ``outside_noise``: beyond the tolerance and outside the measured noise.
- ``outside_tolerance``: beyond the tolerance with no noise to judge it by (no floor,
  the metric is not in it, or a difference no noise explains: a declared file's bytes,
  a checkpoint's keys, shapes or types).
- ``missing``: on one side only, unhashed, or a checkpoint that could not be opened.
- ``volatile``: a file the run declared volatile at record time: listed, not judged.
- ``not_judged``: shown, never part of the verdict (timing metrics, a log's bytes, a
  stale file).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from replay_tui.compare.artifacts import ArtifactDiff
    from replay_tui.compare.comparison import Comparison
    from replay_tui.compare.metrics import MetricDiff
    from replay_tui.compare.noise_results import EndpointResult, NoiseJudgement
    from replay_tui.compare.tensors import TensorDiff

ItemState = Literal[
    "identical",
    "within_tolerance",
    "within_noise",
    "outside_noise",
    "outside_tolerance",
    "missing",
    "volatile",
    "not_judged",
]
ITEM_STATES: Final[tuple[ItemState, ...]] = (
    "identical",
    "within_tolerance",
    "within_noise",
    "outside_noise",
    "outside_tolerance",
    "missing",
    "volatile",
    "not_judged",
)
STATE_WORDS: Final[dict[str, str]] = {
    "identical": "identical",
    "within_tolerance": "within tolerance",
    "within_noise": "within noise",
    "outside_noise": "outside noise",
    "outside_tolerance": "outside tolerance",
    "missing": "missing",
    "volatile": "volatile: listed, not judged",
    "not_judged": "not judged",
}
"""Each state in the words every face uses."""
PASSING: Final[frozenset[str]] = frozenset({"identical", "within_tolerance", "within_noise"})
"""States that count as reproduced (a tab's ✓ count counts these)."""
FAILING: Final[frozenset[str]] = frozenset({"outside_noise", "outside_tolerance", "missing"})
"""States that count against the pair."""
UNJUDGED: Final[frozenset[str]] = frozenset({"volatile", "not_judged"})
"""States shown but not judged (left out of a tab's count)."""
TONE: Final[dict[str, str]] = {
    "identical": "reproduced",
    "within_tolerance": "reproduced",
    "within_noise": "reproduced",
    "outside_noise": "failed",
    "outside_tolerance": "failed",
    "missing": "missing",
    "volatile": "info",
    "not_judged": "info",
}
"""How a face colours a state: ``reproduced``, ``failed``, ``missing`` or ``info``."""


def words(state: str | None) -> str:
    """A state in words (``-`` for none)."""
    return "-" if state is None else STATE_WORDS.get(state, state.replace("_", " "))


def checked(v: object) -> ItemState | None:
    """A stored state, or None when it is not one of ``ITEM_STATES``."""
    for s in ITEM_STATES:
        if v == s:
            return s
    return None


def endpoint_state(e: EndpointResult) -> ItemState:
    """An endpoint of the noise rule: within noise, outside it, or missing."""
    if e.status == "ok":
        return "within_noise"
    return "missing" if e.status == "missing" else "outside_noise"


def structural(x: ArtifactDiff) -> bool:
    """A checkpoint difference no noise explains: keys on one side, other shapes or types."""
    d = x.tensors
    if d is None or x.checkpoint != "out_of_tolerance":
        return False
    return bool(d.only_a or d.only_b) or any(
        t.status in ("shape_mismatch", "dtype_mismatch") for t in d.tensors
    )


def _by_noise(noise: NoiseJudgement | None, within: bool) -> ItemState:
    if noise is None:
        return "outside_tolerance"
    return "within_noise" if within else "outside_noise"


def metric_state(m: MetricDiff, noise: NoiseJudgement | None) -> ItemState:
    if m.timing:
        return "not_judged"
    if m.within_tol:
        if m.missing:
            return "missing"
        return "identical" if m.bitwise_equal else "within_tolerance"
    ends = [e for e in noise.endpoints if e.metric == m.name] if noise is not None else []
    if noise is None or not ends:
        return "outside_tolerance"
    states = [endpoint_state(e) for e in ends]
    if "outside_noise" in states:
        return "outside_noise"
    if "missing" in states:
        return "missing"
    return "within_noise"


def artifact_state(x: ArtifactDiff, noise: NoiseJudgement | None) -> ItemState:
    if x.volatile is not None and x.status in ("differs", "only_a", "only_b"):
        return "volatile"
    if x.status == "stale":
        return "not_judged"
    if x.status == "match":
        return "identical"
    if x.status in ("only_a", "only_b", "unhashed"):
        return "missing"
    if x.checkpoint is None:  # bytes differ, no tensors to judge by
        if "file" not in (x.kind_a, x.kind_b):
            return "not_judged"  # a log or metrics file: judged by what it holds
        return "outside_tolerance"  # a declared output: judged by its bytes
    if x.checkpoint == "same_tensors":
        return "identical"
    if x.checkpoint == "close":
        return "within_tolerance"
    if x.checkpoint == "unavailable":
        return "missing"
    if structural(x):
        return "outside_tolerance"
    return _by_noise(noise, noise is not None and noise.within)


def tensor_state(t: TensorDiff, parent: ItemState) -> ItemState:
    """A tensor of a checkpoint whose own state is ``parent``."""
    if t.status == "equal":
        return "identical"
    if t.status in ("only_a", "only_b"):
        return "missing"
    if t.status in ("shape_mismatch", "dtype_mismatch") and t.max_abs_diff is None:
        return "outside_tolerance"
    if t.within_tolerance:
        return "within_tolerance"
    if t.status in ("shape_mismatch", "dtype_mismatch"):
        return "outside_tolerance"
    return parent if parent in ("within_noise", "outside_noise") else "outside_tolerance"


def _artifact(x: ArtifactDiff, noise: NoiseJudgement | None) -> ArtifactDiff:
    state = artifact_state(x, noise)
    d = x.tensors
    if d is not None:
        tensors = tuple(replace(t, state=tensor_state(t, state)) for t in d.tensors)
        worst = tuple(replace(t, state=tensor_state(t, state)) for t in d.worst)
        d = replace(d, tensors=tensors, worst=worst)
    return replace(x, state=state, tensors=d)


def assign_states(
    artifacts: tuple[ArtifactDiff, ...],
    metrics: tuple[MetricDiff, ...],
    noise: NoiseJudgement | None,
) -> tuple[tuple[ArtifactDiff, ...], tuple[MetricDiff, ...], NoiseJudgement | None]:
    """Each item with its state (``noise``: the judgement when one was made)."""
    arts = tuple(_artifact(x, noise) for x in artifacts)
    mets = tuple(replace(m, state=metric_state(m, noise)) for m in metrics)
    if noise is not None:
        ends = tuple(replace(e, state=endpoint_state(e)) for e in noise.endpoints)
        noise = replace(noise, endpoints=ends)
    return arts, mets, noise


def with_states(c: Comparison) -> Comparison:
    """``c`` with every item's state: as stored, or (a body older than states) by the
    same rule as ``compare_runs``.  For showing: store ``c`` itself, not this."""
    done = all(x.state is not None for x in c.artifacts) and all(
        m.state is not None for m in c.metrics
    )
    if done and (c.noise is None or all(e.state is not None for e in c.noise.endpoints)):
        return c
    arts, mets, noise = assign_states(c.artifacts, c.metrics, c.noise)
    return replace(c, artifacts=arts, metrics=mets, noise=noise)


def counts(states: list[str | None]) -> tuple[int, int]:
    """``(passing, judged)`` of ``states``: what a tab's ``n/m ✓`` shows."""
    judged = [s for s in states if s is not None and s not in UNJUDGED]
    return sum(s in PASSING for s in judged), len(judged)
