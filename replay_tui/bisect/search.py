"""Which factors to swap, in what order, within a probe budget.

1. One factor at a time: GOOD with BAD's value of one factor.  Every factor whose probe
   behaves like BAD explains the divergence alone; one whose probe behaves like GOOD is
   cleared (harmless on its own).
2. If none explains it alone: all testable factors together.  If even that does not
   behave like BAD, the testable factors cannot explain BAD (the untestable ones, or
   noise, remain).  Otherwise delta debugging (ddmin) narrows the set down to a
   smallest one whose swap still behaves like BAD, reusing every result seen.
3. Confirmation: BAD with GOOD's values of the causes should behave like GOOD.

``probe`` is the experiment: it takes the factors to swap, the side they are swapped
into and why, and returns what the probe behaved like.  Results are memoised; a new
probe past ``budget`` stops the search with what is known so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from replay_tui.bisect.noise import Behaviour

ProbeFn = Callable[[frozenset[str], str, str], Behaviour]
"""(factors swapped, base "good" or "bad", why) -> behaviour."""


class BudgetExhausted(Exception):
    pass


@dataclass
class SearchResult:
    causes: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)  # alone neither GOOD nor BAD
    interaction: bool = False  # the causes only act together
    all_together: Behaviour | None = None
    confirmed: bool | None = None
    budget_exhausted: bool = False
    narrowed_to: list[str] = field(default_factory=list)  # best set so far when cut short
    probes: int = 0


class _Memo:
    def __init__(self, probe: ProbeFn, budget: int) -> None:
        self.probe = probe
        self.budget = budget
        self.seen: dict[tuple[frozenset[str], str], Behaviour] = {}
        self.count = 0

    def __call__(self, swapped: frozenset[str], base: str, why: str) -> Behaviour:
        key = (swapped, base)
        if key not in self.seen:
            if self.count >= self.budget:
                raise BudgetExhausted
            self.count += 1
            self.seen[key] = self.probe(swapped, base, why)
        return self.seen[key]


def _split(items: list[str], n: int) -> list[list[str]]:
    k, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        size = k + (1 if i < r else 0)
        out.append(items[start : start + size])
        start += size
    return [x for x in out if x]


def ddmin(items: list[str], fails: Callable[[list[str]], bool]) -> list[str]:
    """Zeller's delta debugging: a 1-minimal subset of ``items`` for which ``fails``
    holds (``fails(items)`` must hold)."""
    c = list(items)
    n = 2
    while len(c) >= 2:
        parts = _split(c, n)
        found = False
        for part in parts:
            if fails(part):
                c, n, found = part, 2, True
                break
        if not found:
            for part in parts:
                rest = [x for x in c if x not in part]
                if len(parts) > 2 and fails(rest):
                    c, n, found = rest, max(n - 1, 2), True
                    break
        if not found:
            if n >= len(c):
                break
            n = min(len(c), 2 * n)
    return c


def search(
    factors: Sequence[str], probe: ProbeFn, *, budget: int, confirm: bool = True
) -> SearchResult:
    """Find the factors that make GOOD behave like BAD (see the module doc).

    ``confirm``: run the confirmation probe (it needs BAD's own inputs).
    """
    memo = _Memo(probe, budget)
    res = SearchResult()
    order = list(factors)
    try:
        singles: dict[str, Behaviour] = {}
        for f in order:
            singles[f] = memo(frozenset([f]), "good", f"one factor at a time: {f} alone")
        res.causes = [f for f in order if singles[f] == "BAD"]
        res.cleared = [f for f in order if singles[f] == "GOOD"]
        res.partial = [f for f in order if singles[f] in ("neither", "failed")]
        if not res.causes and len(order) > 1:
            res.all_together = memo(
                frozenset(order),
                "good",
                "no factor explains it alone: all testable factors together",
            )
            if res.all_together == "BAD":
                res.interaction = True
                res.narrowed_to = list(order)

                def fails(subset: list[str]) -> bool:
                    b = memo(
                        frozenset(subset),
                        "good",
                        "delta debugging: does {" + ", ".join(subset) + "} reproduce BAD?",
                    )
                    if b == "BAD" and len(subset) < len(res.narrowed_to):
                        res.narrowed_to = list(subset)
                    return b == "BAD"

                res.causes = ddmin(order, fails)
                res.cleared = [f for f in res.cleared if f not in res.causes]
        elif not res.causes and len(order) == 1:
            res.all_together = singles[order[0]]
        if res.causes and confirm:
            back = memo(
                frozenset(res.causes),
                "bad",
                "confirmation: BAD with GOOD's " + ", ".join(res.causes),
            )
            res.confirmed = back == "GOOD"
    except BudgetExhausted:
        res.budget_exhausted = True
        if res.interaction:
            res.causes = []
    res.probes = memo.count
    return res
