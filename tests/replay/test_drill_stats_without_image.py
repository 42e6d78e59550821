"""A drill and ``stats`` count runs recorded without an image the same way, by one rule
(``storage.readmodel.WITHOUT_IMAGE``): a drill on a backend that runs only a pinned image
leaves them out and says how many, ``stats`` shows the same count, and neither calls such
a run a failed reproduction.

Real parts: a run recorded with the real launcher from a real git repository without
``--image``, runs ingested with an image, the real SQLite store, the real CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay_tui.evidence.stats import compute_stats
from storage import readmodel
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.support.training import program_repo, record_run, replay_tui

PROGRAM = """import pathlib
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/result.txt").write_text("42\\n")
print("step 0 loss 1.0", flush=True)
"""


def test_the_drill_leaves_out_exactly_the_runs_stats_counts(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    with RunStore(store_path) as s:
        for i in range(5):
            d = make_manifest(index=i)
            if i % 2:
                d["image"] = None  # recorded without --image
            s.ingest(manifest_from_data(d))
        everything = readmodel.drill_candidates(s, None)
        pinned = readmodel.drill_candidates(s, None, pinned=True)
        st = compute_stats(s)
    assert len(everything) == 5
    left_out = {r[0] for r in everything} - {r[0] for r in pinned}
    assert len(left_out) == 2
    assert (st.without_image.numerator, st.without_image.denominator) == (2, 5)
    assert st.to_dict()["runs_without_image"] == {"value": 0.4, "numerator": 2, "denominator": 5}


@pytest.mark.slow
def test_a_run_without_an_image_is_no_failed_reproduction_in_drill_or_stats(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store" / "runs.db"
    repo = program_repo(tmp_path / "repo", {"t.py": PROGRAM})
    run = record_run(store, repo, "--artifact", "out/*", "--", "python", "t.py")
    # a pinned backend cannot replay it: left out and said, not "0 of 1 reproduced"
    pinned = replay_tui(store, "drill", "--count", "1", "--backend", "docker")
    assert pinned.returncode == 2, pinned.stdout + pinned.stderr
    said = pinned.stdout + pinned.stderr
    assert "1 recorded without an image" in said and "not reproduced" not in said
    stats = json.loads(replay_tui(store, "stats", "--json").stdout)
    assert stats["runs_without_image"] == {"value": 1.0, "numerator": 1, "denominator": 1}
    assert stats["drill_pass_rate"]["denominator"] == 0  # no drill was run, none failed
    assert stats["reproducible_run_rate"]["denominator"] == 0
    text = replay_tui(store, "stats").stdout
    assert "runs without an image" in text and "1 of 1 succeeded original runs" in text
    # the local backend replays it: the drill and stats then count one reproduced run
    local = replay_tui(store, "drill", "--count", "1", "--backend", "local", "--json")
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    doc = json.loads(local.stdout)
    assert [i["run_id"] for i in doc["runs"]] == [run]
    assert doc["runs"][0]["status"] == "reproduced"
    stats = json.loads(replay_tui(store, "stats", "--json").stdout)
    assert stats["reproducible_run_rate"] == {"value": 1.0, "numerator": 1, "denominator": 1}
    assert stats["drill_pass_rate"] == {"value": 1.0, "numerator": 1, "denominator": 1}
    assert stats["runs_without_image"]["numerator"] == 1
