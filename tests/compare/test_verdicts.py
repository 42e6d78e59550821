"""One vocabulary of verdicts and replay statuses: aborted replays never count as evidence.

Real stores (SQLite files), real comparisons and real CLI processes; the replay facts are
written the way the runner writes them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from replay_tui.evidence.export import export_bundle
from replay_tui.gaps import gap_counts
from replay_tui.replay.runner import compare_and_store
from replay_tui.verdicts import counts_as_evidence, summarize
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest, RunCli
from tests.helpers.replays import add_attempt
from tests.support.bundles import replay_of


def _store_with_attempts(
    store_path: Path, make_manifest: MakeManifest, **overrides: Any
) -> tuple[str, list[str]]:
    """An original, three IDENTICAL replays, then a cancelled one whose partial outputs
    compared INCOMPLETE (a failed run), then an interrupted attempt with no replay run."""
    orig = make_manifest(index=0, **overrides)
    reps = [replay_of(orig, make_manifest(index=i)["run_id"]) for i in range(1, 5)]
    reps[-1]["status"] = "interrupted"
    reps[-1]["exit_code"] = 143
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(orig), gaps=gap_counts(manifest_from_data(orig)))
        a = store.manifest(orig["run_id"])
        for i, rep in enumerate(reps):
            store.ingest(manifest_from_data(rep), gaps=gap_counts(manifest_from_data(rep)))
            b = store.manifest(rep["run_id"])
            verdict, _, cid = compare_and_store(store, a, b)
            status = "cancelled" if i == 3 else "completed"
            assert verdict == ("INCOMPLETE" if i == 3 else "IDENTICAL")
            add_attempt(
                store,
                a.run_id,
                status,
                replay_run=b.run_id,
                verdict=verdict,
                comparison_id=cid,
                body={"replay": {"determinism": "recorded"}, "verdict": verdict},
                sets_verdict=counts_as_evidence(status, verdict),
            )
        add_attempt(
            store,
            a.run_id,
            "interrupted",
            reason="interrupted before the replay finished (Ctrl-C)",
            duration_s=0.5,
            body={"reason": "interrupted"},
            sets_verdict=False,
        )
    return orig["run_id"], [r["run_id"] for r in reps]


def test_a_cancelled_replay_leaves_verdict_sli_and_export_unchanged(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli, tmp_path: Path
) -> None:
    run_id, reps = _store_with_attempts(store_path, make_manifest)
    with RunStore(store_path) as store:
        assert store.get_run(run_id).last_verdict == "IDENTICAL"
        summary = summarize(store.replay_outcomes([run_id])[run_id])
        res = export_bundle(store, run_id, tmp_path / "latest")
        chosen = export_bundle(store, run_id, tmp_path / "chosen", replay=reps[0][:13])
    assert summary.text() == "IDENTICAL 3/3, 1 cancelled, 1 interrupted"
    assert res.verdict == "IDENTICAL"  # the latest *completed* replay, not the cancelled one
    doc = json.loads((tmp_path / "latest" / "comparison.json").read_text())
    assert doc["verdict"] == "IDENTICAL" and doc["replay_run"] == reps[2]
    assert "Verdict: IDENTICAL" in (tmp_path / "latest" / "report.md").read_text()
    assert chosen.verdict == "IDENTICAL"
    doc = json.loads((tmp_path / "chosen" / "comparison.json").read_text())
    assert doc["replay_run"] == reps[0]
    stats = cli("stats", "--json")
    assert stats.returncode == 0, stats.stderr
    got = json.loads(stats.stdout)
    assert got["reproducible_run_rate"]["value"] == 1.0
    assert got["metric_variance"]["groups"] > 0  # completed replays feed the variances
    assert got["aborted_replay_rate"]["numerator"] == 2
    assert got["aborted_replay_rate"]["denominator"] == 5


def test_export_replay_option_checks_what_it_names(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli, tmp_path: Path
) -> None:
    run_id, reps = _store_with_attempts(store_path, make_manifest)
    r = cli("export", run_id, "--out", tmp_path / "b", "--replay", reps[3])
    assert r.returncode == 0, r.stderr  # a cancelled replay can be exported on purpose
    assert "verdict: CANCELLED (did not complete: not a verdict)" in r.stdout
    report = (tmp_path / "b" / "report.md").read_text()
    assert "**Verdict: CANCELLED**" in report and "compared INCOMPLETE" in report
    rows = [line for line in report.splitlines() if line.startswith("| ")]
    assert any("| CANCELLED |" in row for row in rows)  # the replays table, same words
    assert any("| INTERRUPTED |" in row for row in rows)
    assert not any("| INCOMPLETE |" in row for row in rows)
    bad = cli("export", run_id, "--out", tmp_path / "c", "--replay", run_id)
    assert bad.returncode == 2
    assert f"is not a replay of {run_id}" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert not (tmp_path / "c").exists()
    missing = cli("export", run_id, "--out", tmp_path / "d", "--replay", "zzzz")
    assert missing.returncode == 2 and "--replay 'zzzz'" in missing.stderr


def test_replay_status_vocabulary() -> None:
    from replay_tui.verdicts import environment_failure, normalize_status, replay_status

    assert replay_status("succeeded", cancel_requested=True, exit_code=0) == "completed"
    assert replay_status("failed", cancel_requested=False, exit_code=1) == "completed"
    # the command finished all its steps while the cancel arrived: completed
    assert replay_status("interrupted", cancel_requested=True, exit_code=0) == "completed"
    assert replay_status("interrupted", cancel_requested=True, exit_code=143) == "cancelled"
    assert replay_status("interrupted", cancel_requested=False, exit_code=130) == "interrupted"
    assert replay_status("timed_out", cancel_requested=False, exit_code=137) == "timed_out"
    assert [normalize_status(x) for x in ("succeeded", "failed", "error", "cancelled")] == [
        "completed",
        "completed",
        "infra-error",
        "cancelled",
    ]
    tail = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n"
    assert environment_failure("failed", tail, "succeeded") == (
        "the replay environment cannot import what the run needs: No module named 'torch'"
    )
    assert environment_failure("failed", "ValueError: nan loss\n", "succeeded") is None
    assert environment_failure("succeeded", tail, "succeeded") is None


def test_a_host_without_torch_is_an_infrastructure_error_not_a_failed_reproduction(
    tmp_path: Path,
) -> None:
    """Recorded where ``python3`` has torch; replayed (local backend) where it does not:
    exit 3, the reason shown even under ``--quiet``, the run's verdict untouched."""
    import os
    import subprocess

    from tests.helpers.repos import commit_repo
    from tests.support.training import replay_tui

    program = "import torch\nprint('step 0 loss 1.0')\n"
    repo = commit_repo(tmp_path / "repo", {"uses_torch.py": program}, "torch")
    store = tmp_path / "store.db"
    # recorded with a python3 of its own (it runs this interpreter, which has torch)
    # that the replay host lacks: the replay runs the host's python3, as it says
    own = tmp_path / "own-bin"
    own.mkdir()
    (own / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (own / "python3").chmod(0o755)
    env = dict(os.environ, PATH=f"{own}:{os.environ.get('PATH', '')}")
    rec = replay_tui(store, "record", "--json", "--", "python3", "uses_torch.py", cwd=repo, env=env)
    assert rec.returncode == 0, rec.stderr[-2000:]
    run_id = json.loads(rec.stdout)["run_id"]
    (own / "python3").unlink()
    bare = dict(os.environ, PATH="/usr/bin:/bin")  # this host's python3 has no torch
    probe = subprocess.run(["python3", "-c", "import torch"], env=bare, capture_output=True)
    assert probe.returncode != 0, "the test needs a python3 on /usr/bin without torch"
    rep = replay_tui(store, "replay", run_id, "--backend", "local", "--quiet", env=bare)
    out = rep.stdout + rep.stderr
    assert rep.returncode == 3, out[-2000:]
    assert "No module named 'torch'" in out
    assert "NOT REPRODUCED" not in out
    with RunStore(store) as s:
        facts = s.replays_of(run_id)
        assert [f.status for f in facts] == ["infra-error"]
        assert s.get_run(run_id).last_verdict is None


def test_an_aborted_replay_is_named_the_same_everywhere() -> None:
    from replay_tui.verdicts import aborted_label, outcome_word

    assert [aborted_label(s) for s in ("completed", "cancelled", "interrupted")] == [
        None,
        "CANCELLED",
        "INTERRUPTED",
    ]
    assert aborted_label("timed_out") == "TIMED OUT"
    assert aborted_label("infra-error") == aborted_label("error") == "INFRA-ERROR"
    assert outcome_word("completed", "DIVERGED") == "DIVERGED"
    assert outcome_word("completed", None) == "INFRA-ERROR"  # as summarize counts it
    assert outcome_word("cancelled", "INCOMPLETE") == "CANCELLED"


def test_a_cancelled_replay_run_says_cancelled_in_the_cli(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli
) -> None:
    """The replay run a cancelled attempt made compared INCOMPLETE; its row says how the
    attempt ended, not INCOMPLETE (which reads as a failed reproduction)."""
    run_id, reps = _store_with_attempts(store_path, make_manifest)
    table = cli("runs", "--wide")
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines()[1:]}
    assert "CANCELLED" in rows[reps[3]] and "INCOMPLETE" not in rows[reps[3]]
    assert "IDENTICAL" in rows[reps[0]]
    assert "IDENTICAL 3/3, 1 cancelled, 1 interrupted" in rows[run_id]
    as_json = {r["id"]: r for r in json.loads(cli("runs", "--json").stdout)}
    assert as_json[reps[3]]["replay_aborted"] == "CANCELLED"
    assert as_json[reps[3]]["last_verdict"] == "INCOMPLETE"  # the stored value, unchanged
    assert "replay_aborted" not in as_json[reps[0]]
    shown = cli("show", run_id)
    assert shown.returncode == 0, shown.stderr
    listed = shown.stdout.split("── replays\n", 1)[1].splitlines()
    # numbered per run, oldest first; each says how it ended in the same words
    assert [ln.split()[0] for ln in listed[:5]] == ["1.", "2.", "3.", "4.", "5."]
    assert "IDENTICAL" in listed[0] and "CANCELLED" in listed[3] and "INTERRUPTED" in listed[4]


