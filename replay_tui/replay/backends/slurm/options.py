"""Where and how replay jobs are submitted (:class:`SlurmOptions`, from the
``--slurm-*`` flags and ``REPLAY_TUI_SLURM_*``), and a replay's limits in Slurm's
forms (``--mem``, ``--time``)."""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from replay_tui.errors import BadInput
from replay_tui.replay.backends.slurm.words import RUNTIMES

ENV_PREFIX = "REPLAY_TUI_SLURM_"
# Flags replay-tui sets itself: extra sbatch arguments may not override them.
_RESERVED_SBATCH = (
    "--output",
    "-o",
    "--error",
    "-e",
    "--parsable",
    "--wrap",
    "--chdir",
    "-D",
    "--array",
    "-a",
    "--wait",
    "-W",
    "--export",
    "--job-name",
    "-J",
    "--requeue",
    "--no-requeue",
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
# Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, or UNLIMITED.
_TIME = re.compile(r"^(\d{1,7}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|infinite)$")
_MEMORY = re.compile(r"^(\d+)([bkmg]?)b?$", re.IGNORECASE)


@dataclass(frozen=True)
class SlurmOptions:
    """Where and how replay jobs are submitted; from flags and ``REPLAY_TUI_SLURM_*``."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None  # Slurm's --time form, e.g. 30, 1:00:00, 1-00:00:00
    sbatch_args: tuple[str, ...] = ()
    max_in_flight: int = 0  # jobs of this process queued or running at once; 0: no limit
    spool: Path | None = None  # shared folder for job files (default: beside the store)
    runtime: str | None = None  # what a job starts: docker, podman, apptainer (None: the nodes')
    poll_min_s: float = 1.0
    poll_max_s: float = 15.0
    lost_after_s: float = 300.0  # give up on a job whose state nobody can tell us

    def validated(self) -> SlurmOptions:
        """The same options, or BadInput naming the bad one."""
        for what, value in (
            ("partition", self.partition),
            ("account", self.account),
            ("qos", self.qos),
        ):
            if value is not None and not all(_NAME.match(v) for v in value.split(",")):
                raise BadInput(f"slurm {what} {value!r} is not a valid Slurm name")
        if self.time_limit is not None and not _TIME.match(self.time_limit):
            raise BadInput(
                f"slurm time limit {self.time_limit!r} is not in Slurm's form",
                "use minutes (30), H:M:S (1:30:00) or D-H:M:S (1-00:00:00)",
            )
        for arg in self.sbatch_args:
            flag = arg.split("=", 1)[0]
            if flag in _RESERVED_SBATCH or any(
                flag.startswith(r) and len(r) == 2 for r in _RESERVED_SBATCH if r == flag[:2]
            ):
                raise BadInput(
                    f"extra sbatch argument {arg!r} would override what replay-tui sets"
                    " (output, job name, working folder, environment)"
                )
            if "\x00" in arg or "\n" in arg:
                raise BadInput(f"extra sbatch argument {arg!r} contains a control character")
        if self.runtime is not None and self.runtime not in RUNTIMES:
            raise BadInput(
                f"slurm runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}",
                "leave it unset to use what the cluster's nodes have",
            )
        if self.max_in_flight < 0:
            raise BadInput("slurm max jobs in flight must be >= 0 (0: no limit)")
        if not (0 < self.poll_min_s <= self.poll_max_s):
            raise BadInput("slurm poll interval: need 0 < min <= max")
        return self

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> SlurmOptions:
        """Options from ``REPLAY_TUI_SLURM_*``; ``overrides`` (flags) win where not None."""
        e = os.environ if env is None else env

        def get(name: str) -> str | None:
            v = e.get(ENV_PREFIX + name)
            return v if v else None

        def num(name: str, default: float) -> float:
            v = get(name)
            if v is None:
                return default
            try:
                x = float(v)
            except ValueError:
                raise BadInput(f"{ENV_PREFIX}{name}={v!r} is not a number") from None
            if not math.isfinite(x):
                raise BadInput(f"{ENV_PREFIX}{name}={v!r} is not a finite number")
            return x

        try:
            extra = tuple(shlex.split(get("SBATCH_ARGS") or ""))
        except ValueError as ex:
            raise BadInput(f"{ENV_PREFIX}SBATCH_ARGS cannot be split: {ex}") from None
        spool = get("SPOOL")
        opts = cls(
            partition=get("PARTITION"),
            account=get("ACCOUNT"),
            qos=get("QOS"),
            time_limit=get("TIME"),
            sbatch_args=extra,
            max_in_flight=int(num("MAX_IN_FLIGHT", 0)),
            spool=Path(spool) if spool else None,
            runtime=get("RUNTIME"),
            poll_min_s=num("POLL_MIN", 1.0),
            poll_max_s=num("POLL_MAX", 15.0),
            lost_after_s=num("LOST_AFTER", 300.0),
        )
        given = {k: v for k, v in overrides.items() if v is not None}
        if "sbatch_args" in given:
            given["sbatch_args"] = opts.sbatch_args + tuple(given["sbatch_args"])
        return replace(opts, **given).validated()


def slurm_memory(docker_limit: str) -> str:
    """A docker memory limit (``512m``, ``2g``) as Slurm's ``--mem`` (whole MiB)."""
    m = _MEMORY.match(docker_limit.strip())
    if m is None:
        raise BadInput(f"memory limit {docker_limit!r} is not a size like 512m or 2g")
    n, unit = int(m.group(1)), m.group(2).lower()
    scale = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]
    return f"{max(1, math.ceil(n * scale / 1024**2))}M"


def slurm_time(seconds: float) -> str:
    """Seconds as Slurm's ``M:S`` (Slurm rounds limits up to whole minutes)."""
    s = max(1, math.ceil(seconds))
    return f"{s // 60}:{s % 60:02d}"
