"""The docker sandbox's walls, piece by piece (no engine needed): the user it picks, the
limits it takes from the recorded hardware or this host, the container settings they
become, and how the replay manifest records them without changing older manifests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replay_tui.capture.executor import ExecSpec
from replay_tui.replay.backends.docker import engine as dk
from replay_tui.replay.backends.docker import walls as w
from storage.manifest import ReplayInfo, SandboxInfo, canonical_json


def test_the_user_is_never_root_when_it_can_be_avoided(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert w.choose_user(None) == w.NOBODY
    assert w.choose_user("") == w.NOBODY
    assert w.choose_user("root") == w.NOBODY  # the image asks for root: not given
    assert w.choose_user("0:0") == w.NOBODY
    assert w.choose_user("app") == w.NOBODY  # a name this host cannot resolve
    assert w.choose_user("1000") == (1000, 1000)  # the image's own numeric user
    assert w.choose_user("1000:50") == (1000, 50)
    assert w.choose_user("app", "root") == (0, 0)  # --container-user, on purpose
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    monkeypatch.setattr(os, "getegid", lambda: 99)
    assert w.choose_user("1000") == (1234, 99)  # a non-root invoker runs as itself


def test_limits_come_from_the_recorded_hardware_or_a_share_of_the_host() -> None:
    assert w.default_cpus(4, 16) == 4.0
    assert w.default_cpus(64, 16) == 16.0  # never more than this host has
    assert w.default_cpus(None, 16) == 8.0
    assert w.default_cpus(None, 1) == 1.0
    assert w.default_memory(16 << 30) == "8192m"
    assert w.default_memory(None) is None
    host = w.host_memory_bytes()
    assert host is not None and host > 0 and w.host_cpus() >= 1
    assert w.default_output_bytes(0) == 1 << 30
    assert w.default_output_bytes(3 << 30) == 6 << 30
    assert w.size_bytes("8m") == 8 << 20 and w.size_bytes("2G") == 2 << 30
    with pytest.raises(ValueError):
        w.size_bytes("lots")


def test_bounds_cover_their_subfolders(tmp_path: Path) -> None:
    a, b, c = tmp_path / "out", tmp_path / "out" / "ckpt", tmp_path / "logs"
    assert w.outermost([b, a, c]) == [c, a]  # shallowest first, then by name


def test_the_walls_are_container_settings(tmp_path: Path) -> None:
    ex = dk.DockerExecutor(
        "img",
        [],
        dk.CONTAINER_ROOT,
        dk.Sandbox(memory_limit="512m", cpus=1.5, user="65534:65534"),
    )
    spec = ExecSpec(["true"], tmp_path, {}, tmp_path, tmp_path / "log")
    kwargs = ex.create_kwargs(spec)
    assert kwargs["mem_limit"] == kwargs["memswap_limit"] == "512m"
    assert kwargs["nano_cpus"] == 1_500_000_000
    assert kwargs["user"] == "65534:65534"
    assert ex.sandbox_info == {
        "memory_limit": "512m",
        "cpus": 1.5,
        "user": "65534:65534",
        "pids_limit": 512,
        "output_bytes": None,
    }
    plain = dk.DockerExecutor("img", [], dk.CONTAINER_ROOT).create_kwargs(spec)
    assert "nano_cpus" not in plain and plain["user"] == f"{os.getuid()}:{os.getgid()}"


def test_the_manifest_records_the_walls_and_older_replays_keep_their_bytes() -> None:
    old = ReplayInfo(backend="docker", environment_pinned=True)
    assert "sandbox" not in old.model_dump(mode="json")  # omitted when absent
    walled = ReplayInfo.model_validate(
        {
            "backend": "docker",
            "environment_pinned": True,
            "sandbox": {"memory_limit": "96m", "cpus": 1, "user": "65534:65534"},
        }
    )
    assert walled.sandbox == SandboxInfo(memory_limit="96m", cpus=1.0, user="65534:65534")
    again = ReplayInfo.model_validate_json(canonical_json(walled.model_dump(mode="json")))
    assert again == walled
    with pytest.raises(ValueError):
        SandboxInfo.model_validate({"cpus": -1})
