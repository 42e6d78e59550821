"""``bisect`` on real tiny training runs (local backend: the host's torch), and its parts.

The runs are recorded with the real launcher from a real git repository; probes are
real replays.  The search is also checked on its own with a deterministic oracle (a
function of the swapped set), since it is pure logic over probe outcomes.
"""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from replay_tui.bisect import factors as fx
from replay_tui.bisect.answer import (
    BisectResult,
    DifferingFactor,
    EnvChange,
    FloorSummary,
    GoodVsBad,
    ProbeJudgement,
    ProbeRecord,
    Untestable,
)
from replay_tui.bisect.noise import Behaviour, Distance
from replay_tui.bisect.probe import Side, build_probe
from replay_tui.bisect.search import ddmin, search
from storage.store import RunStore
from tests.helpers.commands import cli_json
from tests.support.training import QUICK, git, make_repo, record_example, replay_tui, write_data

HARMLESS = ["--out", "out/"]  # the same folder as the default "out": a harmless config change


@dataclass
class Lab:
    store: Path
    repo: Path
    clone: Path
    good: str
    bad_seed: str
    bad_data: str


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    root = tmp_path_factory.mktemp("bisect")
    store = root / "store" / "runs.db"
    repo = make_repo(root / "repo")
    good = record_example(store, repo, *QUICK, seed=1)
    bad_seed = record_example(store, repo, *QUICK, *HARMLESS, seed=2)
    # the same project in another clone, whose data file holds other numbers
    clone = root / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    write_data(clone / "data" / "train.npz", seed=5)
    bad_data = record_example(store, clone, *QUICK, *HARMLESS, seed=1)
    for r in (good, bad_seed, bad_data):
        assert r["_returncode"] == 0, r["_stderr"][-2000:]
    return Lab(store, repo, clone, good["run_id"], bad_seed["run_id"], bad_data["run_id"])


