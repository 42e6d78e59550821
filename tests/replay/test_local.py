"""Replays with the local backend and comparisons of real tiny runs: the torch example
where torch's seeds, determinism switches and checkpoints are the point, the numpy-only
trainer (``NUMPY_SCRIPT``, no torch start) where only the replay's mechanics are."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.helpers.commands import cli_json
from tests.support.training import NUMPY_SCRIPT, QUICK, git, make_repo, record_example, replay_tui

pytestmark = pytest.mark.slow


@pytest.fixture
def numpy_repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "numpy-repo", numpy=True)


def replay_json(store: Path, run_id: str, *args: str) -> tuple[int, dict[str, Any], str]:
    return cli_json(store, "replay", run_id, "--backend", "local", "--json", *args)


def test_same_seed_replay_is_identical_and_stored(store: Path, repo: Path) -> None:
    rid = record_example(store, repo, *QUICK)["run_id"]
    code, rep, err = replay_json(store, rid)
    assert code == 0, err[-3000:]
    r = rep["replays"][0]
    assert r["verdict"] == "IDENTICAL"
    with RunStore(store) as s:
        replay = s.manifest(r["replay_run"])
        assert replay.replay is not None
        assert replay.replay.backend == "local" and replay.replay.environment_pinned is False
        from replay_tui.gaps import evaluate

        assert "REPLAY_ENV_NOT_PINNED" in {g.code for g in evaluate(replay)}
        assert s.get_run(rid).last_verdict == "IDENTICAL"
        cmp = s.facts("comparisons")[-1]
        assert cmp["a_run"] == rid and cmp["b_run"] == r["replay_run"]
        assert s.verify().ok
    # the next replay is the run's second: numbered as `show` numbers it
    again = replay_tui(store, "replay", rid, "--backend", "local")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "replay 2: IDENTICAL" in again.stdout, again.stdout
    shown = replay_tui(store, "show", rid).stdout.split("── replays\n", 1)[1]
    assert [ln.split()[0] for ln in shown.splitlines()[:2]] == ["1.", "2."]


def test_unseeded_noise_diverges_with_step_and_tensors_named(store: Path, repo: Path) -> None:
    rid = record_example(store, repo, *QUICK, "--unseeded-noise")["run_id"]
    code, rep, err = replay_json(store, rid)
    assert code == 1, err[-3000:]
    r = rep["replays"][0]
    assert r["verdict"] == "DIVERGED"
    cmp = r["comparison"]
    loss = next(m for m in cmp["metrics"] if m["name"] == "loss")
    assert loss["first_step_differs"] == 0
    assert loss["first_step_out_of_tol"] is not None
    reasons = "\n".join(cmp["reasons"])
    assert "0.weight" in reasons and "first differs at step 0" in reasons


def test_commit_gone_exits_3_and_is_recorded(store: Path, numpy_repo: Path) -> None:
    repo = numpy_repo
    rid = record_example(store, repo, *QUICK, script=NUMPY_SCRIPT)["run_id"]
    # Rewrite history so the recorded commit exists nowhere.
    shutil.rmtree(repo / ".git")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", NUMPY_SCRIPT)
    git(repo, "commit", "-q", "-m", "rewritten")
    code, _, err = replay_json(store, rid)
    assert code == 3
    assert "was not found" in err and "--repo" in err
    with RunStore(store) as s:
        fact = s.facts("replays")[-1]
        assert fact["status"] == "infra-error" and "was not found" in fact["reason"]
        assert s.verify().ok
        # a drill that meets the same failure links its item to the attempt it recorded
        from replay_tui.replay.drill import run_drill
        from replay_tui.replay.plan import ReplayOptions

        (item,) = run_drill(s, count=1, pick="oldest", options=ReplayOptions("local")).items
        assert item.status == "error" and "was not found" in (item.reason or "")
        last = s.replays_of(rid)[-1]
        assert item.replay_fact_id == last.id != fact["id"] and last.status == "infra-error"


def test_replay_from_explicit_repo_clone(store: Path, numpy_repo: Path, tmp_path: Path) -> None:
    repo = numpy_repo
    rid = record_example(store, repo, *QUICK, script=NUMPY_SCRIPT)["run_id"]
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    shutil.rmtree(repo / ".git")  # the recording repo is gone; the clone has the commit
    code, rep, err = replay_json(store, rid, "--repo", str(clone))
    assert code == 0, err[-3000:]
    assert rep["replays"][0]["verdict"] == "IDENTICAL"


def test_noise_floor_and_determinism_cost(store: Path, repo: Path) -> None:
    rid = record_example(store, repo, *QUICK)["run_id"]
    code, rep, err = replay_json(store, rid, "--times", "2", "--determinism", "off")
    assert code == 0, err[-3000:]
    nf = rep["noise_floor"]
    assert nf["replicas"] == 2 and nf["all_identical"] is True
    assert nf["max_metric_gap"] == 0.0 and nf["max_weight_rel_l2"] == 0.0
    det = rep["determinism"]
    assert det["deterministic_s"] > 0 and det["nondeterministic_s"] > 0
    expected = (det["deterministic_s"] - det["nondeterministic_s"]) / det["nondeterministic_s"]
    assert det["determinism_cost_pct"] == pytest.approx(expected * 100)
    assert "CPU" in det["note"]
    modes = [r["determinism"] for r in rep["replays"]]
    assert modes == ["recorded", "recorded", "off"]
    with RunStore(store) as s:
        off = s.manifest(rep["replays"][2]["replay_run"])
        assert off.determinism.deterministic_algorithms is False
        assert len(s.facts("noise_floors")) == 2


def test_float64_vs_float32_equivalent_only_under_loose_tolerance(
    store: Path, numpy_repo: Path
) -> None:
    a, b = (
        record_example(store, numpy_repo, *QUICK, "--dtype", t, seed=3, script=NUMPY_SCRIPT)[
            "run_id"
        ]
        for t in ("float32", "float64")
    )
    loose = replay_tui(store, "compare", a, b, "--rtol", "1e-3", "--atol", "1e-4", "--json")
    tight = replay_tui(store, "compare", a, b, "--rtol", "0", "--atol", "0", "--json")
    lj, tj = json.loads(loose.stdout), json.loads(tight.stdout)
    assert lj["verdict"] == "EQUIVALENT", lj["reasons"]
    assert loose.returncode == 0
    assert tj["verdict"] == "DIVERGED" and tight.returncode == 1
    assert lj["rtol"] == 1e-3 and lj["atol"] == 1e-4
    # the config differs (dtype) and the comparison says so
    assert any(g["code"] == "PAIR_CONFIG_DIFFERS" for g in lj["gaps"])


def test_missing_original_artifact_is_incomplete(store: Path, numpy_repo: Path) -> None:
    rid = record_example(store, numpy_repo, *QUICK, script=NUMPY_SCRIPT)["run_id"]
    with RunStore(store) as s:
        body = s.manifest(rid).model_dump(mode="json")
    body["run_id"] = rid[:-4] + "0a0a"
    body["outputs"]["artifacts"] = [
        a for a in body["outputs"]["artifacts"] if a["path"] != "out/optimizer.safetensors"
    ]
    body.pop("integrity")
    f = store.parent / "partial.json"
    f.write_text(json.dumps(body))
    assert replay_tui(store, "ingest", str(f)).returncode == 0
    proc = replay_tui(store, "compare", body["run_id"], rid, "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert out["verdict"] == "INCOMPLETE"
    assert any("out/optimizer.safetensors" in m for m in out["missing"])
