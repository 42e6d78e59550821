"""The report's metric plots: well-formed, escaped, robust SVG, and what a browser shows."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay_tui.evidence import report
from replay_tui.evidence.gather import Evidence, gather
from replay_tui.evidence.svg import DOWNSAMPLE_OVER, metric_svg, nice_ticks
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.helpers.chromium import chromium
from tests.helpers.replays import add_compared_replay
from tests.support.bundles import replay_of

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = "</svg><script>alert(1)</script>\"'&"


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # raises on anything that is not well-formed XML
    assert root.tag == f"{SVG}svg"
    return root


def _all(root: ET.Element, tag: str) -> list[ET.Element]:
    return list(root.iter(f"{SVG}{tag}"))


def _by_class(root: ET.Element, tag: str, cls: str) -> ET.Element:
    found = [e for e in _all(root, tag) if e.get("class") == cls]
    assert len(found) == 1, (tag, cls, len(found))
    return found[0]


def _points(e: ET.Element) -> list[tuple[float, float]]:
    out = []
    for pair in (e.get("points") or "").split():
        x, y = pair.split(",")
        out.append((float(x), float(y)))
    return out


def _texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in _all(root, "text")]


def _curve(n: int = 100, shift: float = 0.0) -> list[tuple[int, float]]:
    return [(s, 2.0 * math.exp(-s / 40) + shift) for s in range(n)]


# -- the SVG on its own -----------------------------------------------------------------


def test_original_solid_replay_dashed_in_another_colour() -> None:
    root = _parse(metric_svg("loss", _curve(), _curve(shift=0.05)))
    lines = _all(root, "polyline")
    assert len(lines) == 2
    orig = _by_class(root, "polyline", "original")
    rep = _by_class(root, "polyline", "replay")
    assert orig.get("stroke-dasharray") is None
    assert rep.get("stroke-dasharray") not in (None, "", "none")
    assert orig.get("stroke") != rep.get("stroke")
    assert len(_points(orig)) == len(_points(rep)) == 100
    texts = _texts(root)
    assert "original — solid" in texts and "replay — dashed" in texts
    assert "noise band — shaded" not in texts and not _all(root, "polygon")
    # accessible: a title first, an aria-label, a role
    assert root[0].tag == f"{SVG}title"
    assert root[0].text == "loss: original and latest replay by step"
    assert root.get("role") == "img" and (root.get("aria-label") or "").startswith("loss: ")
    # presentation attributes only: nothing for the page's CSP to refuse
    assert not any(e.get("style") for e in root.iter())


def test_inline_form_names_no_namespace_url() -> None:
    svg = metric_svg("loss", _curve(), _curve(), xmlns=False)
    assert "xmlns" not in svg and "http" not in svg
    root = ET.fromstring(svg)
    assert root.tag == "svg" and len(list(root.iter("polyline"))) == 2


def test_axes_have_nice_tick_labels() -> None:
    root = _parse(metric_svg("loss", _curve(), None))
    texts = _texts(root)
    assert {"0", "20", "40", "60", "80"} <= set(texts)  # steps
    assert {"0.5", "1.0", "1.5", "2.0"} <= set(texts)  # values
    assert "step" in texts
    assert "replay — dashed" not in texts and len(_all(root, "polyline")) == 1


def test_band_polygon_and_exit_marker() -> None:
    band = [(s, v - 0.1, v + 0.1) for s, v in _curve()]
    root = _parse(metric_svg("loss", _curve(), _curve(shift=0.05), band, exit_step=60))
    poly = _by_class(root, "polygon", "noise-band")
    assert 0 < float(poly.get("fill-opacity") or 1) < 0.5
    assert len(_points(poly)) == 200  # the upper edge, then the lower one back
    texts = _texts(root)
    assert "noise band — shaded" in texts
    assert "leaves noise band at step 60" in texts  # in words, not by colour alone
    marker = next(g for g in _all(root, "g") if g.get("class") == "noise-exit")
    line = marker.find(f"{SVG}line")
    assert line is not None and line.get("x1") == line.get("x2")
    # the marker sits at step 60 of the x axis (its tick labels are centred under steps)
    x_ticks = {
        "".join(e.itertext()): float(e.get("x") or 0)
        for e in _all(root, "text")
        if e.get("text-anchor") == "middle"
    }
    assert abs(float(line.get("x1") or 0) - x_ticks["60"]) < 0.2
    assert "leaves the noise band at step 60" in (root.get("aria-label") or "")


def test_hostile_metric_name_is_escaped() -> None:
    svg = metric_svg(HOSTILE, _curve(), _curve())
    assert "<script" not in svg and "</svg><" not in svg.replace("\n", "")[:-6]
    root = _parse(svg)  # still one well-formed element
    title = root.find(f"{SVG}title")
    assert title is not None and title.text == f"{HOSTILE}: original and latest replay by step"
    assert (root.get("aria-label") or "").startswith(HOSTILE)
    assert svg.count("<svg") == 1 and svg.count("</svg>") == 1


def test_names_with_control_bidi_and_surrogates_stay_well_formed() -> None:
    name = "a\x1b[31m\u202eb\ud800\uffff"
    root = _parse(metric_svg(name, _curve(), None))
    title = root.find(f"{SVG}title")
    assert title is not None and title.text is not None
    assert "\x1b" not in title.text and "\u202e" not in title.text and "\\x1b" in title.text


def test_constant_series() -> None:
    root = _parse(metric_svg("lr", [(s, 0.5) for s in range(50)], [(s, 0.5) for s in range(50)]))
    ys = {y for _, y in _points(_by_class(root, "polyline", "original"))}
    assert len(ys) == 1
    labels = _texts(root)
    assert "0.50" in labels  # the constant sits on a tick, with ticks either side of it
    ticks = [float(t) for t in labels if re.fullmatch(r"0\.\d+", t)]
    assert min(ticks) < 0.5 < max(ticks)


def test_constant_zero_and_a_single_point() -> None:
    root = _parse(metric_svg("z", [(0, 0.0), (10, 0.0)], None))
    assert "0" in _texts(root)
    root = _parse(metric_svg("one", [(3, 1.25)], [(3, 1.5)]))
    assert len(_all(root, "polyline")) == 2
    dots = {c.get("class"): c for c in _all(root, "circle")}
    assert set(dots) == {"original-point", "replay-point"}
    assert dots["original-point"].get("cy") != dots["replay-point"].get("cy")
    assert "3" in _texts(root)  # the step on the x axis


def test_nan_and_infinite_values_are_left_out() -> None:
    nan, inf = float("nan"), float("inf")
    svg = metric_svg("loss", [(0, 1.0), (1, nan), (2, inf), (3, 2.0)], [(0, -inf), (3, 2.5)])
    root = _parse(svg)
    assert _points(_by_class(root, "polyline", "original"))[0][0] < 1e6
    assert len(_points(_by_class(root, "polyline", "original"))) == 2
    assert len(_points(_by_class(root, "polyline", "replay"))) == 1
    assert all(math.isfinite(v) for e in _all(root, "polyline") for p in _points(e) for v in p)
    numbers = [
        v for e in root.iter() for k, v in e.attrib.items() if k not in {"aria-label", "class"}
    ]
    assert not any(re.search(r"nan|inf", v, re.IGNORECASE) for v in numbers)
    assert "2 NaN or infinite left out" in (root.get("aria-label") or "")
    # nothing finite at all: a plot that says so
    root = _parse(metric_svg("loss", [(0, nan), (1, inf)], None))
    assert "no finite values to plot" in _texts(root) and not _all(root, "polyline")


def test_extreme_values_stay_finite() -> None:
    root = _parse(metric_svg("big", [(0, -1.7e308), (10, 1.7e308)], [(0, 5e-324), (10, 0.0)]))
    for e in _all(root, "polyline"):
        assert all(math.isfinite(v) for p in _points(e) for v in p)


def test_ten_thousand_points_are_downsampled_and_keep_a_spike() -> None:
    hist = [(s, math.sin(s / 500)) for s in range(10_000)]
    hist[7777] = (7777, 9.0)  # one step's spike
    hist[2222] = (2222, -7.0)
    svg = metric_svg("loss", hist, hist[:5000])
    assert len(svg) < 40_000
    root = _parse(svg)
    pts = _points(_by_class(root, "polyline", "original"))
    width = float(root.get("width") or 0)
    assert 100 < len(pts) <= 2 * width + 2 < DOWNSAMPLE_OVER
    top = min(pts, key=lambda p: p[1])
    bottom = max(pts, key=lambda p: p[1])
    # the spikes are the extremes of the drawn line, at their steps
    x0 = pts[0][0]
    x_end = pts[-1][0]
    assert abs((top[0] - x0) / (x_end - x0) - 7777 / 9999) < 0.01
    assert abs((bottom[0] - x0) / (x_end - x0) - 2222 / 9999) < 0.01
    others = [y for x, y in pts if abs(x - top[0]) > 5]
    assert top[1] < min(others) - 50  # far above the sine, not averaged away
    band = [(s, v - 0.1, v + 0.1) for s, v in hist]
    svg = metric_svg("loss", hist, None, band)
    assert len(svg) < 60_000
    poly = _by_class(_parse(svg), "polygon", "noise-band")
    assert len(_points(poly)) <= 4 * width + 4


def test_nice_ticks() -> None:
    lo, hi, ticks = nice_ticks(0, 99, 6, integer=True)
    assert ticks == [0, 20, 40, 60, 80] and lo == 0 and hi == 99
    lo, hi, ticks = nice_ticks(-0.02, 1.02, 5, pad=0.05)
    assert lo < -0.02 and hi > 1.02 and len(ticks) == 6 and ticks[0] == 0
    _, _, ticks = nice_ticks(5, 5, 6, integer=True)
    assert ticks == [4, 5, 6]
    _, _, ticks = nice_ticks(-1.7e308, 1.7e308)
    assert ticks == [-1.7e308, 1.7e308]


# -- the HTML page --------------------------------------------------------------------------


def _store_with_replay(
    store_path: Path, make_manifest: MakeManifest, *, metrics: dict[str, Any] | None = None
) -> str:
    """A store holding an original and a completed replay of it whose loss drifts away
    from step 3000; returns the original's run id."""
    orig = make_manifest(index=0)
    if metrics is not None:
        orig["outputs"]["metric_history"] = metrics
    rep = replay_of(orig, make_manifest(index=1)["run_id"])
    hist = rep["outputs"]["metric_history"]
    if "loss" in hist:
        hist["loss"] = [[s, v + (0 if s < 3000 else (s - 3000) / 4000)] for s, v in hist["loss"]]
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(orig))
        store.ingest(manifest_from_data(rep))
        add_compared_replay(store, orig["run_id"], rep["run_id"])
    return str(orig["run_id"])


