"""A bisect's stored probe output is the program's untrusted bytes: ``bisect-show --logs``
escapes its control characters before they reach a terminal, a body whose blob name is
not a sha256 names no blob, and a blob altered in the store is refused, not shown."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from replay_tui.bisect.answer import BisectResult, ProbeRecord
from replay_tui.bisect.run import probe_log, stored_bisect
from storage.store import RunStore
from tests.conftest import RunCli

HOSTILE = "step 0 loss 1.0\n\x1b]0;owned\x07\x1b[2Jcleared\r\n\x9b31mred\n"


def _store(store_path: Path, sha_override: str | None = None) -> int:
    with RunStore(store_path) as s:
        sha = s.put_blob(HOSTILE.encode(), "bisect-log", None)
        res = BisectResult("g" * 16, "b" * 16, "local")
        res.probes = [ProbeRecord(1, "good", ["seed"], "seed alone", behaves="BAD")]
        body = res.to_dict()
        body["probes"][0]["log_sha256"] = sha_override or sha
        return s.add_bisect(res.good, res.bad, res.outcome, res.causes, body)


def test_the_probe_output_is_escaped_when_shown(cli: RunCli, store_path: Path) -> None:
    bid = _store(store_path)
    r = cli("bisect-show", str(bid), "--logs")
    assert r.returncode == 0, r.stderr
    assert "  | step 0 loss 1.0" in r.stdout
    for raw in ("\x1b", "\x07", "\x9b", "\r"):
        assert raw not in r.stdout
    assert "owned" in r.stdout  # shown as text, its escapes made visible


def test_a_forged_blob_name_names_no_blob(cli: RunCli, store_path: Path) -> None:
    bid = _store(store_path, sha_override="../../etc/passwd")
    with RunStore(store_path) as s:
        res = stored_bisect(s, bid)
        assert res.probes[0].log_sha256 is None
        assert probe_log(s, res, 1) is None
    r = cli("bisect-show", str(bid), "--logs")
    assert r.returncode == 0 and "not kept" in r.stdout


def test_an_altered_blob_is_refused(cli: RunCli, store_path: Path) -> None:
    bid = _store(store_path)
    with sqlite3.connect(store_path) as conn:
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'blobs'"
        ).fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("UPDATE blobs SET data = ? WHERE kind = 'bisect-log'", (b"forged\n",))
    r = cli("bisect-show", str(bid), "--logs")
    assert r.returncode != 0
    assert "forged" not in r.stdout and "altered" in (r.stdout + r.stderr)
