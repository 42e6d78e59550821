"""``bisect``: prove by experiment which recorded difference makes a run diverge.

Two runs, GOOD and BAD, differ in several recorded things at once (code, image, data,
config, seed, determinism switches, environment variables, hardware).  ``bisect``
replays GOOD with some of BAD's factors swapped in (a *probe*) and watches which swaps
make GOOD behave like BAD:

- ``factors``: the fixed vocabulary, which factors differ, and which can be swapped;
- ``probe``: a probe manifest (a copy of GOOD with BAD's values for some factors) and
  where its inputs live on this host;
- ``noise``: distances between runs, GOOD's noise floor and the judgement of a probe;
- ``search``: one factor at a time, then the smallest set (delta debugging) in a budget;
- ``verdict``: the answer as a sentence, an evidence table and JSON;
- ``run``: the whole thing over the replay pipeline, stored in the store and the ledger.
"""

from __future__ import annotations

from replay_tui.bisect.answer import BisectResult
from replay_tui.bisect.factors import FACTORS

__all__ = ["FACTORS", "BisectResult"]
