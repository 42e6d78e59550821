"""``keygen --out`` into a folder that does not exist yet makes it (0700), and a path
under a file is refused with what is wrong."""

from __future__ import annotations

import stat
from pathlib import Path

from tests.conftest import RunCli


def test_keygen_makes_the_folder_it_is_told_to_write_in(cli: RunCli, tmp_path: Path) -> None:
    key = tmp_path / "keys" / "team" / "signer.key"
    r = cli("keygen", "--out", key)
    assert r.returncode == 0, r.stderr
    assert key.is_file() and key.with_suffix(".pub").is_file()
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


def test_keygen_under_a_file_says_so(cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    r = cli("keygen", "--out", tmp_path / "plain" / "signer.key")
    assert r.returncode == 2 and "cannot make folder" in r.stderr
