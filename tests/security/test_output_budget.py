"""Item 4 of the third trust issue (#36), attack O2: an 8 GiB sparse output of a Docker
replay was copied densely into ``objects/`` (8.1 GB of disk), and a run's outputs had
limits per file only, none in total.

Now the door refuses a sparse file (``door.sparse_measure``: its blocks, confirmed by
``SEEK_DATA``/``SEEK_HOLE``) for every reader, and a run's outputs have a total byte
budget (``--output-budget`` on ``record``, ``REPLAY_TUI_OUTPUT_BUDGET`` for record and
replay, 64 GiB by default).  A refused output is listed without a hash (a gap), its bytes
are never copied, and the run itself is kept: what the run did (its log, metrics, the
other outputs) is still worth having, and the user is told which file was refused, what
the limit is and how to raise it.

The attacks run real commands: ``record`` on this machine, and ``record --image`` and a
Docker replay in the real engine.  The sparse files cost nothing on disk; a small budget
set by the flag or the variable shows the total with a few MiB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replay_tui import door
from replay_tui.door import Refused
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.helpers.commands import RECORD_OUTPUTS
from tests.support.training import cli_env, git, make_repo, replay_tui

GiB = 1 << 30
MiB = 1 << 20
PART = 256 * 1024

WRITER = """\
import os, sys
os.makedirs("out", exist_ok=True)
sparse, parts = int(sys.argv[1]), int(sys.argv[2])
if sparse:
    with open("out/big.bin", "wb") as f:
        f.truncate(sparse)  # a length with no bytes behind it
for i in range(parts):
    with open(f"out/part-{i:03d}.bin", "wb") as f:
        f.write(bytes([i % 256]) * 262144)
with open("out/ok.txt", "w") as f:
    f.write("ok")
