"""The TUI tells WITHIN_NOISE apart from IDENTICAL and draws the replicas' noise band."""

from __future__ import annotations

from typing import Any

from rich.style import Style

from replay_tui.tui.widgets.plot import BAND_GLYPH, Series, distance_view, render_plot
from replay_tui.tui.widgets.verdict_banner import block_letters

PLAIN = Style()


def _render(series: list[Series], band: list[tuple[float, float, float]] | None, **how: Any) -> str:
    """``series`` plotted at 60 x 12 in plain styles, ``band`` shaded (``how``: the
    plot's other options)."""
    text = render_plot(
        series, 60, 12, styles=(PLAIN, PLAIN), both=PLAIN, marker_style=PLAIN, axis=PLAIN,
        band=band, band_style=PLAIN, **how,
    )  # fmt: skip
    return text.plain


def _plot(band: list[tuple[float, float, float]] | None, marker: float | None = None) -> str:
    a = [(float(s), 2.0 - s / 100) for s in range(0, 101, 10)]
    b = [(float(s), 2.0 - s / 100 + (0.3 if s >= 50 else 0.0)) for s in range(0, 101, 10)]
    return _render([Series("original", a), Series("replay", b)], band, marker=marker)


def test_the_band_is_shaded_with_a_shape_under_the_curves() -> None:
    band = [(float(s), 1.9 - s / 100, 2.1 - s / 100) for s in range(0, 101, 10)]
    shaded = _plot(band)
    assert BAND_GLYPH in shaded
    assert BAND_GLYPH not in _plot(None)  # no band, no shading
    # the band does not widen the y axis: the same ticks either way
    assert shaded.splitlines()[0].split()[0] == _plot(None).splitlines()[0].split()[0]


def test_the_step_a_curve_leaves_the_band_is_marked_on_the_axis() -> None:
    band = [(float(s), 1.9 - s / 100, 2.1 - s / 100) for s in range(0, 101, 10)]
    axis = _plot(band, marker=50.0).splitlines()[-1]
    assert "▲50" in axis  # a tag under the axis, not only a colour


def test_within_noise_has_its_own_block_letters() -> None:
    within = block_letters("WITHIN_NOISE")
    assert len(within) == 3 and within != block_letters("IDENTICAL")
    assert all(len(row) == len(within[0]) for row in within)


def test_the_distance_view_makes_a_thin_band_fill_the_plot() -> None:
    """A band of 0.1 % of the value: a row at most among the values, every row of the
    plot as the distance from the replicas' mean (the band as ±h around zero)."""
    mean = [(float(s), 2.0 - s / 100) for s in range(0, 101, 10)]
    band = [(x, y - 0.001 * y, y + 0.001 * y) for x, y in mean]
    a = [(x, y + 0.0003 * y) for x, y in mean]
    b = [(x, y - 0.0002 * y) for x, y in mean]

    def rows_with_band(
        series: list[Series], shade: list[tuple[float, float, float]], on: bool
    ) -> int:
        text = _render(series, shade, band_in_range=on)
        return sum(BAND_GLYPH in line for line in text.splitlines())

    raw = [Series("original", a), Series("replay", b)]
    assert rows_with_band(raw, band, False) <= 1
    series, shade = distance_view(raw, band)
    assert all(abs(lo + hi) < 1e-12 for _, lo, hi in shade)  # ±h around zero
    assert abs(series[0].points[0][1] - 0.0006) < 1e-12  # 0.03 % of 2.0 above the mean
    assert rows_with_band(series, shade, True) >= 9  # of the 11 rows above the axis
