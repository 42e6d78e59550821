"""``b`` on a comparison opens the bisect form (issue #28): factors, budget, probes at a
time, GOOD's replays, and the replay options widget (backend and its own options,
timeout, allow-CPU).  The factors offered are those that differ between GOOD and BAD,
ticked; the others are named as the same in both.  Escape cancels and starts nothing;
Start hands the options it built to the bisect screen, which runs the bisect with them.
Snapshots of the form at 80x24 and 200x60 (``--snapshot-update`` refreshes them, in
``__snapshots__/test_bisect_form/``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input, Select, SelectionList, Static

from replay_tui.bisect import FACTORS
from replay_tui.bisect.run import DEFAULT_BUDGET, BisectOptions
from replay_tui.compare.tolerance import Tolerance
from replay_tui.replay.backends import declared_options
from replay_tui.replay.plan import ReplayOptions
from replay_tui.tui.app import ReplayApp
from replay_tui.tui.screens.bisect import BisectFormScreen, BisectScreen
from replay_tui.tui.screens.comparison import ComparisonScreen
from replay_tui.tui.widgets.replay_options import ReplayOptionsForm, field_id
from tests.helpers.tui import replay_app
from tests.support.app import FixedStore, settle, sync, wait_until

SIZE = (120, 50)
SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((200, 60), id="200x60")]
SnapCompare = Callable[..., bool]
DIFFERING = ["code", "image", "data", "config", "seed"]
"""The factors in which the fixed store's original and its critical-gaps run differ."""


def _app(fixed: FixedStore) -> ReplayApp:
    return ReplayApp(fixed.path, replay_options_factory=lambda: ReplayOptions(backend="local"))


async def _open_form(pilot: Pilot[Any], app: ReplayApp, fixed: FixedStore) -> BisectFormScreen:
    await settle(pilot)
    # two originals (bisect is offered for those only): A is GOOD, B is BAD
    await app.push_screen(
        ComparisonScreen(fixed.path, a_run=fixed.original_id, b_run=fixed.critical_id)
    )
    await wait_until(
        pilot, lambda: isinstance(app.screen, ComparisonScreen) and app.screen.view is not None
    )
    await settle(pilot)
    cmp = app.screen
    assert isinstance(cmp, ComparisonScreen)
    await pilot.press("b")
    await wait_until(pilot, lambda: isinstance(app.screen, BisectFormScreen))
    form = app.screen
    assert isinstance(form, BisectFormScreen)
    await wait_until(pilot, lambda: form.report is not None)  # the differing factors read
    await pilot.pause()
    assert (form.good, form.bad) == (cmp.a_run, cmp.b_run)  # A is GOOD, B is BAD
    return form


def _shown(form: BisectFormScreen, backend: str) -> list[bool]:
    return [bool(row.display) for row in form.query(f".backend-{backend}")]


@sync
async def test_b_opens_the_form_with_its_fields_and_escape_starts_nothing(
    fixed: FixedStore,
) -> None:
    app = _app(fixed)
    async with app.run_test(size=SIZE) as pilot:
        form = await _open_form(pilot, app, fixed)
        assert {form.good, form.bad} == {fixed.original_id, fixed.critical_id}
        factors = form.query_one("#factors", SelectionList)
        # the factors that differ, each ticked (the command's default: every one of them)
        assert factors.selected == DIFFERING
        offered = [factors.get_option_at_index(i).value for i in range(factors.option_count)]
        assert offered == DIFFERING
        assert form.offered == tuple(DIFFERING)
        note = str(form.query_one("#factors-note", Static).render())
        assert "the same in both: determinism, environment" in note
        assert form.query_one("#budget", Input).value == str(DEFAULT_BUDGET)
        assert form.query_one("#parallel", Input).value == "1"
        assert form.query_one("#times", Input).value == ""  # from GOOD's settings
        assert form.query_one("#backend", Select).value == "local"  # the app's default
        # the slurm backend's declared options are fields, shown while it is chosen
        slurm = declared_options()["slurm"]
        for option in slurm:
            form.query_one(f"#{field_id('slurm', option)}", Select if option.choices else Input)
        assert _shown(form, "slurm") == [False] * len(slurm)
        form.query_one("#backend", Select).value = "slurm"
        await pilot.pause()
        assert _shown(form, "slurm") == [True] * len(slurm)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ComparisonScreen))
        assert not any(isinstance(s, (BisectScreen, BisectFormScreen)) for s in app.screen_stack)
        assert not [w for w in app.workers if w.group == "bisect"]