def bisect(store: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    return cli_json(store, "bisect", *args, "--backend", "local", "--json")


def events(store: Path) -> int:
    with RunStore(store) as s:
        return len(s.events())


# -- real runs, real probes -------------------------------------------------------------


@pytest.mark.slow
def test_seed_change_names_seed(lab: Lab) -> None:
    # --parallel 2: the two one-factor probes run at the same time, each its own store
    code, res, err = bisect(lab.store, lab.good, lab.bad_seed, "--parallel", "2")
    assert code == 0, err[-4000:]
    assert res["causes"] == ["seed"]
    assert res["cleared"] == ["config"]
    assert res["confirmed"] is True
    assert res["times"] == 1  # seeded and deterministic: one replay of GOOD
    assert [(p["base"], p["swapped"]) for p in res["probes"]] == [
        ("good", ["config"]),
        ("good", ["seed"]),
        ("bad", ["seed"]),
    ]
    assert res["noise_floor"]["identical"] is True
    seed_probe = next(p for p in res["probes"] if p["swapped"] == ["seed"])
    assert seed_probe["behaves_like"] == "BAD" and seed_probe["vs_bad"] == "IDENTICAL"
    assert seed_probe["first_divergent_step"] == 0
    assert any(r["what"] == "env.REPLAY_TUI_SEED" for r in res["env_diff"])
    assert res["verdict"].startswith("the divergence follows the seed")
    with RunStore(lab.store) as s:
        assert s.bisects_of(lab.bad_seed)[-1]["body"]["causes"] == ["seed"]
        assert s.verify().ok
    # the evidence bundle of either run carries the bisect, covered by its checksums
    out = lab.store.parent / "bundle-seed"
    assert replay_tui(lab.store, "export", lab.bad_seed, "--out", str(out)).returncode == 0
    doc = json.loads((out / "bisects.json").read_text())
    assert doc["bisects"][-1]["body"]["causes"] == ["seed"]
    assert "bisects.json" in (out / "SHA256SUMS").read_text()
    assert replay_tui(lab.store, "verify", str(out), "--allow-unsigned").returncode == 0
    with (out / "bisects.json").open("a") as f:
        f.write(" ")
    tampered = replay_tui(lab.store, "verify", str(out), "--allow-unsigned")
    assert tampered.returncode == 1 and "bisects.json" in tampered.stdout


@pytest.mark.slow
def test_data_change_names_data_and_clears_the_config_change(lab: Lab) -> None:
    code, res, err = bisect(lab.store, lab.good, lab.bad_data)
    assert code == 0, err[-4000:]
    assert res["causes"] == ["data"]
    assert res["cleared"] == ["config"]
    assert res["confirmed"] is True
    data_probe = next(p for p in res["probes"] if p["swapped"] == ["data"])
    assert data_probe["behaves_like"] == "BAD" and data_probe["vs_bad"] == "IDENTICAL"
    assert [r["factor"] for r in res["env_diff"]] and {r["factor"] for r in res["env_diff"]} == {
        "data"
    }


@pytest.mark.slow
def test_unseeded_script_is_unexplained_with_the_noise_floor(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store" / "runs.db"
    repo = make_repo(tmp_path / "repo")
    good = record_example(store, repo, *QUICK, "--no-seed", seed=None)
    bad = record_example(store, repo, *QUICK, "--no-seed", *HARMLESS, seed=None)
    # one bisect, in words; its record (what --json prints) read back from the store
    text = replay_tui(store, "bisect", good["run_id"], bad["run_id"], "--backend", "local")
    assert text.returncode == 1, text.stderr[-4000:]
    assert "noise floor of GOOD over 4 run(s)" in text.stdout
    with RunStore(store) as s:
        (fact,) = s.bisects_of(bad["run_id"])
    res = fact["body"]
    assert res["outcome"] == "unexplained"
    assert res["times"] == 3  # not seeded: three replays by default
    assert res["noise_floor"]["metric_gap"] > 0
    assert res["noise_floor"]["identical"] is False
    assert res["probes"] == []
    assert "not reproducible enough to attribute" in res["verdict"]


@pytest.mark.slow
def test_bad_input_exits_2_and_leaves_the_store(lab: Lab) -> None:
    before = events(lab.store)
    code, res, _ = bisect(lab.store, lab.good, lab.good)
    assert code == 2 and "same run" in res["error"]
    code, res, _ = bisect(lab.store, lab.good, lab.bad_seed, "--factors", "seed,weather")
    assert code == 2 and "weather" in res["error"]
    code, res, _ = bisect(lab.store, lab.good, lab.bad_seed, "--factors", ",")
    assert code == 2 and "no factor" in res["error"]
    code, res, _ = bisect(lab.store, lab.good, "no-such-run")
    assert code == 2
    code, res, _ = bisect(lab.store, lab.good, lab.bad_seed, "--budget", "0")
    assert code == 2
    assert events(lab.store) == before


@pytest.mark.slow
def test_an_ingested_run_is_not_probed_unsandboxed(lab: Lab) -> None:
    with RunStore(lab.store) as s:
        data = s.manifest(lab.bad_seed).model_dump(mode="json")
    data["run_id"] = data["run_id"][:-4] + "f00d"
    data.pop("integrity")
    f = lab.store.parent / "foreign.json"
    f.write_text(json.dumps(data))
    assert replay_tui(lab.store, "ingest", str(f)).returncode == 0
    before = events(lab.store)
    code, res, _ = bisect(lab.store, lab.good, data["run_id"])
    assert code == 2 and "not from a recording on this host" in res["error"]
    assert events(lab.store) == before


@pytest.mark.slow
def test_image_cannot_be_swapped_by_the_local_backend(lab: Lab) -> None:
    from replay_tui.bisect.run import _check_image
    from replay_tui.replay.plan import ReplayOptions
    from storage.manifest import manifest_from_data

    with RunStore(lab.store) as s:
        good, bad = s.manifest(lab.good), s.manifest(lab.bad_seed)
    data = bad.model_dump(mode="json")
    data["image"] = {"reference": "localhost:5000/x/y:1", "digest": "sha256:" + "ab" * 32}
    data.pop("integrity")
    with_image = manifest_from_data(data)
    rep = fx.diff_factors(good, with_image)
    assert [d.name for d in rep.differing] == ["image", "config", "seed"]
    why = _check_image(Side(with_image), ReplayOptions(backend="local"), None)
    assert why is not None and "cannot swap images" in why


# -- the parts ----------------------------------------------------------------------------


def test_seed_slots_and_masking() -> None:
    argv = ["python", "t.py", "--seed", "7", "--lr=0.1", "trainer.seed=3", "--random-seed=9"]
    assert fx.seed_values(argv) == ["7", "3", "9"]
    assert fx.masked_argv(argv) == [
        "python",
        "t.py",
        "--seed",
        "<seed>",
        "--lr=0.1",
        "trainer.seed=<seed>",
        "--random-seed=<seed>",
    ]
    assert fx.with_seed_values(argv, ["1", "2"])[3] == "1"
    assert fx.with_seed_values(argv, ["1", "2"])[5] == "trainer.seed=2"
    assert fx.seed_values(["python", "t.py", "--seed"]) == []  # no value: nothing to swap


@pytest.mark.slow
def test_factors_of_real_runs(lab: Lab) -> None:
    with RunStore(lab.store) as s:
        good, bad = s.manifest(lab.good), s.manifest(lab.bad_seed)
        bad_data = s.manifest(lab.bad_data)
    rep = fx.diff_factors(good, bad)
    assert [d.name for d in rep.differing] == ["config", "seed"]
    seed = rep.get("seed")
    assert seed is not None and "REPLAY_TUI_SEED=1 -> 2" in seed.detail
    rep = fx.diff_factors(good, bad_data)
    assert [d.name for d in rep.differing] == ["data", "config"]
    assert fx.diff_factors(good, good).differing == []


@pytest.mark.slow
def test_probe_manifest_takes_only_the_swapped_factors(lab: Lab) -> None:
    with RunStore(lab.store) as s:
        good = Side(s.manifest(lab.good), tuple(s.locations(lab.good)))
        bad = Side(s.manifest(lab.bad_data), tuple(s.locations(lab.bad_data)))
    p = build_probe(good, bad, {"data"}, "good")
    m = p.manifest
    assert m.run_id not in (good.run_id, bad.run_id) and m.kind == "original"
    assert [d.sha256 for d in m.data] == [d.sha256 for d in bad.manifest.data]
    assert m.argv == good.manifest.argv and m.env == good.manifest.env
    assert m.code == good.manifest.code
    assert p.data_locations == bad.data_locations()
    assert p.repo_location == lab.clone.resolve() or p.repo_location == lab.clone
    assert p.code_repo == good.repo
    q = build_probe(good, bad, {"config"}, "good")
    assert q.manifest.argv == bad.manifest.argv and q.manifest.data == good.manifest.data
    with pytest.raises(ValueError, match="not factors"):
        build_probe(good, bad, {"hardware"}, "good")


def test_ddmin_finds_a_smallest_set() -> None:
    items = ["code", "image", "data", "config", "seed", "determinism"]
    calls: list[list[str]] = []

    def fails(s: list[str]) -> bool:
        calls.append(s)
        return {"image", "seed"} <= set(s)

    assert sorted(ddmin(items, fails)) == ["image", "seed"]
    assert len(calls) < 2 ** len(items)


def oracle(rule: Any) -> tuple[Any, list[tuple[frozenset[str], str, str]]]:
    seen: list[tuple[frozenset[str], str, str]] = []

    def probe(swapped: frozenset[str], base: str, why: str) -> Behaviour:
        seen.append((swapped, base, why))
        if base == "bad":
            return "GOOD" if rule(swapped) else "BAD"
        return "BAD" if rule(swapped) else "GOOD"

    return probe, seen


def test_search_one_cause_among_five_takes_six_probes() -> None:
    probe, seen = oracle(lambda s: "data" in s)
    res = search(["code", "image", "data", "config", "seed"], probe, budget=32)
    assert res.causes == ["data"] and res.confirmed is True
    assert res.cleared == ["code", "image", "config", "seed"]
    assert len(seen) == 6 and seen[-1][1] == "bad"
    assert all("one factor at a time" in why for _, base, why in seen[:5])


def test_search_interaction_uses_delta_debugging() -> None:
    probe, seen = oracle(lambda s: {"image", "seed"} <= s)
    res = search(["code", "image", "data", "seed"], probe, budget=32)
    assert res.interaction and sorted(res.causes) == ["image", "seed"]
    assert any("delta debugging" in why for _, _, why in seen)
    assert any("all testable factors together" in why for _, _, why in seen)


def test_search_budget_and_no_cause() -> None:
    probe, _ = oracle(lambda s: {"image", "seed"} <= s)
    res = search(["code", "image", "data", "seed"], probe, budget=3)
    assert res.budget_exhausted and res.causes == [] and res.probes == 3
    probe, _ = oracle(lambda s: False)
    res = search(["code", "image"], probe, budget=10)
    assert res.causes == [] and res.all_together == "GOOD" and res.cleared == ["code", "image"]
    probe, seen = oracle(lambda s: "code" in s)
    res = search(["code"], probe, budget=10, confirm=False)
    assert res.causes == ["code"] and res.confirmed is None and len(seen) == 1


def test_stored_bisect_is_an_append_only_fact_in_the_ledger(tmp_path: Path) -> None:
    res = BisectResult("01a2000000000001", "01a2000000000002", "docker")
    res.outcome, res.causes = "cause", ["image"]
    with RunStore(tmp_path / "s.db") as s:
        bid = s.add_bisect(res.good, res.bad, res.outcome, res.causes, res.to_dict())
        assert s.bisects_of(res.good)[0]["id"] == bid
        assert s.bisects_of(res.bad)[0]["body"]["causes"] == ["image"]
        assert s.facts("bisects")[0]["outcome"] == "cause"
        assert [e.kind for e in s.events()] == ["bisect"]
        assert s.verify().ok
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            s.conn.execute("UPDATE bisects SET outcome = 'x'")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            s.conn.execute("DELETE FROM bisects")
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("DROP TRIGGER bisects_no_delete")
    with RunStore(tmp_path / "s.db") as s:
        assert not s.verify().ok


def test_a_stored_answer_reads_back_into_the_same_result() -> None:
    """What the store keeps (``to_dict``) reads back with ``from_dict``: the same JSON,
    the same verdict line, the same typed rows."""
    res = BisectResult(
        "g" * 16,
        "b" * 16,
        "docker",
        outcome="cause",
        causes=["seed"],
        cleared=["config"],
        untestable=[Untestable("image", "BAD recorded no image digest to pull")],
        factors=[
            DifferingFactor("seed", ("seed 1 -> 2",), testable=True),
            DifferingFactor("config", ("lr",), testable=True),
        ],
        probes=[
            ProbeRecord(
                1,
                "good",
                ["seed"],
                "one factor at a time: seed alone",
                behaves="BAD",
                judgement=ProbeJudgement(
                    "DIVERGED", "IDENTICAL", 40, Distance(0.5, 0.1), Distance(0.0, 0.0)
                ),
                replay_run="r" * 16,
                status="succeeded",
                duration_s=1.5,
            ),
            ProbeRecord(2, "good", ["config"], "config alone", behaves="failed", error="x"),
        ],
        noise_floor=FloorSummary(2, Distance(0.0, 0.0), identical=True),
        good_bad=GoodVsBad("DIVERGED", Distance(0.5, 0.1), 40, "loss"),
        confirmed=True,
        budget=16,
        times=1,
        env_diff=[EnvChange("seed", "randomness.seed", 1, 2)],
        notes=["a note"],
        duration_s=3.25,
        bisect_id=9,
    )
    body = json.loads(json.dumps(res.to_dict()))
    back = BisectResult.from_dict(body)
    assert back == res and back.to_dict() == body and back.verdict_line() == res.verdict_line()
    assert back.probes_run == 2 and back.exit_code == 0 and back.bisect_id == 9
    p1, p2 = back.probes
    assert (p1.vs_good, p1.vs_bad, p1.first_divergent_step) == ("DIVERGED", "IDENTICAL", 40)
    assert (p2.judgement, p2.vs_good, p2.first_divergent_step, p2.error) == (None, None, None, "x")
    (c,) = back.env_diff
    assert (c.what, c.good, c.bad) == ("randomness.seed", 1, 2)  # the values as recorded
    # an older or damaged body still opens, with what it has
    thin = BisectResult.from_dict({"good": "g", "bad": "b", "probes": [{"probe": 1}, "x"]})
    assert thin.outcome == "unexplained" and thin.probes_run == 1
    assert thin.probes[0].vs_good is None and thin.verdict_line().startswith("unexplained")


def test_the_rows_write_the_json_stored_bodies_hold() -> None:
    """The typed rows write exactly the JSON that bodies stored before them hold (the
    keys in their order; an int distance stays an int, a non-finite one a string), and
    such a body reads back and writes itself again byte for byte."""
    probe = ProbeRecord(
        3,
        "bad",
        ["image", "seed"],
        "confirmation",
        behaves="neither",
        judgement=ProbeJudgement("DIVERGED", "DIVERGED", None, Distance(math.inf, 2), None),
        status="failed",
    )
    assert json.dumps(BisectResult("g", "b", "docker", probes=[probe]).to_dict()["probes"]) == (
        '[{"probe": 3, "base": "bad", "swapped": ["image", "seed"], "why": "confirmation",'
        ' "behaves_like": "neither", "vs_good": "DIVERGED", "vs_bad": "DIVERGED",'
        ' "first_divergent_step": null, "distance_to_good": {"metric_gap": "inf",'
        ' "weight_rel_l2": 2}, "distance_to_bad": null, "replay_run": null, "status":'
        ' "failed", "error": null, "duration_s": null}]'
    )
    body = {
        "version": 1,
        "good": "g",
        "bad": "b",
        "backend": "local",
        "outcome": "cause",
        "verdict": "the divergence follows the code: GOOD's hardware with BAD's code"
        " reproduce BAD's outputs",
        "exit_code": 0,
        "causes": ["code"],
        "cleared": [],
        "partial": [],
        "untestable": [{"factor": "hardware", "reason": "hardware and drivers cannot be"}],
        "factors": [
            {"factor": "code", "detail": ["commit a -> b"], "testable": True, "reason": None},
            {"factor": "hardware", "detail": [], "testable": False, "reason": "hardware"},
        ],
        "probes": [],
        "probes_run": 0,
        "budget": 16,
        "budget_exhausted": False,
        "times": 3,
        "noise_floor": {
            "runs": 4,
            "replays": 3,
            "metric_gap": 1,
            "weight_rel_l2": "nan",
            "identical": False,
        },
        "good_vs_bad": {
            "verdict": "DIVERGED",
            "metric_gap": 2,
            "weight_rel_l2": 0.5,
            "first_divergent_step": None,
            "metric": None,
        },
        "reason": None,
        "confirmed": None,
        "interaction": False,
        "env_diff": [
            {"factor": "code", "what": "code.commit", "good": "a", "bad": "b"},
            {"factor": "code", "what": "code.files", "good": ["x.py"], "bad": {"y": [1, 2.5]}},
        ],
        "notes": [],
        "duration_s": 12.5,
    }
    back = BisectResult.from_dict(body)
    assert json.dumps(back.to_dict()) == json.dumps(body)
    nf = back.noise_floor
    assert nf is not None and (nf.runs, nf.replays, nf.floor.metric_gap) == (4, 3, 1)
    assert math.isnan(nf.floor.weight_rel_l2)
    assert "GOOD vs BAD: DIVERGED, metric gap 2, weight rel L2 0.5" in back.text()


def test_verdict_text_of_an_unexplained_result() -> None:
    res = BisectResult("g" * 16, "b" * 16, "local", reason="nothing reproduces BAD")
    assert res.exit_code == 1
    assert res.verdict_line() == "unexplained: nothing reproduces BAD"
    assert json.loads(json.dumps(res.to_dict()))["outcome"] == "unexplained"


@pytest.mark.slow
def test_a_commit_gone_is_untestable(tmp_path: Path) -> None:
    """BAD's commit rewritten away: code is untestable with the reason; no probe runs it."""
    from replay_tui.bisect.run import _check_code
    from replay_tui.replay.plan import ReplayOptions

    store = tmp_path / "store" / "runs.db"
    repo = make_repo(tmp_path / "repo")
    (repo / "train_mlp.py").write_text((repo / "train_mlp.py").read_text() + "\n# edit\n")
    git(repo, "commit", "-q", "-am", "edit")
    bad = record_example(store, repo, "--epochs", "0", "--samples", "8", "--workers", "0")
    assert bad["_returncode"] == 0, bad["_stderr"][-2000:]
    git(repo, "reset", "-q", "--hard", "HEAD~1")
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "-q", "--prune=now")
    with RunStore(store) as s:
        side = Side(s.manifest(bad["run_id"]), tuple(s.locations(bad["run_id"])))
        why = _check_code(s, side, ReplayOptions(backend="local"))
    assert why is not None and "commit is gone" in why


@pytest.mark.slow
def test_tui_comparison_key_b_runs_the_bisect_to_its_answer(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import os
    import sys

    # the local backend runs the recorded `python`: this interpreter (it has torch)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("REPLAY_TUI_SEED", raising=False)

    from textual.widgets import DataTable, Log, Static

    from replay_tui.replay.plan import ReplayOptions
    from replay_tui.tui.app import ReplayApp
    from replay_tui.tui.screens.bisect import BisectFormScreen, BisectScreen
    from replay_tui.tui.screens.comparison import ComparisonScreen
    from tests.support.app import wait_until

    async def flow() -> None:
        app = ReplayApp(lab.store, replay_options_factory=lambda: ReplayOptions(backend="local"))
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause()
            await app.push_screen(ComparisonScreen(lab.store, a_run=lab.good, b_run=lab.bad_seed))
            await app.workers.wait_for_complete()
            await pilot.pause()
            await pilot.press("b")  # the bisect form: its defaults, started as they are
            await pilot.pause()
            assert isinstance(app.screen, BisectFormScreen)
            await pilot.press("ctrl+s")
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, BisectScreen)
            await wait_until(pilot, lambda: screen.phase != "running", timeout=600)
            assert screen.phase == "done", screen.phase
            res = screen.result
            assert res is not None, screen.query_one("#bisect-status", Static).render()
            assert res.causes == ["seed"], res.verdict_line()
            table = screen.query_one("#bisect-probes", DataTable)
            assert table.row_count == len(res.probes) == 3
            log_lines = screen.query_one("#bisect-log", Log).lines
            assert any("probe 1" in line for line in log_lines)
            await pilot.press("escape")
            assert isinstance(app.screen, ComparisonScreen)

    asyncio.run(flow())
