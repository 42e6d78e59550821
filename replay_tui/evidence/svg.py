"""A metric's history as an inline SVG plot, for the evidence report.

:func:`metric_svg` is pure: numbers in, one ``<svg>`` element out, no I/O.  The original's
curve is solid, the replay's dashed (and another colour), the replicas' noise band is a
filled polygon of low opacity, and the step where the replay leaves the band is a vertical
line with a text label, so nothing is told by colour alone.  The metric name comes from a
manifest, which is untrusted: every string is escaped.  NaN and infinite values are left
out (and counted), and a long history is cut to the lowest and highest point of each pixel
column, so a one-step spike stays visible and the page stays small.

Only presentation attributes (``stroke=``, ``fill=``), no ``style=`` and no fetch: the
plot works under the report's Content-Security-Policy.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from replay_tui.safety import escape_control

__all__ = ["DOWNSAMPLE_OVER", "metric_svg", "nice_ticks"]

DOWNSAMPLE_OVER = 2000
"""A series of more points than this is cut to the min and max of each pixel column."""

ORIGINAL_COLOUR = "#0969da"
REPLAY_COLOUR = "#bc4c00"
BAND_COLOUR = "#6e7781"
EXIT_COLOUR = "#a40e26"
AXIS_COLOUR = "#57606a"
GRID_COLOUR = "#d8dee4"
REPLAY_DASH = "7 4"
FONT = "system-ui, -apple-system, 'Segoe UI', sans-serif"

_XMLNS = ' xmlns="http://www.w3.org/2000/svg"'
_MARGIN_LEFT = 64
_MARGIN_RIGHT = 16
_MARGIN_TOP = 30
_MARGIN_BOTTOM = 38

Point = tuple[float, float]
BandPoint = tuple[float, float, float]


@dataclass(frozen=True)
class _Frame:
    """Where the data go: data ranges to the pixel box of the plot area."""

    x0: float
    x1: float
    y0: float
    y1: float
    left: float
    right: float
    top: float
    bottom: float

    def px(self, x: float) -> float:
        return self.left + _frac(x, self.x0, self.x1) * (self.right - self.left)

    def py(self, y: float) -> float:
        return self.bottom - _frac(y, self.y0, self.y1) * (self.bottom - self.top)


def _frac(v: float, lo: float, hi: float) -> float:
    """Where ``v`` lies between ``lo`` and ``hi`` (0..1); halves keep huge spans finite."""
    span = hi / 2 - lo / 2
    if span <= 0:
        return 0.5
    return (v / 2 - lo / 2) / span


# Not characters of XML 1.0 (lone surrogates, U+FFFE, U+FFFF): a JSON string may hold them.
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def _text(v: str) -> str:
    """An untrusted string as SVG text or an attribute value: control and bidi characters
    shown as escapes, what XML cannot hold replaced, markup escaped."""
    return html.escape(_NOT_XML.sub("\ufffd", escape_control(v)), quote=True)


# -- numbers ------------------------------------------------------------------------------


def _c(v: float) -> str:
    """A pixel coordinate, compactly: one decimal, no trailing ``.0``."""
    s = f"{v:.1f}"
    if s.endswith(".0"):
        s = s[:-2]
    return "0" if s == "-0" else s


def _g(v: float) -> str:
    """A data value for prose (``desc``, ``aria-label``): six significant digits."""
    s = f"{v:.6g}"
    return "0" if s == "-0" else s


def _nice(x: float) -> float:
    """The 'nice' number (1, 2 or 5 times a power of ten) nearest ``x`` (> 0)."""
    exp = math.floor(math.log10(x))
    f = x / 10.0**exp
    nf = 1.0 if f < 1.5 else 2.0 if f < 3 else 5.0 if f < 7 else 10.0
    return nf * 10.0**exp


def nice_ticks(
    lo: float, hi: float, count: int = 5, *, integer: bool = False, pad: float = 0.0
) -> tuple[float, float, list[float]]:
    """The axis range for data in ``[lo, hi]`` and nice ticks inside it:
    ``(axis_lo, axis_hi, ticks)``.

    The axis is the data range widened by ``pad`` (a fraction of the span) on each side;
    a single value is widened to a span of its own (by 1 for ``integer`` axes).  Ticks
    are 1, 2 or 5 times a power of ten apart, about ``count`` of them, at least 1 apart
    on an ``integer`` axis (steps).  A span too large for a float falls back to the two
    ends.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("nice_ticks needs finite ends")
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        half = 1.0 if integer or lo == 0 else abs(lo) * 0.1
        lo, hi = lo - half, hi + half
    elif pad > 0:
        widen = (hi / 2 - lo / 2) * 2 * pad
        if math.isfinite(lo - widen) and math.isfinite(hi + widen):
            lo, hi = lo - widen, hi + widen
    raw = (hi - lo) / max(1, count - 1)
    if not math.isfinite(raw) or raw < 1e-300:  # beyond what a float can split
        return lo, hi, [lo, hi]
    step = _nice(raw)
    if integer:
        step = max(step, 1.0)
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    ticks = sorted({i * step for i in range(first, last + 1)})
    if not ticks or not all(math.isfinite(t) for t in ticks):
        return lo, hi, [lo, hi]
    return lo, hi, ticks


