"""O2, M1 and W1 of the third trust round: an import is bounded in total, not per file.

Runs written by the real W&B and MLflow clients, then tampered with by hand: a 1.9 GiB
sparse saved file, a 2 GiB sparse ``.wandb`` log, an MLflow metric file of five million
points, two of half a million, a run of 1001 metric files, and imports past their byte
or point budget (``--max-bytes`` / ``REPLAY_TUI_IMPORT_MAX_BYTES``, ``--max-points`` /
``REPLAY_TUI_IMPORT_MAX_POINTS``).  Each test checks what the user sees (exit code and
message: what was wrong, where, the limit and how to raise it) and that nothing of the
refused import is stored (the ledger head, ``objects/``).  Sparse files cost nothing on
disk; everything lives in the test's own temporary folder.  How fast and in how little
memory the refusals come is measured in ``bench/bench_import.py``, not here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.conftest import MakeManifest
from tests.helpers.foreign import seeded_store
from tests.support.tracker_runs import (
    cli,
    ledger_head,
    mlflow_folder_run,
    objects,
    wandb_run,
)

pytestmark = pytest.mark.slow
MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(scope="module")
def wandb_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wandb_run(tmp_path_factory.mktemp("wandb"))


@pytest.fixture(scope="module")
def mlruns(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mlflow_folder_run(tmp_path_factory.mktemp("mlflow"))


def _wandb_case(tmp_path: Path, run: Path) -> tuple[Path, Path]:
    """A copy of the run at ``proj/wandb/<run>``, its saved file's link pointed at a copy
    of the checkpoint in ``proj``; (proj, run folder)."""
    proj = tmp_path / "proj"
    folder = proj / "wandb" / run.name
    shutil.copytree(run, folder, symlinks=True)
    link = folder / "files" / "model.pt"
    shutil.copyfile(os.path.realpath(link), proj / "model.pt")
    link.unlink()
    link.symlink_to(proj / "model.pt")
    return proj, folder


def _nothing_stored(store: Path, head: tuple[int, str] | None) -> None:
    assert ledger_head(store) == head
    assert objects(store) == []


def _refused(store: Path, *args: str | Path, **how: Any) -> str:
    """``replay-tui ARGS`` (an import; ``how``: :func:`cli`'s timeout and extra_env) on
    ``store``: exit 2, nothing stored; its stderr."""
    head = ledger_head(store)
    proc = cli(store, *args, **how)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    _nothing_stored(store, head)
    return str(proc.stderr)


def _mlflow_case(tmp_path: Path, mlruns: Path) -> tuple[Path, Path]:
    """A copy of the ``mlruns/`` folder; (the copy, its one run's folder)."""
    copy = tmp_path / "mlruns"
    shutil.copytree(mlruns, copy, symlinks=True)
    (meta,) = (p for p in copy.glob("*/*/meta.yaml") if p.parent.parent.name != ".trash")
    return copy, meta.parent


def _metric_file(path: Path, points: int) -> None:
    """MLflow's metric file format, ``<ms> <value> <step>`` per line, ``points`` lines."""
    with path.open("wb") as f:
        for start in range(0, points, 100_000):
            f.write(
                b"".join(
                    b"1795848115%03d 0.%06d %d\n" % (i % 1000, i % 999_983, i)
                    for i in range(start, min(points, start + 100_000))
                )
            )


# -- O2: saved files, sparse and over the import's budget -----------------------------------


def test_o2_a_sparse_saved_file_is_refused_not_copied(wandb_folder: Path, tmp_path: Path) -> None:
    """A saved file of 1.9 GiB, nearly all holes: listed refused (a gap) with why, and
    ``objects/`` holds no copy of it (nothing over 1 MiB at all)."""
    proj, folder = _wandb_case(tmp_path, wandb_folder)
    big = proj / "model.pt"
    with big.open("r+b") as f:
        f.truncate(int(1.9 * GiB))
    assert big.stat().st_blocks * 512 < MiB  # sparse: it costs nothing on disk
    store = tmp_path / "store" / "runs.db"
    proc = cli(store, "import", "wandb", folder, "--files-root", proj, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = json.loads(proc.stdout)["runs"]
    assert any(f"saved file {big} is sparse" in r for r in row["refused"]), row["refused"]
    with RunStore(store) as s:
        arts = {a.path: a for a in s.manifest(row["run_id"]).outputs.artifacts}
    assert arts["model.pt"].sha256 is None and arts["model.pt"].size_bytes is None
    assert all(p.stat().st_size < MiB for p in objects(store)), objects(store)
    text = cli(tmp_path / "other" / "runs.db", "import", "wandb", folder, "--files-root", proj)
    assert text.returncode == 0 and f"refused: saved file {big} is sparse" in text.stdout


def test_o2_an_import_past_its_byte_budget_stores_nothing(
    wandb_folder: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """A dense 8 MiB saved file, each file far under its own limit, but the import's files
    together over ``--max-bytes 4MiB``: exit 2 naming the file, the limit and how to raise
    it; nothing stored.  The environment variable does the same; raised, it imports."""
    proj, folder = _wandb_case(tmp_path, wandb_folder)
    big = proj / "model.pt"
    big.write_bytes(os.urandom(8 * MiB))
    store = seeded_store(tmp_path, make_manifest())
    err = _refused(store, "import", "wandb", folder, "--files-root", proj, "--max-bytes", "4MiB")
    assert f"import budget: saved file {big} (8 MiB) would bring this import's files to" in err, err
    assert "the limit is 4 MiB per import: nothing was stored" in err
    assert "--max-bytes" in err and "REPLAY_TUI_IMPORT_MAX_BYTES" in err
    js = cli(
        store, "import", "wandb", folder, "--files-root", proj, "--max-bytes", "4MiB", "--json"
    )
    assert js.returncode == 2 and "import budget" in json.loads(js.stdout)["error"]
    by_env = {"REPLAY_TUI_IMPORT_MAX_BYTES": "4MiB"}
    err = _refused(store, "import", "wandb", folder, "--trust-root", proj, extra_env=by_env)
    assert "the limit is 4 MiB per import" in err
    bad = cli(store, "import", "wandb", folder, "--max-bytes", "lots")
    assert bad.returncode == 2 and "--max-bytes 'lots': not a size" in bad.stderr
    raised = cli(
        store,
        "import",
        "wandb",
        folder,
        "--trust-root",
        proj,
        "--json",
        extra_env={"REPLAY_TUI_IMPORT_MAX_BYTES": "64MiB"},
    )
    assert raised.returncode == 0, raised.stderr[-3000:]
    assert json.loads(raised.stdout)["runs"][0]["refused"] == []
    assert any(p.stat().st_size == 8 * MiB for p in objects(store))


# -- W1: the .wandb log -------------------------------------------------------------------


def test_w1_a_sparse_wandb_log_is_refused_before_it_is_read(
    wandb_folder: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """The run's ``.wandb`` log grown to 2 GiB of holes (within the log's own limit): exit
    2 naming the log as sparse, nothing stored."""
    _proj, folder = _wandb_case(tmp_path, wandb_folder)
    (log,) = folder.glob("run-*.wandb")
    with log.open("r+b") as f:
        f.truncate(2 * GiB)
    store = seeded_store(tmp_path, make_manifest())
    err = _refused(store, "import", "wandb", folder, timeout=300)
    assert f"W&B log {log} is sparse" in err, err[-3000:]
    assert "MemoryError" not in err and "Traceback" not in err


def test_w1_a_wandb_import_past_its_point_budget_stores_nothing(
    wandb_folder: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """The run's histories (two steps of ``loss`` and ``half``) over ``--max-points 3``:
    the log's reading stops there, exit 2 naming the limit and how to raise it."""
    _proj, folder = _wandb_case(tmp_path, wandb_folder)
    store = seeded_store(tmp_path, make_manifest())
    err = _refused(store, "import", "wandb", folder, "--max-points", "3")
    assert "more than 3 points; the limit is 3 points per import" in err, err
    assert "--max-points" in err and "REPLAY_TUI_IMPORT_MAX_POINTS" in err
    ok = cli(store, "import", "wandb", folder, "--max-points", "4")
    assert ok.returncode == 0, ok.stderr[-3000:]


# -- M1: MLflow metric files --------------------------------------------------------------


def test_m1_a_five_million_point_metric_file_is_refused_as_a_stream(
    mlruns: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """``metrics/loss`` of five million points (129 MB, under the metric file's 256 MiB
    limit): refused before the client opens the store, naming the file and the limit."""
    copy, run = _mlflow_case(tmp_path, mlruns)
    loss = run / "metrics" / "loss"
    _metric_file(loss, 5_000_000)
    assert 120_000_000 < loss.stat().st_size < 256 * MiB
    store = seeded_store(tmp_path, make_manifest())
    err = _refused(store, "import", "mlflow", copy, timeout=300)
    assert (
        f"tracker metric file {loss} holds more than 200000 points; the limit for one"
        " metric's history is 200000: nothing was stored" in err
    ), err[-3000:]
    assert "MemoryError" not in err and "Traceback" not in err


def test_m1_two_long_metric_files_and_too_many_metric_files_are_refused(
    mlruns: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """Two files of 500 000 points each: refused at the first, naming it; a run of 1001
    metric files (one point each): refused naming the count and the limit."""
    copy, run = _mlflow_case(tmp_path, mlruns)
    for name in ("loss", "lr_now"):
        _metric_file(run / "metrics" / name, 500_000)
    store = seeded_store(tmp_path, make_manifest())
    err = _refused(store, "import", "mlflow", copy, timeout=300)
    assert f"tracker metric file {run / 'metrics' / 'loss'} holds more than 200000" in err, err

    many, run2 = _mlflow_case(tmp_path / "many", mlruns)
    for i in range(1001 - len(list((run2 / "metrics").iterdir()))):
        (run2 / "metrics" / f"m{i:04d}").write_bytes(b"1795848115276 0.5 0\n")
    err = _refused(store, "import", "mlflow", many, timeout=300)
    assert f"MLflow run {run2} has 1001 metric files; the limit for one run is 1000" in err, err


def test_m1_a_sparse_metric_file_and_the_point_budget(
    mlruns: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """A metric file of 200 MiB of holes is refused as sparse; the run's four points over
    ``--max-points 3`` (or ``REPLAY_TUI_IMPORT_MAX_POINTS=3``) stop the import, naming the
    limit; at 4 it imports."""
    copy, run = _mlflow_case(tmp_path, mlruns)
    loss = run / "metrics" / "loss"
    keep = loss.read_bytes()
    with loss.open("r+b") as f:
        f.truncate(200 * MiB)
    store = seeded_store(tmp_path, make_manifest())
    err = _refused(store, "import", "mlflow", copy, timeout=300)
    assert f"tracker metric file {loss} is sparse" in err, err[-3000:]
    loss.write_bytes(keep)
    for how in (
        {"args": ("--max-points", "3"), "env": {}},
        {"args": (), "env": {"REPLAY_TUI_IMPORT_MAX_POINTS": "3"}},
    ):
        err = _refused(store, "import", "mlflow", copy, *how["args"], extra_env=how["env"])
        assert "more than 3 points; the limit is 3 points per import" in err
        assert "--max-points" in err
    # the copy's meta.yaml still names the original's artifacts: that folder is named
    ok = cli(store, "import", "mlflow", copy, "--max-points", "4", "--trust-root", mlruns)
    assert ok.returncode == 0, ok.stderr[-3000:]


def _framed(records: list[bytes]) -> bytes:
    """``records`` framed as W&B's transaction log: the 7-byte header, then 32 KiB blocks
    of checksummed chunks (full, or first/middle/last across blocks), as the real client
    writes it."""
    import struct
    import zlib

    out = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    for data in records:
        rest, first = memoryview(data), True
        while True:
            left = 32768 - len(out) % 32768
            if left < 7:
                out += b"\0" * left
                continue
            body, rest = rest[: left - 7], rest[left - 7 :]
            kind = (1 if first else 4) if not len(rest) else (2 if first else 3)
            crc = zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF
            out += struct.pack("<IHB", crc, len(body), kind) + body
            first = False
            if not len(rest):
                break
    return bytes(out)


def test_w1_a_wandb_history_past_its_limit_stops_the_log_s_reading(
    wandb_folder: Path, tmp_path: Path, make_manifest: MakeManifest
) -> None:
    """The real run's records (decoded by the wandb package) with 200 001 more history
    rows of ``loss`` appended, framed as W&B frames them: the stream stops at the
    history limit, exit 2 naming the metric and the limit; nothing stored."""
    from wandb.proto import wandb_internal_pb2 as pb

    from replay_tui.importers.wandb import find_log, read_records

    _proj, folder = _wandb_case(tmp_path, wandb_folder)
    log = find_log(folder)
    records = [r.SerializeToString() for r in read_records(log)]
    row = pb.Record()
    for step in range(100, 100 + 200_001):
        del row.history.item[:]
        row.history.item.add(key="_step", value_json=str(step))
        row.history.item.add(key="loss", value_json="0.25")
        records.append(row.SerializeToString())
    log.write_bytes(_framed(records))
    assert len(list(read_records(log))) == len(records)  # framed as the reader expects
    store = seeded_store(tmp_path, make_manifest())
    err = _refused(store, "import", "wandb", folder, timeout=300)
    assert (
        f"{log}: metric 'loss' has more than 200000 points; the limit for one metric's"
        " history is 200000" in err
    ), err[-3000:]
