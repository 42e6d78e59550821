"""A bisect's evidence table agrees with each probe's conclusion, and its probes' output
goes to the store, shown on request (``bisect-show ID --logs``, ``l`` in the TUI), not
printed by default.

The real part: two tiny training runs recorded with the real launcher from a real git
repository (seed 1 and seed 2), bisected on the local backend (real replays), the answer
and the probes' output read back from the real SQLite store.  The rule from closenesses
to a conclusion is also checked on fixed numbers: a probe that moves with BAD within its
noise while the fixed tolerance calls it DIVERGED from both (the row that once read
"GOOD config BAD DIVERGED DIVERGED").
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from replay_tui.bisect.answer import PROBE_COLUMNS, BisectResult, ProbeJudgement, ProbeRecord
from replay_tui.bisect.noise import Closeness, conclude, judge, noise_floor
from storage.manifest import RunManifest, manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.support.training import QUICK, make_repo, record_example, replay_tui

HARMLESS = ["--out", "out/"]


def _cells_agree(p: ProbeRecord) -> None:
    """The row says near/far against GOOD and BAD, and the conclusion is the one rule's."""
    j = p.judgement
    assert j is not None and j.near_good is not None and j.near_bad is not None, p
    cells = p.cells()
    assert cells[3] == j.near_good.label() and cells[4] == j.near_bad.label()
    assert cells[3].startswith(("near: ", "far: ")) and cells[4].startswith(("near: ", "far: "))
    assert p.behaves == conclude(p.status == "succeeded", j.near_good, j.near_bad) == cells[5]
    if j.near_good.near:
        assert cells[6] == "-"  # near GOOD: it does not leave GOOD


# -- the rule, on fixed numbers ----------------------------------------------------------


def _curve(data: dict[str, Any], wobble: float, shift: float) -> dict[str, Any]:
    d = copy.deepcopy(data)
    d["outputs"]["metric_history"] = {
        "loss": [
            [s, 3.0 - s / 100 + wobble + (shift if s >= 40 else 0.0)] for s in range(0, 101, 10)
        ]
    }
    d["outputs"]["metrics"] = {"loss": 2.0 + wobble + shift}
    d["outputs"]["metric_times"] = {}
    d["outputs"]["artifacts"] = []  # the metrics alone decide here
    return d


def _manifest(data: dict[str, Any], run_id: str) -> RunManifest:
    d = copy.deepcopy(data)
    d["run_id"] = run_id
    return manifest_from_data(d)


def test_a_probe_within_bads_noise_reads_near_bad_and_far_from_good(
    make_manifest: MakeManifest,
) -> None:
    base = make_manifest(index=0)
    ids = [make_manifest(index=i)["run_id"] for i in range(1, 7)]
    good = _manifest(_curve(base, 0.0, 0.0), base["run_id"])
    replicas = [_manifest(_curve(base, w, 0.0), ids[i]) for i, w in enumerate((1e-3, -1e-3, 5e-4))]
    bad = _manifest(_curve(base, 2e-4, -0.3), ids[3])
    probe = _manifest(_curve(base, -4e-4, -0.3), ids[4])  # BAD's change, its own wobble
    floor = noise_floor(good, replicas, None, bad)
    j = judge(probe, good, bad, floor, None, rtol=1e-5, atol=1e-8)
    # the fixed tolerance calls it DIVERGED from both: those verdicts cannot be the columns
    assert (j.vs_good, j.vs_bad) == ("DIVERGED", "DIVERGED")
    assert j.behaves == "BAD"
    assert j.near_good == Closeness(False, "outside noise", 40)
    assert j.near_bad is not None and j.near_bad.near and j.near_bad.basis == "within noise"
    rec = ProbeRecord(
        1,
        "good",
        ["config"],
        "config alone",
        behaves=j.behaves,
        judgement=ProbeJudgement(
            j.vs_good, j.vs_bad, j.first_divergent_step, j.d_good, j.d_bad, j.near_good, j.near_bad
        ),
        status="succeeded",
    )
    assert rec.cells() == (
        "1",
        "GOOD",
        "config",
        "far: outside noise",
        "near: within noise",
        "BAD",
        "40",
    )
    _cells_agree(rec)
    # the stored row reads back into the same cells
    back = BisectResult.from_dict(
        json.loads(json.dumps(BisectResult("g", "b", "local", probes=[rec]).to_dict()))
    )
    assert back.probes[0].cells() == rec.cells()
    # GOOD's own wobble: near GOOD, and near BAD it is not
    same = _manifest(_curve(base, -7e-4, 0.0), ids[5])
    j2 = judge(same, good, bad, floor, None, rtol=1e-5, atol=1e-8)
    assert j2.behaves == "GOOD" and j2.near_good is not None and j2.near_good.near
    assert j2.near_bad is not None and not j2.near_bad.near


def test_the_rule_from_closenesses_to_a_conclusion() -> None:
    near, far = Closeness(True, "within noise"), Closeness(False, "outside noise", 3)
    assert conclude(True, far, near) == "BAD"
    assert conclude(True, near, far) == "GOOD"
    assert conclude(True, near, near) == "GOOD"  # nothing moved it off GOOD
    assert conclude(True, far, far) == "neither"
    assert (
        conclude(False, Closeness(False, "failed, not succeeded"), Closeness(True, "failed too"))
        == "BAD"
    )
    assert conclude(False, far, far) == "failed"
    # an old body (no closeness) says its verdicts are the fixed tolerance's
    old = ProbeRecord(
        2,
        "good",
        ["seed"],
        "x",
        behaves="BAD",
        judgement=ProbeJudgement("DIVERGED", "IDENTICAL", 0, None, None),
    )
    assert old.cells()[3:5] == ("DIVERGED (tolerance)", "IDENTICAL (tolerance)")
    assert len(old.cells()) == len(PROBE_COLUMNS)


