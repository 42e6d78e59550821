"""A backend declares its own options; the commands that replay make their flags of them.

The flags are built when the command's module is imported, so a backend registered by a
test is run in a fresh process: a small driver registers it, then runs the real
``replay-tui`` group.  The slurm backend's flags (``--slurm-*``) are the model: refused
with another backend, a bad value (flag or variable) refused with its name, exit 2 before
anything is stored.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from replay_tui.errors import BadInput
from replay_tui.replay.backends import BackendOption, declared_options, get_backend
from replay_tui.replay.backends.slurm.backend import OPTIONS, slurm_options
from replay_tui.replay.backends.slurm.options import SlurmOptions
from storage.store import RunStore
from tests.conftest import RunCli, subprocess_env

# A backend of the test's own: the local backend with one declared option.  The replay
# pipeline is replaced by a stand-in that prints the ReplayOptions the command built.
DRIVER = """
import dataclasses, json, sys

from replay_tui.errors import BadInput
from replay_tui.replay import backends
from replay_tui.replay.backends.local.backend import LocalBackend
import replay_tui.replay.series as series


class FakeBackend(LocalBackend):
    name = "fake"
    summary = "a test's backend"
    options = (
        backends.BackendOption(
            "level",
            "--fake-level",
            "How hard the fake tries",
            env="REPLAY_TUI_FAKE_LEVEL",
            type=int,
        ),
    )

    def check_options(self, options):
        super().check_options(options)
        for name, value in options:
            if int(value) < 0:
                raise BadInput(f"--fake-level {value!r} must be >= 0")


def shown(store, run, options, **kwargs):
    print(json.dumps({
        "run": run,
        "backend": options.backend,
        "backend_options": options.backend_options,
        "allow_cpu": options.allow_cpu,
        "timeout_s": options.timeout_s,
        "gpus": options.gpus,
        "rtol": options.tolerance.rtol,
    }))
    sys.exit(0)


backends.register("fake", FakeBackend)
series.replay_many = shown
from replay_tui.cli import main

