"""Item 10 of the trust issue, and the small guards the others rely on.

Huge or special files, a store that is not a database, an impossible memory size and
the real grace period of a timeout, each through the real CLI; plus the escaping and the
environment allow-list as functions.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click
import pytest

from replay_tui.door import read_named
from replay_tui.errors import BadInput
from replay_tui.replay.envpolicy import check_env, env_allowed
from replay_tui.safety import escape_control, memory_limit_arg
from storage.store import RunStore
from tests.conftest import RunCli
from tests.support.training import make_repo, replay_tui


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text", "plain text"),
        ("a\x1b]0;title\x07b", "a\\x1b]0;title\\x07b"),
        ("erase\x1b[2K\rover", "erase\\x1b[2K\\x0dover"),
        ("c1 \x9b2J", "c1 \\x9b2J"),
        ("bidi \u202eexe.txt", "bidi \\u202eexe.txt"),
        ("del\x7f", "del\\x7f"),
        ("tab\tand\nnewline", "tab\\x09and\\x0anewline"),
        ("accents é ü 日本", "accents é ü 日本"),
    ],
)
def test_escape_control(text: str, shown: str) -> None:
    assert escape_control(text) == shown
    assert "\x1b" not in escape_control(text, keep_newlines=True)


def test_escape_control_keeps_newlines_when_asked() -> None:
    assert escape_control("a\nb\tc\x1b", keep_newlines=True) == "a\nb\tc\\x1b"


def test_read_named_refuses_devices_fifos_and_huge_files(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not a regular file"):
        read_named(Path("/dev/zero"), "key file", limit=1024)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(BadInput, match="not a regular file"):
        read_named(fifo, "key file", limit=1024)  # no writer: a blocking open would hang
    assert time.monotonic() - t0 < 30
    big = tmp_path / "big"
    with big.open("wb") as f:
        f.truncate(10 * 1024**3)
    with pytest.raises(BadInput, match="the limit for a key file is 1 KiB"):
        read_named(big, "key file", limit=1024)
    with pytest.raises(BadInput, match="is a folder"):
        read_named(tmp_path, "key file", limit=1024)
    ok = tmp_path / "ok"
    ok.write_bytes(b"x" * 1024)
    assert read_named(ok, "key file", limit=1024) == b"x" * 1024


def test_env_allow_list() -> None:
    assert env_allowed("CUBLAS_WORKSPACE_CONFIG") and env_allowed("NCCL_IB_DISABLE")
    assert env_allowed("PYTORCH_CUDA_ALLOC_CONF")
    for name in ("NCCL_NET_PLUGIN", "NCCL_TOPO_FILE", "PYTORCH_KERNEL_CACHE_PATH", "BROWSER"):
        assert not env_allowed(name), name
    assert env_allowed("MY_FLAG", ["MY_FLAG"])
    with pytest.raises(BadInput, match="never passes LD_PRELOAD"):
        check_env({}, ["LD_PRELOAD"])
    with pytest.raises(BadInput, match="contains NUL"):
        check_env({"OMP_NUM_THREADS": "4\x00"})


def test_memory_limit_values() -> None:
    assert memory_limit_arg("2G") == "2g" and memory_limit_arg("512m") == "512m"
    for bad in ("lots", "-1g", "1.5g", "2gb", "1k", ""):
        with pytest.raises(click.BadParameter):
            memory_limit_arg(bad)


def test_cli_on_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(8192))
    for args in (("runs",), ("show", "x"), ("replay", "x")):
        proc = replay_tui(junk, *args)
        assert proc.returncode == 2, proc.stderr
        assert "not a replay-tui store" in proc.stderr and "Traceback" not in proc.stderr


def test_replay_memory_lots_is_a_usage_error(store_path: Path, cli: RunCli) -> None:
    proc = cli("replay", "01a20000-0000-7000-8000-000000000000", "--memory", "lots")
    assert proc.returncode == 2
    assert "'lots' is not a memory size" in proc.stderr and "Traceback" not in proc.stderr


def test_a_timeout_says_its_real_grace_period(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('started', flush=True); time.sleep(60)"
    )
    t0 = time.monotonic()
    proc = replay_tui(
        store, "record", "--timeout", "1", "--", sys.executable, "-c", stubborn, cwd=repo
    )
    assert time.monotonic() - t0 < 50, proc.stderr
    with RunStore(store) as s:
        (rec,) = s.list_runs()
        assert s.manifest(rec.id).status == "timed_out"
    rep = replay_tui(store, "replay", rec.id, "--backend", "local", "--timeout", "1")
    # the SIGTERM is ignored: the run is killed 5 s later, and the message says so
    assert "timed out after 1s (then SIGTERM, and SIGKILL after a 5s grace period" in rep.stderr
    assert "stopped after 6." in rep.stderr, rep.stderr[-2000:]
    help_text = replay_tui(store, "replay", "--help").stdout
    assert "SIGKILL after a 5 s grace period" in " ".join(help_text.split())
