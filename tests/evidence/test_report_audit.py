"""The report an auditor reads: the candidate in one sentence, the signer's key id, the
ledger head and every bisect in the bundle with its answer; and the noise band of a
WITHIN_NOISE metric, in the distance view, measured in pixels in a real browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

from replay_tui.evidence import report
from replay_tui.evidence.export import export_bundle
from replay_tui.evidence.keys import generate
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.helpers.chromium import chromium
from tests.support.app import frozen_clock
from tests.support.noisy_pair import noisy_pair


def test_the_report_names_the_candidate_signer_ledger_head_and_bisects(
    store_path: Path, make_manifest: MakeManifest, tmp_path: Path
) -> None:
    with frozen_clock():
        pair = noisy_pair(store_path, make_manifest)
    keys = generate(tmp_path / "k.key", tmp_path / "k.pub")
    with RunStore(store_path) as store:
        bid = store.add_bisect(
            pair.original,
            pair.replay,
            "cause",
            ["config.lr"],
            {"verdict": "config.lr alone makes GOOD diverge", "probes_run": 2},
        )
        res = export_bundle(store, pair.original, tmp_path / "b", key_path=keys.private_path)
    assert res.key_id and res.ledger_head
    md = (tmp_path / "b" / "report.md").read_text()
    page = (tmp_path / "b" / "report.html").read_text()
    for text in (md.replace("\\", ""), page):  # Markdown escapes its # and _
        assert "For the auditor" in text
        assert res.key_id in text and res.ledger_head in text
        assert f"bisect #{bid}" in text and "cause found: config.lr" in text
        assert "config.lr alone makes GOOD diverge" in text
    sentence = report.candidate_sentence(_evidence(store_path, pair.original))
    assert sentence.startswith(f"The candidate is the replay {pair.replay} (the latest")
    assert "not one of the 3 replicas of noise floor #" in sentence
    assert sentence.count(". ") == 0 and sentence.endswith(".")  # one sentence
    assert sentence.replace("'", "&#x27;") in page or sentence in page
    # the bundle's bisects.json is what the section names
    assert json.loads((tmp_path / "b" / "bisects.json").read_text())["bisects"][0]["id"] == bid


def _exported_report(store_path: Path, make_manifest: MakeManifest, folder: Path, name: str) -> str:
    """The report ``name`` of the noisy pair's original, exported unsigned into
    ``folder`` (the clock frozen while the pair is made)."""
    with frozen_clock():
        pair = noisy_pair(store_path, make_manifest)
    with RunStore(store_path) as store:
        export_bundle(store, pair.original, folder)
    return (folder / name).read_text()


def test_an_unsigned_bundle_with_no_bisect_says_so(
    store_path: Path, make_manifest: MakeManifest, tmp_path: Path
) -> None:
    md = _exported_report(store_path, make_manifest, tmp_path / "b", "report.md")
    assert "not signed (export --key signs the bundle)" in md
    assert "none: no bisect had this run as GOOD or BAD" in md


def test_a_section_added_by_another_module_lands_before_the_checks(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    with frozen_clock():
        pair = noisy_pair(store_path, make_manifest)
    extra = report.Section("Annex", ["- one line"], "<p>one line</p>")
    ev = _evidence(store_path, pair.original)
    md = report.markdown(ev, "t", None, [extra])
    page = report.html_page(ev, "t", None, [extra])
    assert md.index("## For the auditor") < md.index("## Annex") < md.index("## Checking")
    assert page.index("<h2>Annex</h2><p>one line</p>") < page.index("<h2>Checking")


def _evidence(store_path: Path, run_id: str) -> report.Evidence:
    from replay_tui.evidence.gather import gather

    with RunStore(store_path) as store:
        return gather(store, run_id)


# -- the band in pixels ---------------------------------------------------------------------

MEASURE = """
<script>
window.addEventListener('load', () => {
  const out = [];
  for (const fig of document.querySelectorAll('figure.metric.distance')) {
    const band = fig.querySelector('polygon.noise-band').getBoundingClientRect();
    const axes = fig.querySelector('g.axes path').getBoundingClientRect();
    out.push([fig.querySelector('figcaption code').textContent, band.height, axes.height]);
  }
  const pre = document.createElement('pre');
  pre.id = 'measured';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def test_the_band_of_a_within_noise_metric_fills_the_distance_plot_in_chromium(
    store_path: Path, make_manifest: MakeManifest, tmp_path: Path
) -> None:
    """The report as exported, opened in headless chromium: in the distance view the band
    (a 0.1 % floor here, one pixel in the plot of values) is at least 20 % of the plot's
    height.  The measuring script is added to a copy of the page (whose policy forbids
    scripts); the page's own markup and CSS are untouched."""
    page = _exported_report(store_path, make_manifest, tmp_path / "b", "report.html")
    assert "Verdict: WITHIN_NOISE" in page
    measured = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page)
    measured = measured.replace("</body>", MEASURE + "</body>")
    copy = tmp_path / "measured.html"
    copy.write_text(measured)
    r = chromium("--dump-dom", copy.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', r.stdout)
    assert found is not None, r.stdout[-2000:]
    rows = json.loads(found.group(1).replace("&quot;", '"'))
    print("band/plot heights (px):", json.dumps(rows))
    assert {name for name, _, _ in rows} == {"loss", "val_loss"}
    for name, band, plot in rows:
        assert plot > 100, (name, plot)  # the plot area drawn, not collapsed
        assert band >= 0.2 * plot, (name, band, plot)