main(prog_name="replay-tui")
"""


def fake_cli(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", DRIVER, "--store", str(store), *args],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    RunStore(path).close()
    return path


def test_a_registered_backend_gets_a_flag_of_its_option(store: Path) -> None:
    proc = fake_cli(store, "replay", "--help")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())  # click wraps the help
    assert "--backend [docker|local|slurm|podman|apptainer|fake]" in out
    assert "--fake-level INTEGER How hard the fake tries [REPLAY_TUI_FAKE_LEVEL]." in out
    assert "--slurm-partition TEXT Slurm partition [REPLAY_TUI_SLURM_PARTITION]." in out


def test_the_flag_reaches_replay_options_as_a_backend_option(store: Path) -> None:
    proc = fake_cli(
        store, "replay", "RUN", "--backend", "fake", "--fake-level", "3", "--timeout", "9",
        "--allow-cpu", "--gpus", "none", "--rtol", "0.5",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "run": "RUN",
        "backend": "fake",
        "backend_options": [["level", "3"]],
        "allow_cpu": True,
        "timeout_s": 9.0,
        "gpus": "none",
        "rtol": 0.5,
    }
    proc = fake_cli(store, "replay", "RUN", "--backend", "fake")  # not given: none passed
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["backend_options"] == []


def test_a_flag_of_another_backend_and_a_bad_value_are_refused_by_name(store: Path) -> None:
    proc = fake_cli(store, "replay", "RUN", "--backend", "local", "--fake-level", "3")
    assert proc.returncode == 2
    assert "--fake-level applies to --backend fake only (got --backend local)" in proc.stderr
    proc = fake_cli(store, "replay", "RUN", "--backend", "fake", "--fake-level", "-1")
    assert proc.returncode == 2 and "--fake-level '-1' must be >= 0" in proc.stderr
    proc = fake_cli(store, "replay", "RUN", "--backend", "fake", "--fake-level", "many")
    assert proc.returncode == 2 and "--fake-level" in proc.stderr  # click: not an integer
    proc = fake_cli(store, "--json", "replay", "RUN", "--backend", "docker", "--fake-level", "1")
    assert proc.returncode == 2


@pytest.mark.parametrize("command", [["replay", "RUN"], ["drill"], ["bisect", "GOOD", "BAD"]])
def test_slurm_flags_are_refused_with_docker_on_every_command_that_replays(
    cli: RunCli, store: Path, command: list[str]
) -> None:
    proc = cli(*command, "--backend", "docker", "--slurm-partition", "gpu", store=store)
    assert proc.returncode == 2, proc.stderr
    assert "--slurm-partition applies to --backend slurm only (got --backend docker)" in proc.stderr
    with RunStore(store) as s:  # nothing was stored
        assert s.facts("replays") == [] and s.facts("drills") == []


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--slurm-time", "tomorrow"], "--slurm-time"),
        (["--slurm-max-in-flight", "-1"], "--slurm-max-in-flight"),
        (["--slurm-partition", "no good"], "--slurm-partition"),
        (["--slurm-sbatch-args", "--output=/tmp/x"], "--slurm-sbatch-args"),
        (["--slurm-sbatch-args", "'unclosed"], "--slurm-sbatch-args"),
    ],
)
def test_bad_slurm_values_are_refused_naming_the_flag(
    cli: RunCli, store: Path, flags: list[str], named: str
) -> None:
    proc = cli("drill", "--backend", "slurm", *flags, store=store)
    assert proc.returncode == 2, proc.stderr
    assert f"error: {named}" in proc.stderr


def test_a_bad_variable_is_named_and_a_flag_overrides_it(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"REPLAY_TUI_SLURM_PARTITION": "no good"}
    with pytest.raises(BadInput, match=r"^REPLAY_TUI_SLURM_PARTITION: "):
        slurm_options((), env)
    assert slurm_options((("partition", "gpu"),), env).partition == "gpu"
    with pytest.raises(BadInput, match="REPLAY_TUI_SLURM_MAX_IN_FLIGHT"):
        slurm_options((), {"REPLAY_TUI_SLURM_MAX_IN_FLIGHT": "many"})
    monkeypatch.setenv("REPLAY_TUI_SLURM_TIME", "tomorrow")
    with pytest.raises(BadInput, match="REPLAY_TUI_SLURM_TIME"):
        get_backend("slurm").check_options(())


def test_each_slurm_option_is_its_flag_and_its_variable() -> None:
    """The declarations are what the command line and SlurmOptions.from_env read."""
    assert declared_options()["slurm"] == OPTIONS
    assert declared_options()["docker"] == declared_options()["local"] == ()
    assert [o.flag for o in OPTIONS] == [
        "--slurm-partition",
        "--slurm-account",
        "--slurm-qos",
        "--slurm-time",
        "--slurm-sbatch-args",
        "--slurm-max-in-flight",
        "--slurm-spool",
        "--slurm-runtime",
    ]
    samples = {
        "partition": ("gpu", "gpu"),
        "account": ("lab", "lab"),
        "qos": ("high", "high"),
        "time_limit": ("2:00:00", "2:00:00"),
        "sbatch_args": ("--nice=5 '--comment=a b'", ("--nice=5", "--comment=a b")),
        "max_in_flight": ("4", 4),
        "spool": ("/shared/spool", Path("/shared/spool")),
        "runtime": ("podman", "podman"),
    }
    for option in OPTIONS:
        text, value = samples[option.name]
        assert option.env is not None
        from_env = SlurmOptions.from_env({option.env: text})
        from_flag = slurm_options(((option.name, text),), {})
        assert getattr(from_env, option.name) == getattr(from_flag, option.name) == value
    assert OPTIONS[0].help_text == "Slurm partition [REPLAY_TUI_SLURM_PARTITION]."


def test_a_backend_without_options_refuses_any() -> None:
    with pytest.raises(BadInput, match=r"the docker backend has no option 'partition'"):
        get_backend("docker").check_options((("partition", "gpu"),))
    get_backend("local").check_options(())
    assert BackendOption("x", "--x", "An x").help_text == "An x."