def test_a_cancelled_replay_run_in_the_runs_browser_and_dashboard(
    store_path: Path, make_manifest: MakeManifest
) -> None:
    import asyncio

    from textual.widgets import DataTable

    from replay_tui.tui.app import ReplayApp
    from replay_tui.tui.messages import OpenRun
    from replay_tui.tui.screens.dashboard import DashboardScreen
    from replay_tui.tui.screens.runs import RunsScreen
    from tests.support.app import settle

    unseeded = {"seed": None, "python": None, "numpy": None, "torch": None, "cuda": None}
    # every run has a critical gap (SEED_UNKNOWN): the original and its 4 replay runs
    run_id, reps = _store_with_attempts(store_path, make_manifest, randomness=unseeded)

    async def main() -> None:
        app = ReplayApp(store_path)
        async with app.run_test(size=(160, 40)) as pilot:
            await settle(pilot)
            runs = app.screen
            assert isinstance(runs, RunsScreen) and runs.grouped
            status = str(runs.query_one("#status").render())
            # one group shown, and the runs it holds (what the dashboard counts)
            assert "1 of 1 runs (5 with their replays)" in status, status
            await pilot.press("g")  # flat: the replay runs are rows
            await settle(pilot)
            record = runs.table.record(reps[3])
            assert record is not None and record.last_verdict == "CANCELLED"
            assert runs.table.record(reps[0]).last_verdict == "IDENTICAL"  # type: ignore[union-attr]
            await pilot.press("d")
            await settle(pilot)
            dash = app.screen
            assert isinstance(dash, DashboardScreen) and dash.stats is not None
            s = dash.stats
            assert s.critical_total == 5 and s.critical_originals == 1
            caption = str(dash.query_one("#card-critical .caption").render())
            assert "(1 original, 4 replays)" in caption
            shown = {r.id: r.last_verdict for r in s.critical_runs}
            assert shown[reps[3]] == "CANCELLED" and shown[reps[0]] == "IDENTICAL"
            await pilot.press("escape")
            app.post_message(OpenRun(run_id))
            await settle(pilot)
            table = app.screen.query_one("#replays", DataTable)
            numbers = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
            words = [str(table.get_row_at(i)[4]).strip() for i in range(table.row_count)]
            assert numbers == ["1", "2", "3", "4", "5"]  # per run, as `show` numbers them
            assert words == ["IDENTICAL"] * 3 + ["CANCELLED", "INTERRUPTED"]

    asyncio.run(main())


