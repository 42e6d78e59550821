"""One judgement, one presentation: a WITHIN_NOISE comparison read on every face (the TUI,
the CLI's text and --json, report.md, report.html) shows no failure mark, and a DIVERGED
one shows its failures; the states come from the comparison, never judged again."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Static, TabbedContent

from replay_tui.compare.render import comparison_text
from replay_tui.compare.states import FAILING, with_states
from replay_tui.compare.stored import comparison_from_dict
from replay_tui.evidence.export import export_bundle
from replay_tui.tui.messages import OpenComparison
from replay_tui.tui.screens.comparison import ComparisonScreen
from replay_tui.tui.widgets.plot import LinePlot
from storage.store import RunStore
from tests.conftest import MakeManifest, RunCli
from tests.helpers.tui import comparison_app
from tests.support.app import (
    SIZES,
    SnapCompare,
    Step,
    comparison_shown,
    frozen_clock,
    settle,
    snap_app,
    sync,
    then,
)
from tests.support.noisy_pair import EXIT_STEP, NoisyPair, noisy_pair

FAILURE_MARKS = ("✗", "DIFFERS", "OUTSIDE", "NOT REPRODUCED", "outside noise", "outside tol")


@pytest.fixture
def diverged(store_path: Path, make_manifest: MakeManifest) -> NoisyPair:
    with frozen_clock():
        pair = noisy_pair(store_path, make_manifest, diverged=True)
    assert pair.verdict == "DIVERGED"
    return pair


def _states(body: dict[str, Any]) -> list[str]:
    """Every state the stored body carries (artifacts, tensors, metrics, endpoints)."""
    out = [x["state"] for x in body["artifacts"]] + [m["state"] for m in body["metrics"]]
    out += [e["state"] for e in body["noise"]["endpoints"]]
    return out


def _cells(table: DataTable[Any], column: int) -> list[str]:
    return [str(table.get_row_at(i)[column]) for i in range(table.row_count)]


# -- the comparison ------------------------------------------------------------------------


def test_each_item_carries_one_state_stored_with_the_comparison(within: NoisyPair) -> None:
    with RunStore(within.store) as store:
        body = store.comparison(within.comparison_id)
    assert body is not None
    by = {m["name"]: m["state"] for m in body["metrics"]}
    assert by == {"loss": "within_noise", "val_loss": "within_tolerance"}
    arts = {x["path"]: x["state"] for x in body["artifacts"]}
    assert arts == {"checkpoints/final.pt": "identical", "logs/train.log": "not_judged"}
    assert not set(_states(body)) & FAILING
    # a body stored before states had none: read back, it has none, and its bytes stay;
    # shown, the same rule gives the same states
    old = json.loads(json.dumps(body))
    for part in (*old["artifacts"], *old["metrics"], *old["noise"]["endpoints"]):
        del part["state"]
    back = comparison_from_dict(old)
    assert back.to_dict() == old and all(m.state is None for m in back.metrics)
    assert with_states(back).to_dict() == comparison_from_dict(body).to_dict() == body


def test_a_diverged_pair_judges_its_metrics_outside_noise(diverged: NoisyPair) -> None:
    with RunStore(diverged.store) as store:
        body = store.comparison(diverged.comparison_id)
    assert body is not None
    assert {m["state"] for m in body["metrics"]} == {"outside_noise"}
    assert {e["state"] for e in body["noise"]["endpoints"]} == {"outside_noise"}
    # the headline is the first reason, in the same words
    c = comparison_from_dict(body)
    assert c.headline == f"not reproduced: {c.reasons[0]}"
    assert c.reasons[0].startswith("outside this run's noise")


# -- every face ----------------------------------------------------------------------------


@sync
async def test_the_tui_shows_within_noise_as_reproduced(within: NoisyPair) -> None:
    async with comparison_app(within.store, (200, 50), within.comparison_id) as (_, pilot, screen):
        tabs = screen.query_one(TabbedContent)
        labels = [str(tabs.get_tab(t).label) for t in ("tab-artifacts", "tab-metrics")]
        assert labels == ["Artifacts (1/1 ✓)", "Metrics (2/2 ✓)"]
        metrics = screen.query_one("#metrics", DataTable)
        assert _cells(metrics, 0) == ["≈", "✓"]  # within noise is its own mark
        assert _cells(metrics, 8) == ["within noise", "within tolerance"]
        arts = screen.query_one("#artifacts", DataTable)
        assert _cells(arts, 0) == ["✓", "·"]
        shown = " ".join(
            str(w.render()) for w in screen.query(Static) if not isinstance(w, LinePlot)
        )
        assert not any(mark in shown for mark in FAILURE_MARKS), shown
        assert "within noise, beyond the fixed tolerance only" in shown
        # the band in view: n shows the distance from the replicas' mean, and the floor
        # that set val_loss's band is said in words
        tabs.active = "tab-metrics"
        await settle(pilot)
        plot = screen.query_one("#plot", LinePlot)
        assert plot.has_band and not plot.showing_distance
        await pilot.press("n")
        await settle(pilot)
        assert plot.showing_distance
        title = str(screen.query_one("#plot-title", Static).render())
        assert "loss within noise − replicas' mean" in title
        metrics.move_cursor(row=1)
        await settle(pilot)
        title = str(screen.query_one("#plot-title", Static).render())
        assert "the replicas agreed more closely than 0.1 %; the 0.1 % minimum was used" in title
        # y copies the original's id (the comparison of a replay is about its original)
        assert screen.current_run() == within.original


@sync
async def test_the_tui_marks_a_diverged_pairs_exit_step_at_80_columns(
    diverged: NoisyPair,
) -> None:
    cid = diverged.comparison_id
    async with comparison_app(diverged.store, (80, 24), cid) as (_, pilot, screen):
        screen.query_one(TabbedContent).active = "tab-metrics"
        await settle(pilot)
        assert _cells(screen.query_one("#metrics", DataTable), 0) == ["✗", "✗"]
        title = screen.query_one("#plot-title", Static)
        first = str(title.render()).splitlines()[0]
        assert f"leaves noise band at step {EXIT_STEP}" in first
        assert title.size.width <= 80 and first.index(str(EXIT_STEP)) < title.size.width - 2
        tabs = screen.query_one(TabbedContent)
        assert str(tabs.get_tab("tab-metrics").label) == "Metrics (0/2 ✓)"


@sync
async def test_the_header_keeps_to_four_rows_at_60x20(within: NoisyPair) -> None:
    async with comparison_app(within.store, (60, 20), within.comparison_id) as (_, _, screen):
        tabs = screen.query_one(TabbedContent)
        assert tabs.region.y <= 4, tabs.region  # header, verdict, its headline, a reason


def test_the_cli_shows_within_noise_as_reproduced(within: NoisyPair, cli: RunCli) -> None:
    r = cli("compare", within.original, within.replay, "--no-store", store=within.store)
    assert r.returncode == 0, r.stderr
    assert "verdict: WITHIN_NOISE  exit code 0" in r.stdout
    table = r.stdout[r.stdout.index("── artifacts") : r.stdout.index("── environment")]
    assert not re.search(r"^\s+XX\s", table, re.M) and "outside" not in table
    assert re.search(r"^\s+~n\s+loss\b.*within noise$", table, re.M)
    j = json.loads(
        cli("compare", within.original, within.replay, "--json", store=within.store).stdout
    )
    assert j["verdict"] == "WITHIN_NOISE" and not set(_states(j)) & FAILING


def test_the_cli_lists_a_diverged_pairs_failures(diverged: NoisyPair) -> None:
    with RunStore(diverged.store) as store:
        body = store.comparison(diverged.comparison_id)
    assert body is not None
    text = comparison_text(comparison_from_dict(body))
    assert re.search(r"^\s+XX\s+loss\b.*outside noise$", text, re.M)


def test_the_report_shows_within_noise_as_reproduced(within: NoisyPair, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    with RunStore(within.store) as store:
        export_bundle(store, within.original, out)
    md = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    for text in (md, page):
        assert "Verdict: WITHIN_NOISE" in text
        assert not any(mark in text for mark in FAILURE_MARKS)
        assert "within noise" in text
    assert "- beyond the fixed tolerance" not in md and "<li>beyond the fixed" not in page
    assert 'class="failed"' not in page and 'class="reproduced"' in page
    assert "verdict-within_noise" in page
    # the metrics judged against the floor are drawn as their distance from the mean,
    # and a floored band says so
    assert page.count('class="metric distance"') == 2
    assert "the replicas agreed more closely than 0.1 %; the 0.1 % minimum was used" in page


def test_the_report_shows_a_diverged_pairs_failures(diverged: NoisyPair, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    with RunStore(diverged.store) as store:
        export_bundle(store, diverged.original, out)
    page = (out / "report.html").read_text()
    assert 'class="failed"' in page and "OUTSIDE NOISE" in page


# -- snapshots -----------------------------------------------------------------------------


def _open(pair: NoisyPair, pane: str) -> Step:
    async def run(pilot: Any) -> None:
        pilot.app.post_message(OpenComparison(comparison_id=pair.comparison_id))
        screen = await comparison_shown(pilot)
        assert isinstance(screen, ComparisonScreen)
        await settle(pilot)
        screen.query_one(TabbedContent).active = pane.removesuffix("-distance")
        if pane.endswith("-distance"):  # the distance from the replicas' mean
            await settle(pilot)
            await pilot.press("n")

    return run


@pytest.mark.parametrize("size", [*SIZES[:1], pytest.param((200, 50), id="200x50")])
@pytest.mark.parametrize("pane", ["tab-artifacts", "tab-metrics", "tab-metrics-distance"])
def test_snapshot_within_noise(
    snap_compare: SnapCompare, within: NoisyPair, size: tuple[int, int], pane: str
) -> None:
    app = snap_app(_Fixed(within.store))  # type: ignore[arg-type]
    assert snap_compare(app, terminal_size=size, run_before=then(_open(within, pane)))


@pytest.mark.parametrize("size", [*SIZES[:1], pytest.param((200, 50), id="200x50")])
def test_snapshot_diverged(
    snap_compare: SnapCompare, diverged: NoisyPair, size: tuple[int, int]
) -> None:
    app = snap_app(_Fixed(diverged.store))  # type: ignore[arg-type]
    assert snap_compare(app, terminal_size=size, run_before=then(_open(diverged, "tab-metrics")))


class _Fixed:
    """What ``snap_app`` reads of a fixed store: its path."""

    def __init__(self, path: Path) -> None:
        self.path = path
