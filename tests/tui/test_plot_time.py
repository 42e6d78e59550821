"""The plot's x axis by wall time: ``w`` switches between the step and the seconds since
each run started, where every series shown recorded a time per point."""

from __future__ import annotations

import asyncio
from pathlib import Path

from textual.app import App, ComposeResult

from replay_tui.tui.widgets.plot import LinePlot, Series, by_wall_time, time_at

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


def test_a_real_run_and_its_replay_plot_by_wall_time(tmp_path: Path) -> None:
    """The example training recorded by the real launcher (its SDK logs every step with
    the time), replayed locally: both carry a time per point, so the comparison's plot
    and the run's overlay offer ``w``, and the axis reads seconds."""
    from replay_tui.replay.plan import ReplayOptions
    from replay_tui.replay.series import replay_many
    from replay_tui.tui.app import ReplayApp
    from replay_tui.tui.messages import OpenComparison, OpenRun
    from storage.store import RunStore
    from tests.support.app import record_real_run, settle

    store, run_id = record_real_run(tmp_path)
    with RunStore(store) as s:
        report = replay_many(s, run_id, ReplayOptions(backend="local"))
        assert report.exit_code == 0, report.text()
        replay_id = s.replays_of(run_id)[-1].replay_run
        m = s.manifest(run_id)
    assert replay_id is not None
    name = max(m.outputs.metric_history, key=lambda k: len(m.outputs.metric_history[k]))
    times = m.outputs.metric_times[name]
    assert len(times) == len(m.outputs.metric_history[name]) and times == sorted(times)

    async def main() -> None:
        app = ReplayApp(store)
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            app.post_message(OpenComparison(a_run=run_id, b_run=replay_id))
            await settle(pilot)
            await pilot.press("3")  # the Metrics tab
            await settle(pilot)
            plot = app.screen.query_one("#plot", LinePlot)
            plot.focus()
            await settle(pilot)
            assert "w" in app.screen.active_bindings
            await pilot.press("w")
            await settle(pilot)
            assert plot.showing_time and "wall time (s)" in _axis(plot)
            await pilot.press("escape")
            await settle(pilot)
            app.post_message(OpenRun(run_id))  # the run with its replay overlaid
            await settle(pilot)
            sparks = list(app.screen.query(".spark").results(LinePlot))
            overlaid = [s for s in sparks if len(s._series) == 2]  # the run + its replay
            assert overlaid and all(s._timed is not None for s in overlaid)

    asyncio.run(main())
