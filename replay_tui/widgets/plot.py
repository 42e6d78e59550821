"""A small braille line plot: one or two series, optionally a marked step.

Each terminal cell holds a 2x4 grid of braille dots, so a plot of W x H cells has
2W x 4H dots.  Two series share the grid: cells holding dots of both get the "both"
colour, and a marked step (where two histories leave tolerance) is drawn as a vertical
line in the marker colour.  Colours come from the theme through component classes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

from rich.style import Style
from rich.text import Text
from textual.widget import Widget

# Braille dot bits, indexed [column][row] within a cell.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_COLUMN = (0x01 | 0x02 | 0x04 | 0x40, 0x08 | 0x10 | 0x20 | 0x80)


class Series(NamedTuple):
    label: str
    points: Sequence[tuple[float, float]]


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _finite(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    return [
        (float(x), float(y))
        for x, y in points
        if isinstance(x, int | float)
        and isinstance(y, int | float)
        and math.isfinite(x)
        and math.isfinite(y)
    ]


def _line(x0: int, y0: int, x1: int, y1: int) -> list[tuple[int, int]]:
    """Dots of a straight line (Bresenham)."""
    out = []
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    err = dx + dy
    while True:
        out.append((x0, y0))
        if x0 == x1 and y0 == y1:
            return out
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            x0 += sx
        if e2 <= dx:
            err += dx
            y0 += sy


def render_plot(
    series: Sequence[Series],
    width: int,
    height: int,
    *,
    styles: Sequence[Style],
    both: Style,
    marker_style: Style,
    axis: Style,
    marker: float | None = None,
    axes: bool = True,
    x_title: str = "step",
) -> Text:
    """The plot as Rich text of ``height`` lines, ``width`` cells each."""
    data = [_finite(s.points) for s in series]
    pts = [p for d in data for p in d]
    if width < 4 or height < 1:
        return Text("")
    if not pts:
        return Text("no history recorded".center(width)[:width], style=axis)
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    xmin, xmax, ymin, ymax = min(xs), max(xs), min(ys), max(ys)
    if marker is not None and math.isfinite(marker):
        xmin, xmax = min(xmin, marker), max(xmax, marker)
    if ymax == ymin:
        ymin, ymax = ymin - 0.5, ymax + 0.5
    if xmax == xmin:
        xmin, xmax = xmin - 0.5, xmax + 0.5
    top, bottom, middle = _fmt(ymax), _fmt(ymin), _fmt((ymax + ymin) / 2)
    gutter = (max(len(top), len(bottom), len(middle)) + 1) if axes and width >= 24 else 0
    rows = height - (1 if axes and height >= 3 else 0)
    mid_row = (rows - 1) // 2 if rows >= 5 else -1  # a middle tick when there is room
    cols = width - gutter
    if cols < 2 or rows < 1:
        return Text("")
    dots_w, dots_h = 2 * cols, 4 * rows
    masks = [[[0] * cols for _ in range(rows)] for _ in data]

    def to_dot(x: float, y: float) -> tuple[int, int]:
        dx = round((x - xmin) / (xmax - xmin) * (dots_w - 1))
        dy = round((ymax - y) / (ymax - ymin) * (dots_h - 1))
        return dx, dy

    for k, d in enumerate(data):
        grid = masks[k]
        prev: tuple[int, int] | None = None
        for x, y in sorted(d):
            cur = to_dot(x, y)
            for px, py in _line(*prev, *cur) if prev else [cur]:
                grid[py // 4][px // 2] |= _DOTS[px % 2][py % 4]
            prev = cur
    marker_col = marker_bits = -1
    if marker is not None and math.isfinite(marker):
        mx = to_dot(marker, ymin)[0]
        marker_col, marker_bits = mx // 2, _COLUMN[mx % 2]
    lines: list[Text] = []
    for r in range(rows):
        line = Text(no_wrap=True, end="")
        if gutter:
            label = top if r == 0 else bottom if r == rows - 1 else ""
            if r == mid_row and mid_row not in (0, rows - 1):
                label = middle
            line.append(label.rjust(gutter - 1) + " ", style=axis)
        for c in range(cols):
            bits = [m[r][c] for m in masks]
            total = 0
            for b in bits:
                total |= b
            if c == marker_col:
                line.append(chr(0x2800 + (total | marker_bits)), style=marker_style)
                continue
            if not total:
                line.append(" ")
                continue
            present = [i for i, b in enumerate(bits) if b]
            # "both" only where the series draw the very same dots: where they differ, the
            # later one (B, a replay) is drawn in its own colour
            same = len(present) > 1 and all(bits[i] == bits[present[0]] for i in present)
            style = both if same else styles[present[-1] % len(styles)]
            line.append(chr(0x2800 + total), style=style)
        lines.append(line)
    if rows < height:
        left, right = _fmt(xmin), _fmt(xmax)
        axis_line = [" "] * cols
        for i, ch in enumerate(left[:cols]):
            axis_line[i] = ch
        for i, ch in enumerate(right[-cols:]):
            axis_line[cols - len(right[-cols:]) + i] = ch
        title = f" {x_title} "
        if x_title and len(left) + len(right) + len(title) + 2 <= cols:
            start = (cols - len(title)) // 2
            axis_line[start : start + len(title)] = list(title)
        bottom_line = Text(" " * gutter + "".join(axis_line), style=axis, no_wrap=True, end="")
        if 0 <= marker_col < cols:
            tag = f"▲{_fmt(marker)}" if marker is not None else "▲"
            start = min(max(0, marker_col), max(0, cols - len(tag)))
            chars = list(bottom_line.plain)
            chars[gutter + start : gutter + start + len(tag)] = list(tag)
            bottom_line = Text("".join(chars)[:width], style=axis, no_wrap=True, end="")
            bottom_line.stylize(marker_style, gutter + start, gutter + start + len(tag))
        lines.append(bottom_line)
    return Text("\n", no_wrap=True).join(lines)


def overlay_spread(histories: Sequence[Sequence[tuple[float, float]]]) -> float:
    """The largest gap between any two histories at a step they share: how far runs
    that should agree drift apart (0.0: every overlaid history is the same)."""
    by_step: dict[float, list[float]] = {}
    for h in histories:
        for x, y in _finite(h):
            by_step.setdefault(x, []).append(y)
    return max((max(v) - min(v) for v in by_step.values() if len(v) > 1), default=0.0)


class LinePlot(Widget):
    """One or two metric histories, with an optional marked step."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "lineplot--a",
        "lineplot--b",
        "lineplot--both",
        "lineplot--marker",
        "lineplot--axis",
    }
    DEFAULT_CSS = """
    LinePlot {
        height: 8;
        width: 1fr;
    }
    LinePlot > .lineplot--a { color: $primary; }
    LinePlot > .lineplot--b { color: $warning; }
    LinePlot > .lineplot--both { color: $success; }
    LinePlot > .lineplot--marker { color: $error; text-style: bold; }
    LinePlot > .lineplot--axis { color: $text-muted; }
    """

    def __init__(
        self,
        series: Sequence[Series] = (),
        *,
        marker: float | None = None,
        axes: bool = True,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._series = list(series)
        self._marker = marker
        self._axes = axes

    def set_data(self, series: Sequence[Series], marker: float | None = None) -> None:
        self._series = list(series)
        self._marker = marker
        self.refresh()

    def render(self) -> Text:
        return render_plot(
            self._series,
            self.size.width,
            self.size.height,
            styles=(
                self.get_component_rich_style("lineplot--a"),
                self.get_component_rich_style("lineplot--b"),
            ),
            both=self.get_component_rich_style("lineplot--both"),
            marker_style=self.get_component_rich_style("lineplot--marker"),
            axis=self.get_component_rich_style("lineplot--axis"),
            marker=self._marker,
            axes=self._axes,
        )
