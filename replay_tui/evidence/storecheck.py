"""The store's integrity check (``replay-tui verify-store``, the TUI's "Check store") and
what it says: one wording for both faces.

The check itself is ``RunStore.verify``: walk the ledger, re-hash every stored fact,
compare the anchors noted down earlier.  :func:`store_check_lines` is its report in
words; :func:`check_store` opens the store, checks it, and says so, a store that is
not a database (or whose pages are corrupted) included.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from storage.store import RunStore, VerifyReport

MAX_ALSO = 19
"""Problems listed after the first (the JSON lists them all)."""


def store_check_lines(rep: VerifyReport) -> list[str]:
    """What ``verify-store`` prints: what it checked, the ledger head, the outcome."""
    lines = [
        f"checked {rep.events} events, {rep.manifests} manifests, {rep.blobs} blobs,"
        f" {rep.facts} other facts",
        f"ledger head: {rep.head or '(empty)'}",
    ]
    if rep.ok:
        lines.append("store intact: every link and every hash matches")
    else:
        lines.append(f"STORE ALTERED: first problem: {rep.problems[0]}")
        lines += [f"  also: {p}" for p in rep.problems[1 : 1 + MAX_ALSO]]
    return lines


def unreadable_line(path: Path, error: BaseException) -> str:
    """What ``verify-store`` says of a store it cannot read at all."""
    return f"STORE UNREADABLE: {path}: {error}"


@dataclass(frozen=True)
class StoreCheck:
    """A check of the store at ``path``: intact or not, and the lines that say so."""

    path: Path
    ok: bool
    lines: list[str]
    head: str | None = None
    """The ledger head (``SEQ:HASH``) to note down (None: empty or unreadable)."""
    report: VerifyReport | None = None
    """What ``RunStore.verify`` counted and found (None: the store was unreadable)."""


def check_store(path: Path, anchors: Sequence[str] = ()) -> StoreCheck:
    """Open the store at ``path`` (its own connection: a fresh look at the file), check
    it, and say what ``verify-store`` says."""
    try:
        with RunStore(path) as store:
            rep = store.verify(anchors)
    except sqlite3.DatabaseError as e:  # not a database, or pages corrupted
        return StoreCheck(path, False, [unreadable_line(path, e)])
    return StoreCheck(path, rep.ok, store_check_lines(rep), rep.head, rep)
