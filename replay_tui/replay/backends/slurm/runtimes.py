"""What a Slurm job starts besides Docker: Podman or Apptainer (``--slurm-runtime``).

The job script runs the command lines of the one-host runtime modules
(:mod:`replay_tui.replay.backends.podman.runtime`,
:mod:`replay_tui.replay.backends.apptainer.runtime`), built by their own argument
builders for the node (``on_node``: the binary as named there): the same sandbox (no
network, read-only code and data, caps dropped or no privileges, the limits, the user,
every mount), with the node's walls (:data:`~replay_tui.replay.backends.slurm.engine.
_WALLS`: bounded folders, memory and CPUs sized from the job) added as the docker job's
are.  Words only the node knows (the container's name, the image it resolved, the
scratch file of a conversion, the job's GPUs) are shell variables of the script.

**Identity, checked before anything runs.**  The job resolves the image on the node
(Podman: pulled by digest, inspected by its id; Apptainer: converted once into the SIF
cache in the spool under a lock, hashed, its definition read) and writes what the runtime
said into the job folder (``identity``).  The submitting process checks it with the same
code the one-host backends use (``PodmanRuntime.identity_of``,
``ApptainerRuntime.identity_of``) and answers ``identity.ok`` (a MAC of those bytes
keyed by the job's secret, as the image probe's) or ``identity.refused``; the job runs
nothing without a matching ``identity.ok``.  A refused identity is IdentityMismatch
(exit 3) naming the identity that differed; the replay manifest records the runtime,
its version and the identity as the one-host backends do.

**The default runtime** is what the nodes have (:func:`detect_runtime`): a probe job on
the same partition, account and QOS asks each runtime for its version and writes the
answer with a MAC keyed by its secret; the answer is kept for a day in ``slurm-runtimes/``
beside the store.  Docker is chosen when the nodes have it, then Podman, then
Apptainer (:data:`~replay_tui.replay.backends.slurm.words.RUNTIMES`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replay_tui.errors import InfraError
from replay_tui.replay.backends.runtime import ImageIdentity, RunRequest, requested_digest
from replay_tui.replay.backends.slurm.words import (
    GPUS_WORD,
    IMAGE_WORD,
    NAME_WORD,
    RUNTIMES,
    TMP_WORD,
)

if TYPE_CHECKING:
    from replay_tui.replay.backends.slurm.options import SlurmOptions
    from replay_tui.replay.backends.slurm.spool import JobFolder

_VARIABLES = {NAME_WORD: '"$NAME"', IMAGE_WORD: '"$IMAGE"', TMP_WORD: '"$TMP"'}
"""Words of a command line only the node knows, and the script's variable for each."""

IDENTITY_WAIT_S = 600
"""How long a job waits for the submitting process's answer on the identity."""


def words(argv: Sequence[str]) -> list[str]:
    """``argv`` as shell words: each quoted, the node's words as its variables."""
    return [_VARIABLES.get(w) or shlex.quote(w) for w in argv]


def command_line(
    argv: Sequence[str], *, after: str | None = None, insert: Sequence[str] = ()
) -> str:
    """``argv`` as one shell command; ``insert`` (raw shell words such as
    ``"${WALLS[@]}"``) right after the word ``after`` (the runtime's subcommand)."""
    out = words(argv)
    if after is not None:
        i = list(argv).index(after)
        out[i + 1 : i + 1] = list(insert)
    return " ".join(out)


def env_prefix(env: Mapping[str, str], extra: Sequence[str] = ()) -> list[str]:
    """``env -i`` and ``env``'s variables (the runtime process's whole environment, as
    the one-host runtime passes it), the node's own PATH and HOME."""
    out = ["env", "-i", 'PATH="$PATH"', 'HOME="$HOME"']
    out += [shlex.quote(f"{k}={v}") for k, v in env.items() if k not in ("PATH", "HOME")]
    return [*out, *extra]


