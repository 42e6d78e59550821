"""The TUI's workbench tools, driven with Pilot over real stores: the metric plot's keys
(log y, zoom to the divergence), told-apart series, verifying a bundle and running a
drill from the command palette, and the full value of a cut cell."""

from __future__ import annotations

import math
from typing import Any

import pytest
from rich.style import Style
from textual.widgets._footer import FooterKey

from replay_tui.app import ReplayApp
from replay_tui.messages import OpenComparison
from replay_tui.widgets.plot import LinePlot, Series, render_plot, zoom_window
from tests.app_support import FixedStore, build_fixed_store, settle
from tests.test_app_flows import sync, wait_until

A_STYLE, B_STYLE, BOTH = Style(color="blue"), Style(color="yellow"), Style(color="green")
KW: dict[str, Any] = dict(
    styles=(A_STYLE, B_STYLE), both=BOTH, marker_style=Style(color="red"), axis=Style()
)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> FixedStore:
    return build_fixed_store(tmp_path_factory.mktemp("tools"))


def _dots(text: str) -> int:
    """How many braille dots the plot draws."""
    return sum(bin(ord(ch) - 0x2800).count("1") for ch in text if 0x2800 < ord(ch) <= 0x28FF)


# -- the plot ---------------------------------------------------------------------------


def test_b_is_dashed_a_is_solid_and_both_is_solid_where_they_agree() -> None:
    rising = [(float(s), float(s)) for s in range(100)]
    falling = [(float(s), float(100 - s)) for s in range(100)]
    alone_a = render_plot([Series("A", rising)], 60, 8, **KW)
    alone_b = render_plot([Series("A", []), Series("B", rising)], 60, 8, **KW)
    assert _dots(alone_b.plain) < _dots(alone_a.plain)  # the same line, dashed: gaps
    assert {s.style for s in alone_b.spans} >= {B_STYLE}
    same = render_plot([Series("A", rising), Series("B", rising)], 60, 8, **KW)
    assert same.plain == alone_a.plain  # agreeing series: one solid line...
    assert BOTH in {s.style for s in same.spans} and B_STYLE not in {s.style for s in same.spans}
    crossing = render_plot([Series("A", rising), Series("B", falling)], 60, 8, **KW)
    styles = [s.style for s in crossing.spans]
    assert A_STYLE in styles and B_STYLE in styles  # ...differing ones keep their colours


def test_log_y_ticks_read_values_and_the_axis_says_log() -> None:
    decaying = [(float(s), 10.0 ** (-s / 10)) for s in range(41)]  # 1 down to 1e-4
    linear = render_plot([Series("A", decaying)], 60, 9, **KW).plain.splitlines()
    log = render_plot([Series("A", decaying)], 60, 9, log_y=True, **KW).plain.splitlines()
    assert log[0].split()[0] == "1" and log[-2].split()[0] == "0.0001"
    assert log[len(log) // 2 - 1].split()[0] == "0.01"  # the middle tick: the geometric mean
    assert "log y" in log[-1] and "log y" not in linear[-1]
    # linear: the curve hugs the bottom after a few steps; log: a straight diagonal
    assert sum(line.count("⣀") for line in linear) > sum(line.count("⣀") for line in log)


def test_zoom_window_is_the_steps_around_the_marker() -> None:
    series = [Series("A", [(float(s), float(s)) for s in range(0, 2000, 10)])]
    lo, hi = zoom_window(series, 1250.0) or (math.nan, math.nan)
    assert lo < 1250 < hi and hi - lo == 2 * 20 * 10  # a tenth of 200 steps either side
    assert zoom_window(series, None) is None
    short = [Series("A", [(float(s), float(s)) for s in range(6)])]
    assert zoom_window(short, 3.0) is None  # the whole history: nothing to zoom into
    text = render_plot(series, 60, 6, marker=1250.0, x_range=(lo, hi), **KW).plain
    axis = text.splitlines()[-1].split()
    assert axis[0] == f"{lo:g}" and axis[-1] == f"{hi:g}" and "▲1250" in axis
    assert "zoom" in text.splitlines()[-1]


def _footer(app: ReplayApp) -> set[str]:
    return {k.description for k in app.screen.query(FooterKey)}


@sync
async def test_plot_keys_log_and_zoom_show_in_the_footer_only_while_it_has_focus(
    fixed: FixedStore,
) -> None:
    app = ReplayApp(fixed.path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.post_message(OpenComparison(comparison_id=fixed.diverged_comparison))
        await settle(pilot)
        await pilot.press("3")  # the Metrics tab: the diverged loss is plotted
        await settle(pilot)
        plot = app.screen.query_one("#plot", LinePlot)
        assert plot._marker == 1250.0
        assert "Log y" not in _footer(app)
        plot.focus()
        await wait_until(pilot, lambda: {"Log y", "Zoom to divergence"} <= _footer(app))
        await pilot.press("z")
        await wait_until(pilot, lambda: plot.zoomed)
        lo, hi = plot.x_range or (math.nan, math.nan)
        assert lo < 1250 < hi and (hi - lo) < 1000  # 40 steps of 50: a tenth either side
        assert "zoom" in str(plot.render()).splitlines()[-1]
        await pilot.press("z")
        await wait_until(pilot, lambda: not plot.zoomed)
        await pilot.press("l")
        await wait_until(pilot, lambda: plot.showing_log)
        assert "log y" in str(plot.render()).splitlines()[-1]
        await pilot.press("l")
        await wait_until(pilot, lambda: not plot.showing_log)
        app.screen.focus_next()  # away from the plot: its keys leave the footer
        await wait_until(pilot, lambda: not plot.has_focus and "Log y" not in _footer(app))


def test_the_key_map_lists_every_plot_key() -> None:
    from textual.binding import Binding

    from replay_tui.screens.modals import KEYMAP

    (plot_keys,) = [keys for section, keys in KEYMAP if section.startswith("plot")]
    bound = {b.key for b in LinePlot.BINDINGS if isinstance(b, Binding)}
    assert {key for key, _ in plot_keys} == bound == {"l", "z"}
