"""Run a replay's sandboxed container as a Slurm batch job.

The job runs the same container as the docker backend: the docker backend's
:class:`~replay_tui.replay.backends.docker.engine.DockerExecutor` defines the sandbox
(image by digest, no network, read-only code and data, capabilities dropped,
no-new-privileges, pids and memory limits, a label), :func:`container_kwargs` takes
exactly what it would create the container with, and :func:`docker_cli_args` turns that
into ``docker run`` flags, refusing any setting it does not know (so the two backends
cannot drift apart silently).

The job never opens the store.  It writes into a job folder in the spool (a folder on a
filesystem the submit host and the compute nodes share): the container's output, the
script's own exit code and timestamps, where it ran, and what the image is.  The process
that submitted the job streams the output from there, polls Slurm with back-off
(``scontrol show job``, then ``sacct`` once the controller has forgotten the job), maps
the end state to an honest result, and does the hashing, comparing and storing itself.

Commands used: ``sbatch --parsable``, ``scontrol show job -o``, ``sacct``, ``scancel``.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import hmac
import io
import json
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from replay_tui.capture import probes
from replay_tui.capture.executor import ExecResult, ExecSpec, OnLine, ShouldCancel
from replay_tui.errors import BadInput, InfraError
from replay_tui.replay.backends.docker.engine import PROBE, SDK_DIR, SDK_MOUNT
from replay_tui.replay.backends.runtime import ImageIdentity
from replay_tui.replay.backends.slurm.words import NAME_WORD, RUNTIMES
from storage.ledger import utc_now

ENV_PREFIX = "REPLAY_TUI_SLURM_"
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
_CONNECT = ("Unable to contact slurm controller", "Socket timed out", "Connection refused")


# -- options -----------------------------------------------------------------------------


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


def spool_dir(options: SlurmOptions, store_path: Path) -> Path:
    """The spool: ``options.spool``, else ``slurm-spool`` beside the store; its whole
    path trusted (:func:`trusted_spool`), made owner-only when missing, and refused when
    someone else could write into it or into a folder above it: its content runs in the
    replay's container, and the job writes there as this user."""
    return trusted_spool((options.spool or store_path.parent / "slurm-spool").resolve())


_SPOOL_HINT = (
    "keep the spool under folders only you and root can write (a sticky one such as"
    " /tmp will do), e.g. mkdir -m 700 ~/slurm-spool, and name it with --slurm-spool or"
    " REPLAY_TUI_SLURM_SPOOL"
)


def path_problem(folder: Path) -> tuple[Path, str] | None:
    """The first folder from ``folder`` (an absolute path without links) up to ``/``
    that someone other than root or this user could change, and what is wrong with it.

    Each folder there must belong to root or to this user, and must not be writable by
    its group or others unless it is sticky (as ``/tmp`` is), where only an entry's
    owner may rename or remove it, and every entry on the path is checked to be root's
    or this user's.  Otherwise its owner, or anyone who can write into it, could move
    the spool away while a job waits and put a folder of their own in its place, full
    of links the job would write through as this user.  A folder not there yet is
    skipped (it is made by this user)."""
    me = os.geteuid()
    for d in (folder, *folder.parents):
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            continue
        except OSError as e:
            return d, f"cannot be inspected ({e.strerror})"
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            return d, "is a symbolic link (put in since the path was resolved)"
        if not stat.S_ISDIR(st.st_mode):
            return d, "is not a folder"
        if st.st_uid not in (0, me):
            return d, (
                f"belongs to uid {st.st_uid}, neither you (uid {me}) nor root: its owner"
                " could move the spool away and put a folder of their own in its place"
            )
        if mode & 0o022 and not mode & stat.S_ISVTX:
            who = "others" if mode & 0o002 else "its group"
            return d, (
                f"can be written by {who} (mode {mode:04o}) and is not sticky: they could"
                " move the spool away and put a folder of their own in its place"
            )
    return None


def _refuse_path(spool: Path) -> None:
    from replay_tui.door import Refused

    problem = path_problem(spool.parent)
    if problem is not None:
        where, what = problem
        raise Refused(f"Slurm spool {spool}: the folder {where} above it {what}", _SPOOL_HINT)


def trusted_spool(spool: Path) -> Path:
    """``spool`` (absolute, resolved) when its whole path is trusted: every folder above
    it passes :func:`path_problem` (checked before anything is made there, and again
    after), and the spool itself is this user's alone (``door.private_folder``: made
    0700 when missing, tightened when ours, refused when not).  Refusals are
    ``door.Refused`` (exit 2) naming the folder and what is wrong with it."""
    from replay_tui.door import private_folder

    _refuse_path(spool)
    private_folder(spool, "Slurm spool")
    _refuse_path(spool)  # the folders made on the way are checked too
    return spool


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


# -- the container, as docker run flags -------------------------------------------------


def container_kwargs(executor: Any, spec: ExecSpec) -> dict[str, Any]:
    """What ``executor`` (a DockerExecutor) creates its container with for ``spec``.

    The docker backend's own code builds the settings, so a sandbox setting added there
    is seen here (and :func:`docker_cli_args` refuses it until it knows the flag).
    """
    kwargs: dict[str, Any] = executor.create_kwargs(spec)
    return kwargs


def _mount_flag(m: Mapping[str, Any]) -> str:
    fields = [f"type={m.get('Type', 'bind')}"]
    if m.get("Source"):
        fields.append(f"source={m['Source']}")
    fields.append(f"target={m['Target']}")
    if m.get("ReadOnly"):
        fields.append("readonly")
    opts = m.get("TmpfsOptions") or {}
    if opts.get("SizeBytes"):
        fields.append(f"tmpfs-size={int(opts['SizeBytes'])}")
    if opts.get("Mode"):
        fields.append(f"tmpfs-mode={int(opts['Mode']):o}")
    # docker parses --mount as one CSV record: quote fields holding , or "
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(fields)
    return buf.getvalue()