_BODY = """\
stop() {{
  echo "replay-tui: job received $1: stopping the container" >&2
  {stop}
}}
trap 'stop SIGTERM' TERM
trap 'stop SIGINT' INT
fail() {{  # MESSAGE: the image is not ready on the node, or not approved: nothing ran
  printf '%s\\n' "$1" >&2
  printf '%s\\n' "$1" > resolve_error.tmp && mv -f resolve_error.tmp resolve_error
  echo 1 > exit_code.tmp && mv -f exit_code.tmp exit_code
  exit 1
}}
REF={ref}
{resolve}
# The submitting host checks the identity the runtime gave (the file `identity`) with
# the one-host backend's own check before anything runs: identity.ok holds the MAC of
# those bytes keyed by this job's secret.
answer=
for (( i=0; i<{ticks}; i++ )); do
  if [ -e identity.refused ]; then
    fail "replay-tui: the submitting host refused the image's identity: nothing is run"
  fi
  if [ -f identity.ok ] && [ ! -L identity.ok ]; then answer=$(head -c 200 identity.ok); break; fi
  sleep 0.2
done
sum=$(sha256sum < identity) && mac=$(printf '%s:%s' {token} "${{sum%% *}}" | sha256sum)
if [ -z "$answer" ] || [ "$answer" != "${{mac%% *}}" ]; then
  fail "replay-tui: no approval of the image's identity from the submitting host: nothing is run"
fi
GPUS=()
GPUENV=()
{gpus}
WALLS=()
unbound() {{ :; }}
{walls}
{run} \\
  >> output.log 2>&1 &
pid=$!
wait "$pid"; rc=$?
while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
{finish}
unbound
date -u +%s.%N > end
"""