def _tick_label(v: float, step: float) -> str:
    """A tick's value as short as its spacing allows (``0.25``, ``1500``, ``2e+07``)."""
    if not (math.isfinite(step) and step > 0):
        return _g(v)
    if v == 0 or abs(v) < step * 1e-9:
        return "0"
    mag = abs(v)
    if 1e-4 <= mag < 1e6 and step >= 1e-6:
        decimals = max(0, -math.floor(math.log10(step) + 1e-9))
        s = f"{v:.{decimals}f}"
    else:
        digits = math.floor(math.log10(mag)) - math.floor(math.log10(step) + 1e-9) + 1
        s = f"{v:.{min(15, max(1, digits))}g}"
    return "0" if s in ("-0", "-0.0") else s


# -- data ---------------------------------------------------------------------------------


def _finite_points(series: Sequence[tuple[int, float]]) -> tuple[list[Point], int]:
    """The finite points of ``series``, by step; and how many were not finite."""
    out: list[Point] = []
    dropped = 0
    for step, value in series:
        s, v = float(step), float(value)
        if math.isfinite(s) and math.isfinite(v):
            out.append((s, v))
        else:
            dropped += 1
    out.sort(key=lambda p: p[0])
    return out, dropped


def _finite_band(band: Sequence[tuple[int, float, float]]) -> tuple[list[BandPoint], int]:
    out: list[BandPoint] = []
    dropped = 0
    for step, lo, hi in band:
        s, a, b = float(step), float(lo), float(hi)
        if math.isfinite(s) and math.isfinite(a) and math.isfinite(b):
            out.append((s, min(a, b), max(a, b)))
        else:
            dropped += 1
    out.sort(key=lambda p: p[0])
    return out, dropped


def _column(x: float, frame: _Frame) -> int:
    return math.floor(frame.px(x) - frame.left)


def _downsample(points: list[Point], frame: _Frame) -> list[Point]:
    """At most the lowest and the highest point of each pixel column, in step order, and
    the two ends: the line looks the same and a spike keeps its extreme."""
    if len(points) <= DOWNSAMPLE_OVER:
        return points
    keep: set[int] = {0, len(points) - 1}
    col = None
    lo_i = hi_i = 0
    for i, (x, y) in enumerate(points):
        c = _column(x, frame)
        if c != col:
            if col is not None:
                keep.update((lo_i, hi_i))
            col, lo_i, hi_i = c, i, i
            continue
        if y < points[lo_i][1]:
            lo_i = i
        if y > points[hi_i][1]:
            hi_i = i
    keep.update((lo_i, hi_i))
    return [points[i] for i in sorted(keep)]