def docker_cli_args(kwargs: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``docker run`` flags and the command for the Docker SDK's ``containers.create``
    keyword arguments.  A setting without a known flag raises ValueError."""
    args: list[str] = []
    command: list[str] = []
    for key, value in kwargs.items():
        if key == "command":
            command = [str(a) for a in value]
        elif key == "working_dir":
            args += ["--workdir", str(value)]
        elif key == "environment":
            for k, v in value.items():
                args += ["--env", f"{k}={v}"]
        elif key == "mounts":
            for m in value:
                args += ["--mount", _mount_flag(m)]
        elif key == "network_mode":
            args += ["--network", str(value)]
        elif key == "cap_drop":
            for cap in value:
                args += ["--cap-drop", str(cap)]
        elif key == "cap_add":
            for cap in value:
                args += ["--cap-add", str(cap)]
        elif key == "security_opt":
            for opt in value:
                args += ["--security-opt", str(opt)]
        elif key == "pids_limit":
            args += ["--pids-limit", str(int(value))]
        elif key == "read_only":
            if value:
                args.append("--read-only")
        elif key == "tmpfs":
            for path, opts in value.items():
                args += ["--tmpfs", f"{path}:{opts}" if opts else str(path)]
        elif key == "shm_size":
            args += ["--shm-size", str(value)]
        elif key == "privileged":
            if value:
                raise ValueError("a privileged container is never run")
        elif key == "user":
            args += ["--user", str(value)]
        elif key == "labels":
            for k, v in value.items():
                args += ["--label", f"{k}={v}"]
        elif key == "mem_limit":
            args += ["--memory", str(value)]
        elif key == "memswap_limit":
            args += ["--memory-swap", str(value)]
        elif key == "nano_cpus":
            args += ["--cpus", f"{int(value) / 1e9:g}"]
        elif key == "device_requests":
            for req in value:
                caps = [c for group in (req.get("Capabilities") or []) for c in group]
                if "gpu" not in caps:
                    raise ValueError(f"device request {dict(req)} has no docker run flag here")
                count = req.get("Count", -1)
                args += ["--gpus", "all" if count in (-1, None) else str(count)]
        elif key in ("detach", "remove", "auto_remove", "name"):
            continue  # how the CLI runs it is the job script's business
        else:
            raise ValueError(f"container setting {key!r} has no docker run flag here")
    return args, command


# -- the job script ----------------------------------------------------------------------

HEADER = """\
#!/bin/bash
# A replay-tui replay job: runs one sandboxed container and records what happened in
# the job folder.  It never touches the replay-tui store.
set -u
set -C  # noclobber: a file is made here only where none (and no link) is there yet
umask 077
JOBDIR={jobdir}
# Work inside the folder replay-tui made, by its descriptor (the working folder), and
# check it is that one: a folder someone put in its place has no token, and gets nothing.
cd -- "$JOBDIR" || exit 1
if [ ! -f job.token ] || [ -L job.token ] || [ "$(head -c 200 job.token)" != {token} ]; then
  echo "replay-tui: $JOBDIR is not the job folder replay-tui made (moved away and" \\
    "replaced?): nothing is run" >&2
  exit 1
fi
NAME="replay-tui-${{SLURM_JOB_ID:-$$}}"
date -u +%s.%N > start.tmp && mv -f start.tmp start
printf '{{"job_id": "%s", "node": "%s", "partition": "%s"}}\\n' \\
  "${{SLURM_JOB_ID:-}}" "$(hostname -s)" "${{SLURM_JOB_PARTITION:-}}" > where.json
"""
"""The job script's start, the same for every runtime: the job folder checked by its
token, the start time, where it runs."""

PROBE_BLOCK = """\
# What the image holds, with a MAC keyed by this job's secret (only this script and
# replay-tui know it): a probe.json someone else left here is never taken.
if [ {want_probe} = 1 ] && [ "$rc" -lt 128 ]; then
  if {probe_cmd} > probe.json.tmp 2>/dev/null; then
    sum=$(sha256sum < probe.json.tmp) \\
      && mac=$(printf '%s:%s' {token} "${{sum%% *}}" | sha256sum) \\
      && printf '%s\\n' "${{mac%% *}}" > probe.mac.tmp \\
      && mv -f probe.json.tmp probe.json && mv -f probe.mac.tmp probe.mac
  fi
  rm -f probe.json.tmp probe.mac.tmp
fi
echo "$rc" > exit_code.tmp && mv -f exit_code.tmp exit_code
exit "$rc"
"""
"""The job script's end, the same for every runtime: the image probe (``probe_cmd``)
with its MAC, then the exit code."""

_DOCKER = """\
stop() {{
  echo "replay-tui: job received $1: stopping the container" >&2
  docker stop --time 5 "$NAME" >/dev/null 2>&1
}}
trap 'stop SIGTERM' TERM
trap 'stop SIGINT' INT
GPUS=()
{gpus}
WALLS=()
unbound() {{ :; }}
{walls}
T0=$(date +%s)
docker run --rm --pull missing --quiet --name "$NAME" "${{GPUS[@]}}" "${{WALLS[@]}}" \\
{docker_args} \\
  {image} \\
{command} \\
  >> output.log 2>&1 &
pid=$!
wait "$pid"; rc=$?
while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
# killed at its memory limit: the engine's own "oom" event for this container says so
if [ "$rc" = 137 ] && [ -n "$(docker events --since "$T0" --until "$(( $(date +%s) + 1 ))" \\
  --filter "container=$NAME" --filter event=oom --format x 2>/dev/null | head -c 1)" ]; then
  echo 1 > oom.tmp && mv -f oom.tmp oom
fi
unbound
date -u +%s.%N > end
docker image inspect --format '{{{{json .}}}}' {image} > image.json 2>/dev/null || true
"""
_SCRIPT = HEADER + _DOCKER + PROBE_BLOCK


_WALLS = """\
# The walls (replay_tui.replay.backends.docker.walls), sized here on the node: memory
# and CPUs from this job's allocation unless given, the container's user, and each
# folder it may write a tmpfs of a fixed size mounted here (root only), its content
# copied back onto the shared folder underneath when the container has ended.
U={uid}; G={gid}; MEM={memory}; CPUS={cpus}; WANT={want}
if [ -z "$MEM" ]; then
  if [ "${{SLURM_MEM_PER_NODE:-0}}" -ge 6 ] 2>/dev/null; then MEM="${{SLURM_MEM_PER_NODE}}m"
  else MEM="$(( $(awk '/^MemTotal:/ {{print $2}}' /proc/meminfo) / 2048 ))m"; fi
  WALLS+=(--memory "$MEM" --memory-swap "$MEM")
fi
if [ -z "$CPUS" ]; then
  have=$(nproc)
  given=${{SLURM_CPUS_ON_NODE:-0}}
  if [ "$given" -ge 1 ] 2>/dev/null && [ "$given" -lt "$have" ]; then have=$given; fi
  CPUS=${{WANT:-$have}}
  if [ "$CPUS" -gt "$have" ]; then CPUS=$have; fi
  WALLS+=(--cpus "$CPUS")
fi
read -ra me < <(sed 's/.*) //' /proc/$$/stat)
TAG="replay-tui-walls.$$.${{me[19]}}"
BOUND=()
bound() {{  # FOLDER SIZE: a tmpfs of SIZE bytes over FOLDER, what it held copied in
  local d=$1 stash rc
  stash=$(mktemp -d "${{d%/}}.walls-XXXXXX") || return 1
  if ! cp -a -- "$d/." "$stash/" \\
    || ! mount -t tmpfs -o "size=$2,mode=0700,uid=$U,gid=$G,nosuid,nodev" "$TAG" "$d"; then
    rm -rf -- "$stash"; return 1
  fi
  if cp -a -- "$stash/." "$d/" && chown -R -h -- "$U:$G" "$d"; then BOUND+=("$d"); rc=0
  else umount -- "$d" 2>/dev/null || umount --lazy -- "$d"; rc=1; fi  # over its bound
  rm -rf -- "$stash"; return $rc
}}
unbound() {{  # what each folder holds, back on the folder underneath; then unmounted
  local i d stash p s
  for (( i=${{#BOUND[@]}}-1; i>=0; i-- )); do
    d=${{BOUND[i]}}
    stash=$(mktemp -d "${{d%/}}.walls-XXXXXX") && cp -a -- "$d/." "$stash/"
    umount -- "$d" 2>/dev/null || umount --lazy -- "$d"
    if [ -n "$stash" ] && [ -d "$stash" ]; then
      # underneath: no link is left to write through, nor what the run removed or
      # replaced by another kind; a file it did not touch keeps its identity (cp -u)
      find "$d" -mindepth 1 -depth -print0 | while IFS= read -r -d '' p; do
        s="$stash/${{p#"$d"/}}"
        if [ -L "$p" ] || [ -L "$s" ] || {{ [ -d "$p" ] && [ ! -d "$s" ]; }} \\
          || {{ [ ! -d "$p" ] && [ ! -f "$s" ]; }}; then rm -rf -- "$p"; fi
      done
      cp -a -u -- "$stash/." "$d/"; rm -rf -- "$stash"
    fi
  done
  BOUND=()
}}
FOLDERS=({folders})
OUTPUT_BYTES=null
WHY=
if [ "$(id -u)" != 0 ]; then WHY="mounting a size-bounded folder needs root"
elif ! command -v mount >/dev/null || ! command -v umount >/dev/null; then
  WHY="mount(8) is not on PATH"
else
  for f in "${{FOLDERS[@]}}"; do
    bound "$f" {size} || {{ WHY="cannot mount a {size}-byte tmpfs over an output folder"; break; }}
  done
  if [ -z "$WHY" ]; then
    bound {handoff} {handoff_bytes} || WHY="cannot bound the handoff folder"
  fi
  if [ -n "$WHY" ]; then unbound; else OUTPUT_BYTES={size}; fi
fi
if [ -n "$WHY" ] && [ "$(id -u)" = 0 ]; then  # plain folders, the container's user's
  for f in "${{FOLDERS[@]}}" {handoff}; do chown -R -h -- "$U:$G" "$f"; done
fi
printf '{{"memory_limit": "%s", "cpus": %s, "output_bytes": %s, "not_bounded": "%s"}}\\n' \\
  "$MEM" "$CPUS" "$OUTPUT_BYTES" "$WHY" > walls.json
"""


@dataclass(frozen=True)
class NodeWalls:
    """What the job script needs to raise the walls on the node: the container's user,
    the folders it may write (bounded at ``size`` bytes each), the recorded CPU count
    (capped there at the job's allocation) and whether memory and CPUs were given."""

    uid: int
    gid: int
    folders: tuple[str, ...]
    size: int
    want_cpus: int | None = None


def walls_block(walls: NodeWalls, handoff: Path, memory: str | None, cpus: float | None) -> str:
    """The job script's lines that raise ``walls`` (see :data:`_WALLS`)."""
    from replay_tui.replay.backends.docker.walls import HANDOFF_BYTES

    return _WALLS.format(
        uid=int(walls.uid),
        gid=int(walls.gid),
        memory=shlex.quote(memory or ""),
        cpus=shlex.quote(f"{cpus:g}" if cpus else ""),
        want=int(walls.want_cpus) if walls.want_cpus else "",
        folders=" ".join(shlex.quote(f) for f in walls.folders),
        size=int(walls.size),
        handoff=shlex.quote(str(handoff)),
        handoff_bytes=HANDOFF_BYTES,
    )


_WALL_MEMORY = re.compile(r"^[0-9]{1,12}[bkmg]?$")


def read_walls(raw: bytes) -> dict[str, Any]:
    """The walls the job script says it raised (``walls.json``, untrusted: a file in the
    spool), checked field by field; what does not check is left out."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("walls.json is not an object")
    got: dict[str, Any] = {}
    mem = data.get("memory_limit")
    if isinstance(mem, str) and _WALL_MEMORY.match(mem):
        got["memory_limit"] = mem
    cpus = data.get("cpus")
    if isinstance(cpus, (int, float)) and not isinstance(cpus, bool) and 0 < cpus <= 1 << 16:
        got["cpus"] = float(cpus)
    size = data.get("output_bytes")
    if isinstance(size, int) and not isinstance(size, bool) and 0 < size < 1 << 62:
        got["output_bytes"] = size
    why = data.get("not_bounded")
    if isinstance(why, str) and why and why.isprintable():
        got["not_bounded"] = why[:300]
    return got


def _lines(words: Sequence[str], indent: str = "  ") -> str:
    """Words as shell-quoted continuation lines, a flag and its value on one line."""
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            out.append(f"{indent}{shlex.quote(w)} {shlex.quote(words[i + 1])}")
            i += 2
        else:
            out.append(f"{indent}{shlex.quote(w)}")
            i += 1
    return " \\\n".join(out) if out else f"{indent}"


def identity_answer(token: str, body: bytes) -> str:
    """What ``identity.ok`` holds for the identity ``body``: its MAC keyed by the job's
    secret (the image probe's, :func:`probe_mac`)."""
    return probe_mac(token, body) + "\n"


def probe_mac(token: str, body: bytes) -> str:
    """The MAC the job script writes beside the probe: ``sha256("TOKEN:" + sha256(body))``
    (hex), the inner digest fixed in length so the outer one cannot be extended."""
    inner = hashlib.sha256(body).hexdigest()
    return hashlib.sha256(f"{token}:{inner}".encode()).hexdigest()


def job_script(
    jobdir: Path,
    image: str,
    docker_args: Sequence[str],
    command: Sequence[str],
    *,
    want_probe: bool,
    gpus: bool,
    token: str,
    walls: str = "# no walls asked for",
) -> str:
    args = list(docker_args)
    if "--gpus" in args:  # the job's allocated GPUs, not every GPU of the node
        i = args.index("--gpus")
        del args[i : i + 2]
    gpu_lines = (
        'if [ -n "${SLURM_JOB_GPUS:-}" ]; then GPUS=(--gpus "\\"device=$SLURM_JOB_GPUS\\"");'
        " else GPUS=(--gpus all); fi"
        if gpus
        else "# no GPUs recorded: none requested"
    )
    quoted = shlex.quote(image)
    probe_cmd = (
        "docker run --rm --network none --cap-drop ALL --security-opt no-new-privileges \\\n"
        f"    --entrypoint python3 {quoted} -I -c {shlex.quote(PROBE)}"
    )
    return _SCRIPT.format(
        jobdir=shlex.quote(str(jobdir)),
        token=shlex.quote(token),
        gpus=gpu_lines,
        walls=walls,
        docker_args=_lines(args),
        image=quoted,
        command=_lines(list(command), "  "),
        want_probe=1 if want_probe else 0,
        probe_cmd=probe_cmd,
    )


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _own_folder(parent_fd: int | None, name: str | Path, shown: Path, what: str) -> int:
    """A descriptor of the folder ``name`` (under ``parent_fd``, or a path whose folders
    above it the caller trusts), made 0700 when missing; opened without following a
    link, refused (``door.Refused``) unless it is this user's, tightened to 0700."""
    from replay_tui.door import Refused

    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass
    except OSError as e:
        raise Refused(f"{what} {shown}: cannot make it ({e.strerror})") from None
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as e:
        raise Refused(
            f"{what} {shown} is not a folder of ours (a link, or not a folder: {e.strerror})"
        ) from None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise Refused(
            f"{what} {shown} belongs to uid {st.st_uid} with mode"
            f" {stat.S_IMODE(st.st_mode):04o}: only a folder of yours alone is used"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.fchmod(fd, 0o700)
    return fd


def _write_new(dir_fd: int, name: str, data: str | bytes, mode: int = 0o600) -> None:
    """Make the new file ``name`` in the folder ``dir_fd`` holding ``data``, owner-only:
    an existing file or link of that name is an error, never written through."""
    fd = os.open(name, _NEW_FILE, mode & 0o700, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


@dataclass
class JobFolder:
    """A job's folder in the spool (``jobs/<name>/``), held open by descriptor.

    Every file of the job is made relative to that descriptor (``O_CREAT | O_EXCL |
    O_NOFOLLOW``, 0600) and read from it through the door (no link followed, bounded),
    so a folder moved away and replaced under the same name is neither written nor
    read.  ``token`` is the job's secret: the job script checks the folder holds it
    before running anything, and keys the image probe's MAC with it."""

    path: Path
    fd: int
    jobs_fd: int
    token: str

    @classmethod
    def make(cls, spool: Path) -> JobFolder:
        trusted_spool(spool)
        spool_fd = _own_folder(None, spool, spool, "Slurm spool")
        try:
            jobs_fd = _own_folder(spool_fd, "jobs", spool / "jobs", "Slurm spool's jobs folder")
        finally:
            os.close(spool_fd)
        try:
            for _ in range(64):
                name = secrets.token_hex(4)
                try:
                    os.mkdir(name, 0o700, dir_fd=jobs_fd)
                except FileExistsError:
                    continue
                break
            else:
                raise InfraError(f"cannot make a job folder in {spool / 'jobs'}")
            fd = _own_folder(jobs_fd, name, spool / "jobs" / name, "Slurm job folder")
        except BaseException:
            os.close(jobs_fd)
            raise
        job = cls(spool / "jobs" / name, fd, jobs_fd, secrets.token_hex(32))
        job.create("job.token", job.token)
        return job

    @property
    def name(self) -> str:
        return self.path.name

    def create(
        self, name: str, data: str | bytes = b"", *, at: int | None = None, mode: int = 0o600
    ) -> None:
        """Make the new file ``name`` (in the job folder, or the folder ``at``) holding
        ``data``; an existing file or link there is an error, never written through."""
        _write_new(self.fd if at is None else at, name, data, mode)

    def folder(self, parts: Sequence[str]) -> int:
        """A descriptor of the folder ``parts`` below the job folder, made as needed."""
        fd = os.dup(self.fd)
        shown = self.path
        for part in parts:
            shown = shown / part
            try:
                nxt = _own_folder(fd, part, shown, "Slurm job folder")
            finally:
                os.close(fd)
            fd = nxt
        return fd

    def exists(self, name: str) -> bool:
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def read(self, name: str, kind: str = "spool file") -> bytes:
        """A file the job wrote, through the door from the held descriptor (a regular
        file, no link, at most ``LIMITS[kind]``); ``ValueError`` when it is not that."""
        from replay_tui.door import Refused, read_under

        try:
            return read_under(self.path, name, kind, root_fd=self.fd)
        except Refused as e:
            raise ValueError(str(e)) from None

    def remove(self) -> None:
        """Remove the folder and all in it (from the jobs folder's descriptor, no link
        followed)."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self.name, dir_fd=self.jobs_fd)

    def close(self) -> None:
        for fd in (self.fd, self.jobs_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def sdk_copy(job: JobFolder) -> Path:
    """The replay_tui package (what the container imports as the SDK) copied into the
    job's own owner-only folder, fresh for each job, so compute nodes that cannot see
    this checkout have it, and nothing another user left in the spool is ever run."""
    folders: dict[tuple[str, ...], int] = {}
    try:
        for p in sorted(SDK_DIR.rglob("*")):
            if p.suffix not in (".py", ".typed") or p.is_symlink() or not p.is_file():
                continue
            rel = ("sdk", "replay_tui", *p.relative_to(SDK_DIR).parts)
            where = rel[:-1]
            if where not in folders:
                folders[where] = job.folder(where)
            job.create(rel[-1], p.read_bytes(), at=folders[where])
    finally:
        for fd in folders.values():
            os.close(fd)
    return job.path / "sdk" / "replay_tui"


# -- talking to Slurm --------------------------------------------------------------------


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise InfraError(
            f"`{name}` is not on PATH: this host is not a Slurm submit host",
            "install the Slurm client (Debian: slurm-client) and point SLURM_CONF at the"
            " cluster, or set up a one-node cluster with scripts/slurm-env.sh;"
            " or replay with --backend docker",
        )
    return path


def _run(argv: list[str], timeout: float = 60, umask: int = -1) -> subprocess.CompletedProcess[str]:
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
    p = _run(["scontrol", "show", "job", "-o", job_id], timeout=30)
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
    q = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", fmt], timeout=30)
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
    return _run(["scancel", job_id], timeout=30).returncode == 0


_slots_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def _slot(n: int) -> threading.BoundedSemaphore | None:
    """One semaphore per limit, shared by every replay of this process."""
    if n <= 0:
        return None
    with _slots_lock:
        return _slots.setdefault(n, threading.BoundedSemaphore(n))


def probe_cache_fd(cache: Path | None) -> int | None:
    """The probe cache folder's descriptor: made 0700 when missing; None (no cache:
    every job probes) when it, or a folder above it, is not this user's to trust."""
    from replay_tui.door import Refused

    if cache is None or path_problem(cache.parent) is not None:
        return None
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        return _own_folder(None, cache, cache, "image-probe cache")
    except (OSError, Refused):
        return None


# -- the executor ------------------------------------------------------------------------


@dataclass
class SlurmExecutor:
    """Runs an ExecSpec as a Slurm batch job of ``container``'s sandboxed container.

    ``container`` is a DockerExecutor set up exactly as the docker backend sets it up,
    with ``image`` the digest reference (the node pulls it by digest); the ExecSpec's
    handoff folder and the mounts' sources must be on the shared filesystem.
    """

    container: Any  # replay_tui.replay.backends.docker.engine.DockerExecutor
    spool: Path
    options: SlurmOptions = field(default_factory=SlurmOptions)
    gpus: int = 0  # GPUs to request with --gres (the manifest's count, never assumed)
    memory: str | None = None  # Slurm --mem
    job_id: str | None = None
    job_info: dict[str, Any] = field(default_factory=dict)  # where it ran, for the manifest
    image_info: dict[str, Any] = field(default_factory=dict)  # filled from the node
    infra_fault: str | None = None  # the cluster, not the command, ended the run
    probe_cache: Path | None = None
    """Where this host keeps what an image holds (Python, packages, OS), by image digest:
    beside the store, never in the spool.  A job probes only an image not in it."""
    walls: NodeWalls | None = None
    """The walls the job script raises on the node (None: only the container's flags)."""
    node_walls: dict[str, Any] = field(default_factory=dict)
    """The walls the job script says it raised (``walls.json``, checked)."""
    node_runtime: Any = None
    """What the job starts when not Docker (``slurm.runtimes.NodeRuntime``: Podman or
    Apptainer), its identity checked here before the job runs anything."""
    identity: ImageIdentity | None = None
    """What the node's runtime said ran, checked (Podman, Apptainer)."""
    refusal: InfraError | None = None
    """Why the identity the node gave was refused (nothing ran)."""

    @property
    def runtime_info(self) -> dict[str, Any] | None:
        """What the replay manifest records of the runtime (``ReplayInfo.runtime``), as
        the one-host backends record it; None for Docker (its manifests as before)."""
        return self.identity.runtime_info() if self.identity is not None else None

    @property
    def sandbox_info(self) -> dict[str, Any]:
        """The walls as the replay manifest records them (``ReplayInfo.sandbox``): the
        memory and CPUs the node gave the container, its user, each folder's bound."""
        if self.walls is None:
            return {}
        sb = self.container.sandbox
        got = self.node_walls
        return {
            "memory_limit": got.get("memory_limit") or sb.memory_limit,
            "cpus": got.get("cpus") or sb.cpus,
            "user": sb.user or f"{os.getuid()}:{os.getgid()}",
            "pids_limit": sb.pids_limit,
            "output_bytes": got.get("output_bytes"),
        }

    def _probe_key(self) -> str | None:
        image = str(self.container.image)
        if "@sha256:" not in image:
            return None
        return "digest-" + image.split("@", 1)[1].replace(":", "_") + ".json"

    def _cache_fd(self) -> int | None:
        return probe_cache_fd(self.probe_cache)

    def _cached_probe(self) -> dict[str, Any] | None:
        """The cached probe of this image: an entry this tool wrote (its own folder),
        holding the probe's bytes as the job's MAC vouched for them and their digest,
        both checked again; anything else there is ignored (the job probes anew)."""
        key = self._probe_key()
        fd = self._cache_fd() if key is not None else None
        if fd is None or key is None or self.probe_cache is None:
            return None
        from replay_tui.door import Refused, read_under

        try:
            entry = json.loads(read_under(self.probe_cache, key, "image probe", root_fd=fd))
            body = entry["probe"].encode()
            if entry.get("image") != self.container.image or not hmac.compare_digest(
                str(entry.get("sha256")), hashlib.sha256(body).hexdigest()
            ):
                return None
            data = json.loads(body)
        except (Refused, ValueError, TypeError, KeyError, AttributeError):
            return None
        finally:
            os.close(fd)
        return data if isinstance(data, dict) else None

    def _keep_probe(self, body: bytes) -> None:
        """Keep a probe the job vouched for (its MAC checked) as ``{image, probe: the
        bytes, sha256}``: written fresh (``O_EXCL``, 0600) and renamed into place."""
        key = self._probe_key()
        fd = self._cache_fd() if key is not None else None
        if fd is None or key is None:
            return
        try:
            entry = {
                "image": self.container.image,
                "probe": body.decode("utf-8"),
                "sha256": hashlib.sha256(body).hexdigest(),
            }
        except UnicodeDecodeError:
            os.close(fd)
            return
        tmp = f".{key}.{secrets.token_hex(8)}"
        try:
            with contextlib.suppress(OSError):
                _write_new(fd, tmp, json.dumps(entry).encode())
                os.replace(tmp, key, src_dir_fd=fd, dst_dir_fd=fd)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            os.close(fd)

    def _job_probe(self, job: JobFolder) -> dict[str, Any] | None:
        """The probe this job's script wrote, only when its MAC (keyed by the job's
        secret, :func:`probe_mac`) matches the bytes: a probe.json someone else left in
        the job folder is never taken, nor cached.  Kept in the cache when taken."""
        with contextlib.suppress(ValueError):
            body = job.read("probe.json", "image probe")
            mac = job.read("probe.mac").decode("ascii", "replace").strip()
            if not hmac.compare_digest(mac, probe_mac(job.token, body)):
                return None
            fresh = json.loads(body)
            if isinstance(fresh, dict):
                self._keep_probe(body)
                return fresh
        return None

    def sbatch_argv(self, jobdir: Path, script: Path, timeout_s: float | None) -> list[str]:
        o = self.options
        argv = [
            _tool("sbatch"),
            "--parsable",
            "--job-name",
            f"replay-tui-{jobdir.name}",
            "--output",
            str(jobdir / "slurm-%j.out"),
            "--chdir",
            str(jobdir),
            "--ntasks",
            "1",
            "--export",
            "ALL",
            "--no-requeue",  # a node failure ends the replay (honestly), never reruns it
        ]
        if o.partition:
            argv += ["--partition", o.partition]
        if o.account:
            argv += ["--account", o.account]
        if o.qos:
            argv += ["--qos", o.qos]
        limit = o.time_limit or (slurm_time(timeout_s) if timeout_s else None)
        if limit:
            argv += ["--time", limit]
        if self.gpus > 0:
            argv += [f"--gres=gpu:{self.gpus}"]
        if self.memory:
            argv += ["--mem", self.memory]
        cpus = getattr(self.container.sandbox, "cpus", None)
        if cpus:  # --cpus: the job is allocated as many, and the container gets them
            argv += ["--cpus-per-task", str(max(1, math.ceil(cpus)))]
        argv += list(o.sbatch_args)
        argv.append(str(script))
        return argv

    def submit(self, spec: ExecSpec) -> tuple[str, JobFolder]:
        """Write the job folder and script, submit it; (job id, job folder, held open:
        the caller closes it)."""
        job = JobFolder.make(self.spool)  # the spool's whole path checked again
        try:
            return self._submit(spec, job), job
        except BaseException:
            job.remove()
            job.close()
            raise

    def _submit(self, spec: ExecSpec, job: JobFolder) -> str:
        job.create("output.log")
        sdk = sdk_copy(job)  # the compute node sees the spool, not this checkout
        walls = "# no walls asked for"
        if self.walls is not None:
            sb = self.container.sandbox
            if (self.walls.uid, self.walls.gid) != (os.geteuid(), os.getegid()):
                from replay_tui.replay.backends.docker.walls import open_to_others

                open_to_others(job.path / "sdk")  # in the job's 0700 folder: others stop there
            walls = walls_block(self.walls, spec.handoff_dir, sb.memory_limit, sb.cpus)
        if self.node_runtime is not None:  # Podman or Apptainer: their own command lines
            text = self._runtime_script(spec, job, sdk, walls)
        else:
            text = self._docker_script(spec, job, sdk, walls)
        script = job.path / "job.sh"
        job.create("job.sh", text, mode=0o700)
        argv = self.sbatch_argv(job.path, script, spec.timeout_s)
        job.create("sbatch.json", json.dumps(argv))
        p = _run(argv, timeout=120, umask=0o077)  # the job's files: owner-only
        if p.returncode != 0:
            raise sbatch_refused(p, "the replay job")
        job_id = p.stdout.strip().split(";", 1)[0]
        if not job_id.isdigit():
            raise InfraError(f"sbatch printed no job id: {p.stdout.strip()[:200]!r}")
        job.create("job_id", job_id + "\n")
        return job_id

    def _on_node(self, job: JobFolder) -> dict[str, str]:
        """Mount sources that are files of this host's temporary folder (the empty file
        over a worktree's ``.git`` file), and the copy in the job folder the node sees."""
        from replay_tui.replay.backends.docker.engine import _empty_file

        here = str(_empty_file())
        if not any(m.source == here for m in self.container.mounts):
            return {}
        job.create("empty-file", b"")
        os.chmod("empty-file", 0o444, dir_fd=job.fd)  # made just now (O_EXCL, no link)
        return {here: str(job.path / "empty-file")}

    def _docker_script(self, spec: ExecSpec, job: JobFolder, sdk: Path, walls: str) -> str:
        kwargs = container_kwargs(self.container, spec)
        moved = self._on_node(job)
        for m in kwargs.get("mounts") or []:
            if m.get("Target") == f"{SDK_MOUNT}/replay_tui":
                m["Source"] = str(sdk)
            elif m.get("Source") in moved:
                m["Source"] = moved[m["Source"]]
        try:
            args, command = docker_cli_args(kwargs)
        except ValueError as e:
            raise InfraError(f"cannot express the sandbox as docker run flags: {e}") from None
        return job_script(
            job.path,
            self.container.image,
            args,
            command,
            want_probe=self._cached_probe() is None,
            gpus=self.gpus > 0,
            token=job.token,
            walls=walls,
        )

    def _runtime_script(self, spec: ExecSpec, job: JobFolder, sdk: Path, walls: str) -> str:
        from replay_tui.replay.backends.runtime import run_request

        c = self.container
        moved = self._on_node(job)
        mounts = [replace(m, source=moved.get(m.source, m.source)) for m in c.mounts]
        req = run_request(spec, mounts, c.workdir, c.sandbox, NAME_WORD, sdk_source=str(sdk))
        text: str = self.node_runtime.script(
            job, req, gpus=self.gpus, want_probe=self._cached_probe() is None, walls=walls
        )
        return text

    def _answer_identity(self, job: JobFolder, on_line: OnLine) -> None:
        """The identity the job's runtime gave, checked here (the one-host backend's
        check): approved (``identity.ok``, its MAC) or refused (``identity.refused``)."""
        try:
            body = job.read("identity")
            identity = self.node_runtime.identity(body)
        except (InfraError, ValueError) as e:
            self.refusal = e if isinstance(e, InfraError) else InfraError(str(e))
            on_line(f"[slurm] refused: {self.refusal.message}")
            with contextlib.suppress(OSError):
                job.create("identity.refused", self.refusal.message + "\n")
            return
        self.identity = identity
        if identity.image_id is not None:
            self.image_info.update(identity.image_info())
        what = identity.image_id or f"SIF sha256:{identity.sif_sha256}"
        on_line(f"[slurm] {identity.runtime} {identity.version} on the node, image {what[:19]}")
        job.create("identity.ok", identity_answer(job.token, body))

    def run(self, spec: ExecSpec, on_line: OnLine, should_cancel: ShouldCancel) -> ExecResult:
        _tool("sbatch")
        slot = _slot(self.options.max_in_flight)
        started = utc_now()
        t0 = time.monotonic()
        if slot is not None:
            while not slot.acquire(timeout=0.5):
                if should_cancel():
                    return ExecResult(
                        130, "interrupted", started, utc_now(), 0.0, "cancelled before submitting"
                    )
        try:
            return self._run(spec, on_line, should_cancel, started, t0)
        finally:
            if slot is not None:
                slot.release()

    def _run(
        self,
        spec: ExecSpec,
        on_line: OnLine,
        should_cancel: ShouldCancel,
        started: str,
        t0: float,
    ) -> ExecResult:
        job_id, job = self.submit(spec)
        try:
            return self._watch(spec, on_line, should_cancel, started, t0, job_id, job)
        finally:
            job.close()

    def _watch(
        self,
        spec: ExecSpec,
        on_line: OnLine,
        should_cancel: ShouldCancel,
        started: str,
        t0: float,
        job_id: str,
        job: JobFolder,
    ) -> ExecResult:
        jobdir = job.path
        self.job_id = job_id
        self.job_info = {"scheduler": "slurm", "job_id": job_id}
        on_line(f"[slurm] submitted batch job {job_id} (folder {jobdir})")
        tail = _Tail(job, "output.log", spec.log_path, on_line)
        # the batch script's own output (Slurm's messages, docker's errors): shown, not kept
        slurm_out = _Tail(job, f"slurm-{job_id}.out", None, lambda t: on_line(f"[slurm] {t}"))
        cancelled = timed_out = False
        cancel_reason = ""
        state: JobState | None = None
        last_answer = time.monotonic()
        run_started: float | None = None
        delay = self.options.poll_min_s
        next_poll = time.monotonic()
        last_state = ""
        interrupted_by_signal = False
        ctrl_c = False

        def forward(signum: int, frame: object) -> None:
            nonlocal interrupted_by_signal, ctrl_c
            interrupted_by_signal = True
            ctrl_c = ctrl_c or signum == signal.SIGINT

        # Ctrl-C and SIGTERM are noted, not raised wherever the wait happens to be (inside
        # a squeue or scancel, a file read): the loop cancels the job, waits for Slurm to
        # say it ended, and a Ctrl-C is raised again after, at this one place
        in_main = threading.current_thread() is threading.main_thread()
        old: dict[int, Any] = {}
        if in_main:
            old[signal.SIGTERM] = signal.signal(signal.SIGTERM, forward)
            old[signal.SIGINT] = signal.signal(signal.SIGINT, forward)
        try:
            while True:
                tail.pump()
                slurm_out.pump()
                now = time.monotonic()
                want_stop = should_cancel() or interrupted_by_signal
                if want_stop and not cancelled:
                    cancelled = True
                    cancel_reason = f"cancelled: scancel of Slurm job {job_id}"
                    on_line(f"[slurm] cancelling job {job_id}")
                    cancel_job(job_id)
                    next_poll = now
                if (
                    spec.timeout_s
                    and run_started is not None
                    and now - run_started > spec.timeout_s
                    and not (timed_out or cancelled)
                ):
                    timed_out = True
                    on_line(f"[slurm] {spec.timeout_s:g}s timeout: cancelling job {job_id}")
                    cancel_job(job_id)
                    next_poll = now
                if (
                    self.node_runtime is not None
                    and self.identity is None
                    and self.refusal is None
                    and job.exists("identity")
                ):
                    self._answer_identity(job, on_line)
                if job.exists("exit_code") and next_poll > now + 0.5:
                    next_poll = now + 0.5  # the script is done: Slurm will say so soon
                if now >= next_poll:
                    state = query_job(job_id)
                    if state is None:
                        if now - last_answer > self.options.lost_after_s:
                            break
                        delay = min(delay * 2, self.options.poll_max_s)
                    else:
                        last_answer = now
                        self._note(state)
                        if state.state != last_state:
                            on_line(
                                f"[slurm] job {job_id} {state.state}"
                                + (f" on {state.node}" if state.node else "")
                                + (f" ({state.reason})" if state.reason else "")
                            )
                            last_state = state.state
                            delay = self.options.poll_min_s
                        else:
                            delay = min(delay * 1.5, self.options.poll_max_s)
                        if state.state in ("RUNNING", "COMPLETING") and run_started is None:
                            run_started = now
                        if state.state in TERMINAL:
                            break
                    next_poll = now + delay
                time.sleep(0.2)
        except KeyboardInterrupt:  # not in the main thread: raised by whoever interrupts
            on_line(f"[slurm] interrupted: cancelling job {job_id}")
            cancel_job(job_id)
            raise
        finally:
            if in_main:
                for s, h in old.items():
                    signal.signal(s, h)
        if ctrl_c:
            on_line(f"[slurm] interrupted: job {job_id} cancelled")
            raise KeyboardInterrupt
        tail.pump(final=True)
        slurm_out.pump(final=True)
        if self.walls is not None:  # a job script killed before it unmounted (this node)
            from replay_tui.replay.backends.docker.walls import sweep_mounts

            sweep_mounts(lambda note: on_line(f"[slurm] {note}"))
        self._read_node_files(job)
        if self.node_runtime is not None and not (cancelled or timed_out):
            self._refuse_unresolved(job, job_id)
        result = self._result(
            job_id, job, state, started, t0, cancelled, cancel_reason, timed_out, spec
        )
        if result.status == "succeeded":
            job.remove()
        else:
            on_line(f"[slurm] job files kept in {jobdir}")
        return result

    def _refuse_unresolved(self, job: JobFolder, job_id: str) -> None:
        """Raise what kept the job from running anything: its identity refused here
        (IdentityMismatch names the identity that differed), or the image not made
        ready on the node (what the node said).  The job folder is kept."""
        if self.refusal is not None:
            raise self.refusal
        if self.identity is not None:
            return
        with contextlib.suppress(ValueError):
            said = job.read("resolve_error").decode("utf-8", "replace").strip()
            said = "".join(ch if ch.isprintable() else " " for ch in said)[-600:]
            where = self.job_info.get("node") or "the node"
            raise InfraError(
                f"Slurm job {job_id} on {where}: {said} (job files kept in {job.path})",
                "check that the runtime on the nodes can reach the registry by digest",
            )

    def _note(self, st: JobState) -> None:
        for k in ("node", "partition", "account", "qos", "time_limit"):
            v = getattr(st, k)
            if v:
                self.job_info[k] = v
        self.job_info["state"] = st.state
        if st.reason:
            self.job_info["reason"] = st.reason

    def _read_node_files(self, job: JobFolder) -> None:
        if self.walls is not None:
            with contextlib.suppress(OSError, ValueError):
                self.node_walls = read_walls(job.read("walls.json"))
        with contextlib.suppress(OSError, ValueError, AttributeError):
            where = json.loads(job.read("where.json"))
            if isinstance(where.get("node"), str) and where["node"].isprintable():
                self.job_info["node"] = where["node"][:256]
        if self.node_runtime is not None:  # the identity, checked before the run
            return
        with contextlib.suppress(OSError, ValueError, IndexError, AttributeError):
            img = json.loads(job.read("image.json"))
            name = self.container.image.split("@", 1)[0]
            digest = self.container.image.split("@", 1)[1] if "@" in self.container.image else None
            self.image_info.update(
                reference=self.container.image,
                digest=digest,
                image_id=img.get("Id"),
                platform=f"{img.get('Os', 'linux')}/{img.get('Architecture', 'unknown')}",
            )
            if digest and not any(rd == f"{name}@{digest}" for rd in img.get("RepoDigests") or []):
                self.image_info["digest"] = None

    def _result(
        self,
        job_id: str,
        job: JobFolder,
        st: JobState | None,
        started: str,
        t0: float,
        cancelled: bool,
        cancel_reason: str,
        timed_out: bool,
        spec: ExecSpec,
    ) -> ExecResult:
        rc = _read_int(job, "exit_code")
        duration = _node_duration(job) or time.monotonic() - t0
        env_view: dict[str, Any] = {}
        probed = self._cached_probe()
        if probed is None:
            probed = self._job_probe(job)
        if probed is not None:
            probed["packages_sha256"] = probes.packages_sha256(probed.get("packages") or [])
            for k in ("python_version", "packages", "packages_sha256", "os"):
                if probed.get(k):
                    env_view[k] = probed[k]
        where = f"Slurm job {job_id}" + (
            f" on {self.job_info['node']}" if "node" in self.job_info else ""
        )
        if st is None:
            self.infra_fault = (
                f"{where}: no answer from the Slurm controller or accounting for"
                f" {self.options.lost_after_s:g}s; the job's end state is unknown"
            )
            code = rc if rc is not None else 1
            return ExecResult(
                code, "failed", started, utc_now(), duration, self.infra_fault, env_view
            )
        why = f" ({st.reason})" if st.reason else ""
        state = st.state
        code = rc if rc is not None else _slurm_exit(st.exit_code)
        if state == "COMPLETED" and code == 0:
            return ExecResult(0, "succeeded", started, utc_now(), duration, None, env_view)
        if code == 137 and job.exists("oom") and not (timed_out or cancelled):
            # the machine's wall ended it, not the program: no verdict on reproduction
            limit = self.sandbox_info.get("memory_limit") or "the node's"
            self.infra_fault = (
                f"{where}: out of memory: the container was killed at its memory limit of"
                f" {limit} (an oom event of the engine; pass a larger --memory)"
            )
            return ExecResult(
                code, "failed", started, utc_now(), duration, self.infra_fault, env_view
            )
        if timed_out:
            status, reason = "timed_out", f"timed out after {spec.timeout_s:g}s: {where} {state}"
        elif state == "TIMEOUT":
            limit = st.time_limit or self.job_info.get("time_limit")
            status, reason = (
                "timed_out",
                f"{where} TIMEOUT: hit its Slurm time limit" + (f" ({limit})" if limit else ""),
            )
        elif cancelled:
            status, reason = "interrupted", f"{cancel_reason} ({state})"
        elif state == "CANCELLED":
            status, reason = "interrupted", f"{where} CANCELLED outside replay-tui{why}"
            self.infra_fault = reason
        elif state in ("PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE", "REVOKED"):
            status, reason = "interrupted", f"{where} {state}{why}"
            self.infra_fault = reason
        elif state == "OUT_OF_MEMORY":
            status, reason = "failed", f"{where} OUT_OF_MEMORY: the job ran out of memory"
        else:
            status, reason = "failed", f"{where} {state}: exit code {code}{why}"
        return ExecResult(
            code if code else 1, status, started, utc_now(), duration, reason, env_view
        )


def _job_file(job: JobFolder, name: str) -> str:
    """A small file the job wrote into its folder (see :meth:`JobFolder.read`)."""
    return job.read(name).decode("utf-8", "replace")


def _read_int(job: JobFolder, name: str) -> int | None:
    try:
        return int(_job_file(job, name).strip())
    except ValueError:
        return None


def _node_duration(job: JobFolder) -> float | None:
    try:
        a = float(_job_file(job, "start"))
        b = float(_job_file(job, "end"))
    except ValueError:
        return None
    return max(0.0, b - a)


def _slurm_exit(code: str | None) -> int:
    """Slurm's ``code:signal`` as one exit code (128+signal when killed)."""
    if not code:
        return 1
    c, _, s = code.partition(":")
    try:
        ci, si = int(c), int(s or 0)
    except ValueError:
        return 1
    return 128 + si if si else ci


class _Tail:
    """Follows a file the job appends to, copying it to ``dest`` line by line."""

    def __init__(self, job: JobFolder, name: str, dest: Path | None, on_line: OnLine) -> None:
        self.job, self.name, self.on_line = job, name, on_line
        self.pos = 0
        self.buf = b""
        self.out = dest.open("wb") if dest is not None else None

    def pump(self, final: bool = False) -> None:
        from replay_tui.door import LIMITS, Refused, open_under

        try:
            with open_under(self.job.path, self.name, "job log", root_fd=self.job.fd) as f:
                os.lseek(f.fd, self.pos, os.SEEK_SET)
                chunk = os.read(f.fd, max(0, min(1 << 24, LIMITS["job log"] - self.pos)))
        except (OSError, Refused):
            chunk = b""
        if chunk:
            self.pos += len(chunk)
            if self.out is not None:
                self.out.write(chunk)
                self.out.flush()
            self.buf += chunk
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.on_line(line.decode("utf-8", "replace").rstrip("\r"))
        if final:
            if self.buf:
                self.on_line(self.buf.decode("utf-8", "replace"))
                self.buf = b""
            if self.out is not None:
                self.out.close()
