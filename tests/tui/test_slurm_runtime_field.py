"""The replay options form (the replay, drill and bisect forms share it) offers the Slurm
runtime as a choice, from the same declaration the command line reads
(``--slurm-runtime``): the three runtimes, none chosen (the nodes' default) until one is,
and a chosen one read into the options the replay runs with."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Select

from replay_tui.replay.backends import declared_options
from replay_tui.replay.backends.slurm.words import RUNTIMES
from replay_tui.replay.plan import ReplayOptions
from replay_tui.tui.widgets.replay_options import ReplayOptionsForm, field_id
from tests.support.app import sync


class _Form(App[None]):
    def __init__(self, options: ReplayOptions) -> None:
        super().__init__()
        self.options = options

    def compose(self) -> ComposeResult:
        yield ReplayOptionsForm(self.options)


@sync
async def test_the_form_offers_the_slurm_runtimes_and_reads_the_chosen_one() -> None:
    (option,) = [o for o in declared_options()["slurm"] if o.name == "runtime"]
    app = _Form(ReplayOptions(backend="slurm"))
    async with app.run_test(size=(100, 40)) as pilot:
        form = app.query_one(ReplayOptionsForm)
        select = form.query_one(f"#{field_id('slurm', option)}", Select)
        assert [value for _label, value in select._options if value != Select.NULL] == list(
            RUNTIMES
        )
        assert select.value == Select.NULL  # none chosen: what the nodes have
        assert select.display and form.backend_values() == ()
        select.value = "apptainer"
        await pilot.pause()
        assert form.backend_values() == (("runtime", "apptainer"),)
    given = ReplayOptions(backend="slurm", backend_options=(("runtime", "podman"),))
    async with _Form(given).run_test(size=(100, 40)) as pilot:
        await pilot.pause()
        select = pilot.app.query_one(f"#{field_id('slurm', option)}", Select)
        assert select.value == "podman"  # a replay's own options shown as they were
