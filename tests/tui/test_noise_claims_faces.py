"""The noise rule's claims on the faces that show a WITHIN_NOISE (the TUI's comparison
view and report.html; the CLI: tests/cli/test_noise_claims_cli.py): the smallest change
it could have seen, and with a declared margin the equivalence claim (TOST), read from
the stored comparison.  A body stored before the claims were kept still shows the
smallest change, worked out from its endpoints.  Numbers: tests/support/noisy_pair.py
(the smallest change 0.1 %; with --margin 0.5%, p = 0.0199)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Static

from replay_tui.compare.tolerance import Tolerance
from replay_tui.evidence.export import export_bundle
from replay_tui.replay.runner import compare_and_store
from replay_tui.tui.app import ReplayApp
from replay_tui.tui.widgets.verdict_banner import VerdictBanner
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.helpers.tui import comparison_app
from tests.support.app import frozen_clock, settle, sync
from tests.support.noisy_pair import NoisyPair, noisy_pair

EQUIVALENT = "equivalent within ±0.5 % (TOST, p=0.0199, α=0.05)"
EQUIVALENT_SHORT = "equivalent within ±0.5 % (p=0.0199)"
STRENGTH = "smallest visible change: 0.1 %"
STRENGTH_WORDS = "the smallest change it could have seen: 0.1 % of the value"


@pytest.fixture
def with_margin(store_path: Path, make_manifest: MakeManifest) -> tuple[NoisyPair, int]:
    """The noisy pair, compared again with --margin 0.5% (the newest comparison)."""
    with frozen_clock():
        pair = noisy_pair(store_path, make_manifest)
        with RunStore(store_path) as store:
            a, b = store.manifest(pair.original), store.manifest(pair.replay)
            verdict, _, cid = compare_and_store(store, a, b, tolerance=Tolerance(margin=0.005))
    assert pair.verdict == verdict == "WITHIN_NOISE"
    return pair, cid


def _banner_text(app: ReplayApp) -> str:
    return str(app.screen.query_one(VerdictBanner).render())


@sync
async def test_the_tui_header_says_both_claims(with_margin: tuple[NoisyPair, int]) -> None:
    pair, cid = with_margin
    for size in ((200, 50), (80, 24)):
        async with comparison_app(pair.store, size, cid) as (app, pilot, _):
            await settle(pilot)
            banner = _banner_text(app)
            assert app.screen.query_one(VerdictBanner).has_class("-within_noise")
            assert f"{STRENGTH} · {EQUIVALENT_SHORT}" in banner, (size, banner)
    # the comparison stored without a margin: the smallest change alone
    async with comparison_app(pair.store, (200, 50), pair.comparison_id) as (app, pilot, _):
        await settle(pilot)
        banner = _banner_text(app)
        assert STRENGTH in banner and "TOST" not in banner
        reasons = str(app.screen.query_one("#all-reasons", Static).render())
        assert STRENGTH_WORDS in reasons


@sync
async def test_a_body_stored_before_the_claims_still_shows_its_strength(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    with frozen_clock():
        pair = noisy_pair(store_path, make_manifest)
    with RunStore(store_path) as store:  # the body as it was stored before the claims
        body = store.comparison(pair.comparison_id)
        assert body is not None
        body["noise"].pop("sensitivity")
        body["noise"]["reasons"] = [r for r in body["noise"]["reasons"] if "smallest" not in r]
        body["reasons"] = [r for r in body["reasons"] if "smallest" not in r]
        a, b = body["a_run"], body["b_run"]
        old = store.add_comparison(a, b, body["verdict"], json.loads(json.dumps(body)))
    async with comparison_app(store_path, (200, 50), old) as (app, pilot, _):
        await settle(pilot)
        assert STRENGTH in _banner_text(app)


def test_the_report_lists_both_claims_under_the_verdict(
    with_margin: tuple[NoisyPair, int], tmp_path: Path
) -> None:
    pair, _ = with_margin
    out = tmp_path / "bundle"
    with RunStore(pair.store) as store:
        export_bundle(store, pair.original, out)
    page = (out / "report.html").read_text()
    start = page.index('<ul id="claims" class="claims">')
    claims = page[start : page.index("</ul>", start)]
    assert page.index('id="verdict"') < start  # right under the verdict
    assert STRENGTH_WORDS in claims
    assert f"<li>{EQUIVALENT}</li>" in claims
    assert "Verdict: WITHIN_NOISE" in page