@dataclass(frozen=True)
class _BandedEvidence(Evidence):
    """Evidence whose latest comparison judged the replay against the replicas' noise:
    its ``noise_bands`` (a property of ``Evidence``, read from that judgement) given
    here directly, a malformed entry among them."""

    bands: dict[str, Any] = field(default_factory=dict)

    @property
    def noise_bands(self) -> dict[str, Any]:  # type: ignore[override]
        return self.bands


def _banded(ev: Evidence) -> _BandedEvidence:
    latest = ev.latest
    assert latest is not None and latest.manifest is not None
    orig = ev.original.outputs.metric_history["loss"]
    rep = dict(latest.manifest.outputs.metric_history["loss"])
    band = [(s, v - 0.15, v + 0.15) for s, v in orig]
    exit_step = next(s for s, lo, hi in band if not lo <= rep[s] <= hi)
    return _BandedEvidence(
        ev.record,
        ev.original,
        ev.gaps,
        ev.replays,
        ev.chosen,
        bands={"loss": (band, exit_step), "accuracy": "not a band"},
    )


def test_page_has_a_metrics_section_after_the_verdict(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    run_id = _store_with_replay(store_path, make_manifest)
    with RunStore(store_path) as store:
        ev = gather(store, run_id)
    assert report._noise_bands(ev) == {}  # today's Evidence has none: the seam is empty
    page = report.html_page(ev, "2024-01-01T00:00:00Z")
    assert page.index('id="verdict"') < page.index("<h2>Metrics (2)</h2>")
    assert page.index("<h2>Metrics (2)</h2>") < page.index("side by side</h2>")
    assert page.count("<svg") == 2 and page.count('class="replay"') == 2
    assert "noise-band" not in page and "leaves noise band" not in page
    assert "accuracy" in page and page.index("accuracy: original") < page.index("loss: original")
    assert 'style="' not in page
    for needle in ("http://", "https://", "<link", "<script", "src="):  # standalone, no URL
        assert needle not in page, needle


def test_page_draws_the_noise_band_when_evidence_carries_one(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    run_id = _store_with_replay(store_path, make_manifest)
    with RunStore(store_path) as store:
        ev = _banded(gather(store, run_id))
    bands = report._noise_bands(ev)
    assert set(bands) == {"loss"}  # the malformed entry is left out, not fatal
    band, exit_step = bands["loss"]
    assert len(band) == 100 and band[0] == (50, band[0][1], band[0][2])
    assert exit_step is not None and 3000 <= exit_step <= 4000
    page = report.html_page(ev, "2024-01-01T00:00:00Z")
    # the values with the band, and their distance from the replicas' mean with ±h
    assert page.count('class="noise-band"') == 2 and page.count('class="metric distance"') == 1
    assert f"leaves noise band at step {exit_step}" in page


def test_page_caps_the_plots_and_escapes_names(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    metrics: dict[str, Any] = {f"m{i:02d}": [[1, 1.0], [2, float(i)]] for i in range(29)}
    metrics[HOSTILE] = [[1, 0.0], [2, 1.0]]
    metrics["empty"] = []
    run_id = _store_with_replay(store_path, make_manifest, metrics=metrics)
    with RunStore(store_path) as store:
        page = report.html_page(gather(store, run_id), "2024-01-01T00:00:00Z")
    assert "<h2>Metrics (30)</h2>" in page  # an empty history is no plot
    assert page.count("<svg") == report.MAX_PLOTS == 24
    assert "6 more metrics not plotted" in page
    assert "<script>alert" not in page and "&lt;/svg&gt;&lt;script&gt;" in page
    assert "the latest replay logged" not in page  # the replay logged every history


# -- in a real browser ----------------------------------------------------------------------


def test_plots_render_in_headless_chromium(
    store_path: Path, make_manifest: MakeManifest, tmp_path: Path
) -> None:
    run_id = _store_with_replay(store_path, make_manifest)
    with RunStore(store_path) as store:
        ev = _banded(gather(store, run_id))
    page = tmp_path / "report.html"
    page.write_text(report.html_page(ev, "2024-01-01T00:00:00Z"))
    url = page.as_uri()
    dom = chromium("--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    out = dom.stdout
    # parsed as SVG in the page, not as text: the elements are in the DOM
    assert out.count("<svg") == 3 and out.count("</svg>") == 3  # loss also as its distance
    assert out.count("<polyline") == 6 and out.count('class="noise-band"') == 2
    assert re.search(r'<polyline class="replay"[^>]*stroke-dasharray="[0-9 ]+"', out)
    assert "leaves noise band at step" in out
    assert "<title>loss: original and latest replay by step</title>" in out
    shot = tmp_path / "report.png"
    r = chromium(f"--screenshot={shot}", url)
    assert r.returncode == 0, r.stderr[-2000:]
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 40_000