@dataclass
class NodeRuntime:
    """Podman or Apptainer as a Slurm job's script starts it (see the module's doc)."""

    name: str
    ref: str
    cache: Path | None = None
    """The SIF cache (Apptainer): in the spool, which every node sees."""

    def runtime(self, job: JobFolder | None = None) -> Any:
        """The one-host runtime module's object, its command lines for the node."""
        if self.name == "podman":
            from replay_tui.replay.backends.podman.runtime import PodmanRuntime

            return PodmanRuntime(on_node=True)
        from replay_tui.replay.backends.apptainer.runtime import ApptainerRuntime

        assert self.cache is not None
        made: list[int] = []

        def make_empty() -> str:  # an empty read-only folder in the job folder
            assert job is not None
            name = f"empty-{len(made)}"
            fd = job.folder([name])
            try:
                os.fchmod(fd, 0o555)
            finally:
                os.close(fd)
            made.append(1)
            return str(job.path / name)

        return ApptainerRuntime(self.cache, on_node=True, make_empty=make_empty)

    def placeholder(self) -> ImageIdentity:
        """The identity as the script names it (the image the node resolved: $IMAGE)."""
        digest = requested_digest(self.ref)
        if self.name == "podman":
            return ImageIdentity(self.name, "", self.ref, digest, image_id=IMAGE_WORD)
        return ImageIdentity(self.name, "", self.ref, digest, sif_path=Path(IMAGE_WORD))

    @property
    def sif(self) -> Path:
        from replay_tui.replay.backends.apptainer.runtime import sif_name

        assert self.cache is not None
        return self.cache / sif_name(requested_digest(self.ref))

    # -- the script ---------------------------------------------------------------------

    def resolve_block(self) -> str:
        rt = self.runtime()
        if self.name == "podman":
            return "\n".join(
                [
                    f"if ! {command_line([rt.binary, 'image', 'exists', self.ref])}; then",
                    '  echo "replay-tui: podman pull $REF" >&2',
                    f"  {command_line(rt.pull_argv(self.ref))} >/dev/null 2>pull.err \\",
                    '    || fail "replay-tui: cannot pull $REF with podman:'
                    ' $(tail -c 400 pull.err)"',
                    "fi",
                    "IMAGE=$("
                    + command_line([rt.binary, "image", "inspect", "--format", "{{.Id}}", self.ref])
                    + ') || fail "replay-tui: podman shows no image for $REF"',
                    f"{{ printf 'version\\t%s\\n' \"$({command_line(rt.version_argv())})\";"
                    " printf -- '---\\n';"
                    f" {command_line([rt.binary, 'image', 'inspect', IMAGE_WORD])}; }}"
                    ' > identity.tmp && mv -f identity.tmp identity || fail "replay-tui:'
                    ' podman cannot inspect $IMAGE"',
                ]
            )
        from replay_tui.replay.backends.apptainer.runtime import CONVERSIONS

        assert self.cache is not None
        build = env_prefix(rt.build_env(self.ref)) + words(rt.build_argv(TMP_WORD, self.ref))
        plain = env_prefix(rt.process_env(None) or {})
        version = " ".join(plain + words(rt.version_argv()))
        inspect = " ".join(plain + words(rt.inspect_argv(IMAGE_WORD)))
        digest = shlex.quote(requested_digest(self.ref))
        return f"""\
CACHE={shlex.quote(str(self.cache))}
IMAGE={shlex.quote(str(self.sif))}
mkdir -p -m 700 -- "$CACHE" || fail "replay-tui: cannot make the SIF cache $CACHE"
if [ -L "$CACHE" ] || [ ! -d "$CACHE" ] || [ ! -O "$CACHE" ]; then
  fail "replay-tui: the SIF cache $CACHE is not a folder of this user"
fi
command -v flock >/dev/null || fail "replay-tui: flock(1) is not on the node's PATH"
exec 9>>"$IMAGE.lock" || fail "replay-tui: cannot open the lock $IMAGE.lock"
flock 9 || fail "replay-tui: cannot lock $IMAGE.lock"
if [ -L "$IMAGE" ] || {{ [ -e "$IMAGE" ] && [ ! -f "$IMAGE" ]; }}; then
  fail "replay-tui: $IMAGE is not a regular file: remove it"
fi
if [ -e "$IMAGE" ]; then
  echo "replay-tui: SIF from the cache: $IMAGE" >&2
else
  echo "replay-tui: converting $REF to a SIF file (once per image): $IMAGE" >&2
  TMP="$CACHE/.${{IMAGE##*/}}.$$.tmp"
  rm -f -- "$TMP"
  t0=$(date +%s.%N)
  if {" ".join(build)} > build.log 2>&1 && mv -f -- "$TMP" "$IMAGE"; then
    t1=$(date +%s.%N)
    printf '%s %s %s\\n' {digest} "$(awk -v a="$t0" -v b="$t1" 'BEGIN {{printf "%.1f", b - a}}')" \\
      "$(hostname -s)" >> "$CACHE"/{CONVERSIONS}
    echo "replay-tui: converted" >&2
  else
    rm -f -- "$TMP"
    fail "replay-tui: cannot convert $REF to a SIF file: $(tail -c 400 build.log)"
  fi
fi
sum=$(sha256sum < "$IMAGE") || fail "replay-tui: cannot read $IMAGE"
{{ printf 'version\\t%s\\n' "$({version})"; printf 'sif_sha256\\t%s\\n' "${{sum%% *}}";
  printf -- '---\\n'; {inspect}; }} > identity.tmp && mv -f identity.tmp identity \\
  || fail "replay-tui: apptainer cannot inspect $IMAGE"
exec 9>&-"""

    def gpu_block(self, count: int) -> str:
        """The job's allocated GPUs (``SLURM_JOB_GPUS``; else the first of the recorded
        count), as the runtime takes them.  No GPU here: built, tested as text."""
        if count <= 0:
            return "# no GPUs recorded: none requested"
        from replay_tui.replay.backends.runtime import gpu_indices

        first = ",".join(gpu_indices(count))
        lines = [f'JOB_GPUS="${{SLURM_JOB_GPUS:-{first}}}"']
        if self.name == "podman":
            from replay_tui.replay.backends.podman.runtime import CDI_GPU

            lines.append(f'for g in ${{JOB_GPUS//,/ }}; do GPUS+=(--device "{CDI_GPU}=$g"); done')
            return "\n".join(lines)
        from replay_tui.replay.backends.apptainer.runtime import nv_args

        flags, env = nv_args(count, [GPUS_WORD])
        lines.append(f"GPUS=({' '.join(shlex.quote(f) for f in flags)})")
        lines.append("GPUENV=(" + " ".join(f'{k}="$JOB_GPUS"' for k in env) + ")")
        return "\n".join(lines)

    def run_line(self, req: RunRequest, rt: Any) -> str:
        image = self.placeholder()
        plain = dataclasses.replace(req, sandbox=dataclasses.replace(req.sandbox, gpus=0))
        argv = rt.run_argv(image, plain)  # the GPUs are the job's: "${GPUS[@]}"
        arrays = ['"${GPUS[@]}"', '"${WALLS[@]}"']
        if self.name == "podman":
            return command_line(argv, after="run", insert=arrays)
        env = rt.process_env(plain) or {}
        return (
            " ".join(env_prefix(env, ['"${GPUENV[@]}"']))
            + " "
            + command_line(argv, after="exec", insert=arrays)
        )

    def stop_line(self) -> str:
        if self.name == "podman":
            return f"{command_line(['podman', 'stop', '--time', '5', NAME_WORD])} >/dev/null 2>&1"
        return '[ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null'

    def finish_block(self) -> str:
        if self.name != "podman":
            return ":  # nothing is left of an apptainer run"
        from replay_tui.replay.backends.runtime import oci_oom_argv, oci_rm_argv

        oom = command_line(oci_oom_argv("podman", NAME_WORD))
        return "\n".join(
            [
                "# killed at its memory limit: podman says so of the container",
                f'if [ "$rc" = 137 ] && [ "$({oom} 2>/dev/null)" = true ]; then',
                "  echo 1 > oom.tmp && mv -f oom.tmp oom",
                "fi",
                f"{command_line(oci_rm_argv('podman', NAME_WORD))} >/dev/null 2>&1",
            ]
        )

    def probe_cmd(self, rt: Any) -> str:
        argv = rt.probe_argv(self.placeholder())
        if self.name == "podman":
            return command_line(argv)
        return " ".join(env_prefix(rt.process_env(None) or {})) + " " + command_line(argv)

    def script(
        self,
        job: JobFolder,
        req: RunRequest,
        *,
        gpus: int,
        want_probe: bool,
        walls: str,
    ) -> str:
        """The whole job script (the shared start and end of
        :mod:`~replay_tui.replay.backends.slurm.script`'s, this runtime's middle)."""
        from replay_tui.replay.backends.slurm.script import HEADER, PROBE_BLOCK

        rt = self.runtime(job)
        token = shlex.quote(job.token)
        run = self.run_line(req, rt)  # first: it makes the empty folders it binds
        text = HEADER + _BODY + PROBE_BLOCK
        return text.format(
            jobdir=shlex.quote(str(job.path)),
            token=token,
            stop=self.stop_line(),
            ref=shlex.quote(self.ref),
            resolve=self.resolve_block(),
            ticks=int(IDENTITY_WAIT_S / 0.2),
            gpus=self.gpu_block(gpus),
            walls=walls,
            run=run,
            finish=self.finish_block(),
            want_probe=1 if want_probe else 0,
            probe_cmd=self.probe_cmd(rt),
        )

    # -- the identity, on the submitting host --------------------------------------------

    def identity(self, body: bytes) -> ImageIdentity:
        """The identity the job's runtime gave (``identity``, untrusted: a file in the
        spool), checked by the one-host runtime's own ``identity_of``: IdentityMismatch
        naming the identity that differed, InfraError when it says nothing usable."""
        text = body.decode("utf-8", "replace")
        head, sep, answer = text.partition("\n---\n")
        if not sep:
            raise InfraError("the job's identity file says nothing the runtime answered")
        said: dict[str, str] = {}
        for line in head.splitlines():
            key, tab, value = line.partition("\t")
            if tab and key.isidentifier():
                said[key] = value.strip()
        rt = self.runtime()
        if self.name == "podman":
            version = said.get("version", "")
            if not version or not version.isprintable() or len(version) > 64:
                raise InfraError(f"podman on the node gave no version ({version[:80]!r})")
            try:
                found = json.loads(answer)
            except ValueError:
                raise InfraError("podman's image inspect on the node is not JSON") from None
            if not isinstance(found, list) or not found or not isinstance(found[0], dict):
                raise InfraError("podman's image inspect on the node shows no image")
            identity: ImageIdentity = rt.identity_of(self.ref, found[0], version)
            return identity
        from replay_tui.replay.backends.apptainer.runtime import parse_built_from, parse_version

        version = parse_version(said.get("version", ""))
        identity = rt.identity_of(
            self.ref, self.sif, parse_built_from(answer), said.get("sif_sha256", ""), version
        )
        return identity


