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

Commands used: ``sbatch --parsable``, ``scontrol show job -o``, ``sacct``, ``scancel``
(:mod:`~replay_tui.replay.backends.slurm.commands`).  The options live in
``slurm.options``, the spool and job folder in ``slurm.spool``, the job script in
``slurm.script``; here: the executor that submits and watches the job.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from replay_tui.capture import probes
from replay_tui.capture.executor import ExecResult, ExecSpec, OnLine, ShouldCancel
from replay_tui.errors import InfraError
from replay_tui.replay.backends.docker.engine import SDK_MOUNT
from replay_tui.replay.backends.runtime import ImageIdentity
from replay_tui.replay.backends.slurm.commands import (
    TERMINAL,
    JobState,
    cancel_job,
    in_flight_slot,
    query_job,
    run_tool,
    sbatch_refused,
    tool_path,
)
from replay_tui.replay.backends.slurm.options import SlurmOptions, slurm_time
from replay_tui.replay.backends.slurm.script import (
    NodeWalls,
    container_kwargs,
    docker_cli_args,
    job_script,
    read_walls,
    walls_block,
)
from replay_tui.replay.backends.slurm.spool import (
    JobFolder,
    identity_answer,
    keep_json,
    probe_cache_fd,
    probe_mac,
    sdk_copy,
)
from replay_tui.replay.backends.slurm.words import NAME_WORD
from storage.ledger import utc_now

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
        keep_json(fd, key, entry)

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
            tool_path("sbatch"),
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
        p = run_tool(argv, timeout=120, umask=0o077)  # the job's files: owner-only
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
        tool_path("sbatch")
        slot = in_flight_slot(self.options.max_in_flight)
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
