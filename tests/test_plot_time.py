"""The plot's x axis by wall time: ``w`` switches between the step and the seconds since
each run started, where every series shown recorded a time per point."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult

from replay_tui.widgets.plot import LinePlot, Series, by_wall_time, time_at

A = Series("A", [(0.0, 1.0), (10.0, 0.5), (20.0, 0.25), (30.0, 0.2)])
B = Series("B", [(0.0, 1.0), (10.0, 0.5), (20.0, 0.4), (30.0, 0.3)])
TIMES_A = [0.0, 2.0, 4.0, 6.0]
TIMES_B = [0.0, 3.0, 6.0, 9.0]  # the replay ran slower


def test_series_by_wall_time_need_a_time_for_every_point() -> None:
    timed = by_wall_time([A, B], [TIMES_A, TIMES_B])
    assert timed is not None
    assert [p[0] for p in timed[1].points] == TIMES_B
    assert [p[1] for p in timed[1].points] == [p[1] for p in B.points]
    assert by_wall_time([A, B], [TIMES_A, None]) is None  # one side has no times
    assert by_wall_time([A], [TIMES_A[:2]]) is None  # fewer times than points
    assert by_wall_time([], []) is None


def test_a_marked_step_is_placed_at_its_time() -> None:
    timed = by_wall_time([A], [TIMES_A])
    assert timed is not None
    assert time_at(A, timed[0], 20.0) == 4.0
    assert time_at(A, timed[0], 15.0) == 4.0  # the first point at or after it
    assert time_at(A, timed[0], 99.0) is None
    assert time_at(A, timed[0], None) is None


class _PlotApp(App[None]):
    def __init__(self, plot: LinePlot) -> None:
        super().__init__()
        self.plot = plot

    def compose(self) -> ComposeResult:
        yield self.plot


def _axis(plot: LinePlot) -> str:
    return str(plot.render()).splitlines()[-1]


def test_w_switches_the_x_axis_to_wall_time_and_back() -> None:
    async def main() -> None:
        plot = LinePlot([A, B], marker=20.0, times=[TIMES_A, TIMES_B])
        app = _PlotApp(plot)
        async with app.run_test(size=(80, 12)) as pilot:
            plot.focus()
            await pilot.pause()
            assert "step" in _axis(plot) and "30" in _axis(plot)
            assert app.screen.active_bindings["w"].enabled
            await pilot.press("w")
            await pilot.pause()
            assert plot.showing_time
            axis = _axis(plot)
            assert "wall time (s)" in axis
            assert axis.rstrip().endswith("9")  # B's last point, 9 s after its start
            assert "▲4" in axis  # the marked step 20 sits at A's time for it
            await pilot.press("w")
            await pilot.pause()
            assert not plot.showing_time and "step" in _axis(plot)

    asyncio.run(main())


def test_without_times_w_is_not_offered() -> None:
    async def main() -> None:
        plot = LinePlot([A, B])
        app = _PlotApp(plot)
        async with app.run_test(size=(80, 12)) as pilot:
            plot.focus()
            await pilot.pause()
            assert "w" not in app.screen.active_bindings  # neither shown nor bound
            plot.set_data([A, B], times=[TIMES_A, None])  # the replay has none
            await pilot.pause()
            assert "w" not in app.screen.active_bindings
            await pilot.press("w")
            await pilot.pause()
            assert not plot.showing_time and "step" in _axis(plot)
            plot.set_data([A, B], times=[TIMES_A, TIMES_B])
            await pilot.pause()
            assert app.screen.active_bindings["w"].enabled

    asyncio.run(main())
