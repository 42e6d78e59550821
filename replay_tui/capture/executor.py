"""The executor: start the training command, stream its output into the log, forward
Ctrl-C and SIGTERM to it, and stop it on cancel or timeout.

``Executor`` is the seam (a local process here, a container in ``replay/backends``);
``LocalExecutor`` runs the command as a child of this process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from storage.ledger import utc_now
from storage.vocabulary import is_training_env

OnLine = Callable[[str], None]
ShouldCancel = Callable[[], bool]


@dataclass
class ExecResult:
    exit_code: int
    status: str  # succeeded / failed / interrupted / timed_out
    started_at: str
    ended_at: str
    duration_s: float
    reason: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExecSpec:
    """What an executor runs: everything already validated and resolved."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    handoff_dir: Path
    log_path: Path
    timeout_s: float | None = None
    clear_training_env: bool = False
    """A replay on this host: the host's own training variables (``ACCELERATE_USE_CPU``,
    ``OMP_NUM_THREADS``...: ``storage.vocabulary.is_training_env``) are cleared, so the
    command sees the recorded ones (``env``) and no others."""


class Executor(Protocol):
    def run(self, spec: ExecSpec, on_line: OnLine, should_cancel: ShouldCancel) -> ExecResult: ...


class LocalExecutor:
    """Runs the command as a child process of this one."""

    infra_fault: str | None = None  # the command could not start: the host's fault

    def __init__(self, interpreter: str | None = None) -> None:
        self.interpreter = interpreter
        """A replay's recorded interpreter, run where the command names ``python``."""

    def run(self, spec: ExecSpec, on_line: OnLine, should_cancel: ShouldCancel) -> ExecResult:
        if self.interpreter is not None and spec.argv:
            spec = replace(spec, argv=[self.interpreter, *spec.argv[1:]])
        env = {
            k: v
            for k, v in os.environ.items()
            if not (spec.clear_training_env and is_training_env(k))
        }
        env.update(spec.env)
        from replay_tui.capture.frameworks.observe import install

        install(spec.handoff_dir, env)  # torch's switches as the program leaves them
        started, t0 = utc_now(), time.monotonic()
        interrupted = timed_out = False
        pending: list[int] = []  # signals that came before the child existed
        child: list[subprocess.Popen[bytes]] = []

        def forward(signum: int, frame: object) -> None:
            nonlocal interrupted
            interrupted = True
            if child:
                _signal_group(child[0], signum)
            else:
                pending.append(signum)

        # The forwarder is in place before the child starts: a Ctrl-C at any moment
        # reaches the child (and is recorded), never this process as KeyboardInterrupt.
        in_main = threading.current_thread() is threading.main_thread()
        old = {}
        if in_main:
            for sig in (signal.SIGINT, signal.SIGTERM):
                old[sig] = signal.signal(sig, forward)
        try:
            try:
                proc = subprocess.Popen(
                    spec.argv,
                    cwd=spec.cwd,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as e:
                self.infra_fault = f"the command cannot start: {spec.argv[0]!r}: {e.strerror}"
                spec.log_path.write_text(f"cannot start {spec.argv[0]!r}: {e.strerror}\n")
                on_line(f"cannot start {spec.argv[0]!r}: {e.strerror}")
                return ExecResult(127, "failed", started, utc_now(), 0.0, f"cannot start: {e}")
            child.append(proc)
            for signum in pending:
                _signal_group(proc, signum)
            reader = threading.Thread(
                target=_pump, args=(proc, spec.log_path, on_line), daemon=True
            )
            reader.start()
            # a thread waits on the child, so its end is seen at once (a poll every 50 ms
            # added 25 ms to every run on average); the loop checks cancel and timeout
            exited = threading.Event()
            threading.Thread(target=_wait_then_set, args=(proc, exited), daemon=True).start()
            while not exited.wait(0.05):
                if should_cancel() and not interrupted:
                    interrupted = True
                    _stop(proc)
                if spec.timeout_s and time.monotonic() - t0 > spec.timeout_s and not timed_out:
                    timed_out = True
                    _stop(proc)
            proc.wait()
        finally:
            if in_main:
                for sig, h in old.items():
                    signal.signal(sig, h)
        reader.join(timeout=10)
        rc = proc.returncode
        code = rc if rc >= 0 else 128 - rc
        if timed_out:
            status, reason = (
                "timed_out",
                f"timed out after {spec.timeout_s:g}s (then SIGTERM, and SIGKILL after a 5s grace"
                f" period: stopped after {time.monotonic() - t0:.1f}s)",
            )
        elif interrupted:
            status, reason = "interrupted", "interrupted (Ctrl-C or cancel)"
        elif rc == 0:
            status, reason = "succeeded", None
        else:
            status, reason = "failed", f"exit code {code}"
        return ExecResult(code, status, started, utc_now(), time.monotonic() - t0, reason)


def _wait_then_set(proc: subprocess.Popen[bytes], exited: threading.Event) -> None:
    try:
        proc.wait()
    finally:
        exited.set()


def _pump(proc: subprocess.Popen[bytes], log_path: Path, on_line: OnLine) -> None:
    assert proc.stdout is not None
    with log_path.open("wb") as log:
        for raw in proc.stdout:
            log.write(raw)
            log.flush()
            on_line(raw.decode("utf-8", "replace").rstrip("\r\n"))


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
