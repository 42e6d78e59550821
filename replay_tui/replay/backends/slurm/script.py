"""The Docker job script: the container as ``docker run`` flags
(:func:`docker_cli_args`, from exactly what the docker backend creates it with,
:func:`container_kwargs`), the script's text (:func:`job_script`; its start and end,
:data:`HEADER` and :data:`PROBE_BLOCK`, shared with the other runtimes' scripts), and
the walls it raises on the node (:func:`walls_block`) and reports back
(:func:`read_walls`)."""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from replay_tui.capture.executor import ExecSpec
from replay_tui.replay.backends.docker.engine import PROBE


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