@sync
async def test_start_hands_the_options_the_form_says_to_the_bisect(fixed: FixedStore) -> None:
    app = _app(fixed)
    async with app.run_test(size=SIZE) as pilot:
        form = await _open_form(pilot, app, fixed)
        factors = form.query_one("#factors", SelectionList)
        for name in ("code", "image", "data"):
            factors.deselect(name)
        form.query_one("#budget", Input).value = "5"
        form.query_one("#parallel", Input).value = "2"
        form.query_one("#times", Input).value = "2"
        form.query_one("#timeout", Input).value = "30"
        form.query_one("#allow-cpu", Checkbox).value = True
        await pilot.pause()
        expected = BisectOptions(
            replay=ReplayOptions(backend="local", timeout_s=30.0, allow_cpu=True),
            times=2,
            factors=("config", "seed"),
            budget=5,
            parallel=2,
            rtol=Tolerance().rtol,
            atol=Tolerance().atol,
        )
        assert form.chosen() == expected
        await pilot.press("ctrl+s")
        # the form goes, then the comparison pushes the bisect (its callback)
        await wait_until(
            pilot, lambda: not isinstance(app.screen, (BisectFormScreen, ComparisonScreen))
        )
        screen = app.screen
        assert isinstance(screen, BisectScreen), app.screen_stack  # (an error modal: says why)
        assert screen.options == expected  # what the bisect runs with
        assert "local backend" in str(screen.query_one("#bisect-title").render())
        await pilot.press("x")  # whatever it got to: cancelled (or already ended)
        await wait_until(pilot, lambda: screen.phase in ("done", "failed", "cancelled"), 120)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ComparisonScreen))


@sync
async def test_slurm_options_are_read_and_a_bad_one_keeps_the_form(fixed: FixedStore) -> None:
    app = _app(fixed)
    async with app.run_test(size=SIZE) as pilot:
        form = await _open_form(pilot, app, fixed)
        form.query_one("#backend", Select).value = "slurm"
        await pilot.pause()
        (partition, time_limit) = (
            next(o for o in declared_options()["slurm"] if o.name == name)
            for name in ("partition", "time_limit")
        )
        form.query_one(f"#{field_id('slurm', partition)}", Input).value = "gpu"
        await pilot.pause()
        options = form.chosen()
        assert options.replay.backend == "slurm"
        assert options.replay.backend_options == (("partition", "gpu"),)
        assert options.factors is None  # every factor: the bisect's default
        form.query_one(f"#{field_id('slurm', time_limit)}", Input).value = "tomorrow"
        await pilot.pause()
        assert form.problem(form.chosen()) is not None
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is form  # refused: nothing started
        assert not [w for w in app.workers if w.group == "bisect"]
        # the replay form shares the widget: the same fields there
        assert form.query_one(ReplayOptionsForm).backend == "slurm"


@sync
async def test_before_the_factors_are_read_every_one_is_offered(
    fixed: FixedStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until the worker says which differ, the form offers all seven, ticked: a quick
    Start swaps every one that differs (the bisect's default), never none."""
    form = BisectFormScreen(
        fixed.path, fixed.original_id, fixed.critical_id, ReplayOptions(backend="local")
    )
    monkeypatch.setattr(BisectFormScreen, "_read_factors", lambda self: None)  # never read
    app = _app(fixed)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await app.push_screen(form)
        await pilot.pause()
        assert form.report is None
        assert form.query_one("#factors", SelectionList).selected == list(FACTORS)
        assert form.chosen().factors is None
        assert "reading which factors differ" in str(form.query_one("#factors-note").render())


@sync
async def test_two_runs_the_same_but_the_hardware_offer_no_factor(fixed: FixedStore) -> None:
    """A replay's original and its replay (the same code, data, config, seed...) differ in
    the hardware only: nothing is offered, the note says why, and Start refuses."""
    from replay_tui.tui.screens.bisect import FactorsRead

    form = BisectFormScreen(
        fixed.path, fixed.original_id, fixed.replay_id, ReplayOptions(backend="local")
    )
    app = _app(fixed)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await app.push_screen(form)
        await wait_until(pilot, lambda: form.report is not None)
        await pilot.pause()
        assert form.offered == ()
        factors = form.query_one("#factors", SelectionList)
        assert factors.option_count == 0 and not factors.display
        note = str(form.query_one("#factors-note").render())
        assert note == (
            "none of the factors a replay can swap differs;"
            " the hardware differs: a replay cannot swap it"
        )
        assert form.problem(form.chosen()) == (
            "no factor a replay can swap differs between GOOD and BAD: nothing to bisect"
        )
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is form  # refused: nothing started
        assert not [w for w in app.workers if w.group == "bisect"]
        # a read that failed (a store that cannot be read): the note says why
        form.post_message(FactorsRead(None, "no run matches 'x'"))
        await pilot.pause()
        assert "could not read which factors differ: no run matches 'x'" in str(
            form.query_one("#factors-note").render()
        )


def _form_steps(fixed: FixedStore) -> Callable[[Pilot[Any]], Any]:
    async def run(pilot: Pilot[Any]) -> None:
        app = replay_app(pilot)
        app.sub_title = "store.db"  # the temporary path changes from run to run
        await _open_form(pilot, app, fixed)
        await settle(pilot)

    return run


@pytest.mark.parametrize("size", SIZES)
def test_bisect_form_snapshot(
    snap_compare: SnapCompare, fixed: FixedStore, size: tuple[int, int]
) -> None:
    """The form as ``b`` opens it: the differing factors ticked, the others named, the
    fields, Start and Cancel, all in view at 80x24 too (a longer form scrolls; the
    buttons stay under it)."""
    assert snap_compare(_app(fixed), terminal_size=size, run_before=_form_steps(fixed))