def _downsample_band(band: list[BandPoint], frame: _Frame) -> list[BandPoint]:
    """The band's envelope per pixel column (its lowest low, its highest high), at the
    column's first and last step."""
    if len(band) <= DOWNSAMPLE_OVER:
        return band
    out: list[BandPoint] = []
    group: list[BandPoint] = []

    def flush() -> None:
        lo = min(p[1] for p in group)
        hi = max(p[2] for p in group)
        out.append((group[0][0], lo, hi))
        if group[-1][0] != group[0][0]:
            out.append((group[-1][0], lo, hi))

    col = None
    for p in band:
        c = _column(p[0], frame)
        if c != col and group:
            flush()
            group = []
        col = c
        group.append(p)
    if group:
        flush()
    return out


# -- drawing ------------------------------------------------------------------------------


def _points_attr(points: Sequence[Point], frame: _Frame) -> str:
    return " ".join(f"{_c(frame.px(x))},{_c(frame.py(y))}" for x, y in points)


def _series_desc(label: str, points: list[Point], dropped: int) -> str:
    if not points:
        text = f"{label}: no finite values"
    else:
        ys = [p[1] for p in points]
        text = (
            f"{label}: {len(points)} points, steps {_g(points[0][0])} to {_g(points[-1][0])},"
            f" values {_g(min(ys))} to {_g(max(ys))}, last {_g(points[-1][1])}"
        )
    if dropped:
        text += f" ({dropped} NaN or infinite left out)"
    return text


def metric_svg(
    name: str,
    original: Sequence[tuple[int, float]],
    replay: Sequence[tuple[int, float]] | None,
    band: Sequence[tuple[int, float, float]] | None = None,
    exit_step: int | None = None,
    *,
    width: int = 640,
    height: int = 240,
    xmlns: bool = True,
    distance: bool = False,
) -> str:
    """One metric's history as a standalone ``<svg>`` element (valid XML and HTML).

    ``original`` and ``replay`` are ``(step, value)`` points (the manifest's
    ``outputs.metric_history[name]``); ``replay`` None draws the original alone.
    ``band`` is the replicas' noise band, ``(step, lo, hi)`` per step; ``exit_step`` the
    step where the replay leaves it, marked by a line and the words "leaves noise band at
    step N".  Steps are on x, values on y; NaN and infinite values are left out.
    ``xmlns`` False leaves out the namespace declaration, for an ``<svg>`` inline in an
    HTML page (whose parser puts it in the SVG namespace itself): the page then holds no
    URL at all.  ``distance``: the points are distances from the replicas' mean and the
    band is ``±h`` around zero (the title, the legend and a zero line say so).
    """
    width = max(240, int(width))
    height = max(120, int(height))
    orig_pts, orig_dropped = _finite_points(original)
    rep_pts, rep_dropped = _finite_points(replay) if replay is not None else ([], 0)
    band_pts, _ = _finite_band(band) if band is not None else ([], 0)

    xs = [p[0] for p in orig_pts] + [p[0] for p in rep_pts] + [p[0] for p in band_pts]
    ys = [p[1] for p in orig_pts] + [p[1] for p in rep_pts]
    ys += [p[1] for p in band_pts] + [p[2] for p in band_pts]
    if exit_step is not None and math.isfinite(float(exit_step)):
        xs.append(float(exit_step))

    title = f"{name}: original" + (" and latest replay" if replay is not None else "")
    title += " minus the replicas' mean, by step" if distance else " by step"
    descs = [_series_desc("original", orig_pts, orig_dropped)]
    if replay is not None:
        descs.append(_series_desc("replay", rep_pts, rep_dropped))
    if band_pts:
        descs.append(f"noise band over {len(band_pts)} steps")
    if exit_step is not None:
        descs.append(f"the replay leaves the noise band at step {exit_step}")
    desc = "; ".join(descs) + "."
    e_title, e_desc = _text(title), _text(desc)
    out = [
        f'<svg{_XMLNS if xmlns else ""} class="metric-plot" role="img"'
        f' width="{width}" height="{height}" viewBox="0 0 {width} {height}"'
        f' aria-label="{e_title}. {e_desc}" font-family="{FONT}" font-size="11">',
        f"<title>{e_title}</title>",
        f"<desc>{e_desc}</desc>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
    ]
    if not xs or not ys:
        out.append(_axis_text(_c(width / 2), _c(height / 2), "no finite values to plot"))
        out.append("</svg>")
        return "\n".join(out)

    x0, x1, xticks = nice_ticks(min(xs), max(xs), 6, integer=True)
    y0, y1, yticks = nice_ticks(min(ys), max(ys), 5, pad=0.05)
    frame = _Frame(
        x0,
        x1,
        y0,
        y1,
        left=_MARGIN_LEFT,
        right=width - _MARGIN_RIGHT,
        top=_MARGIN_TOP,
        bottom=height - _MARGIN_BOTTOM,
    )
    out += _axes(frame, xticks, yticks)
    out += _legend(frame, replay is not None, bool(band_pts), distance)
    if distance and frame.y0 < 0 < frame.y1:  # the replicas' mean
        y = _c(frame.py(0.0))
        out.append(
            f'<line class="mean" x1="{_c(frame.left)}" y1="{y}" x2="{_c(frame.right)}"'
            f' y2="{y}" stroke="{BAND_COLOUR}" stroke-width="1" stroke-dasharray="1 3"/>'
        )

    if band_pts:
        shown = _downsample_band(band_pts, frame)
        upper = [(s, hi) for s, _, hi in shown]
        lower = [(s, lo) for s, lo, _ in reversed(shown)]
        out.append(
            f'<polygon class="noise-band" fill="{BAND_COLOUR}" fill-opacity="0.22"'
            f' stroke="{BAND_COLOUR}" stroke-opacity="0.4" stroke-width="0.75"'
            f' points="{_points_attr(upper + lower, frame)}"/>'
        )
    out += _series(orig_pts, frame, "original", ORIGINAL_COLOUR, None)
    if replay is not None:
        out += _series(rep_pts, frame, "replay", REPLAY_COLOUR, REPLAY_DASH)
    if exit_step is not None and math.isfinite(float(exit_step)):
        out += _exit_marker(int(exit_step), frame)
    out.append("</svg>")
    return "\n".join(out)


