"""The one door for untrusted bytes: each refusal on real files, links and FIFOs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replay_tui import door
from replay_tui.door import Refused


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "m.json").write_text('{"loss": 1}')
    return root


def test_a_regular_file_under_the_root_is_read(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert door.read_under(root, "a/b/m.json", "metrics file") == b'{"loss": 1}'
    assert door.read_under_or_none(root, "a/b/none.json", "metrics file") is None


def test_a_link_anywhere_below_the_root_is_refused_naming_it(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text('{"loss": 424242}')
    (root / "a" / "link.json").symlink_to(secret)
    with pytest.raises(Refused, match=r"link\.json is a symbolic link \(-> .*secret\.json\)"):
        door.read_under(root, "a/link.json", "metrics file")
    # a folder swapped for a link on the way is refused too (the walk is the check)
    (root / "c").symlink_to(root / "a" / "b")
    with pytest.raises(Refused, match=r"root/c is a symbolic link"):
        door.read_under(root, "c/m.json", "metrics file")
    # a link back inside the root is still a link
    (root / "a" / "inside.json").symlink_to(root / "a" / "b" / "m.json")
    with pytest.raises(Refused, match="symbolic link"):
        door.read_under(root, "a/inside.json", "metrics file")


def test_paths_that_leave_the_root_are_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    for rel, why in (
        ("../x", "'..' would leave"),
        ("/etc/passwd", "an absolute path"),
        ("", "empty"),
    ):
        with pytest.raises(Refused, match=why):
            door.read_under(root, rel, "metrics file")
    with pytest.raises(Refused, match="NUL"):
        door.read_under(root, "a\x00b", "metrics file")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    os.mkfifo(root / "a" / "pipe")
    with pytest.raises(Refused, match="not a regular file"):
        door.read_under(root, "a/pipe", "metrics file")
    with pytest.raises(Refused, match="not a regular file"):
        door.read_named(root / "a" / "pipe", "key file")
    with pytest.raises(Refused, match="is a folder"):
        door.read_under(root, "a/b", "metrics file")


def test_a_file_over_its_kinds_limit_is_refused_naming_the_limit(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    big = root / "a" / "big.bin"
    with big.open("wb") as f:  # sparse: no bytes are written
        f.truncate(door.LIMITS["metrics file"] + 1)
    with pytest.raises(Refused, match=r"the limit for a metrics file is 256 MiB"):
        door.read_under(root, "a/big.bin", "metrics file")
    (root / "a" / "k").write_bytes(b"x" * 2000)
    with pytest.raises(Refused, match="the limit for a key file is 1000 bytes"):
        door.read_named(root / "a" / "k", "key file", limit=1000)
    with door.open_under(root, "a/k", "key file") as f:  # chunks stop at the limit too
        assert sum(len(c) for c in f.chunks(512)) == 2000


def test_a_link_is_followed_only_to_a_regular_file_under_the_files_root(tmp_path: Path) -> None:
    project = tmp_path / "project"
    run = project / "wandb" / "run-1"
    (run / "files").mkdir(parents=True)
    (project / "out").mkdir()
    (project / "out" / "model.pt").write_bytes(b"weights")
    (run / "files" / "model.pt").symlink_to(project / "out" / "model.pt")
    (run / "files" / "shadow").symlink_to(tmp_path / "elsewhere")
    target = door.resolve_link_under(run, "files/model.pt", project, "saved file")
    assert target == (project / "out" / "model.pt").resolve()
    with pytest.raises(Refused, match=r"outside .*project.*--files-root"):
        door.resolve_link_under(run, "files/shadow", project, "saved file")


def test_a_private_folder_is_made_tightened_or_refused(tmp_path: Path) -> None:
    made = door.private_folder(tmp_path / "spool", "Slurm spool")
    assert (made.stat().st_mode & 0o777) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    door.private_folder(loose, "Slurm spool")
    assert (loose.stat().st_mode & 0o777) == 0o700  # ours: tightened
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(Refused, match=r"can be written by others \(mode 1777\)") as e:
        door.private_folder(shared, "Slurm spool")
    assert e.value.hint and "mkdir -m 700" in e.value.hint


def test_an_output_target_must_be_missing_or_a_regular_file(tmp_path: Path) -> None:
    assert door.output_target(tmp_path / "new.prom", "--prometheus") == tmp_path / "new.prom"
    (tmp_path / "old.prom").write_text("x")
    door.output_target(tmp_path / "old.prom", "--prometheus")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Refused, match="a device, FIFO or socket"):
        door.output_target(tmp_path / "fifo", "--prometheus")
    (tmp_path / "ln").symlink_to(tmp_path / "old.prom")
    with pytest.raises(Refused, match="a symbolic link"):
        door.output_target(tmp_path / "ln", "--prometheus")


def test_a_folder_from_elsewhere_is_scanned_for_links_special_files_and_sizes(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    assert door.scan_tree(root, lambda _rel: "tracker file", "MLflow store") == 1
    (root / "a" / "b" / "x").symlink_to("/etc/passwd")
    with pytest.raises(Refused, match=r"x is a symbolic link \(-> /etc/passwd\)"):
        door.scan_tree(root, lambda _rel: "tracker file", "MLflow store")
    (root / "a" / "b" / "x").unlink()
    os.mkfifo(root / "a" / "f")
    with pytest.raises(Refused, match="not a regular file"):
        door.scan_tree(root, lambda _rel: "tracker file", "MLflow store")
