"""Formatters every text face shares: the CLI's tables and reports, the TUI's widgets,
the evidence report.  Neutral: no Textual, no click, no domain logic.

The CLI's text lives in ``replay_tui.cli.render`` (runs, manifests, gaps, drills) and
``replay_tui.compare.render`` (comparisons); both build on these.  A gap's lines are
``replay_tui.compare.gaps.gap_lines``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len, set_cell_size

from replay_tui.safety import escape_control


def cut(value: str, n: int | None) -> str:
    """``value`` in at most ``n`` terminal cells; a cut value ends in an ellipsis, never
    cut silently (None: whole).  Every face cuts with this (or ``fit`` on a Rich Text)."""
    if n is None or cell_len(value) <= n:
        return value
    if n <= 0:
        return ""
    return set_cell_size(value, n - 1) + "…"


def short(value: str | None, n: int = 12) -> str:
    """The first ``n`` characters of an id, commit or digest (``sha256:`` dropped)."""
    if not value:
        return "-"
    return value.removeprefix("sha256:")[:n]


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Left-aligned columns two spaces apart; cells are escaped (they hold manifest
    strings, which may carry terminal control sequences)."""
    cells = [[escape_control(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]

    def line(row: Sequence[str]) -> str:
        return indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])
