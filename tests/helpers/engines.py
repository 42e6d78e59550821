"""The real engines a test needs, or a failure (never a skip) that says how to start them."""

from __future__ import annotations

import os
from typing import Any

import pytest


def docker_client() -> Any:
    """A client of the real Docker engine, which has answered a ping."""
    try:
        import docker

        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as e:  # an environment problem: a failure, never a skip
        pytest.fail(f"no Docker engine: {e} (run scripts/docker-env.sh)")
    return client


def train_env(name: str = "REPLAY_TUI_TRAIN_IMAGE") -> str:
    """The training image's tag (or, by ``REPLAY_TUI_TRAIN_DIGEST``, its digest reference)
    that scripts/docker-env.sh exported."""
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} unset (source /var/lib/replay-tui-env/train-image.env)")
    return value
