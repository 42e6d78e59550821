"""Waiting for a condition in a test, with a deadline (never a fixed pause)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``cond`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)