def test_a_drill_run_that_did_not_finish_is_named_like_a_replay() -> None:
    from replay_tui.tui.queries import StoredDrill

    body = {
        "runs": [
            {"status": "reproduced", "verdict": "IDENTICAL"},
            {"status": "error", "verdict": None, "reason": "cancelled"},
            {"status": "error", "reason": "interrupted (SIGINT)"},
            {"status": "error", "reason": "timed_out after 60s"},
            {"status": "error", "reason": "docker daemon unreachable"},
            {"status": "not_reproduced", "verdict": None, "reason": "no commit"},
            {"status": 7, "verdict": ["x"]},  # a malformed entry reads as nothing known
        ]
    }
    drill = StoredDrill.from_row({"id": 1, "created_at": "t", "passed": False, "body": body})
    assert drill.words == [
        "IDENTICAL",
        "CANCELLED",
        "INTERRUPTED",
        "TIMED OUT",
        "INFRA-ERROR",
        "-",  # not reproduced, with no verdict: nothing stands where one would
        "-",
    ]
    assert drill.summary() == "1/7 reproduced"
    assert [i.abort for i in drill.items] == [
        None,
        "cancelled",
        "interrupted",
        "timed_out",
        "infra-error",
        None,
    ]


def test_a_run_whose_replays_all_stopped_has_no_verdict_and_says_why(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli, tmp_path: Path
) -> None:
    orig = make_manifest(index=0)
    with RunStore(store_path) as store:
        store.ingest(manifest_from_data(orig))
        for status in ("interrupted", "timed_out"):
            add_attempt(
                store,
                orig["run_id"],
                status,
                reason=f"{status} before the replay finished",
                body={"reason": status},
                sets_verdict=False,
            )
    r = cli("export", orig["run_id"], "--out", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    assert "verdict: none: 2 replay(s), none completed with a verdict" in r.stdout
    assert "not replayed" not in r.stdout  # it was replayed, twice
    v = cli("verify", tmp_path / "b", "--allow-unsigned")
    assert "verdict none (2 replay(s), none completed with a verdict)" in v.stdout, v.stdout


def test_comparing_a_run_with_its_stopped_replay_is_not_judged(
    store_path: Path, make_manifest: MakeManifest, cli: RunCli
) -> None:
    """`compare RUN REPLAY` where the replay was cancelled: its outputs are partial; the
    comparison says so and exits as the replay did (130), never 1 (not reproduced)."""
    run_id, reps = _store_with_attempts(store_path, make_manifest)
    r = cli("compare", run_id, reps[3])
    assert r.returncode == 130, r.stdout[-2000:]
    assert f"NOT JUDGED: {reps[3]} is a replay that did not complete (CANCELLED)" in r.stdout
    as_json = json.loads(cli("compare", run_id, reps[3], "--json").stdout)
    assert as_json["replay_aborted"] == {"run": reps[3], "ended": "CANCELLED", "exit_code": 130}
    done = cli("compare", run_id, reps[0])  # a completed replay: judged as before
    assert done.returncode == 0 and "NOT JUDGED" not in done.stdout
