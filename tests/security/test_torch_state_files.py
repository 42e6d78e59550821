"""The files torch's observed state is written to (one per process of a local run, by
the hook record starts the command with) are written by the run: untrusted.  A link, a
file past its limit, one not of its shape and a flood of them are refused with what and
where, and no switch of theirs is taken."""

from __future__ import annotations

import json
from pathlib import Path

from replay_tui.capture.frameworks import observe

GOOD = {
    "pid": 11,
    "ppid": 10,
    "launcher": False,
    "warn_only": False,
    "deterministic_algorithms": True,
    "cudnn_deterministic": False,
    "cudnn_benchmark": False,
    "cublas_workspace_config": ":4096:8",
}


def _folder(tmp_path: Path) -> Path:
    d = tmp_path / observe.OBSERVED_FOLDER
    d.mkdir()
    return d


def _write(d: Path, name: str, data: object) -> None:
    (d / name).write_text(json.dumps(data))


def test_a_good_file_gives_its_switches(tmp_path: Path) -> None:
    _write(_folder(tmp_path), "11.json", GOOD)
    got, refused = observe.read(tmp_path)
    assert got is not None and not refused
    assert got.switches["deterministic_algorithms"] is True and got.processes == 1


def test_a_link_a_big_file_and_a_bad_shape_are_refused(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    (tmp_path / "elsewhere.json").write_text(json.dumps(GOOD))
    (d / "1.json").symlink_to(tmp_path / "elsewhere.json")
    (d / "2.json").write_text(json.dumps({**GOOD, "pad": "x" * 8000}))
    _write(d, "3.json", {**GOOD, "deterministic_algorithms": "yes"})
    _write(d, "4.json", {**GOOD, "cublas_workspace_config": "\x1b[2J"})
    _write(d, "5.json", [1, 2])
    (d / "6.json").write_text("{not json")
    got, refused = observe.read(tmp_path)
    assert got is None  # not one switch taken
    said = "\n".join(refused)
    assert len(refused) == 6, said
    assert "torch-state/1.json" in said and "link" in said
    assert "torch-state/2.json" in said and "4 KiB" in said
    assert (
        "torch-state/3.json: not its shape (deterministic_algorithms is not true or false)" in said
    )
    assert "cublas_workspace_config is not a short printable text" in said
    assert "torch-state/5.json: not its shape (not a JSON object)" in said
    assert "torch-state/6.json: not its shape" in said


def test_a_flood_of_files_is_not_read(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    for i in range(observe.MAX_FILES + 1):
        _write(d, f"{i}.json", {**GOOD, "pid": i})
    got, refused = observe.read(tmp_path)
    assert got is None
    assert refused == [
        f"torch state files: {observe.MAX_FILES + 1}, more than {observe.MAX_FILES}: not read"
    ]


def test_a_launcher_and_a_parent_that_only_started_others_are_not_the_training(
    tmp_path: Path,
) -> None:
    d = _folder(tmp_path)
    off = {**GOOD, "deterministic_algorithms": False, "cublas_workspace_config": None}
    _write(d, "5.json", {**off, "pid": 5, "ppid": 1, "launcher": True})  # torchrun's own
    _write(d, "6.json", {**off, "pid": 6, "ppid": 5})  # mp.spawn's parent
    _write(d, "7.json", {**GOOD, "pid": 7, "ppid": 6})
    _write(d, "8.json", {**GOOD, "pid": 8, "ppid": 6})
    got, _ = observe.read(tmp_path)
    assert got is not None and got.processes == 2
    assert got.switches["deterministic_algorithms"] is True
    # processes that still disagree leave the switch unknown, never a guess
    _write(d, "9.json", {**off, "pid": 9, "ppid": 6})
    got, _ = observe.read(tmp_path)
    assert got is not None and got.switches["deterministic_algorithms"] is None
    assert got.switches["cudnn_benchmark"] is False