# -- a real bisect -----------------------------------------------------------------------


@dataclass
class Done:
    store: Path
    good: str
    bad: str
    output: str  # what `bisect` printed (stdout and stderr)
    code: int


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Done:
    root = tmp_path_factory.mktemp("bisect-table")
    store = root / "store" / "runs.db"
    repo = make_repo(root / "repo")
    good = record_example(store, repo, *QUICK, seed=1)
    bad = record_example(store, repo, *QUICK, *HARMLESS, seed=2)
    for r in (good, bad):
        assert r["_returncode"] == 0, r["_stderr"][-2000:]
    proc = replay_tui(store, "bisect", good["run_id"], bad["run_id"], "--backend", "local")
    return Done(store, good["run_id"], bad["run_id"], proc.stdout + proc.stderr, proc.returncode)


@pytest.mark.slow
def test_no_probe_output_by_default_and_the_table_agrees(done: Done) -> None:
    assert done.code == 0, done.output[-4000:]
    # stage lines and each probe's answer, never the program's own lines
    assert "behaves like" in done.output
    assert "step 0 loss" not in done.output and "\n  | " not in done.output
    with RunStore(done.store) as s:
        (fact,) = s.bisects_of(done.bad)
    res = BisectResult.from_dict(fact["body"])
    assert res.causes == ["seed"] and len(res.probes) == 3
    for p in res.probes:
        _cells_agree(p)
    # the printed table is the stored answer's, row for row
    lines = res.text().splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("probes ("))
    table = [x for x in lines[start : start + 1 + 1 + len(res.probes)]]
    assert len(table) == 5 and all(x in done.output.splitlines() for x in table)
    seed = next(p for p in res.probes if p.swapped == ["seed"] and p.base == "good")
    assert seed.cells()[3:6] == ("far: not identical", "near: identical", "BAD")
    config = next(p for p in res.probes if p.swapped == ["config"])
    assert config.cells()[3] == "near: identical" and config.behaves == "GOOD"
    header = PROBE_COLUMNS
    assert all(h in done.output for h in header[3:])
    assert f"bisect-show {fact['id']} --logs" in done.output


@pytest.mark.slow
def test_the_probes_output_is_in_the_store_and_shown_on_request(done: Done) -> None:
    with RunStore(done.store) as s:
        (fact,) = s.bisects_of(done.bad)
        body = fact["body"]
        res = BisectResult.from_dict(body)
        # every probe's output and GOOD's noise-floor replay's, as blobs of the store
        assert len(body["floor_logs"]) == 1 and all(p["log_sha256"] for p in body["probes"])
        for p in res.probes:
            assert p.log_sha256 is not None
            text = (s.get_blob(p.log_sha256) or b"").decode()
            assert "step 0 loss" in text and "epoch 0 accuracy" in text
        assert s.verify().ok
    shown = replay_tui(done.store, "bisect-show", str(fact["id"]), "--logs")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("── output of") == 4  # the noise-floor replay and 3 probes
    assert "  | step 0 loss" in shown.stdout
    one = replay_tui(done.store, "bisect-show", str(fact["id"]), "--probe", "2", "--json")
    assert one.returncode == 0, one.stderr
    doc = json.loads(one.stdout)
    (log,) = doc["logs"]
    assert log["probe"] == 2 and "step 0 loss" in log["log"]
    plain = replay_tui(done.store, "bisect-show", str(fact["id"]))
    assert plain.returncode == 0 and "step 0 loss" not in plain.stdout
    assert "behaves like" in plain.stdout
    missing = replay_tui(done.store, "bisect-show", str(fact["id"]), "--probe", "9")
    assert missing.returncode == 2 and "no probe 9" in missing.stdout + missing.stderr
    none = replay_tui(done.store, "bisect-show", "999")
    assert none.returncode == 2


@pytest.mark.slow
def test_tui_bisect_view_shows_a_probes_output_on_l(done: Done) -> None:
    import asyncio

    from textual.widgets import DataTable, Log

    from replay_tui.tui.app import ReplayApp
    from replay_tui.tui.queries import bisects_of
    from replay_tui.tui.screens.bisect import BisectScreen
    from tests.support.app import wait_until

    with RunStore(done.store) as s:
        (stored,) = bisects_of(s, done.bad)

    async def flow() -> None:
        app = ReplayApp(done.store)
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.pause()
            screen = BisectScreen(done.store, done.good, done.bad, stored=stored)
            await app.push_screen(screen)
            await pilot.pause()
            table = screen.query_one("#bisect-probes", DataTable)
            assert table.row_count == 3
            for i, p in enumerate(stored.result.probes):  # the command's cells
                assert [str(c) for c in table.get_row_at(i)] == list(p.cells())
            log = screen.query_one("#bisect-log", Log)
            assert not any("step 0 loss" in line for line in log.lines)  # not by default
            table.move_cursor(row=1)
            await pilot.press("l")
            await wait_until(pilot, lambda: any("step 0 loss" in x for x in log.lines), timeout=30)
            assert log.lines[0] == f"== output of probe {stored.result.probes[1].index}"

    asyncio.run(flow())