def _labelled(ticks: list[float], step: float) -> list[tuple[float, str]]:
    """Each tick with its label; a tick whose label repeats the one before is left out
    (values too close for a float to tell apart)."""
    out: list[tuple[float, str]] = []
    for t in ticks:
        text = _tick_label(t, step)
        if not out or out[-1][1] != text:
            out.append((t, text))
    return out


def _axes(frame: _Frame, xticks: list[float], yticks: list[float]) -> list[str]:
    out: list[str] = ['<g class="axes">']
    ystep = yticks[1] - yticks[0] if len(yticks) > 1 else abs(yticks[0]) or 1.0
    xstep = xticks[1] - xticks[0] if len(xticks) > 1 else 1.0
    for t, text in _labelled(yticks, ystep):  # a grid line across, its value on the left
        y = _c(frame.py(t))
        out.append(_axis_line(_c(frame.left), y, _c(frame.right), y, GRID_COLOUR))
        out.append(
            _axis_text(_c(frame.left - 6), y, text, 'text-anchor="end" dominant-baseline="middle"')
        )
    for t, text in _labelled(xticks, xstep):  # a tick under the axis, its step below
        x = _c(frame.px(t))
        out.append(_axis_line(x, _c(frame.bottom), x, _c(frame.bottom + 4), AXIS_COLOUR))
        out.append(_axis_text(x, _c(frame.bottom + 16), text))
    out.append(
        f'<path d="M{_c(frame.left)},{_c(frame.top)} V{_c(frame.bottom)}'
        f' H{_c(frame.right)}" fill="none" stroke="{AXIS_COLOUR}" stroke-width="1"/>'
    )
    out.append(_axis_text(_c((frame.left + frame.right) / 2), _c(frame.bottom + 32), "step"))
    out.append("</g>")
    return out