def node_runtime(name: str, ref: str, spool: Path) -> NodeRuntime | None:
    """What a job starts for ``name`` (None: Docker, the engine job script's own)."""
    if name == "docker":
        return None
    return NodeRuntime(name, ref, spool / "sif" if name == "apptainer" else None)


# -- which runtime the nodes have ---------------------------------------------------------

_PROBE_JOB = """\
#!/bin/bash
# A replay-tui probe job: which container runtimes this node has.  Runs nothing else.
set -u
set -C
umask 077
cd -- {jobdir} || exit 1
if [ ! -f job.token ] || [ -L job.token ] || [ "$(head -c 200 job.token)" != {token} ]; then
  echo "replay-tui: not the job folder replay-tui made: nothing is run" >&2
  exit 1
fi
{{
{asks}
}} > runtimes.tmp 2>/dev/null
sum=$(sha256sum < runtimes.tmp) \\
  && mac=$(printf '%s:%s' {token} "${{sum%% *}}" | sha256sum) \\
  && printf '%s\\n' "${{mac%% *}}" > runtimes.mac.tmp \\
  && mv -f runtimes.tmp runtimes && mv -f runtimes.mac.tmp runtimes.mac
"""

_VERSION_ASKS = {
    # docker: the engine must answer (its server's version), not only the client exist
    "docker": ["docker", "version", "--format", "{{.Server.Version}}"],
    "podman": ["podman", "version", "--format", "{{.Client.Version}}"],
    "apptainer": ["apptainer", "--version"],
}
KEEP_S = 24 * 3600
"""How long the nodes' answer is kept (the image-probe cache beside the store)."""
_detect_lock = threading.Lock()


