"""Item 1 and 5 of the trust issue: what a run leaves in its output is never trusted.

The attacks run real commands through the real launcher (``replay-tui record``): the
command writes symbolic links to host files, special files and a hostile SDK handoff
file into its output, as code inside a replay container would.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from replay_tui.capture.artifacts import artifact_entries
from replay_tui.capture.handoff import read_inside
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.helpers.commands import RECORD_OUTPUTS
from tests.support.training import make_repo, replay_tui

SECRET = b"root:$6$not-a-real-hash:19000:0:99999:7:::\n"


def _record(store: Path, repo: Path, script: str, *extra: str) -> dict[str, object]:
    command = ("--", sys.executable, "-c", script)
    proc = replay_tui(store, *RECORD_OUTPUTS, *extra, *command, cwd=repo, timeout=120)
    assert proc.stdout, proc.stderr
    out: dict[str, object] = json.loads(proc.stdout)
    out["_rc"] = proc.returncode
    out["_stderr"] = proc.stderr
    return out


def test_symlinks_in_the_output_are_not_followed_hashed_or_kept(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    secret = tmp_path / "host-secret"
    secret.write_bytes(SECRET)
    secret_dir = tmp_path / "host-dir"
    secret_dir.mkdir()
    (secret_dir / "id_ed25519").write_bytes(SECRET)
    script = (
        "import os; os.makedirs('out', exist_ok=True);"
        f"os.symlink({str(secret)!r}, 'out/model.pt');"
        f"os.symlink({str(secret_dir)!r}, 'out/keys');"
        "os.symlink('model.pt', 'out/alias.pt');"
        "os.mkfifo('out/pipe');"
        "open('out/real.txt', 'w').write('fine')"
    )
    res = _record(store, repo, script, "--artifact", "out/keys/*")
    assert res["_rc"] == 0, res["_stderr"]
    with RunStore(store) as s:
        m = s.manifest(str(res["run_id"]))
    arts = {a.path: a for a in m.outputs.artifacts}
    # the real file is hashed; every link and the FIFO are listed without a hash
    assert arts["out/real.txt"].sha256 is not None
    for bad in ("out/model.pt", "out/alias.pt", "out/pipe", "out/keys"):
        assert bad in arts and arts[bad].sha256 is None, bad
    # the linked folder is never listed through the link: not even the names in it (a
    # host folder's file names) reach the manifest
    assert not [p for p in arts if p.startswith("out/keys/")]
    assert "out/keys: out/keys is a symbolic link" in str(res["_stderr"])
    # the host secret's bytes are nowhere in the object store
    objects = ObjectStore.beside(store)
    import hashlib

    assert objects.get(hashlib.sha256(SECRET).hexdigest()) is None
    for path in objects.root.rglob("*"):
        if path.is_file():
            assert path.read_bytes() != SECRET
            assert stat.S_IMODE(path.stat().st_mode) == 0o400
        else:
            assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE(objects.root.stat().st_mode) == 0o700
    # and the user is told: a gap names each unhashed artifact
    gaps = replay_tui(store, "gaps", str(res["run_id"]))
    assert "artifact out/model.pt has no hash" in gaps.stdout


@pytest.mark.parametrize("mode", [[], ["--json"], ["--quiet"]], ids=["text", "json", "quiet"])
def test_refusals_are_said_on_stderr(tmp_path: Path, mode: list[str]) -> None:
    """Said whatever the output mode (``--json`` and ``--quiet`` hide the command's own
    output, never a refusal); ``--json`` also lists them."""
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    script = "import os; os.makedirs('out'); os.symlink('/etc/passwd', 'out/model.pt')"
    command = ("--", sys.executable, "-c", script)
    proc = replay_tui(store, "record", *mode, "--artifact", "out/*", *command, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    why = "out/model.pt: out/model.pt is a symbolic link (-> /etc/passwd)"
    assert f"refused: {why}" in proc.stderr
    if mode == ["--json"]:
        (listed,) = json.loads(proc.stdout)["refused"]
        assert listed.startswith(why)


def test_sdk_logged_paths_outside_the_folder_are_refused(tmp_path: Path) -> None:
    base = tmp_path / "work"
    (base / "out").mkdir(parents=True)
    (base / "out" / "ok.bin").write_bytes(b"ok")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(SECRET)
    os.symlink(outside, base / "out" / "link.bin")
    refused: list[str] = []
    entries = artifact_entries(
        base, [], ["out/ok.bin", "../outside.bin", str(outside), "out/link.bin"], refused
    )
    by_path = {e["path"]: e for e in entries}
    assert by_path["out/ok.bin"]["sha256"] is not None
    assert by_path["out/link.bin"]["sha256"] is None
    assert "../outside.bin" not in by_path and str(outside) not in by_path
    assert any("outside the output folder" in r for r in refused)
    assert any("symbolic link" in r for r in refused)


def test_object_store_refuses_a_link_and_a_changed_file(tmp_path: Path) -> None:
    objects = ObjectStore(tmp_path / "objects")
    real = tmp_path / "a.bin"
    real.write_bytes(b"abc")
    import hashlib

    sha = hashlib.sha256(b"abc").hexdigest()
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    try:
        objects.put(link, sha)
    except OSError:
        pass
    else:
        raise AssertionError("a symlink was followed into the object store")
    try:
        objects.put(real, hashlib.sha256(b"other").hexdigest())
    except ValueError as e:
        assert "no longer hashes" in str(e)
    else:
        raise AssertionError("bytes that do not match their hash were kept")
    assert stat.S_IMODE(objects.put(real, sha).stat().st_mode) == 0o400


HOSTILE_HANDOFFS = [
    {"seeds": "xx"},
    {"metric_history": {"a": 5}},
    {"metric_history": {"a": [[1, "NaN"]]}},
    {"metrics": {"loss": "zero"}},
    {"seed": -5},
    {"seed": 2**70},
    {"name": "\x1b]0;pwned\x07"},
    {"gpus": [{"nam": "x"}]},
    {"environment": {"torch_version": "x" * 10_000}},
    {"determinism": {"allow_tf32": "yes"}},
    {"config": {"lr": float("inf")}},
    {"artifacts": "out/model.pt"},
    [1, 2, 3],
]


def test_hostile_handoff_keeps_the_run_and_names_the_problem(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    handoff = {"seeds": "xx", "metric_history": {"a": 5}, "seed": 3, "metrics": {"acc": 0.5}}
    script = (
        "import json, os; os.makedirs('out', exist_ok=True);"
        "open('out/m.bin', 'w').write('m');"
        "p = os.path.join(os.environ['REPLAY_TUI_HANDOFF'], 'inside.json');"
        f"open(p, 'w').write(json.dumps({handoff!r}))"
    )
    proc = replay_tui(
        store, "record", "--artifact", "out/*", "--", sys.executable, "-c", script, cwd=repo
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "handoff file: seeds is malformed" in proc.stderr
    assert "handoff file: metric_history is malformed" in proc.stderr
    with RunStore(store) as s:
        (rec,) = s.list_runs()
        m = s.manifest(rec.id)
    assert m.randomness.seed == 3  # the well-formed parts are kept
    assert m.outputs.metrics == {"acc": 0.5}
    assert m.randomness.python is None and m.outputs.metric_history == {}


def test_each_hostile_handoff_is_read_without_a_crash(tmp_path: Path) -> None:
    for i, bad in enumerate(HOSTILE_HANDOFFS):
        d = tmp_path / f"h{i}"
        d.mkdir()
        (d / "inside.json").write_text(json.dumps(bad, allow_nan=True))
        inside = read_inside(d)
        assert inside.get("problems"), bad
        assert set(inside) == {"problems"}, (bad, inside)
    # a FIFO or a link as the handoff file is refused, not read (a FIFO would block)
    d = tmp_path / "fifo"
    d.mkdir()
    os.mkfifo(d / "inside.json")
    assert "not a regular file" in read_inside(d)["problems"][0]
    d = tmp_path / "link"
    d.mkdir()
    (d / "inside.json").symlink_to("/etc/passwd")
    assert "cannot open" in read_inside(d)["problems"][0]
