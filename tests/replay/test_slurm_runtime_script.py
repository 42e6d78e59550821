"""How a Slurm job starts Podman or Apptainer (``--slurm-runtime``), as text and checks.

The job scripts are built here and read by ``bash -n``; their command lines are held
against the one-host runtimes' own argument builders (the sandbox is written once).  The
identity the node's runtime gives is checked by the one-host backends' check.  GPUs: no
GPU is on this machine, so the GPU lines are checked as built, never run.  The real jobs
run in tests/replay/test_slurm_runtimes.py and tests/security/test_slurm_runtime_sandbox.py.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from replay_tui.capture.executor import ExecSpec
from replay_tui.errors import BadInput
from replay_tui.replay.backends import declared_options
from replay_tui.replay.backends.docker import engine as dk
from replay_tui.replay.backends.runtime import IdentityMismatch, oci_run_flags, run_request
from replay_tui.replay.backends.slurm.backend import OPTIONS, RUNTIMES, slurm_options
from replay_tui.replay.backends.slurm.options import SlurmOptions
from replay_tui.replay.backends.slurm.runtimes import (
    NAME_WORD,
    choose,
    node_runtime,
    probe_script,
    read_runtimes,
)
from replay_tui.replay.backends.slurm.spool import JobFolder
from tests.conftest import RunCli

DIGEST = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64
REF = f"localhost:5000/replay-tui/train@{DIGEST}"


def test_the_runtime_option_is_declared_once_for_flag_variable_and_form() -> None:
    (option,) = [o for o in OPTIONS if o.name == "runtime"]
    assert option.flag == "--slurm-runtime" and option.env == "REPLAY_TUI_SLURM_RUNTIME"
    assert option.choices == RUNTIMES == ("docker", "podman", "apptainer")
    assert option in declared_options()["slurm"]  # the TUI's form reads the same tuple
    assert slurm_options((("runtime", "podman"),), {}).runtime == "podman"
    assert slurm_options((), {"REPLAY_TUI_SLURM_RUNTIME": "apptainer"}).runtime == "apptainer"
    assert slurm_options((), {}).runtime is None  # the nodes' (a probe job says)
    with pytest.raises(BadInput, match="REPLAY_TUI_SLURM_RUNTIME"):
        slurm_options((), {"REPLAY_TUI_SLURM_RUNTIME": "enroot"})
    with pytest.raises(BadInput, match="not one of docker, podman, apptainer"):
        SlurmOptions(runtime="enroot").validated()


def test_the_command_line_offers_the_runtimes_and_refuses_others(cli: RunCli) -> None:
    out = " ".join(cli("drill", "--help").stdout.split())
    assert "--slurm-runtime [docker|podman|apptainer]" in out
    proc = cli("replay", "x", "--backend", "slurm", "--slurm-runtime", "enroot")
    assert proc.returncode == 2 and "--slurm-runtime" in proc.stderr
    proc = cli("replay", "x", "--backend", "podman", "--slurm-runtime", "podman")
    assert proc.returncode == 2
    assert "--slurm-runtime applies to --backend slurm only" in proc.stderr


def _job(tmp_path: Path) -> tuple[JobFolder, ExecSpec, dk.Sandbox, list[dk.Mount]]:
    spool = tmp_path / "spool"
    job = JobFolder.make(spool)
    handoff = spool / "work" / "handoff"
    handoff.mkdir(parents=True)
    spec = ExecSpec(
        ["python3", "train.py", "--lr", "0.1"],
        tmp_path,
        {"SEED": "1", "NOTE": 'it\'s a "quoted" $value, with a comma'},
        handoff,
        spool / "work" / "output.log",
    )
    sandbox = dk.Sandbox(gpus=2, memory_limit="2g", pids_limit=256, user="65534:65534")
    mounts = [
        dk.Mount(str(tmp_path / "wt"), dk.CONTAINER_ROOT, True),
        dk.Mount("", f"{dk.CONTAINER_ROOT}/.git", True, kind="tmpfs"),
        dk.Mount(str(tmp_path / "wt" / "out"), f"{dk.CONTAINER_ROOT}/out", False),
    ]
    return job, spec, sandbox, mounts


def _run_words(script: str, runtime: str) -> list[str]:
    """The words of the line that starts the run (before its redirection)."""
    start = script.index(f"{runtime} run " if runtime == "podman" else "env -i PATH")
    start = script.rfind("\n", 0, script.index(" \\\n  >> output.log", start)) + 1
    line = script[start : script.index(" \\\n  >> output.log", start)]
    return shlex.split(line)


@pytest.mark.parametrize("runtime", ["podman", "apptainer"])
def test_the_job_script_runs_the_one_host_runtimes_sandbox(runtime: str, tmp_path: Path) -> None:
    job, spec, sandbox, mounts = _job(tmp_path)
    try:
        nr = node_runtime(runtime, REF, job.path.parent.parent)
        assert nr is not None
        sdk = str(job.path / "sdk" / "replay_tui")
        req = run_request(spec, mounts, dk.CONTAINER_ROOT, sandbox, NAME_WORD, sdk_source=sdk)
        script = nr.script(job, req, gpus=2, want_probe=True, walls="# walls")
    finally:
        job.close()
    check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr
    run = _run_words(script, runtime)
    joined = " ".join(run)
    assert "${GPUS[@]}" in run and "${WALLS[@]}" in run  # the node's GPUs and walls
    assert run[-4:] == ["python3", "train.py", "--lr", "0.1"]
    assert f"{dk.SDK_MOUNT}/replay_tui" in joined and sdk in joined  # the job's SDK copy
    if runtime == "podman":
        # every sandbox flag of the one-host podman backend, the node's name and image
        plain = req.__class__(**{**req.__dict__, "name": "$NAME"})
        for flag in oci_run_flags(plain):
            assert flag in run, flag
        assert run[run.index("--pull") + 1] == "never" and "$IMAGE" in run
        assert '--env NOTE=it\'s a "quoted" $value, with a comma' in joined
        assert 'GPUS+=(--device "nvidia.com/gpu=$g")' in script  # CDI, the job's GPUs
    else:
        for flag in ("--containall", "--no-home", "--cleanenv", "--no-privs"):
            assert flag in run
        assert "--net --network none" in joined and "--security uid:65534,gid:65534" in joined
        assert "--memory 2g --memory-swap 2g" in joined and "--pids-limit 256" in joined
        assert f"--bind {tmp_path / 'wt'}:{dk.CONTAINER_ROOT}:ro" in joined
        assert f"--bind {tmp_path / 'wt' / 'out'}:{dk.CONTAINER_ROOT}/out:rw" in joined
        # the .git folder is covered by an empty folder in the job folder (the node sees it)
        assert f"--bind {job.path / 'empty-0'}:{dk.CONTAINER_ROOT}/.git:ro" in joined
        assert 'APPTAINERENV_NOTE=it\'s a "quoted" $value, with a comma' in run  # never split
        assert run[run.index("$IMAGE") - 1] == "none" or "$IMAGE" in run
        assert "GPUS=(--nv)" in script
        assert 'APPTAINERENV_CUDA_VISIBLE_DEVICES="$JOB_GPUS"' in script
        assert 'JOB_GPUS="${SLURM_JOB_GPUS:-0,1}"' in script  # the recorded count, 2
    # nothing runs before the submitting host approves the identity it was shown
    assert script.index("identity.ok") < script.index(">> output.log")
    assert "sha256sum < identity" in script


def _podman_identity(digest: str) -> bytes:
    found = [{"Id": "c" * 64, "Digest": digest, "RepoDigests": [], "Os": "linux"}]
    return b"version\t4.3.1\n---\n" + json.dumps(found).encode()


def test_the_nodes_identity_is_checked_by_the_one_host_check(tmp_path: Path) -> None:
    podman = node_runtime("podman", REF, tmp_path)
    assert podman is not None
    got = podman.identity(_podman_identity(DIGEST))
    assert got.runtime_info() == {
        "name": "podman",
        "version": "4.3.1",
        "requested_digest": DIGEST,
        "image_id": "sha256:" + "c" * 64,
    }
    with pytest.raises(IdentityMismatch, match="podman's image digest differs") as e:
        podman.identity(_podman_identity(OTHER))
    assert OTHER in e.value.message and DIGEST in e.value.message
    app = node_runtime("apptainer", REF, tmp_path)
    assert app is not None
    head = f"version\tapptainer version 1.4.5\nsif_sha256\t{'d' * 64}\n---\n"
    got = app.identity(f"{head}bootstrap: docker\nfrom: x@{DIGEST}\n".encode())
    assert got.sif_sha256 == "d" * 64 and got.sif_built_from == DIGEST
    assert got.sif_path == tmp_path / "sif" / f"{'a' * 64}.sif"  # the spool's SIF cache
    with pytest.raises(IdentityMismatch, match="the SIF's built-from digest differs") as e:
        app.identity(f"{head}bootstrap: docker\nfrom: x@{OTHER}\n".encode())
    assert OTHER in e.value.message and DIGEST in e.value.message


def test_which_runtime_the_nodes_have_is_read_and_chosen_in_order(tmp_path: Path) -> None:
    script = probe_script(tmp_path, "t" * 64)
    check = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert check.returncode == 0, check.stderr
    assert "{{.Server.Version}}" in script  # docker counts only when its engine answers
    found = read_runtimes(b"apptainer apptainer version 1.4.5\npodman 4.3.1\nenroot 3.4\n")
    assert found == {"apptainer": "1.4.5", "podman": "4.3.1"}
    assert choose(found) == "podman"
    assert choose({**found, "docker": "24.0"}) == "docker"  # the engine first, as before
    assert choose({}) is None


def test_a_controller_that_does_not_answer_the_probe_job_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from replay_tui.errors import InfraError
    from replay_tui.replay.backends.slurm.runtimes import detect_runtime

    bindir = tmp_path / "bin"
    bindir.mkdir()
    sbatch = bindir / "sbatch"
    sbatch.write_text(
        "#!/bin/bash\necho 'sbatch: error: Batch job submission failed: Unable to contact"
        " slurm controller (connect failure)' >&2\nexit 1\n"
    )
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    with pytest.raises(InfraError, match="Slurm controller does not answer") as e:
        detect_runtime(SlurmOptions(), tmp_path / "spool", tmp_path / "probes")
    assert e.value.hint and "slurm-env.sh" in e.value.hint  # as a replay job's says
    assert not list((tmp_path / "spool" / "jobs").iterdir())  # the probe's folder removed


@pytest.mark.parametrize("runtime", ["docker", "podman", "apptainer"])
def test_the_empty_file_over_a_worktrees_git_file_is_one_the_node_sees(
    runtime: str, tmp_path: Path
) -> None:
    """A worktree's ``.git`` is a file, covered by an empty file of this host's temporary
    folder: a compute node has its own /tmp, so the job binds a copy in its folder."""
    from replay_tui.replay.backends.slurm.engine import SlurmExecutor

    host_empty = str(dk._empty_file())
    mounts = [
        dk.Mount(str(tmp_path / "wt"), dk.CONTAINER_ROOT, True),
        dk.Mount(host_empty, f"{dk.CONTAINER_ROOT}/.git", True),
    ]
    spool = tmp_path / "spool"
    container = dk.DockerExecutor(REF, mounts, dk.CONTAINER_ROOT, dk.Sandbox(user="65534:65534"))
    ex = SlurmExecutor(container, spool, node_runtime=node_runtime(runtime, REF, spool))
    job, spec, _sandbox, _mounts = _job(tmp_path)
    try:
        sdk = job.path / "sdk" / "replay_tui"
        if runtime == "docker":
            script = ex._docker_script(spec, job, sdk, "# walls")
        else:
            script = ex._runtime_script(spec, job, sdk, "# walls")
    finally:
        job.close()
    assert host_empty not in script
    assert str(job.path / "empty-file") in script
    assert (job.path / "empty-file").stat().st_size == 0


def test_the_probe_job_takes_where_a_job_runs_not_when() -> None:
    from replay_tui.replay.backends.slurm.runtimes import probe_sbatch_args

    given = ["--constraint=a100", "--hold", "--begin", "now+1hour", "-d", "afterok:1",
             "--dependency=singleton", "--reservation", "r1", "-H", "--gres=gpu:1"]  # fmt: skip
    assert probe_sbatch_args(given) == ["--constraint=a100", "--reservation", "r1", "--gres=gpu:1"]
