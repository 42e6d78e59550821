"""Talking to Slurm: ``sbatch`` refusals explained (:func:`sbatch_refused`), a
job's state from ``scontrol show job -o`` or else ``sacct`` (:func:`query_job`),
``scancel`` (:func:`cancel_job`), and the per-process limit on jobs in flight
(:func:`in_flight_slot`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from dataclasses import dataclass

from replay_tui.errors import InfraError
from replay_tui.replay.backends.slurm.options import ENV_PREFIX

TERMINAL = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "PREEMPTED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
_CONNECT = ("Unable to contact slurm controller", "Socket timed out", "Connection refused")


def tool_path(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise InfraError(
            f"`{name}` is not on PATH: this host is not a Slurm submit host",
            "install the Slurm client (Debian: slurm-client) and point SLURM_CONF at the"
            " cluster, or set up a one-node cluster with scripts/slurm-env.sh;"
            " or replay with --backend docker",
        )
    return path


def run_tool(
    argv: list[str], timeout: float = 60, umask: int = -1
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            umask=umask,
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} timed out after {timeout}s")


def _controller_down(stderr: str) -> bool:
    return any(s in stderr for s in _CONNECT)


def sbatch_refused(p: subprocess.CompletedProcess[str], what: str) -> InfraError:
    """Why ``sbatch`` did not take ``what`` (a replay job, the probe job): the controller
    does not answer, or it refused the job's options."""
    err = (p.stderr or p.stdout).strip()[-600:]
    if _controller_down(err) or p.returncode == 124:
        return InfraError(
            f"the Slurm controller does not answer: {err}",
            "check that slurmctld runs (`scontrol ping`; scripts/slurm-env.sh starts"
            " the one-node cluster) and that SLURM_CONF points at it",
        )
    return InfraError(
        f"sbatch refused {what}: {err}",
        "check the partition, account, QOS, time limit and extra sbatch arguments"
        f" ({ENV_PREFIX}* or the --slurm-* flags)",
    )


@dataclass
class JobState:
    state: str  # PENDING, RUNNING, COMPLETED...
    reason: str | None = None
    node: str | None = None
    partition: str | None = None
    exit_code: str | None = None  # Slurm's "code:signal"
    time_limit: str | None = None
    account: str | None = None
    qos: str | None = None
    source: str = "scontrol"


def _field(text: str, key: str) -> str | None:
    m = re.search(rf"(?:^|\s){key}=(\S*)", text)
    if m is None:
        return None
    v = m.group(1)
    return None if v in ("", "(null)", "None", "N/A") else v


def query_job(job_id: str) -> JobState | None:
    """The job's state from the controller, else from accounting; None if nobody answers."""
    p = run_tool(["scontrol", "show", "job", "-o", job_id], timeout=30)
    if p.returncode == 0 and "JobState=" in p.stdout:
        t = p.stdout
        return JobState(
            state=(_field(t, "JobState") or "UNKNOWN").upper(),
            reason=_field(t, "Reason"),
            node=_field(t, "BatchHost") or _field(t, "NodeList"),
            partition=_field(t, "Partition"),
            exit_code=_field(t, "ExitCode"),
            time_limit=_field(t, "TimeLimit"),
            account=_field(t, "Account"),
            qos=_field(t, "QOS"),
        )
    if shutil.which("sacct") is None:
        return None
    fmt = "State,ExitCode,NodeList,Partition,Reason,Timelimit,Account,QOS"
    q = run_tool(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", fmt], timeout=30)
    line = next((ln for ln in q.stdout.splitlines() if ln.strip()), "")
    if q.returncode != 0 or not line:
        return None
    parts = (line.split("|") + [""] * 8)[:8]

    def nz(v: str) -> str | None:
        return v if v and v not in ("None", "None assigned", "Unknown") else None

    return JobState(
        state=parts[0].split()[0].upper() if parts[0] else "UNKNOWN",
        reason=nz(parts[4]),
        node=nz(parts[2]),
        partition=nz(parts[3]),
        exit_code=nz(parts[1]),
        time_limit=nz(parts[5]),
        account=nz(parts[6]),
        qos=nz(parts[7]),
        source="sacct",
    )


def cancel_job(job_id: str) -> bool:
    return run_tool(["scancel", job_id], timeout=30).returncode == 0


_slots_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def in_flight_slot(n: int) -> threading.BoundedSemaphore | None:
    """One semaphore per limit, shared by every replay of this process."""
    if n <= 0:
        return None
    with _slots_lock:
        return _slots.setdefault(n, threading.BoundedSemaphore(n))
