"""Formatters every text face shares: the CLI's tables and reports, the TUI's widgets,
the evidence report.  Neutral: no Textual, no click, no domain logic.

The CLI's text lives in ``replay_tui.cli.render`` (runs, manifests, gaps, drills) and
``replay_tui.compare.render`` (comparisons); both build on these.  A gap's lines are
``replay_tui.gaps.gap_lines``.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size

from replay_tui.safety import escape_control


def cut(value: str, n: int | None) -> str:
    """``value`` in at most ``n`` terminal cells; a cut value ends in an ellipsis, never
    cut silently (None: whole).  Every face cuts with this (or ``fit`` on a Rich Text).
    The value is escaped for the terminal first (``escape_control``): what is cut is
    what is shown."""
    value = escape_control(value)
    if n is None or cell_len(value) <= n:
        return value
    if n <= 0:
        return ""
    return set_cell_size(value, n - 1) + "…"


def short(value: str | None, n: int = 12) -> str:
    """The first ``n`` characters of an id, commit or digest (``sha256:`` dropped),
    escaped for the terminal (an imported run's digest is any string)."""
    if not value:
        return "-"
    return escape_control(value.removeprefix("sha256:")[:n])


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


def output_width() -> int | None:
    """The width in terminal cells the CLI's text must fit: ``$COLUMNS`` when it is set,
    else the terminal's when stdout is one; None (no limit: every line whole, as always)
    for a pipe or a file with no ``$COLUMNS``."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        tty = sys.stdout is not None and sys.stdout.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stdout
        tty = False
    return shutil.get_terminal_size().columns if tty else None


@dataclass(frozen=True)
class Column:
    """A table column and how it gives way when the table is wider than the screen.

    ``min``: the fewest cells it is cut to (with an ellipsis); None: never cut (an id
    prefix, a date, a word).  ``drop``: when cutting is not enough, the columns with a
    ``drop`` rank are left out, the lowest rank first; None: always shown.
    """

    header: str
    min: int | None = None
    drop: int | None = None


@dataclass(frozen=True)
class Fitted:
    """A table laid out to a width: its lines, the headers of the columns left out to
    fit (in the order of the table) and whether any value was cut."""

    lines: list[str]
    dropped: list[str]
    cut: bool

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def fit_table(
    columns: Sequence[Column | str],
    rows: Sequence[Sequence[str]],
    width: int | None = None,
    *,
    indent: str = "",
    sep: str = "  ",
    header: bool = True,
) -> Fitted:
    """Left-aligned columns ``sep`` apart, each line at most ``width`` cells (None: no
    limit).  Too wide, the table first cuts the columns that may be cut (the one with the
    most to spare first, never below its ``min``), then leaves out whole columns by their
    ``drop`` rank, as few as it can.  A table whose uncuttable columns alone are wider
    than ``width`` is printed at that floor: an id is never cut below its prefix.  Cells
    are escaped (they hold manifest strings, which may carry terminal control
    sequences)."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    cells = [[escape_control(c) for c in r] for r in rows]
    natural = [cell_len(c.header) if header else 0 for c in cols]
    for r in cells:
        natural = [max(w, cell_len(c)) for w, c in zip(natural, r, strict=True)]
    floor = [natural[i] if c.min is None else min(c.min, natural[i]) for i, c in enumerate(cols)]
    shown = list(range(len(cols)))
    if width is not None:
        ranked = sorted((c.drop, i) for i, c in enumerate(cols) if c.drop is not None)
        droppable = [i for _, i in ranked]
        room = width - cell_len(indent)
        for k in range(len(droppable) + 1):
            shown = [i for i in range(len(cols)) if i not in droppable[:k]]
            if _span([floor[i] for i in shown], sep) <= room:
                break
        widths = {i: natural[i] for i in shown}
        excess = _span(list(widths.values()), sep) - room
        while excess > 0:
            spare, i = max((widths[i] - floor[i], i) for i in shown)
            if spare <= 0:
                break
            widths[i] -= 1
            excess -= 1
    else:
        widths = dict(enumerate(natural))

    was_cut = False

    def line(row: Sequence[str]) -> str:
        nonlocal was_cut
        out = []
        for i in shown:
            c = cut(row[i], widths[i])
            was_cut |= c != row[i]
            out.append(c + " " * (widths[i] - cell_len(c)))
        return (indent + sep.join(out)).rstrip()

    lines = [line([c.header for c in cols])] if header else []
    lines += [line(r) for r in cells]
    dropped = [c.header for i, c in enumerate(cols) if i not in shown]
    return Fitted(lines, dropped, was_cut)


def _span(widths: Sequence[int], sep: str) -> int:
    return sum(widths) + len(sep) * max(len(widths) - 1, 0)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> str:
    """Left-aligned columns two spaces apart, every value whole (:func:`fit_table` fits
    one to a width); cells are escaped."""
    return fit_table(headers, rows, indent=indent).text


def fit_line(line: str, width: int | None) -> str:
    """``line`` cut to ``width`` cells with an ellipsis (None: whole)."""
    return cut(line, width)


def wrap_line(line: str, width: int | None) -> list[str]:
    """Prose ``line`` wrapped at spaces to ``width`` cells (None: whole).  Continuation
    lines hang under the value when the line is ``key  value`` (two or more spaces after
    its first word group, within the first half), else at the line's own indentation
    (two cells in for a line that has none); a word longer than a line is cut with an
    ellipsis, never dropped."""
    if width is None or cell_len(line) <= width:
        return [line]
    lead = len(line) - len(line.lstrip(" "))
    hang = lead or 2
    gap = line.find("  ", lead)
    if gap != -1:
        value_at = len(line) - len(line[gap:].lstrip(" ")) if line[gap:].strip() else -1
        if 0 < value_at <= width // 2:
            hang = value_at
    hang = min(hang, max(width // 2, 0))
    wrapped = textwrap.wrap(
        line[lead:],
        width=max(width - lead, 1),
        subsequent_indent=" " * (hang - lead),
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [cut(" " * lead + w, width) for w in wrapped]


def fit_text(text: str, width: int | None, *, prose: bool = True) -> str:
    """Every line of ``text`` within ``width`` cells (None: whole): wrapped at spaces
    (``prose``, :func:`wrap_line`) or cut with an ellipsis."""
    if width is None:
        return text
    out: list[str] = []
    for ln in text.splitlines():
        out += wrap_line(ln, width) if prose else [fit_line(ln, width)]
    return "\n".join(out)
