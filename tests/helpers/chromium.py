"""Debian's real chromium, headless, for the tests that open a report the way a reader
would."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"


def chromium(*args: str, window: str = "1200,2000") -> subprocess.CompletedProcess[str]:
    """``chromium --headless ARGS`` in a window of ``window`` (``W,H``), with a fresh
    profile and nothing fetched in the background; missing, the test fails."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium"
            " (`apt-get install chromium`, or scripts/setup.sh)"
        )
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                f"--window-size={window}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
