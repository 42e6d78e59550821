"""The EU AI Act Annex IV map: the bundle member and the report's section."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from replay_tui.evidence import annex
from replay_tui.evidence.export import export_bundle
from replay_tui.evidence.gather import gather
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest

IDS = [
    "development-methods",
    "design-choices",
    "compute",
    "data",
    "validation-testing",
    "retention",
]


def test_the_member_maps_each_item_to_facts_the_bundle_holds(bundle: Path) -> None:
    doc = json.loads((bundle / annex.ANNEX_NAME).read_text())
    assert doc["schema"] == annex.SCHEMA
    assert [i["id"] for i in doc["items"]] == IDS
    held = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    folders = {n.split("/", 1)[0] for n in held if "/" in n}
    for item in doc["items"]:
        assert item["answered_by"], item["id"]
        for fact in item["answered_by"]:
            member = fact["member"]
            top = member.split("/", 1)[0]
            assert member in held or top in folders, (item["id"], member)
        # every item says what the bundle cannot answer: nothing pretends to be complete
        assert item["cannot_answer"] and item["status"] == "partly answered"
    by_id = {i["id"]: i for i in doc["items"]}
    assert any("design rationale" in c for c in by_id["design-choices"]["cannot_answer"])
    assert "labelling procedures" in by_id["data"]["cannot_answer"]
    members = {f["member"] for f in by_id["validation-testing"]["answered_by"]}
    assert {"comparison.json", "model.sig", "logs", "replays"} <= members
    manifest = json.loads((bundle / "manifest.json").read_text())
    facts = {f["field"]: f["value"] for f in by_id["development-methods"]["answered_by"]}
    assert facts["code.commit"] == manifest["code"]["commit"]
    assert facts["image.digest"] == manifest["image"]["digest"]


def test_the_report_sections_name_every_item(
    replayed_store: tuple[Path, str],
) -> None:
    store_path, run_id = replayed_store
    with RunStore(store_path) as store:
        ev = gather(store, run_id)
    md = annex.markdown_section(ev)
    assert md.startswith(f"## {annex.TITLE}\n")
    rows = [
        line for line in md.splitlines() if line.startswith("| Annex IV") or "Article 18" in line
    ]
    assert len(rows) == 6
    assert "labelling procedures" in md and "design rationale" in md
    page = annex.html_section(ev)

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.open: list[str] = []
            self.rows = 0

        def handle_starttag(self, tag: str, attrs: object) -> None:
            if tag != "br":
                self.open.append(tag)
            self.rows += tag == "tr"

        def handle_endtag(self, tag: str) -> None:
            assert self.open.pop() == tag

    p = Tags()
    p.feed(page)
    assert p.open == [] and p.rows == 7  # the header and one row per item
    assert page.startswith('<section id="annex-iv">')


def test_hostile_manifest_values_are_escaped_in_both_sections(
    store_path: Path, make_manifest: MakeManifest, tmp_path: Path
) -> None:
    evil = "<script>alert(1)</script>|**x**"
    m = make_manifest()
    m["code"]["branch"] = "b"
    m["argv"] = ["python", evil]
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(m))
        ev = gather(store, m["run_id"])
        export_bundle(store, m["run_id"], tmp_path / "b")
    page = annex.html_section(ev)
    assert "<script>" not in page and "&lt;script&gt;" in page
    md = annex.markdown_section(ev)
    assert "<script>" not in md and "\\|\\*\\*x\\*\\*" in md
    doc = json.loads((tmp_path / "b" / annex.ANNEX_NAME).read_text())
    # not replayed: the validation item still answers from what the bundle holds
    val = doc["items"][4]
    assert val["answered_by"][0]["value"] == "not replayed"


def test_the_report_carries_the_map_and_the_map_names_the_members_the_bundle_holds(
    bundle: Path,
) -> None:
    md = (bundle / "report.md").read_text()
    assert f"## {annex.TITLE}" in md and "labelling procedures" in md
    page = (bundle / "report.html").read_text()
    assert f"<h2>{annex.TITLE}</h2>" in page and 'class="annex-iv"' in page
    assert md.index(annex.TITLE) < md.index("## Checking this bundle")
    doc = json.loads((bundle / annex.ANNEX_NAME).read_text())
    named = {f["member"] for i in doc["items"] for f in i["answered_by"]}
    held = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()}
    tops = {n.split("/", 1)[0] for n in held}
    assert {n.split("/", 1)[0] for n in named} <= tops
    # what the bundle holds is named where an item asks for it: model.sig, logs, replays
    assert {"model.sig", "logs", "replays"} <= named
