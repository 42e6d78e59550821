"""A small braille line plot: one or more series, optionally a marked step.

Each terminal cell holds a 2x4 grid of braille dots, so a plot of W x H cells has
2W x 4H dots.  The first series (A) is drawn as a solid line, every later one (B, the
replays) as a dashed line, so the two are told apart without colour too; the legend
says which is which.  Cells where every series draws the very same dots get the "both"
colour; where they differ, each keeps its own colour.  A marked step (where two
histories leave tolerance, or a curve leaves the noise band) is drawn as a vertical line
in the marker colour, with a ``▲`` tag under the axis.  An optional band (the replicas'
noise band: ``(step, lo, hi)``) shades the cells it covers with ``░`` in the band
colour, a shape as well as a colour, under the curves.  In the distance view
(``LinePlot.distance``, the comparison's ``n``) each curve is its distance from the
replicas' mean and the band is ``±h`` around zero, part of the y range, so a band of
0.1 % of the value fills the plot (``distance_view``).

The y axis has ticks at its top, middle and bottom, the x axis its first and last step
and its title.  A focused plot takes keys: ``l`` switches the y axis between linear and
log scale, ``z`` zooms to the steps around the marked step and back, ``w`` switches the
x axis between the step and the wall time (seconds since each run started, where every
series shown recorded one per point: ``outputs.metric_times``).  Colours come from the
theme through component classes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widget import Widget

from replay_tui.safety import escape_control

# Braille dot bits, indexed [column][row] within a cell.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_COLUMN = (0x01 | 0x02 | 0x04 | 0x40, 0x08 | 0x10 | 0x20 | 0x80)
DASH_ON, DASH_PERIOD = 4, 6
"""A dashed series draws 4 dots of every 6 along its path: two cells on, one off."""
SOLID_GLYPH, DASHED_GLYPH = "━", "╍"
"""How the legend shows a solid series and a dashed one."""
BAND_GLYPH = "░"
"""How an empty cell inside the noise band is drawn (and how the legend shows the band)."""
Band = Sequence[tuple[float, float, float]]
ZOOM_MIN_STEPS = 5
"""A zoom to the marked step shows at least this many recorded steps either side."""


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


def by_wall_time(
    series: Sequence[Series], times: Sequence[Sequence[float] | None]
) -> list[Series] | None:
    """``series`` with each point's x its wall time (``times[i]``: one per point of
    ``series[i]``); None unless every series has one time per point."""
    if not series or len(times) != len(series):
        return None
    out: list[Series] = []
    for s, ts in zip(series, times, strict=True):
        if ts is None or len(ts) != len(s.points):
            return None
        out.append(Series(s.label, [(t, y) for t, (_, y) in zip(ts, s.points, strict=True)]))
    return out


def time_at(step_series: Series, time_series: Series, step: float | None) -> float | None:
    """The wall time of the first point at or after ``step`` (a marked step on a wall
    time axis), or None."""
    if step is None or not math.isfinite(step):
        return None
    for (x, _), (t, _) in zip(step_series.points, time_series.points, strict=False):
        if x >= step:
            return float(t)
    return None


def distance_view(
    series: Sequence[Series], band: Band
) -> tuple[list[Series], list[tuple[float, float, float]]]:
    """Each series as its distance from the replicas' mean (the band's middle) at the
    band's steps, and the band as ``±h`` around zero: a band of 0.1 % of the value fills
    the plot instead of one row of it."""
    mean = {float(x): (lo + hi) / 2 for x, lo, hi in band}
    out = [
        Series(s.label, [(x, y - mean[float(x)]) for x, y in s.points if float(x) in mean])
        for s in series
    ]
    shade = [(float(x), lo - mean[float(x)], hi - mean[float(x)]) for x, lo, hi in band]
    return out, shade


def can_log(series: Sequence[Series]) -> bool:
    """Whether a log y axis can show every point (all values above zero)."""
    ys = [y for s in series for _, y in _finite(s.points)]
    return bool(ys) and min(ys) > 0


def zoom_window(series: Sequence[Series], marker: float | None) -> tuple[float, float] | None:
    """The steps around ``marker`` a zoom shows: a tenth of the recorded steps (at least
    :data:`ZOOM_MIN_STEPS`) either side of it; None without a marker or a history."""
    if marker is None or not math.isfinite(marker):
        return None
    steps = sorted({x for s in series for x, _ in _finite(s.points)})
    if len(steps) < 2:
        return None
    k = max(ZOOM_MIN_STEPS, len(steps) // 10)
    at = min(range(len(steps)), key=lambda i: abs(steps[i] - marker))
    lo, hi = steps[max(0, at - k)], steps[min(len(steps) - 1, at + k)]
    if lo == steps[0] and hi == steps[-1]:
        return None  # the window is the whole history: nothing to zoom into
    return min(lo, marker), max(hi, marker)


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
    log_y: bool = False,
    x_range: tuple[float, float] | None = None,
    band: Band | None = None,
    band_style: Style | None = None,
    band_in_range: bool = False,
) -> Text:
    """The plot as Rich text of ``height`` lines, ``width`` cells each.

    ``log_y``: the y axis in log scale (points at or below zero are left out; the ticks
    read the values themselves).  ``x_range``: only the steps in it (a zoom).  ``band``:
    ``(x, lo, hi)`` shaded under the curves (it does not widen the y axis: a band far
    wider than the curves is clipped to the plot), unless ``band_in_range`` (the distance
    view: the band is what the plot is about, so it sets the y axis with the curves).
    """
    data = [_finite(s.points) for s in series]
    shade = [
        (float(x), float(lo), float(hi))
        for x, lo, hi in (band or ())
        if all(isinstance(v, int | float) and math.isfinite(v) for v in (x, lo, hi))
    ]
    if x_range is not None:
        data = [[(x, y) for x, y in d if x_range[0] <= x <= x_range[1]] for d in data]
        shade = [b for b in shade if x_range[0] <= b[0] <= x_range[1]]
    if log_y:
        data = [[(x, math.log10(y)) for x, y in d if y > 0] for d in data]
        shade = [(x, math.log10(lo), math.log10(hi)) for x, lo, hi in shade if lo > 0]
    pts = [p for d in data for p in d]
    if width < 4 or height < 1:
        return Text("")
    if not pts:
        return Text("no history recorded".center(width)[:width], style=axis)
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    if band_in_range:
        ys += [v for _, lo, hi in shade for v in (lo, hi)]
    xmin, xmax, ymin, ymax = min(xs), max(xs), min(ys), max(ys)
    if x_range is not None:
        xmin, xmax = x_range
    if marker is not None and math.isfinite(marker):
        xmin, xmax = min(xmin, marker), max(xmax, marker)
    if ymax == ymin:
        ymin, ymax = ymin - 0.5, ymax + 0.5
    if xmax == xmin:
        xmin, xmax = xmin - 0.5, xmax + 0.5

    def tick(v: float) -> str:
        return _fmt(10**v if log_y else v)

    top, bottom, middle = tick(ymax), tick(ymin), tick((ymax + ymin) / 2)
    gutter = (max(len(top), len(bottom), len(middle)) + 1) if axes and width >= 24 else 0
    rows = height - (1 if axes and height >= 3 else 0)
    mid_row = (rows - 1) // 2 if rows >= 5 else -1  # a middle tick when there is room
    cols = width - gutter
    if cols < 2 or rows < 1:
        return Text("")
    dots_w, dots_h = 2 * cols, 4 * rows
    # per series: every dot of its line (to tell where the series agree), and the dots
    # drawn (a dashed series leaves some out)
    solid = [[[0] * cols for _ in range(rows)] for _ in data]
    drawn = [[[0] * cols for _ in range(rows)] for _ in data]

    def to_dot(x: float, y: float) -> tuple[int, int]:
        dx = round((x - xmin) / (xmax - xmin) * (dots_w - 1))
        dy = round((ymax - y) / (ymax - ymin) * (dots_h - 1))
        return dx, dy

    for k, d in enumerate(data):
        prev: tuple[int, int] | None = None
        along = 0  # dots along the path so far: where a dashed line is on or off
        last: tuple[int, int] | None = None
        for x, y in sorted(d):
            cur = to_dot(x, y)
            for px, py in _line(*prev, *cur) if prev else [cur]:
                if (px, py) == last:
                    continue
                last = (px, py)
                bit = _DOTS[px % 2][py % 4]
                solid[k][py // 4][px // 2] |= bit
                if k == 0 or along % DASH_PERIOD < DASH_ON:
                    drawn[k][py // 4][px // 2] |= bit
                along += 1
            prev = cur
    marker_col = marker_bits = -1
    if marker is not None and math.isfinite(marker):
        mx = to_dot(marker, ymin)[0]
        marker_col, marker_bits = mx // 2, _COLUMN[mx % 2]
    covered = [[False] * cols for _ in range(rows)]
    for x, lo, hi in shade:
        if not xmin <= x <= xmax:
            continue
        c = to_dot(x, ymin)[0] // 2
        top_row = max(0, to_dot(x, min(max(hi, ymin), ymax))[1] // 4)
        low_row = min(rows - 1, to_dot(x, max(min(lo, ymax), ymin))[1] // 4)
        for r in range(top_row, low_row + 1):
            covered[r][c] = True
    lines: list[Text] = []
    for r in range(rows):
        line = Text(no_wrap=True, end="")
        if gutter:
            label = top if r == 0 else bottom if r == rows - 1 else ""
            if r == mid_row and mid_row not in (0, rows - 1):
                label = middle
            line.append(label.rjust(gutter - 1) + " ", style=axis)
        for c in range(cols):
            lines_here = [m[r][c] for m in solid]
            present = [i for i, b in enumerate(lines_here) if b]
            # "both" only where the series draw the very same dots: there they are drawn
            # solid; where they differ, each series keeps its own colour and line style
            same = len(present) > 1 and all(
                lines_here[i] == lines_here[present[0]] for i in present
            )
            bits = [lines_here[present[0]]] if same else [m[r][c] for m in drawn]
            total = 0
            for b in bits:
                total |= b
            if c == marker_col:
                line.append(chr(0x2800 + (total | marker_bits)), style=marker_style)
                continue
            if not total:
                if covered[r][c] and band_style is not None:
                    line.append(BAND_GLYPH, style=band_style)
                else:
                    line.append(" ")
                continue
            if same:
                style = both
            else:  # where two differ, the later one (B, a replay) shows its colour
                shown = [i for i, b in enumerate(bits) if b]
                style = styles[shown[-1] % len(styles)]
            line.append(chr(0x2800 + total), style=style)
        lines.append(line)
    if rows < height:
        modes = [m for m, on in (("zoom", x_range is not None), ("log y", log_y)) if on]
        title = " · ".join([x_title, *modes] if x_title else modes)
        tag = f"▲{_fmt(marker)}" if marker is not None and 0 <= marker_col < cols else ""
        lines.append(
            Text(" " * gutter, style=axis, no_wrap=True, end="")
            + _x_axis(cols, _fmt(xmin), _fmt(xmax), title, tag, marker_col, axis, marker_style)
        )
    return Text("\n", no_wrap=True).join(lines)


def _x_axis(
    cols: int,
    left: str,
    right: str,
    title: str,
    tag: str,
    marker_col: int,
    axis: Style,
    marker_style: Style,
) -> Text:
    """The x axis line: first and last step at the ends, the marked step's tag under its
    column, the title centred in the widest stretch left free (never over a number)."""
    chars = [" "] * cols
    taken = [False] * cols

    def put(start: int, word: str) -> None:
        for i, ch in enumerate(word):
            if 0 <= start + i < cols:
                chars[start + i] = ch
                taken[start + i] = True

    def free(start: int, n: int) -> bool:  # with a blank cell kept either side
        return all(not taken[i] for i in range(max(0, start - 1), min(cols, start + n + 1)))

    tag_at = min(max(0, marker_col), max(0, cols - len(tag))) if tag else -1
    if tag:  # the marked step first: the ends give way to it
        put(tag_at, tag)
    for start, word in ((0, left), (cols - len(right), right)):
        if start >= 0 and free(start, len(word)):
            put(start, word)
    if title:
        word = f" {title} "
        gaps: list[tuple[int, int]] = []  # stretches of free cells, one cell kept each side
        run = 0
        for i in range(cols + 1):
            if i < cols and not taken[i]:
                run += 1
                continue
            if run:
                gaps.append((i - run + 1, i - 1))  # [start, end), a margin each side
            run = 0
        n = len(word)
        centre = (cols - n) // 2
        at_centre = [a for a, b in gaps if a <= centre <= b - n]
        if at_centre:
            put(centre, word)
        elif widest := max(
            (ab for ab in gaps if ab[1] - ab[0] >= n), default=None, key=lambda ab: ab[1] - ab[0]
        ):
            put(widest[0] + (widest[1] - widest[0] - n) // 2, word)
    line = Text("".join(chars), style=axis, no_wrap=True, end="")
    if tag:
        line.stylize(marker_style, tag_at, tag_at + len(tag))
    return line


def overlay_spread(histories: Sequence[Sequence[tuple[float, float]]]) -> float:
    """The largest gap between any two histories at a step they share: how far runs
    that should agree drift apart (0.0: every overlaid history is the same)."""
    by_step: dict[float, list[float]] = {}
    for h in histories:
        for x, y in _finite(h):
            by_step.setdefault(x, []).append(y)
    return max((max(v) - min(v) for v in by_step.values() if len(v) > 1), default=0.0)


class LinePlot(Widget, can_focus=True):
    """One or more metric histories, with an optional marked step.

    Focused, ``l`` toggles a log y axis and ``z`` zooms to the marked step and back
    (the footer shows them only while the plot has the focus)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "toggle_log", "Log y"),
        Binding("z", "toggle_zoom", "Zoom to divergence"),
        Binding("w", "toggle_time", "x: step/time"),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "lineplot--a",
        "lineplot--b",
        "lineplot--both",
        "lineplot--marker",
        "lineplot--axis",
        "lineplot--band",
    }
    DEFAULT_CSS = """
    LinePlot {
        height: 8;
        width: 1fr;
    }
    LinePlot:focus { background: $boost; }
    LinePlot > .lineplot--a { color: $primary; }
    LinePlot > .lineplot--b { color: $warning; }
    LinePlot > .lineplot--both { color: $success; }
    LinePlot > .lineplot--marker { color: $error; text-style: bold; }
    LinePlot > .lineplot--axis { color: $text-muted; }
    LinePlot > .lineplot--band { color: $accent-muted; }
    """

    def __init__(
        self,
        series: Sequence[Series] = (),
        *,
        marker: float | None = None,
        times: Sequence[Sequence[float] | None] | None = None,
        axes: bool = True,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._series = list(series)
        self._marker = marker
        self._axes = axes
        self._timed = by_wall_time(self._series, times) if times is not None else None
        self._band: list[tuple[float, float, float]] = []
        self.log_y = False
        self.zoomed = False
        self.wall_time = False
        """The x axis shows the wall time (when every series has one) instead of steps."""
        self.distance = False
        """Each curve as its distance from the replicas' mean, the band as ±h around 0
        (``distance_view``; only with a band, by step, on a linear axis)."""

    def set_data(
        self,
        series: Sequence[Series],
        marker: float | None = None,
        times: Sequence[Sequence[float] | None] | None = None,
        band: Band | None = None,
    ) -> None:
        """Show other histories (``times``: each series' wall time per point, for the
        ``w`` key; ``band``: the replicas' noise band by step); the log scale and the
        wall time axis stay on when they can, a zoom ends."""
        self._series = list(series)
        self._band = [(float(x), float(lo), float(hi)) for x, lo, hi in band or ()]
        self._marker = marker
        self._timed = by_wall_time(self._series, times) if times is not None else None
        self.zoomed = False
        self.refresh()
        self.refresh_bindings()

    @property
    def showing_distance(self) -> bool:
        """Whether the distance view is drawn now (asked for, with a band, by step)."""
        return self.distance and bool(self._band) and not self.showing_time

    @property
    def has_band(self) -> bool:
        return bool(self._band)

    @property
    def showing_time(self) -> bool:
        """Whether the x axis is the wall time now (asked for, and recorded)."""
        return self.wall_time and self._timed is not None

    def _shown(self) -> tuple[list[Series], float | None]:
        """The series as drawn (by step or by wall time) and the marker on that axis."""
        if self.showing_time and self._timed is not None:
            at = time_at(self._series[0], self._timed[0], self._marker) if self._series else None
            return self._timed, at
        return self._series, self._marker

    @property
    def x_range(self) -> tuple[float, float] | None:
        """The steps (or seconds) shown while zoomed (None: all of them)."""
        return zoom_window(*self._shown()) if self.zoomed else None

    @property
    def showing_log(self) -> bool:
        """Whether the y axis is in log scale now (asked for, and every value above 0)."""
        return self.log_y and can_log(self._series)

    def legend(self, labels: Sequence[str] | None = None) -> Text:
        """``━ A  ╍ B  ━ both``: each series' line style in its colour, for a title."""
        names = list(labels) if labels is not None else [s.label for s in self._series]
        styles = (
            self.get_component_rich_style("lineplot--a"),
            self.get_component_rich_style("lineplot--b"),
        )
        t = Text()
        for i, name in enumerate(names):
            glyph = SOLID_GLYPH if i == 0 else DASHED_GLYPH  # a name: a metric's, escaped
            t.append(f"{glyph} {escape_control(name)}", style=styles[min(i, 1)])
            t.append("  ")
        if len(names) > 1:
            t.append(f"{SOLID_GLYPH} both", style=self.get_component_rich_style("lineplot--both"))
        if self._band:
            band_style = self.get_component_rich_style("lineplot--band")
            words = "±h band" if self.showing_distance else "replicas' noise band"
            t.append(f"  {BAND_GLYPH} {words}", style=band_style)
        t.rstrip()
        return t

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "toggle_zoom":  # only where there is a divergence to zoom to
            return zoom_window(*self._shown()) is not None
        if action == "toggle_time":  # only where every series has its wall times
            return self._timed is not None
        return True

    def action_toggle_time(self) -> None:
        if self._timed is None:
            self.notify("these histories have no wall time per point", severity="warning")
            return
        self.wall_time = not self.wall_time
        self.zoomed = self.zoomed and zoom_window(*self._shown()) is not None
        self.refresh()
        self.refresh_bindings()

    def action_toggle_log(self) -> None:
        if not self.log_y and not can_log(self._series):
            self.notify("a log y axis needs every value above zero", severity="warning")
            return
        self.log_y = not self.log_y
        self.refresh()

    def action_toggle_zoom(self) -> None:
        if zoom_window(*self._shown()) is None:
            return
        self.zoomed = not self.zoomed
        self.refresh()

    def render(self) -> Text:
        series, marker = self._shown()
        band: Band | None = None if self.showing_time else self._band
        if self.showing_distance:
            series, band = distance_view(series, self._band)
        return render_plot(
            series,
            self.size.width,
            self.size.height,
            styles=(
                self.get_component_rich_style("lineplot--a"),
                self.get_component_rich_style("lineplot--b"),
            ),
            both=self.get_component_rich_style("lineplot--both"),
            marker_style=self.get_component_rich_style("lineplot--marker"),
            axis=self.get_component_rich_style("lineplot--axis"),
            marker=marker,
            axes=self._axes,
            x_title="wall time (s)" if self.showing_time else "step",
            log_y=self.showing_log and not self.showing_distance,
            x_range=self.x_range,
            band=band,
            band_style=self.get_component_rich_style("lineplot--band"),
            band_in_range=self.showing_distance,
        )
