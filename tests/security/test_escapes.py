"""Item 3 of the trust issue, the printing part: a manifest string with terminal escape
sequences reaches no terminal raw, whichever command or report prints it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import RunCli
from tests.support.factories import realistic_manifest

EVIL = {
    "argv": "--lr=1\x1b[2K\rpython3 train.py",
    "env": "4\x1b]0;owned\x07",
    "config": "x\x1b]52;c;cm0gLXJm\x07y",
}


def _store_two(cli: RunCli, tmp_path: Path) -> tuple[str, str]:
    a, b = realistic_manifest(1), realistic_manifest(2)
    b["argv"][1] = EVIL["argv"]
    b["env"]["OMP_NUM_THREADS"] = EVIL["env"]
    b["config"]["note"] = EVIL["config"]
    b.pop("config_hash", None)
    for d in (a, b):
        (tmp_path / f"{d['run_id']}.json").write_text(json.dumps(d))
    proc = cli("ingest", *(tmp_path / f"{d['run_id']}.json" for d in (a, b)))
    assert proc.returncode == 0, proc.stderr
    return a["run_id"], b["run_id"]


def test_no_command_prints_an_escape_sequence(cli: RunCli, tmp_path: Path) -> None:
    a, b = _store_two(cli, tmp_path)
    runs = (("runs",), ("runs", "--wide"), ("runs", "--csv"), ("show", b, "--wide"))
    for args in (("compare", a, b), ("show", b), ("gaps", b), *runs):
        proc = cli(*args)
        out = proc.stdout + proc.stderr
        assert "\x1b" not in out and "\x07" not in out, (args, out[-500:])
    shown = cli("compare", a, b).stdout
    assert "4\\x1b]0;owned\\x07" in shown  # visible, not interpreted


def test_reports_in_a_bundle_hold_no_escape_sequence(cli: RunCli, tmp_path: Path) -> None:
    _, b = _store_two(cli, tmp_path)
    out = tmp_path / "bundle"
    assert cli("export", b, "--out", out).returncode == 0
    for name in ("report.md", "report.html"):
        text = (out / name).read_text()
        assert "\x1b" not in text and "\x07" not in text, name
        assert "\\x1b" in text, name
