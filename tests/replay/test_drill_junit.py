"""``drill --junit FILE``: a real drill's report, read back by ``junitparser`` (what CI
dashboards read), on the local backend (the real runs ``tests.replay.test_drill`` records
once: two of the numpy-only trainer that reproduce, one of the torch example that does not)
and the docker backend (the real engine, training image and torch example; a missing engine
is a failure, never a skip)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml, Properties, Skipped, TestCase, TestSuite

from replay_tui.replay.drill import DrillItem, DrillReport, candidates, pick_runs
from replay_tui.replay.junit import junit_xml
from storage.store import RunStore
from tests.replay.test_drill import _cli, _fresh_copy, recorded  # noqa: F401 (fixture)
from tests.support.training import QUICK, make_repo, record_in_image, replay_tui


def _suite(path: Path) -> TestSuite:
    xml = JUnitXml.fromfile(str(path))
    (suite,) = list(xml)
    assert isinstance(suite, TestSuite)
    return suite


def _cases(suite: TestSuite) -> dict[str, TestCase]:
    return {c.name: c for c in suite}


def _props(element: TestCase | TestSuite) -> dict[str, str]:
    props = element.child(Properties)
    return {p.name: p.value for p in props} if props is not None else {}


def _check_against_json(suite: TestSuite, out: dict[str, object]) -> None:
    """Every drilled run is one case, passed / failed / skipped as the drill says."""
    runs = out["runs"]
    assert isinstance(runs, list)
    assert suite.tests == len(runs) and suite.errors == 0
    assert suite.failures == sum(1 for r in runs if r["status"] == "not_reproduced")
    assert suite.skipped == sum(1 for r in runs if r["status"] == "error")
    assert _props(suite)["drill_id"] == str(out["drill_id"])
    assert _props(suite)["outcome"] in ("PASSED", "FAILED", "CANCELLED", "INTERRUPTED")
    cases = list(suite)
    for run, case in zip(runs, cases, strict=True):
        assert run["run_id"] in case.name
        assert case.time == pytest.approx(run["duration_s"], abs=1e-3)
        props = _props(case)
        assert props["run_id"] == run["run_id"] and props["status"] == run["status"]
        if run["status"] == "reproduced":
            assert case.is_passed and props["verdict"] == run["verdict"]
        elif run["status"] == "not_reproduced":
            (fail,) = case.result
            assert isinstance(fail, Failure) and not case.is_passed
            assert fail.type == (run["verdict"] or "NOT_REPLAYABLE")
            assert run["reason"] and fail.message == run["reason"]
        else:
            (skip,) = case.result
            assert isinstance(skip, Skipped) and case.is_skipped and not case.is_passed
            assert run["reason"] and run["reason"] in (skip.message or "")


@pytest.mark.slow
def test_local_drill_writes_one_case_per_run_with_its_verdict(
    recorded: tuple[Path, list[str]],  # noqa: F811
    tmp_path: Path,
) -> None:
    store = _fresh_copy(recorded, tmp_path)
    report = tmp_path / "drill.xml"
    r = _cli(
        store, "drill", "--backend", "local", "--pick", "oldest", "--count", "3",
        "--junit", str(report), "--quiet", "--json",
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr  # the unseeded-noise run did not reproduce
    out = json.loads(r.stdout)
    suite = _suite(report)
    _check_against_json(suite, out)
    assert suite.tests == 3 and suite.failures == 1 and suite.skipped == 0
    noisy = next(c for c in suite if recorded[1][2] in c.name)
    (fail,) = noisy.result
    assert fail.type == "DIVERGED" and fail.message
    assert "verdict: DIVERGED" in (noisy.system_out or "")
    assert sum(1 for c in suite if c.is_passed) == 2


@pytest.mark.slow
def test_an_aborted_replay_is_skipped_with_its_reason_never_passed(
    recorded: tuple[Path, list[str]],  # noqa: F811
    tmp_path: Path,
) -> None:
    store = _fresh_copy(recorded, tmp_path)
    report = tmp_path / "drill.xml"
    # the torch example's run: its torch start alone outlasts the timeout, where the
    # numpy-only trainer's whole run may not
    torch_run = recorded[1][2]
    with RunStore(store) as s:
        cands = candidates(s)
    seed = next(n for n in range(1000) if pick_runs(cands, 1, "random", n) == [torch_run])
    r = _cli(
        store, "drill", "--backend", "local", "--count", "1", "--seed", str(seed),
        "--timeout", "0.1", "--junit", str(report), "--quiet", "--json",
    )  # fmt: skip
    out = json.loads(r.stdout)
    assert r.returncode == 3, r.stdout + r.stderr
    suite = _suite(report)
    _check_against_json(suite, out)
    (case,) = list(suite)
    (skip,) = case.result
    assert isinstance(skip, Skipped) and skip.message.startswith("TIMED OUT")
    assert suite.skipped == 1 and suite.failures == 0 and not case.is_passed


def test_a_bad_junit_path_is_refused_before_the_drill_runs(
    recorded: tuple[Path, list[str]],  # noqa: F811
    tmp_path: Path,
) -> None:
    store = _fresh_copy(recorded, tmp_path)
    r = _cli(store, "drill", "--junit", str(tmp_path / "no" / "such" / "x.xml"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = _cli(store, "drill", "--junit", str(tmp_path))
    assert r.returncode == 2 and "is a directory" in r.stderr


def test_hostile_reasons_stay_well_formed_xml(tmp_path: Path) -> None:
    """A reason comes from a run's own output: control characters, markup and quotes in
    it never break the XML (escaped, and read back as the text it was)."""
    evil = 'bad \x1b[31m</failure><x a="1"> & \x00 end'
    rep = DrillReport("oldest", None, None, 2, "local", 2, "2026-01-01T00:00:00.000Z")
    rep.items += [
        DrillItem("r1", "<n>", "not_reproduced", "DIVERGED", "x", 1, evil, 1.5),
        DrillItem("r2", "n2", "error", None, None, None, evil, 0.5, "interrupted"),
    ]
    path = tmp_path / "j.xml"
    path.write_bytes(junit_xml(rep))
    suite = _suite(path)
    one, two = list(suite)
    assert one.name == "<n> (r1)"
    (fail,) = one.result
    assert "</failure>" in fail.message and "\\x1b" in fail.message and "\x1b" not in fail.message
    (skip,) = two.result
    assert isinstance(skip, Skipped) and skip.message.startswith("INTERRUPTED: bad")


# -- the docker backend ------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
def test_docker_drill_report(tmp_path: Path) -> None:
    image = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    if not image:
        pytest.fail("REPLAY_TUI_TRAIN_IMAGE unset (run scripts/docker-env.sh, source its env)")
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    run = record_in_image(
        store, repo, image, "train_mlp.py", "--data", "data/train.npz", "--seed", "1", *QUICK
    )
    report = tmp_path / "drill.xml"
    proc = replay_tui(
        store, "drill", "--backend", "docker", "--count", "1", "--junit", report, "--json",
        "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    out = json.loads(proc.stdout)
    suite = _suite(report)
    _check_against_json(suite, out)
    (case,) = list(suite)
    assert run in case.name and case.is_passed and case.classname == "replay-tui.drill.docker"
    assert _props(case)["verdict"] in ("IDENTICAL", "EQUIVALENT")
