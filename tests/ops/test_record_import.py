"""``ops.record`` and ``ops.importing``: the record and import use cases the CLI calls,
over a real SQLite store, a real git repository and a real recorded process, and an
``mlruns/`` folder the real MLflow client wrote."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from replay_tui.capture.options import RecordOptions
from replay_tui.errors import BadInput
from replay_tui.importers import OverBudget
from replay_tui.ops.importing import import_tracker_runs
from replay_tui.ops.record import record_run
from storage.store import RunStore
from tests.support.tracker_runs import mlflow_folder_run
from tests.support.training import program_repo

PROGRAM = """\
import pathlib, sys
pathlib.Path("out").mkdir(exist_ok=True)
pathlib.Path("out/result.txt").write_text("42\\n")
print("step 1 loss=0.5")
sys.exit(3)
"""


def test_a_recorded_command_ends_with_its_own_exit_code_and_says_its_gaps(
    tmp_path: Path,
) -> None:
    repo = program_repo(tmp_path / "repo", {"prog.py": PROGRAM})
    db = tmp_path / "store" / "runs.db"
    db.parent.mkdir()
    lines: list[str] = []
    opened: list[RunStore] = []

    def opener() -> RunStore:
        opened.append(RunStore(db))
        return opened[-1]

    opts = RecordOptions(
        argv=[sys.executable, "prog.py"],
        cwd=repo,
        artifacts=["out/*", "nothing/*.pt"],
    )
    done = record_run(opts, db, opener, on_line=lines.append)
    try:
        assert len(opened) == 1  # opened once, after the command ended
        stored = opened[0].manifest(done.run_id)
    finally:
        for s in opened:
            s.close()
    assert done.exit_code == 3 and done.status == "failed"
    assert done.run_id == done.manifest.run_id == stored.run_id
    assert stored.integrity.manifest_sha256 == done.manifest.integrity.manifest_sha256
    assert [a.path for a in stored.outputs.artifacts] == ["out/result.txt"]
    assert done.unmatched == ("nothing/*.pt",) and done.refused == ()
    assert done.log_path.is_file() and "step 1 loss=0.5" in done.log_path.read_text()
    assert any("step 1 loss=0.5" in line for line in lines)


@pytest.mark.slow
def test_an_import_counts_what_it_stored_and_a_second_keeps_it_as_it_was(
    tmp_path: Path,
) -> None:
    mlruns = mlflow_folder_run(tmp_path / "tracker")
    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        with pytest.raises(OverBudget, match="the limit is 1 bytes") as over:
            import_tracker_runs(store, "mlflow", str(mlruns), max_bytes="1")
        assert over.value.exit_code == 2 and store.list_runs() == []  # nothing stored
        first = import_tracker_runs(store, "mlflow", str(mlruns))
        again = import_tracker_runs(store, "mlflow", str(mlruns), said_as="the tracker")
        runs = len(store.list_runs())
    assert (first.imported, first.already, first.skipped, first.exit_code) == (1, 0, 0, 0)
    assert first.tracker == "mlflow" and first.source == str(mlruns)
    (o,) = first.outcomes
    assert o.status == "imported" and o.run_id is not None
    assert (again.imported, again.already, again.skipped) == (0, 1, 0)
    assert again.outcomes[0].run_id == o.run_id and again.source == "the tracker"
    assert runs == 1


def test_an_import_refuses_a_budget_that_is_no_size_before_it_reads_anything(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        with pytest.raises(BadInput, match="--max-bytes 'lots'"):
            import_tracker_runs(store, "mlflow", str(tmp_path / "none"), max_bytes="lots")
        assert store.list_runs() == []