print("wrote", sparse, parts, flush=True)
"""


def _repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "repo")
    (repo / "writer.py").write_text(WRITER)
    git(repo, "add", "writer.py")
    git(repo, "commit", "-q", "-m", "writer")
    return repo


def _record_writer(
    store: Path, repo: Path, big: str, parts: str, *flags: str
) -> subprocess.CompletedProcess[str]:
    """``record`` (outputs ``out/*``, then ``flags``) of this interpreter running
    ``writer.py BIG PARTS`` in ``repo``."""
    command = ("--", sys.executable, "writer.py", big, parts)
    return replay_tui(store, *RECORD_OUTPUTS, *flags, *command, cwd=repo, timeout=300)


def _on_disk(objects: ObjectStore) -> tuple[int, int, list[str]]:
    """Bytes the object store really holds on disk, the objects' lengths, and any staged
    copy left behind."""
    if not objects.root.exists():
        return 0, 0, []
    disk = size = 0
    staged = []
    for p in objects.root.rglob("*"):
        st = p.lstat()
        if p.is_file():
            disk += st.st_blocks * 512
            size += st.st_size
            if p.name.startswith(".put."):
                staged.append(p.name)
    return disk, size, staged


def _sparse_file(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)
    return path


# -- the door -------------------------------------------------------------------------


def test_the_door_refuses_a_sparse_file_for_every_reader(tmp_path: Path) -> None:
    big = _sparse_file(tmp_path / "d" / "big.bin", 8 * GiB)
    with pytest.raises(Refused) as e, door.open_under(tmp_path / "d", "big.bin", "run output"):
        pass
    assert str(e.value) == (
        f"run output {big} is sparse: 8 GiB long with only 0 bytes written (the rest are"
        " holes); a sparse file is refused, since reading or copying it would take all 8 GiB"
    )
    # a user-named file and a scanned import folder alike (under their size limits)
    small = _sparse_file(tmp_path / "d2" / "meta.yaml", 32 * MiB)
    with pytest.raises(Refused, match="is sparse: 32 MiB long"):
        door.read_named(small, "tracker file")
    with pytest.raises(Refused, match=r"tracker file .*meta\.yaml is sparse"):
        door.scan_tree(tmp_path / "d2", lambda rel: "tracker file", "MLflow folder")
    # a half-written file: 3 MiB of data, then 1 MiB of hole at the end, is no sparse file
    half = tmp_path / "d3" / "half.bin"
    half.parent.mkdir()
    with half.open("wb") as f:
        f.write(b"x" * (3 * MiB))
        f.truncate(4 * MiB)
    assert len(door.read_under(tmp_path / "d3", "half.bin", "run output")) == 4 * MiB
    # a small file with a hole is never called sparse (files under SPARSE_MIN)
    _sparse_file(tmp_path / "d4" / "tiny.bin", door.SPARSE_MIN - 1)
    assert len(door.read_under(tmp_path / "d4", "tiny.bin", "run output")) == door.SPARSE_MIN - 1
    # a dense file of the same length as a refused one is read
    dense = tmp_path / "d5" / "dense.bin"
    dense.parent.mkdir()
    dense.write_bytes(b"\0" * (2 * MiB))
    assert door.sparse_measure(os.open(dense, os.O_RDONLY)) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux only")
def test_the_early_reader_stages_no_more_than_the_budget_and_no_sparse_file(
    tmp_path: Path,
) -> None:
    """While the run runs, outputs are copied as they close: never past the budget in
    all, and a sparse file not at all (the door refuses it)."""
    from replay_tui.capture.outputs import EarlyOutputs
    from tests.support.waiting import wait_until

    work = tmp_path / "w"
    (work / "out").mkdir(parents=True)
    objects = ObjectStore(tmp_path / "store" / "objects")
    early = EarlyOutputs.start(work, ["out/*"], objects, {}, budget=MiB)
    assert early is not None
    try:
        assert early.ready.wait(60)
        _sparse_file(work / "out" / "big.bin", 8 * GiB)
        for i in range(8):
            (work / "out" / f"part-{i}.bin").write_bytes(bytes([i]) * PART)
        wait_until(lambda: early.stats.read + early.stats.skipped == 9, "every close seen")
        assert early.stats.read == 4 and early.stats.skipped == 5
        staged = [p for p in objects.root.iterdir() if p.name.startswith(".put.")]
        assert sum(p.stat().st_size for p in staged) == 4 * PART  # within the 1 MiB
        assert _on_disk(objects)[0] <= MiB + 64 * 1024
    finally:
        early.close()
    assert _on_disk(objects)[2] == []  # dropped: nothing was taken


# -- record, on this machine ----------------------------------------------------------


def test_record_refuses_a_sparse_output_and_copies_nothing_of_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    store = tmp_path / "store" / "runs.db"
    proc = _record_writer(store, repo, str(8 * GiB), "0")
    assert proc.returncode == 0, proc.stderr[-3000:]  # the command's own exit code
    res = json.loads(proc.stdout)
    why = (
        f"out/big.bin: run output {repo / 'out' / 'big.bin'} is sparse: 8 GiB long with only"
        " 0 bytes written"
    )
    assert f"replay-tui: refused: {why}" in proc.stderr
    assert any(r.startswith(why) for r in res["refused"])
    disk, size, staged = _on_disk(ObjectStore.beside(store))
    assert disk < MiB and size < MiB and staged == []  # nothing dense in objects/
    # the run is kept, with the refusal as its gap: the other output is hashed and kept
    with RunStore(store) as s:
        (rec,) = s.list_runs()
        arts = {a.path: a for a in s.manifest(rec.id).outputs.artifacts}
    assert arts["out/big.bin"].sha256 is None and arts["out/big.bin"].size_bytes is None
    assert arts["out/ok.txt"].sha256 is not None
    gaps = replay_tui(store, "gaps", rec.id)
    assert "artifact out/big.bin has no hash" in gaps.stdout


def test_record_stops_at_the_total_budget_set_by_the_flag(tmp_path: Path) -> None:
    """40 files of 256 KiB (10 MiB) and ``ok.txt`` under a 2 MiB budget: taken by path
    while they fit (``ok.txt``, then 7 parts), every other one listed unhashed and never
    copied, and the user told which, the budget, who set it and how to raise it."""
    repo = _repo(tmp_path)
    store = tmp_path / "store" / "runs.db"
    proc = _record_writer(store, repo, "0", "40", "--output-budget", "2MiB")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout)
    first = (
        "replay-tui: refused: out/part-007.bin: not hashed or kept: its 256 KiB would bring"
        " this run's outputs 2 bytes past the output budget of 2 MiB (set by"
        " --output-budget); raise it with --output-budget SIZE or REPLAY_TUI_OUTPUT_BUDGET=SIZE"
    )
    assert first in proc.stderr, proc.stderr[-3000:]
    # 33 parts refused: 10 said one by one, the rest in one line
    assert proc.stderr.count("past the output budget of 2 MiB (set by") == 10
    assert (
        "and 23 more output(s) past the output budget of 2 MiB (8.2 MiB refused in all):"
        " listed unhashed, never copied; raise it with --output-budget SIZE" in proc.stderr
    )
    _, size, staged = _on_disk(ObjectStore.beside(store))
    assert size == 7 * PART + 2 and staged == []  # within the budget, not a byte more
    with RunStore(store) as s:
        (rec,) = s.list_runs()
        arts = {a.path: a.sha256 for a in s.manifest(rec.id).outputs.artifacts}
    kept = sorted(p for p, sha in arts.items() if sha is not None)
    assert kept == ["out/ok.txt", *(f"out/part-{i:03d}.bin" for i in range(7))]
    assert len(arts) == 41 and res["run_id"] == rec.id


def test_the_budget_from_the_environment_and_a_bad_size(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    store = tmp_path / "store" / "runs.db"
    env = cli_env()
    env["REPLAY_TUI_OUTPUT_BUDGET"] = "1MiB"
    argv = ["record", "--artifact", "out/*", "--", sys.executable, "writer.py", "0", "8"]
    proc = replay_tui(store, *argv, cwd=repo, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "past the output budget of 1 MiB (set by REPLAY_TUI_OUTPUT_BUDGET); raise it with"
        " --output-budget SIZE or REPLAY_TUI_OUTPUT_BUDGET=SIZE" in proc.stderr
    )
    assert _on_disk(ObjectStore.beside(store))[1] == 3 * PART + 2  # ok.txt and 3 parts
    # a budget that is no size is refused before anything runs or is stored
    store2 = tmp_path / "store2" / "runs.db"
    for bad_env, flag in (("lots", []), ("1MiB", ["--output-budget", "-3"])):
        env["REPLAY_TUI_OUTPUT_BUDGET"] = bad_env
        argv = ["record", *flag, "--artifact", "out/*", "--", sys.executable, "-c", "1/0"]
        proc = replay_tui(store2, *argv, cwd=repo, env=env)
        assert proc.returncode == 2, proc.stderr
        assert "is not a size" in proc.stderr and "ZeroDivisionError" not in proc.stderr
        shown = "REPLAY_TUI_OUTPUT_BUDGET 'lots'" if not flag else "--output-budget '-3'"
        assert shown in proc.stderr
    assert not store2.exists() or not RunStore(store2).list_runs()


# -- in the real Docker engine --------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
def test_a_docker_replay_refuses_a_sparse_output_and_stops_at_the_budget(
    image: str, tmp_path: Path
) -> None:
    """O2 as it was found: the program writes an 8 GiB sparse file (and 40 parts of
    256 KiB) into its output in the container.  ``record --image`` and the Docker replay
    both refuse the sparse file; the replay, under a 2 MiB budget from the variable,
    keeps ``ok.txt`` and 7 parts and lists the rest unhashed.  Nothing dense lands in
    ``objects/``."""
    repo = _repo(tmp_path)
    store = tmp_path / "store" / "runs.db"
    proc = replay_tui(
        store,
        "record",
        "--json",
        "--image",
        image,
        "--output-budget",
        "64MiB",
        "--artifact",
        "out/*",
        "--",
        "python3",
        "writer.py",
        str(8 * GiB),
        "40",
        cwd=repo,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rid = json.loads(proc.stdout)["run_id"]
    assert "refused: out/big.bin: run output" in proc.stderr
    assert "is sparse: 8 GiB long with only 0 bytes written" in proc.stderr
    objects = ObjectStore.beside(store)
    disk, size, staged = _on_disk(objects)
    assert size == 40 * PART + 2 and disk < 40 * PART + MiB and staged == []

    env = cli_env()
    env["REPLAY_TUI_OUTPUT_BUDGET"] = "2MiB"
    proc = replay_tui(store, "replay", rid, env=env, timeout=900)
    seen = proc.stdout + proc.stderr
    assert "Traceback" not in seen, seen[-3000:]
    assert "refused: out/big.bin: run output" in seen and "is sparse: 8 GiB long" in seen
    assert (
        "refused: out/part-007.bin: not hashed or kept: its 256 KiB would bring this run's"
        " outputs 2 bytes past the output budget of 2 MiB (set by"
        " REPLAY_TUI_OUTPUT_BUDGET); raise it with --output-budget SIZE or"
        " REPLAY_TUI_OUTPUT_BUDGET=SIZE" in seen
    ), seen[-3000:]
    # the replay could not be checked in full: said so, never a reproduction
    assert proc.returncode == 1, seen[-3000:]
    assert "INCOMPLETE" in seen
    disk, size2, staged = _on_disk(objects)
    assert size2 == size and disk < 40 * PART + MiB and staged == []  # the same bytes
    with RunStore(store) as s:
        (rep,) = [r for r in s.list_runs() if r.id != rid]
        arts = {a.path: a.sha256 for a in s.manifest(rep.id).outputs.artifacts}
    kept = sorted(p for p, sha in arts.items() if sha)
    assert kept == ["out/ok.txt", *(f"out/part-{i:03d}.bin" for i in range(7))]
    assert arts["out/big.bin"] is None and arts["out/part-007.bin"] is None


def test_a_local_replay_stops_at_the_budget_set_by_its_flag(tmp_path: Path) -> None:
    """``replay --output-budget``: the same 40 files replayed under 2 MiB (the original,
    recorded with the default budget, kept them all): the replay takes what fits, lists
    the rest unhashed (INCOMPLETE, never a silent pass) and names the flag that raises it."""
    repo = _repo(tmp_path)
    store = tmp_path / "store" / "runs.db"
    proc = _record_writer(store, repo, "0", "40")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rid = json.loads(proc.stdout)["run_id"]
    before = _on_disk(ObjectStore.beside(store))[1]
    bad = replay_tui(store, "replay", rid, "--backend", "local", "--output-budget", "2 lots")
    assert bad.returncode == 2 and "--output-budget" in bad.stderr, bad.stderr[-2000:]
    rep = replay_tui(
        store,
        "replay",
        rid,
        "--backend",
        "local",
        "--output-budget",
        "2MiB",
        "--quiet",
        timeout=300,
    )
    assert rep.returncode == 1, rep.stdout[-3000:] + rep.stderr[-3000:]
    said = rep.stdout + rep.stderr
    assert "INCOMPLETE" in said and "NOT REPRODUCED" in said
    assert "past the output budget of 2 MiB (set by --output-budget)" in said, said[-3000:]
    assert "raise it with --output-budget SIZE" in said
    assert _on_disk(ObjectStore.beside(store))[1] == before  # the same bytes: nothing new
