"""Issue #39: ``--artifact 'out/**'`` collected no file at all (Python 3.11's glob gives
only folders for a trailing ``**``) while the early output reader matched the files
below it.  One matcher (``door.glob_match``) and one walk (``door.glob_under``) now serve
the collection after the run, the early reader, the stale snapshot and the gap that
names a glob that matched nothing; ``**`` matches every file at every depth.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from replay_tui.capture import stale
from replay_tui.capture.artifacts import artifact_entries
from replay_tui.capture.outputs import EarlyOutputs, _Reach
from replay_tui.door import glob_match, glob_parts, glob_under
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.helpers.commands import RECORD_DEEP_OUTPUTS
from tests.helpers.early import collect
from tests.support.training import make_repo, replay_tui
from tests.support.waiting import wait_until

FILES = (
    "out/top.pt",
    "out/.hidden",
    "out/a/mid.pt",
    "out/a/b/deep.safetensors",
    "out/a/b/c/d/deepest.txt",
    "logs/train.log",
    "logs/2026/run.log",
    "notes.md",
)

GLOBS = (
    "out/**",
    "**",
    "**/*.pt",
    "out/**/*.pt",
    "out/*",
    "out/*/*",
    "out/a/**/d/*",
    "**/b/**",
    "logs/**/*.log",
    "*.md",
    "out/a/b/deep.safetensors",
    "nothing/**",
)


def _tree(root: Path) -> Path:
    for rel in FILES:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rel.encode())
    (root / "out" / "empty").mkdir()
    return root


def test_a_trailing_double_star_matches_every_file_at_every_depth(tmp_path: Path) -> None:
    base = _tree(tmp_path / "w")
    entries = artifact_entries(base, ["out/**"], [], [])
    assert [e["path"] for e in entries] == sorted(f for f in FILES if f.startswith("out/"))
    assert all(e["sha256"] is not None for e in entries)
    assert [m.rel for m in glob_under(base, ("**",))] == sorted(FILES)


@pytest.mark.parametrize("glob", GLOBS)
def test_the_walk_and_the_matcher_agree_on_every_glob(tmp_path: Path, glob: str) -> None:
    """What the collection walks to is exactly what the early reader's matcher accepts
    among the files there: one matcher, whatever the glob."""
    base = _tree(tmp_path / "w")
    pats = glob_parts(glob)
    assert pats is not None
    walked = {m.rel for m in glob_under(base, pats)}
    reach = _Reach.of([glob])
    matched = {f for f in FILES if reach.file(f.split("/"))}
    assert walked == matched == {f for f in FILES if glob_match(f.split("/"), pats)}
    collected = {e["path"] for e in artifact_entries(base, [glob], [], [])}
    assert collected == matched
    # every folder on the way to a match is one the early reader watches
    for f in matched:
        parts = f.split("/")
        assert all(reach.folder(parts[:i]) for i in range(len(parts))), f


def test_fixed_cases_of_the_matcher() -> None:
    def m(path: str, glob: str) -> bool:
        pats = glob_parts(glob)
        assert pats is not None
        return glob_match(path.split("/"), pats)

    assert m("out/a/b/c.pt", "out/**") and m("out/c.pt", "out/**")
    assert m("c.pt", "**/*.pt") and m("a/b/c.pt", "**/*.pt") and not m("a/b/c.ptx", "**/*.pt")
    assert m("a/x/y/b/f", "a/**/b/*") and m("a/b/f", "a/**/b/*") and not m("a/b/c/f", "a/**/b/*")
    assert m("out/.hidden", "out/*") and not m("out/a/b", "out/*")
    assert not m("Out/a", "out/**")  # case counts, as on the filesystem
    for bad in ("/abs/**", "../up/**", "out/../../x", "", ".", "a\x00b"):
        assert glob_parts(bad) is None, bad


def test_the_stale_snapshot_sees_the_files_a_double_star_matches(tmp_path: Path) -> None:
    base = _tree(tmp_path / "w")
    before = stale.snapshot(base, ["out/**"])
    assert sorted(before.files) == sorted(f for f in FILES if f.startswith("out/"))


def test_a_link_is_never_walked_through(tmp_path: Path) -> None:
    base = _tree(tmp_path / "w")
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    (outside / "secret" / "id_rsa").write_bytes(b"key")
    os.symlink(outside, base / "out" / "a" / "link")
    found = {m.rel: m.what for m in glob_under(base, ("out", "**"))}
    assert found["out/a/link"] == "link"
    assert not [r for r in found if r.startswith("out/a/link/")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux only")
def test_the_early_reader_and_the_collection_take_the_same_deep_files(tmp_path: Path) -> None:
    base = tmp_path / "w"
    base.mkdir()
    objects = ObjectStore(tmp_path / "store" / "objects")
    early = EarlyOutputs.start(base, ["out/**"], objects, {})
    assert early is not None
    try:
        assert early.ready.wait(60)
        deep = base / "out" / "a" / "b"
        deep.mkdir(parents=True)
        wait_until(lambda: early.stats.watched >= 4, "the watches down to out/a/b")
        (deep / "w.bin").write_bytes(b"weights" * 100)
        wait_until(lambda: early.stats.read == 1, "the deep file read early")
        early.finish()
        entries, _ = collect(base, ["out/**"], objects, early)
    finally:
        early.close()
    assert [e["path"] for e in entries] == ["out/a/b/w.bin"]
    assert early.stats.taken == 1  # the very file read early is the one collected


def test_record_with_a_double_star_and_a_glob_that_matches_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    script = (
        "import os; os.makedirs('out/ckpt/epoch1', exist_ok=True);"
        "open('out/ckpt/epoch1/model.bin', 'wb').write(b'w' * 64);"
        "open('out/metrics.json', 'w').write('{}')"
    )
    command = ("--", sys.executable, "-c", script)
    proc = replay_tui(store, *RECORD_DEEP_OUTPUTS, "--artifact", "logs/**", *command, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["unmatched"] == ["logs/**"]
    assert "--artifact 'logs/**' matched no file" in proc.stderr
    with RunStore(store) as s:
        m = s.manifest(res["run_id"])
    assert [(a.path, a.sha256 is not None) for a in m.outputs.artifacts] == [
        ("out/ckpt/epoch1/model.bin", True),
        ("out/metrics.json", True),
    ]
    gaps = replay_tui(store, "gaps", res["run_id"], "--json")
    assert gaps.returncode == 0, gaps.stderr
    empty = [g for g in json.loads(gaps.stdout) if g["code"] == "ARTIFACT_GLOB_EMPTY"]
    assert [g["message"] for g in empty] == [
        "artifact glob 'logs/**' matched no file: nothing it names was recorded"
    ]
    assert empty[0]["field"] == "capture.artifact_globs[1]"


def test_a_glob_that_could_leave_the_folder_is_refused_before_the_run(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    marker = tmp_path / "ran"
    proc = replay_tui(
        store,
        "record",
        "--artifact",
        "../outside/**",
        "--",
        sys.executable,
        "-c",
        f"open({str(marker)!r}, 'w').write('ran')",
        cwd=repo,
    )
    assert proc.returncode == 2
    assert "--artifact '../outside/**' must be a relative glob inside the workdir" in proc.stderr
    assert not marker.exists()  # refused before the command ran