def probe_script(jobdir: Path, token: str) -> str:
    asks = []
    for name in RUNTIMES:
        argv = " ".join(shlex.quote(w) for w in _VERSION_ASKS[name])
        asks.append(f'  v=$({argv} 2>/dev/null | head -n 1) && [ -n "$v" ] && echo "{name} $v"')
    return _PROBE_JOB.format(
        jobdir=shlex.quote(str(jobdir)), token=shlex.quote(token), asks="\n".join(asks)
    )


_WHEN = ("--hold", "-H", "--begin", "-b", "--dependency", "-d")
"""sbatch flags of when a job may start, not where: the probe job leaves them out."""


def probe_sbatch_args(args: Sequence[str]) -> list[str]:
    """The extra sbatch arguments the probe job takes: those that choose where a replay
    job runs (``--constraint``, ``--gres``, ``--reservation``...), not when (a
    ``--hold`` or a dependency would keep the probe from ever answering)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in _WHEN:
            skip = "=" not in arg and flag not in ("--hold", "-H")
            continue
        kept.append(arg)
    return kept


def read_runtimes(body: bytes) -> dict[str, str]:
    """The runtimes a probe job found (``runtimes``, untrusted): name -> version."""
    found: dict[str, str] = {}
    for line in body.decode("utf-8", "replace").splitlines()[:16]:
        name, _, version = line.partition(" ")
        version = version.strip().removeprefix(f"{name} version ")  # apptainer --version
        if name in RUNTIMES and version.isprintable() and name not in found:
            found[name] = version[:80]
    return found


def choose(found: Mapping[str, str]) -> str | None:
    return next((r for r in RUNTIMES if r in found), None)


def _cache_key(options: SlurmOptions) -> str:
    where = [options.partition, options.account, options.qos, list(options.sbatch_args)]
    return "slurm-runtimes-" + hashlib.sha256(json.dumps(where).encode()).hexdigest()[:24]


def _kept(options: SlurmOptions, cache: Path | None) -> dict[str, str] | None:
    from replay_tui.door import Refused, read_under
    from replay_tui.replay.backends.slurm.spool import probe_cache_fd

    fd = probe_cache_fd(cache)
    if fd is None or cache is None:
        return None
    try:
        entry = json.loads(
            read_under(cache, _cache_key(options) + ".json", "spool file", root_fd=fd)
        )
        body = str(entry["runtimes"]).encode()
        if not hmac.compare_digest(str(entry["sha256"]), hashlib.sha256(body).hexdigest()):
            return None
        if not 0 <= time.time() - float(entry["at"]) < KEEP_S:
            return None
    except (Refused, ValueError, TypeError, KeyError, AttributeError):
        return None
    finally:
        os.close(fd)
    return read_runtimes(body)


def _keep(options: SlurmOptions, cache: Path | None, body: bytes) -> None:
    from replay_tui.replay.backends.slurm.spool import keep_json, probe_cache_fd

    fd = probe_cache_fd(cache)
    if fd is None:
        return
    key = _cache_key(options) + ".json"
    entry = {
        "runtimes": body.decode("utf-8", "replace"),
        "sha256": hashlib.sha256(body).hexdigest(),
        "at": time.time(),
    }
    keep_json(fd, key, entry)


@dataclass
class Detected:
    chosen: str
    found: dict[str, str] = field(default_factory=dict)
    probed: bool = False
    """A probe job was run (not the kept answer)."""

    def note(self) -> str:
        have = ", ".join(f"{k} {v}" for k, v in self.found.items())
        how = "a probe job found" if self.probed else "the nodes have (kept from a probe job)"
        return (
            f"container runtime on the nodes: {self.chosen} ({how} {have}; --slurm-runtime chooses)"
        )


def detect_runtime(
    options: SlurmOptions,
    spool: Path,
    cache: Path | None,
    should_cancel: Callable[[], bool] = lambda: False,
    timeout_s: float = 300,
) -> Detected:
    """The runtime a job starts when ``--slurm-runtime`` is not given: what the nodes of
    ``options``' partition have (see the module's doc).  InfraError when the probe job
    gets no answer, or the nodes have none of the runtimes."""
    with _detect_lock:
        kept = _kept(options, cache)
        if kept:
            chosen = choose(kept)
            if chosen is not None:
                return Detected(chosen, kept)
        body = _probe(options, spool, should_cancel, timeout_s)
        found = read_runtimes(body)
        chosen = choose(found)
        if chosen is None:
            raise InfraError(
                "the cluster's nodes have none of docker, podman, apptainer that answers"
                " (a probe job asked each for its version)",
                "install one on the nodes, or name the partition that has one (--slurm-partition)",
            )
        _keep(options, cache, body)
        return Detected(chosen, found, probed=True)


def _probe(
    options: SlurmOptions, spool: Path, should_cancel: Callable[[], bool], timeout_s: float
) -> bytes:
    from replay_tui.replay.backends.slurm.commands import (
        TERMINAL,
        cancel_job,
        query_job,
        run_tool,
        sbatch_refused,
        tool_path,
    )
    from replay_tui.replay.backends.slurm.spool import JobFolder, probe_mac

    job = JobFolder.make(spool)
    job_id = ""
    try:
        job.create("job.sh", probe_script(job.path, job.token), mode=0o700)
        argv = [
            tool_path("sbatch"),
            "--parsable",
            "--job-name",
            f"replay-tui-probe-{job.name}",
            "--output",
            str(job.path / "slurm-%j.out"),
            "--chdir",
            str(job.path),
            "--ntasks",
            "1",
            "--export",
            "ALL",
            "--no-requeue",
            "--time",
            "5",
        ]
        for flag, value in (
            ("--partition", options.partition),
            ("--account", options.account),
            ("--qos", options.qos),
        ):
            if value:
                argv += [flag, value]
        argv += [*probe_sbatch_args(options.sbatch_args), str(job.path / "job.sh")]
        p = run_tool(argv, timeout=120, umask=0o077)
        if p.returncode != 0:
            raise sbatch_refused(p, "the probe job that asks which runtime the nodes have")
        job_id = p.stdout.strip().split(";", 1)[0]
        deadline = time.monotonic() + timeout_s
        delay = options.poll_min_s
        while time.monotonic() < deadline and not should_cancel():
            if job.exists("runtimes.mac"):
                body = job.read("runtimes")
                mac = job.read("runtimes.mac").decode("ascii", "replace").strip()
                if not hmac.compare_digest(mac, probe_mac(job.token, body)):
                    raise InfraError("the probe job's answer does not carry its MAC: not taken")
                job_id = ""
                return body
            st = query_job(job_id)
            if st is not None and st.state in TERMINAL and not job.exists("runtimes.mac"):
                raise InfraError(
                    f"the probe job {job_id} ended {st.state} without saying which container"
                    " runtime the nodes have",
                    "name the runtime with --slurm-runtime",
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 5.0)
        raise InfraError(
            f"the probe job {job_id} did not say within {timeout_s:g}s which container"
            " runtime the nodes have",
            "name the runtime with --slurm-runtime",
        )
    finally:
        if job_id:
            cancel_job(job_id)
        job.remove()
        job.close()
