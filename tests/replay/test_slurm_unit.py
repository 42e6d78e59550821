"""How the slurm backend builds its job: options, sbatch arguments, the job script.

These use fake ``sbatch``/``scontrol``/``scancel`` scripts on PATH, which is the only way
to see a GPU request (``--gres=gpu:2``) and a foreign partition/account/QOS here: this
machine has no GPU and one partition.  They add to the real-cluster tests in
tests/replay/test_slurm.py, never replace them.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest

from replay_tui.capture.executor import ExecSpec
from replay_tui.errors import BadInput, InfraError
from replay_tui.replay.backends.docker import engine as dk
from replay_tui.replay.backends.slurm.engine import SlurmExecutor
from replay_tui.replay.backends.slurm.options import SlurmOptions, slurm_memory, slurm_time
from replay_tui.replay.backends.slurm.script import container_kwargs, docker_cli_args
from tests.conftest import RunCli

IMAGE = "localhost:5000/replay-tui/train@sha256:" + "a" * 64


def _fake_tools(bindir: Path, *, sbatch_fails: str | None = None) -> Path:
    """sbatch that logs its argv and prints a job id (or fails), scontrol that says the
    job COMPLETED on node7, scancel that does nothing."""
    bindir.mkdir(parents=True, exist_ok=True)
    log = bindir / "sbatch-argv.jsonl"
    if sbatch_fails:
        body = f"echo {shlex.quote(sbatch_fails)} >&2; exit 1"
    else:
        body = (
            "python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' \"$@\" >> "
            f"{shlex.quote(str(log))}; echo 4242"
        )
    scripts = {
        "sbatch": body,
        "scontrol": (
            "echo 'JobId=4242 JobName=x JobState=COMPLETED Reason=None ExitCode=0:0"
            " Partition=gpu TimeLimit=00:30:00 BatchHost=node7 Account=lab QOS=high'"
        ),
        "scancel": "exit 0",
        "sacct": "exit 1",
    }
    for name, text in scripts.items():
        p = bindir / name
        p.write_text(f"#!/bin/bash\n{text}\n")
        p.chmod(0o755)
    return log


def _executor(tmp_path: Path, *, gpus: int, options: SlurmOptions) -> SlurmExecutor:
    data = tmp_path / "data"
    data.mkdir()
    container = dk.DockerExecutor(
        IMAGE,
        [dk.Mount(str(tmp_path / "wt"), dk.CONTAINER_ROOT, True), dk.Mount(str(data), "/d")],
        dk.CONTAINER_ROOT,
        dk.Sandbox(gpus=gpus, memory_limit="2g", pids_limit=256),
    )
    return SlurmExecutor(
        container, tmp_path / "spool", options, gpus=gpus, memory=slurm_memory("2g")
    )


def _spec(tmp_path: Path) -> ExecSpec:
    handoff = tmp_path / "spool" / "work" / "handoff"
    handoff.mkdir(parents=True)
    return ExecSpec(
        ["python3", "train.py", "--lr", "0.1"],
        tmp_path,
        {"SEED": "1", "NOTE": 'it\'s a "quoted" $value'},
        handoff,
        tmp_path / "spool" / "work" / "output.log",
        timeout_s=90,
    )


def test_sbatch_gets_the_options_and_the_recorded_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _fake_tools(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    opts = SlurmOptions.from_env(
        {"REPLAY_TUI_SLURM_PARTITION": "cpu", "REPLAY_TUI_SLURM_SBATCH_ARGS": "--nice=5"},
        partition="gpu",  # a flag wins over the variable
        account="lab",
        qos="high",
        sbatch_args=("--constraint=a100",),
    )
    ex = _executor(tmp_path, gpus=2, options=opts)  # a GPU run: mocked, no GPU here
    result = ex.run(_spec(tmp_path), lambda _l: None, lambda: False)
    assert result.status == "succeeded"
    argv = json.loads(log.read_text().splitlines()[0])
    flags = " ".join(argv[:-1])
    assert "--partition gpu" in flags and "--account lab" in flags and "--qos high" in flags
    assert "--gres=gpu:2" in argv and "--mem 2048M" in flags
    assert "--time 1:30" in flags  # --timeout 90 s, in Slurm's M:S
    assert argv.index("--nice=5") < argv.index("--constraint=a100")  # env first, then flags
    assert "--parsable" in argv and argv[-1].endswith("/job.sh")
    assert "--no-requeue" in argv  # a failed node ends the replay, never reruns it
    assert ex.job_info == {
        "scheduler": "slurm",
        "job_id": "4242",
        "node": "node7",
        "partition": "gpu",
        "account": "lab",
        "qos": "high",
        "time_limit": "00:30:00",
        "state": "COMPLETED",
    }


def test_job_script_runs_the_docker_backends_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_tools(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    ex = _executor(tmp_path, gpus=1, options=SlurmOptions())
    spec = _spec(tmp_path)
    job_id, job = ex.submit(spec)
    job.close()
    jobdir = job.path
    script = (jobdir / "job.sh").read_text()
    run = script.split("docker run --rm", 1)[1].split(">> output.log", 1)[0]
    words = shlex.split(run.replace("\\\n", " "))
    joined = " ".join(words)
    for flag in (
        "--network none",
        "--cap-drop ALL",
        "--security-opt no-new-privileges",
        "--read-only",
        "--pids-limit 256",
        "--memory 2g",
        f"--user {os.getuid()}:{os.getgid()}",
        "--label io.replay-tui.run=1",
    ):
        assert flag in joined, flag
    assert (
        "--mount type=bind,source={},target=/workspace,readonly".format(tmp_path / "wt") in joined
    )
    assert f"type=bind,source={spec.handoff_dir},target={dk.HANDOFF_MOUNT}" in joined
    # the SDK comes from the job's own owner-only folder in the spool (compute nodes see
    # it), copied fresh for this job: not from this checkout, nor from a shared copy
    assert f"source={jobdir / 'sdk' / 'replay_tui'}" in joined
    assert (jobdir / "sdk" / "replay_tui" / "sdk.py").is_file()
    assert stat.S_IMODE(jobdir.stat().st_mode) == 0o700
    assert stat.S_IMODE((jobdir / "output.log").stat().st_mode) == 0o600
    assert "umask 077" in script
    assert '--env NOTE=it\'s a "quoted" $value' in joined  # survives the shell intact
    assert words[-4:] == ["python3", "train.py", "--lr", "0.1"]
    assert IMAGE in words
    # the allocated GPUs, never all of the node's
    assert "--gpus all" not in joined
    assert 'GPUS=(--gpus "\\"device=$SLURM_JOB_GPUS\\"")' in script
    assert job_id == "4242"


def test_every_sandbox_setting_has_a_docker_run_flag(tmp_path: Path) -> None:
    ex = _executor(tmp_path, gpus=1, options=SlurmOptions())
    kwargs = container_kwargs(ex.container, _spec(tmp_path))
    _args, command = docker_cli_args(kwargs)  # raises on a setting it cannot express
    assert command == ["python3", "train.py", "--lr", "0.1"]
    with pytest.raises(ValueError, match="cpuset_cpus"):
        docker_cli_args({**kwargs, "cpuset_cpus": "0"})
    with pytest.raises(ValueError, match="privileged"):
        docker_cli_args({**kwargs, "privileged": True})


def test_controller_that_does_not_answer_is_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_tools(
        tmp_path / "bin",
        sbatch_fails="sbatch: error: Batch job submission failed: Unable to contact slurm"
        " controller (connect failure)",
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    ex = _executor(tmp_path, gpus=0, options=SlurmOptions())
    with pytest.raises(InfraError, match="does not answer") as e:
        ex.run(_spec(tmp_path), lambda _l: None, lambda: False)
    assert e.value.exit_code == 3 and e.value.hint and "slurm-env.sh" in e.value.hint
    assert not any((tmp_path / "spool" / "jobs").iterdir())  # nothing left for a job


def test_no_sbatch_on_path_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    ex = _executor(tmp_path, gpus=0, options=SlurmOptions())
    with pytest.raises(InfraError, match=r"sbatch. is not on PATH") as e:
        ex.run(_spec(tmp_path), lambda _l: None, lambda: False)
    assert e.value.hint and "--backend docker" in e.value.hint


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"partition": "a b"}, "partition"),
        ({"account": "x;rm"}, "account"),
        ({"time_limit": "soon"}, "time limit"),
        ({"sbatch_args": ("--output=/etc/x",)}, "override"),
        ({"sbatch_args": ("-o/tmp/x",)}, "override"),
        ({"sbatch_args": ("--export=NONE",)}, "override"),
        ({"sbatch_args": ("--requeue",)}, "override"),
        ({"max_in_flight": -1}, "max jobs"),
    ],
)
def test_bad_options_are_refused(overrides: dict[str, object], needle: str) -> None:
    with pytest.raises(BadInput, match=needle):
        SlurmOptions.from_env({}, **overrides)


def test_options_from_the_environment() -> None:
    o = SlurmOptions.from_env(
        {
            "REPLAY_TUI_SLURM_QOS": "low",
            "REPLAY_TUI_SLURM_TIME": "2:00:00",
            "REPLAY_TUI_SLURM_MAX_IN_FLIGHT": "8",
            "REPLAY_TUI_SLURM_SPOOL": "/shared/spool",
            "REPLAY_TUI_SLURM_SBATCH_ARGS": "--nice=5 '--comment=a b'",
        }
    )
    assert (o.qos, o.time_limit, o.max_in_flight) == ("low", "2:00:00", 8)
    assert o.spool == Path("/shared/spool")
    assert o.sbatch_args == ("--nice=5", "--comment=a b")
    with pytest.raises(BadInput, match="MAX_IN_FLIGHT"):
        SlurmOptions.from_env({"REPLAY_TUI_SLURM_MAX_IN_FLIGHT": "many"})
    assert slurm_time(61) == "1:01" and slurm_time(0.2) == "0:01"
    assert slurm_memory("512m") == "512M" and slurm_memory("1G") == "1024M"


def test_slurm_flags_with_another_backend_are_refused(cli: RunCli, store_path: Path) -> None:
    proc = cli("replay", "no-such-run", "--backend", "docker", "--slurm-partition", "gpu")
    assert proc.returncode == 2
    assert "--slurm-partition applies to --backend slurm only" in proc.stderr
    proc = cli("drill", "--backend", "slurm", "--slurm-time", "tomorrow")
    assert proc.returncode == 2 and "time limit" in proc.stderr
    if store_path.exists():  # opened, but nothing was written
        from storage.store import RunStore

        with RunStore(store_path) as s:
            assert s.facts("replays") == [] and s.facts("drills") == []
            assert s.count_runs() == 0


def test_max_in_flight_holds_a_job_back_until_a_slot_frees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from replay_tui.replay.backends.slurm.commands import in_flight_slot

    log = _fake_tools(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    ex = _executor(tmp_path, gpus=0, options=SlurmOptions(max_in_flight=1))
    held = in_flight_slot(1)
    assert held is not None and held is in_flight_slot(1)  # one limit, shared by every replay
    spec = _spec(tmp_path)
    held.acquire()  # another replay of this process has the only slot
    try:
        result = ex.run(spec, lambda _l: None, lambda: True)
    finally:
        held.release()
    assert result.status == "interrupted" and result.reason == "cancelled before submitting"
    assert not log.exists()  # never submitted
    result = ex.run(spec, lambda _l: None, lambda: False)
    assert result.status == "succeeded" and log.exists()