def _axis_line(x1: str, y1: str, x2: str, y2: str, colour: str) -> str:
    """A one-pixel line: a grid line or a tick."""
    return f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{colour}" stroke-width="1"/>'


def _axis_text(x: str, y: str, text: str, align: str = 'text-anchor="middle"') -> str:
    """A label in the axes' colour at (``x``, ``y``), centred unless ``align`` says."""
    return f'<text x="{x}" y="{y}" {align} fill="{AXIS_COLOUR}">{text}</text>'


def _legend(frame: _Frame, has_replay: bool, has_band: bool, distance: bool = False) -> list[str]:
    """The legend in words beside a sample of each line: colour is never the only cue."""
    y = 14
    items = [("original — solid", "original")]
    if has_replay:
        items.append(("replay — dashed", "replay"))
    if has_band:
        items.append(("noise band ±h — shaded" if distance else "noise band — shaded", "band"))
    out = ['<g class="legend">']
    x = frame.left
    for label, kind in items:
        if kind == "band":
            out.append(
                f'<rect x="{x}" y="{y - 6}" width="24" height="12" fill="{BAND_COLOUR}"'
                ' fill-opacity="0.22"/>'
            )
        else:
            colour, dash = (
                (REPLAY_COLOUR, f' stroke-dasharray="{REPLAY_DASH}"')
                if kind == "replay"
                else (ORIGINAL_COLOUR, "")
            )
            out.append(
                f'<line x1="{x}" y1="{y}" x2="{x + 24}" y2="{y}" stroke="{colour}"'
                f' stroke-width="{_width(kind == "replay")}"{dash}/>'
            )
        out.append(
            f'<text x="{x + 30}" y="{y}" dominant-baseline="middle" fill="#1b1f24">'
            f"{html.escape(label)}</text>"
        )
        x += 30 + round(6.2 * len(label)) + 18
    out.append("</g>")
    return out


def _width(dashed: bool) -> str:
    """The original a little wider: where the two agree, it shows on both sides of the
    replay's dashes."""
    return "1.75" if dashed else "3"


def _series(
    points: list[Point], frame: _Frame, cls: str, colour: str, dash: str | None
) -> list[str]:
    if not points:
        return []
    shown = _downsample(points, frame)
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    out = [
        f'<polyline class="{cls}" fill="none" stroke="{colour}"'
        f' stroke-width="{_width(dash is not None)}"'
        f' stroke-linejoin="round"{dash_attr} points="{_points_attr(shown, frame)}"/>'
    ]
    if len(shown) == 1:  # a lone point draws no line: a dot, hollow for the replay
        x, y = _c(frame.px(shown[0][0])), _c(frame.py(shown[0][1]))
        fill = "#ffffff" if dash else colour
        out.append(
            f'<circle class="{cls}-point" cx="{x}" cy="{y}" r="4" fill="{fill}"'
            f' stroke="{colour}" stroke-width="2"/>'
        )
    return out


def _exit_marker(step: int, frame: _Frame) -> list[str]:
    x = frame.px(step)
    label = f"leaves noise band at step {step}"
    # the label on the side of the line with room for it
    room_right = frame.right - x
    anchor, tx = ("start", x + 4) if room_right > 7 * len(label) else ("end", x - 4)
    return [
        '<g class="noise-exit">',
        f'<line x1="{_c(x)}" y1="{_c(frame.top)}" x2="{_c(x)}" y2="{_c(frame.bottom)}"'
        f' stroke="{EXIT_COLOUR}" stroke-width="1.5" stroke-dasharray="2 2"/>',
        f'<text x="{_c(tx)}" y="{_c(frame.top + 10)}" text-anchor="{anchor}"'
        f' fill="{EXIT_COLOUR}" font-weight="600">{html.escape(label)}</text>',
        "</g>",
    ]
