"""The launcher: run any training command and record it from the outside.

``record`` reads the code and the data before the run, runs the command through an
``Executor`` (local process, or a container for ``--image``) while it probes the
environment and the hardware beside it, streams and keeps the command's output, then
hashes artifacts (a checkpoint read once for its sha256 and its tensor digest), reads
metrics and the SDK's inside view, and stores one sealed manifest in a single
transaction.  A failing or interrupted command is still recorded; nothing half-written
reaches the store.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from replay_tui.capture import probes, stale
from replay_tui.capture.argv_config import ArgvConfig, merge_config, parse_argv
from replay_tui.capture.hashing import (
    StatCache,
    hash_path,
    sha256_regular_file,
)
from replay_tui.capture.metrics import MetricRegex, MetricSeries, read_metrics_file
from replay_tui.capture.outputs import (
    BUDGET_REFUSALS_SAID,
    CHECKPOINT_SUFFIXES,
    EarlyOutputs,
    OutputBudget,
    lower_priority,
    read_once,
    tensor_digest_or_none,
)
from replay_tui.errors import BadInput
from replay_tui.sdk import (
    DETERMINISM_ENV,
    HANDOFF_ENV,
    INSIDE_FILE,
    SEED_ENV,
    determinism_group,
    randomness_group,
    uuid7,
)
from storage.ledger import utc_now
from storage.vocabulary import is_training_env

if TYPE_CHECKING:
    from replay_tui.capture.frameworks import Findings
    from storage.manifest import RunManifest
    from storage.objects import ObjectStore
    from storage.store import Location, RunStore

# The manifest's models (pydantic), the store and the object store are imported where
# they are used: ``record`` launches the command first and imports them while it runs
# (``_warm``); only what the launch itself needs is imported before it.

LOG_TAIL_BYTES = 4000

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


# -- options --------------------------------------------------------------------------


@dataclass
class RecordOptions:
    argv: list[str]
    cwd: Path
    name: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    seed: int | None = None
    deterministic: bool | None = None
    data: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    metrics_file: str | None = None
    metric_regex: list[str] = field(default_factory=list)
    metric_name: str | None = None
    env_names: list[str] = field(default_factory=list)
    timeout_s: float | None = None
    image: str | None = None
    output_budget: int | None = None  # bytes; None: REPLAY_TUI_OUTPUT_BUDGET or the default
    volatile: list[str] = field(default_factory=list)  # outputs listed, not judged by bytes


@dataclass
class RecordResult:
    manifest: RunManifest
    exit: ExecResult
    log_path: Path
    refused: tuple[str, ...] = ()
    """Outputs (and handoff parts) not taken, and why: links, stale files, files outside
    the output folder, sparse files, files past the output budget.  Each is also a gap
    of the manifest; the caller says them."""
    unmatched: tuple[str, ...] = ()
    """Artifact globs that matched no file (gap ``ARTIFACT_GLOB_EMPTY``)."""


def parse_data_arg(arg: str, cwd: Path) -> tuple[str, Path]:
    """``PATH`` or ``NAME=PATH`` to (name, absolute path)."""
    name, _, path = arg.partition("=") if "=" in arg else ("", "", arg)
    p = (cwd / path).resolve()
    if not p.exists():
        raise BadInput(f"--data {arg!r}: {p} does not exist")
    return (name or p.name), p


Place = tuple[Literal["repo", "data", "workdir", "output"], str, str]
"""A ``storage.store.Location`` as plain values (role, name, host path): what ``record``
learns before the launch, made into locations after it (the store is imported then)."""


def _locations(places: Iterable[Place]) -> list[Location]:
    from storage.store import Location

    return [Location(*p) for p in places]


def data_entries(
    items: Sequence[tuple[str, Path]], repo_root: Path | None, cache: StatCache | None
) -> tuple[list[dict[str, Any]], list[Location]]:
    """Hash each data input; its manifest path is relative to the repo when inside it."""
    entries, places = _data_entries(items, repo_root, cache)
    return entries, _locations(places)


def _data_entries(
    items: Sequence[tuple[str, Path]], repo_root: Path | None, cache: StatCache | None
) -> tuple[list[dict[str, Any]], list[Place]]:
    entries: list[dict[str, Any]] = []
    locs: list[Place] = []
    names: set[str] = set()
    for name, p in items:
        if name in names:
            raise BadInput(f"--data name {name!r} given twice")
        names.add(name)
        try:
            digest = hash_path(p, cache=cache)
        except (ValueError, OSError, RuntimeError) as e:
            raise BadInput(f"--data {p}: cannot hash it: {e}") from None
        rel = p.name
        if repo_root is not None and p.is_relative_to(repo_root):
            rel = p.relative_to(repo_root).as_posix() or p.name
        entries.append(
            {
                "name": name,
                "path": rel,
                "sha256": digest.sha256,
                "size_bytes": digest.size_bytes,
                "file_count": digest.file_count,
            }
        )
        locs.append(("data", name, str(p)))
    return entries, locs


def artifact_entries(
    base: Path,
    patterns: Sequence[str],
    extra: Sequence[str],
    refused: list[str] | None = None,
    *,
    one_pass: bool = False,
    objects: ObjectStore | None = None,
    early: EarlyOutputs | None = None,
    budget: OutputBudget | None = None,
    before: stale.Before | None = None,
    unmatched: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Hash every file matching ``patterns`` (relative to ``base``) and SDK-logged paths.

    The output folder was written by the run (in a replay: by code from a manifest), so
    nothing in it is followed out of it: the globs are matched by the one matcher and
    walk (``door.glob_match``, ``door.glob_under``: ``**`` any number of folders, every
    file at every depth as the last part) from ``base`` down with no link followed; a
    symbolic link or a special file (device, FIFO, socket) anywhere on the way is
    refused, and each file is opened through the door, which refuses a sparse one.  A
    refused match is listed without a hash (so it shows as a gap and never compares
    equal) and its reason goes to ``refused``.  ``unmatched``: each glob that matched
    nothing goes there (the manifest's ``ARTIFACT_GLOB_EMPTY`` gap names it too).

    ``budget``: what the outputs may take in all (:class:`OutputBudget`, from the
    environment or the default where None): files are charged by size in path order,
    and one that does not fit is refused unread.  ``before`` (``stale.snapshot``): a
    file left there before the run is listed stale without being read or charged.

    ``one_pass``: a checkpoint's sha256 and tensor digest come from one memory map of
    one descriptor opened through the door (:func:`_checkpoint_pass`), torch-free where
    the format allows; the values are the same as without it.

    ``objects`` (with ``one_pass``): each file is kept in that object store in the same
    read that hashes it (:meth:`ObjectStore.put_fd`: the sha256 recorded is that of the
    very bytes kept), so keeping the run's artifacts after finds them there and reads
    nothing again.

    ``early`` (with ``one_pass``): what was read of each output as soon as the run closed
    it (:class:`outputs.EarlyOutputs`), taken where the file is still that very file.
    """
    from replay_tui.door import Refused, glob_parts, glob_under, open_under

    found: dict[str, Path] = {}
    problems: dict[str, str] = {}
    base = base.resolve()
    budget = OutputBudget.chosen() if budget is None else budget
    for pat in patterns:
        parts = glob_parts(pat)
        if parts is None:
            raise BadInput(f"--artifact {pat!r} must be a relative glob inside the workdir")
        hits = glob_under(base, parts)
        if not hits and unmatched is not None and pat not in unmatched:
            unmatched.append(pat)
        for hit in hits:
            if hit.what == "file":
                found[hit.rel] = base / hit.rel
            elif hit.what == "link":
                problems[hit.rel] = (
                    f"{hit.rel}: {hit.rel} is a symbolic link (-> {(hit.target or '?')[:200]});"
                    " links in a run's output are never followed"
                )
            else:
                problems[hit.rel] = (
                    f"{hit.rel}: not a regular file (a device, FIFO or socket): refused"
                )
    for e in extra:
        if not isinstance(e, str) or not e or "\x00" in e:
            continue
        p = Path(os.path.normpath(base / e))
        if not p.is_relative_to(base) or p == base:
            problems[e[:200]] = f"{e[:200]!r} is outside the output folder: not collected"
            continue
        rel = p.relative_to(base).as_posix()
        why = _unsafe_member(base, rel)
        if why is None:
            found[rel] = p
        elif not why.endswith(_IS_FOLDER):
            problems[rel] = why
    out: list[dict[str, Any]] = []
    stale_said: list[str] = []
    over_budget: set[str] = set()
    for rel, p in sorted(found.items()):
        why_stale = stale.stale_reason(base, rel, before) if before is not None else None
        if why_stale is not None:  # not the run's: never read, never charged
            stale_said.append(f"{rel}: stale: {why_stale}, not written by the run")
            out.append(
                {
                    "path": rel,
                    "sha256": None,
                    "size_bytes": None,
                    "kind": "file",
                    "stale": why_stale,
                }
            )
            continue
        try:  # through the door: a sparse file (or one swapped for a link) is refused
            with open_under(base, rel, "run output") as opened:
                measured = opened.size
        except Refused as exc:
            problems[rel] = f"{rel}: {exc}"
            continue
        if (why := budget.charge(rel, measured)) is not None:
            problems[rel] = why
            over_budget.add(rel)
            continue
        kind = "checkpoint" if p.suffix in CHECKPOINT_SUFFIXES else "file"
        both = None
        try:
            if one_pass and (kind == "checkpoint" or objects is not None):
                both = _checkpoint_pass(
                    base,
                    rel,
                    p,
                    objects,
                    tensor=kind == "checkpoint",
                    early=early,
                    max_bytes=measured,
                )
            if both is None:
                digest, size = sha256_regular_file(p)
            else:
                digest, size = both[0], both[1]
            if size > measured:
                raise ValueError(f"it grew from {measured} bytes while it was collected")
        except (OSError, ValueError, RuntimeError) as exc:
            problems[rel] = f"{rel}: not hashed ({exc})"
            continue
        entry: dict[str, Any] = {"path": rel, "sha256": digest, "size_bytes": size, "kind": kind}
        if kind == "checkpoint":
            entry["tensor_sha256"] = tensor_digest_or_none(p) if both is None else both[2]
        out.append(entry)
    listed = said = 0
    for rel, why in sorted(problems.items()):
        if refused is not None and (rel not in over_budget or said < BUDGET_REFUSALS_SAID):
            said += rel in over_budget
            refused.append(why)
        if rel_path_ok(rel) and listed < MAX_REFUSED_LISTED:
            listed += 1  # in the manifest without a hash: an ARTIFACT_NO_HASH gap
            out.append({"path": rel, "sha256": None, "size_bytes": None, "kind": "file"})
    if refused is not None:
        if (more := budget.summary(said)) is not None:
            refused.append(more)
        refused.extend(stale_said)
    out.sort(key=lambda a: a["path"])
    return out


_IS_FOLDER = "is a folder"
MAX_REFUSED_LISTED = 100


def rel_path_ok(rel: str) -> bool:
    """Whether ``rel`` can stand in a manifest as an artifact path."""
    return (
        0 < len(rel) <= 1024
        and not rel.startswith("/")
        and os.path.normpath(rel) == rel
        and ".." not in rel.split("/")
        and not any(ord(c) < 0x20 or c == "\x7f" for c in rel)
    )


def _unsafe_member(base: Path, rel: str) -> str | None:
    """Why ``base/rel`` may not be collected, or None when it is a regular file in ``base``.

    Every component is ``lstat``-ed: a link anywhere (even one pointing back inside) is
    refused, so what is hashed is what lies in the folder, never what a link names.
    """
    import stat as st_mod

    cur = base
    parts = rel.split("/")
    for i, part in enumerate(parts):
        cur = cur / part
        try:
            st = os.lstat(cur)
        except OSError as e:
            return f"{rel}: cannot inspect it ({e.strerror})"
        shown = "/".join(parts[: i + 1])
        if st_mod.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(cur)
            except OSError:
                target = "?"
            return (
                f"{rel}: {shown} is a symbolic link (-> {target[:200]}); links in a run's"
                " output are never followed"
            )
        if i < len(parts) - 1:
            if not st_mod.S_ISDIR(st.st_mode):
                return f"{rel}: {shown} is not a folder"
        elif st_mod.S_ISDIR(st.st_mode):
            return f"{rel} {_IS_FOLDER}"
        elif not st_mod.S_ISREG(st.st_mode):
            return f"{rel}: not a regular file (a device, FIFO or socket): refused"
    return None


def _checkpoint_pass(
    base: Path,
    rel: str,
    shown: Path,
    objects: ObjectStore | None = None,
    *,
    tensor: bool = True,
    early: EarlyOutputs | None = None,
    max_bytes: int | None = None,
) -> tuple[str, int, str | None] | None:
    """A file's sha256, size and (``tensor``) tensor digest from one read of one
    descriptor opened through the door (``O_NOFOLLOW`` at every step from ``base``,
    regular files only): :func:`outputs.read_once`, or what ``early`` read of this very
    file while the run ran.  None where the door refuses it or the pass cannot serve:
    the caller then hashes it as before, and a refusal is then said in the words it
    always was.

    ``objects``: the sha256 comes from the copy into that object store, made in the same
    read (:meth:`ObjectStore.put_fd`); ``tensor`` False (a file that is no checkpoint):
    that copy alone, no map, and no tensor digest (None).  ``max_bytes``: the size the
    budget was charged; a file grown past it since is not copied.
    """
    from replay_tui.door import Refused, open_under

    try:
        with open_under(base, rel, "run output") as f:
            if max_bytes is not None and f.size > max_bytes:
                raise ValueError(f"{rel} grew from {max_bytes} bytes while it was collected")
            if early is not None and (got := early.take(rel, f.fd)) is not None:
                return got
            cap = f.size if max_bytes is None else max_bytes
            return read_once(f.fd, shown, lambda fd: _keep(objects, fd, shown, cap), tensor=tensor)
    except Refused:
        return None


def _keep(
    objects: ObjectStore | None, fd: int, shown: Path, max_bytes: int | None = None
) -> tuple[str, int] | None:
    """``fd``'s bytes kept in ``objects``, hashed as they are copied: their sha256 and
    size (no more than ``max_bytes`` copied).  None where there is no object store, or
    the copy failed (a full disk, a file grown since it was measured...): the file is
    then hashed alone, and keeping it after the manifest is built tries again and says
    why it fails."""
    if objects is None:
        return None
    try:
        kept = objects.put_fd(fd, None, name=str(shown), max_bytes=max_bytes)
        return objects.sha256_of(kept), kept.stat().st_size
    except (OSError, ValueError):
        return None


def capture_info(opts: RecordOptions) -> dict[str, Any]:
    """The launcher's capture options, recorded so a replay captures the same way."""
    dirs = sorted(
        {
            Path(p).parts[0]
            for p in opts.artifacts
            if len(Path(p).parts) > 1 and "*" not in Path(p).parts[0]
        }
    )
    return {
        "artifact_globs": list(opts.artifacts),
        "metrics_file": opts.metrics_file,
        "metric_regex": list(opts.metric_regex),
        "metric_name": opts.metric_name,
        "output_dirs": dirs,
        "volatile_globs": list(opts.volatile),
    }


def keep_artifacts(store: RunStore, base: Path, manifest: RunManifest) -> list[str]:
    """Copy hashed artifacts into the object store beside the run store.

    Each file is walked and opened like ``artifact_entries`` did (no links, regular files
    only) and kept only if its bytes still hash to the recorded sha256.  Returns what was
    not kept, and why.
    """
    from storage.objects import ObjectStore

    objects = ObjectStore.beside(store.path)
    base = base.resolve()
    skipped: list[str] = []
    for a in manifest.outputs.artifacts:
        if a.sha256 is None:
            continue
        why = _unsafe_member(base, a.path)
        if why is not None:
            skipped.append(why)
            continue
        try:  # no more than the size recorded (and budgeted) is ever copied
            objects.put(base / a.path, a.sha256, max_bytes=a.size_bytes)
        except (OSError, ValueError) as e:
            skipped.append(f"{a.path}: not kept ({e})")
    return skipped


def keep_log(store: RunStore, run_id: str, data: bytes) -> Path:
    """The run's full output beside the store (the store keeps it as a blob too)."""
    path = store.path.parent / "logs" / f"{run_id}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


MAX_HANDOFF_BYTES = 64 * 1024 * 1024


def read_inside(handoff_dir: Path) -> dict[str, Any]:
    """The SDK's inside view, validated like any untrusted input.

    The handoff file is written by the training code, which in a replay came from a
    manifest.  It is read bounded (a regular file, not a link, at most 64 MiB), and each
    part that does not have the shape the manifest needs is dropped, not trusted: the run
    is kept, the dropped part shows as the gap it leaves (no seed, no metrics...), and
    the reasons are listed under ``"problems"``.
    """
    from replay_tui.door import Refused, exists_under, read_under

    if not exists_under(handoff_dir, INSIDE_FILE):
        return {}
    try:
        raw = read_under(handoff_dir, INSIDE_FILE, "handoff file", limit=MAX_HANDOFF_BYTES)
    except Refused as e:
        why = str(e)
        if "not a regular file" in why:
            why += ": ignored"
        elif "does not exist" not in why and "limit" not in why:
            why = f"handoff file {INSIDE_FILE}: cannot open it ({why})"
        return {"problems": [why]}
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        return {"problems": [f"handoff file {INSIDE_FILE} is not JSON ({str(e)[:120]})"]}
    if not isinstance(data, dict):
        return {"problems": [f"handoff file {INSIDE_FILE} is not a JSON object: ignored"]}
    clean, problems = validate_inside(data)
    if problems:
        clean["problems"] = problems
    return clean


@functools.cache
def _inside_checks() -> dict[str, Callable[[Any], Any]]:
    """One validator per part of the inside view, built from the manifest's own types
    (built once: record builds them while the command runs)."""
    from pydantic import TypeAdapter

    from storage import manifest as mf

    def model(cls: Any, keys: Sequence[str]) -> Callable[[Any], Any]:
        adapter = TypeAdapter(cls)

        def check(v: Any) -> Any:
            if not isinstance(v, dict) or set(v) - set(keys):
                raise ValueError(f"expected a map with keys among {', '.join(keys)}")
            adapter.validate_python(v, strict=True)
            return v

        return check

    def typed(tp: Any) -> Callable[[Any], Any]:
        adapter = TypeAdapter(tp)
        return lambda v: adapter.validate_python(v, strict=True)

    def config(v: Any) -> Any:
        if not isinstance(v, dict):
            raise ValueError("expected a map")
        mf._check_config(v, "config")
        typed(dict[mf.Label, Any])(v)
        mf.config_hash(v)
        return v

    def history(v: Any) -> Any:
        typed(dict[mf.Label, list[tuple[mf.SafeInt, mf.Finite]]])(
            {k: [tuple(p) if isinstance(p, list) else p for p in pts] for k, pts in v.items()}
            if isinstance(v, dict) and all(isinstance(p, list) for p in v.values())
            else v
        )
        return v

    env_keys = (
        "python_version",
        "packages",
        "packages_sha256",
        "torch_version",
        "cuda_version",
        "cudnn_version",
        "nccl_version",
        "os",
    )
    return {
        "name": typed(mf.Label),
        "seed": typed(mf.Seed | None),
        "seeds": model(
            mf.RandomnessInfo, ("python", "numpy", "torch", "cuda", "dataloader_workers")
        ),
        "python_hash_seed": typed(mf.Label | None),
        "determinism": model(mf.DeterminismInfo, tuple(mf.DeterminismInfo.model_fields)),
        "nondeterministic_ops": typed(list[mf.Str]),
        "environment": model(mf.EnvironmentInfo, env_keys),
        "gpus": typed(list[mf.GpuInfo] | None),
        "warnings": typed(list[mf.LongStr]),
        "config": config,
        "metrics": typed(dict[mf.Label, mf.Finite]),
        "metric_history": history,
        "metric_times": typed(dict[mf.Label, list[mf.Finite]]),
        "metric_nonfinite": typed(dict[mf.Label, list[mf.SafeInt]]),
        "artifacts": typed(list[mf.Str]),
    }


def validate_inside(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Keep the parts of an inside view that are well formed; say why the others were not."""
    checks = _inside_checks()
    clean: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        check = checks.get(key) if isinstance(key, str) else None
        if check is None:
            continue  # an SDK from another version may send more: ignored, as before
        try:
            check(value)
        except Exception as e:  # pydantic, ManifestError, ValueError: all mean "not this"
            first = str(e).splitlines()
            why = (first[1] if len(first) > 1 else first[0]).strip()[:160] if first else ""
            problems.append(f"handoff file: {key} is malformed ({why}): ignored")
            continue
        clean[key] = value
    return clean, problems


def _log_tail(log_path: Path) -> str:
    try:
        with log_path.open("rb") as f:
            f.seek(max(0, log_path.stat().st_size - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# -- what a run leaves behind (record and replay alike) ------------------------------


@dataclass
class Collected:
    """A finished run's outputs, read the same way after a recording and a replay."""

    inside: dict[str, Any]  # the SDK's handoff, validated
    artifacts: list[dict[str, Any]]
    refused: list[str]  # outputs and handoff parts not taken, and why
    log_bytes: bytes
    log_sha256: str
    log_tail: str  # the end of the log, kept for a run that did not succeed
    unmatched: list[str] = field(default_factory=list)  # artifact globs that matched nothing
    frameworks: Findings | None = None  # what Lightning, TensorBoard, the HF Trainer wrote


def collect_outputs(
    cwd: Path,
    patterns: Sequence[str],
    handoff: Path,
    log_path: Path,
    *,
    metrics_file: str | None,
    series: MetricSeries,
    succeeded: bool,
    before: stale.Before | None = None,
    one_pass: bool = False,
    objects: ObjectStore | None = None,
    early: EarlyOutputs | None = None,
    budget: OutputBudget | None = None,
) -> Collected:
    """Read the handoff, hash the outputs (never following a link, never claiming a file
    the run did not write: ``before`` is ``stale.snapshot`` taken just before the run;
    within the run's output budget: ``budget``, else ``REPLAY_TUI_OUTPUT_BUDGET`` or the
    default), merge the metrics file into ``series``, and read the log.  ``one_pass``,
    ``objects`` and ``early``: see :func:`artifact_entries`."""
    inside = read_inside(handoff)
    refused: list[str] = list(inside.get("problems") or [])
    unmatched: list[str] = []
    artifacts = artifact_entries(
        cwd,
        patterns,
        inside.get("artifacts") or [],
        refused,
        one_pass=one_pass,
        objects=objects,
        early=early,
        budget=budget,
        before=before,
        unmatched=unmatched,
    )
    if before is not None:
        stale.mark_stale(cwd, artifacts, refused, before)
    if metrics_file:
        from replay_tui.door import Refused

        try:
            series.merge(read_metrics_file(cwd, metrics_file))
        except Refused as e:  # its numbers are not taken: the metrics show as missing
            refused.append(str(e))
    from storage.manifest import sha256_hex

    log_bytes = log_path.read_bytes() if log_path.exists() else b""
    from replay_tui.capture.frameworks import read_outputs

    found = read_outputs(  # framework files, read unasked (capture/frameworks)
        cwd,
        patterns,
        [a["path"] for a in artifacts],
        metrics_file=metrics_file,
        log_bytes=log_bytes,
        before=before,
        handoff=handoff,
    )
    refused += found.refused
    return Collected(
        inside,
        artifacts,
        refused,
        log_bytes,
        sha256_hex(log_bytes),
        "" if succeeded else _log_tail(log_path),
        unmatched,
        found,
    )


def keep_run(
    store: RunStore,
    manifest: RunManifest,
    cwd: Path,
    collected: Collected,
    *,
    locations: Sequence[Location] = (),
    blobs: Mapping[str, tuple[str, bytes]] | None = None,
) -> Path:
    """Store a finished run: its artifacts' bytes, the manifest with its gap counts and
    blobs (the log and whatever else is given), and the log file beside the store."""
    from replay_tui.compare.gaps import gap_counts

    keep_artifacts(store, cwd, manifest)
    all_blobs = {collected.log_sha256: ("log", collected.log_bytes), **(blobs or {})}
    store.ingest(manifest, gaps=gap_counts(manifest), locations=list(locations), blobs=all_blobs)
    return keep_log(store, manifest.run_id, collected.log_bytes)


# -- the manifest ---------------------------------------------------------------------


@dataclass
class Outside:
    """What the launcher learnt before the run."""

    git: probes.GitState
    python: probes.PythonEnv
    gpus: probes.GpuProbe
    data: list[dict[str, Any]]
    locations: list[Location]
    env: dict[str, str]


def build_manifest(
    *,
    run_id: str,
    name: str,
    argv: Sequence[str],
    tags: Mapping[str, str],
    outside: Outside,
    result: ExecResult,
    inside: Mapping[str, Any],
    artifacts: list[dict[str, Any]],
    metrics: MetricSeries,
    log_sha256: str | None,
    log_tail: str,
    seed: int | None,
    image: Mapping[str, Any] | None,
    diff_sha256: str | None,
    kind: str = "original",
    replay_of: str | None = None,
    replay: Mapping[str, Any] | None = None,
    capture: Mapping[str, Any] | None = None,
    argv_config: ArgvConfig | None = None,
    frameworks: Findings | None = None,
    interpreter: str | None = None,
) -> RunManifest:
    from replay_tui.capture.frameworks import apply_findings
    from replay_tui.capture.interpreter import interpreter_info
    from storage.manifest import manifest_from_data

    g = outside.git
    seeds = dict(inside.get("seeds") or {})
    det = dict(inside.get("determinism") or {})
    ienv = dict(inside.get("environment") or {})
    env_view = {**ienv, **result.environment}
    # torch, CUDA, cuDNN, NCCL: the SDK's view where it saw torch in the run (all four as
    # the run saw them), else what the run's installed torch says (read before the run)
    torch_view: Mapping[str, Any] = (
        env_view if env_view.get("torch_version") else outside.python.torch_versions()
    )
    gpus = inside.get("gpus")
    if gpus is None and outside.gpus.gpus:
        gpus = outside.gpus.gpus
    if gpus is not None and outside.gpus.gpus:  # prefer nvidia-smi detail (uuid)
        gpus = outside.gpus.gpus
    sdk_metrics = MetricSeries()
    sdk_times = inside.get("metric_times") or {}
    for n, pts in (inside.get("metric_history") or {}).items():
        times = sdk_times.get(n)
        if not isinstance(times, list) or len(times) != len(pts):
            times = [None] * len(pts)  # the SDK's times must match its points one for one
        for (s, v), t in zip(pts, times, strict=True):
            sdk_metrics.add(str(n), int(s), float(v), None if t is None else float(t))
    for n, steps in (inside.get("metric_nonfinite") or {}).items():
        sdk_metrics.nonfinite[str(n)] = [int(x) for x in steps][:1000]
    for n, v in (inside.get("metrics") or {}).items():
        sdk_metrics.set_final(str(n), float(v))
    sdk_metrics.merge(metrics)
    config, config_source = merge_config(dict(inside.get("config") or {}), argv_config)
    data: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id,
        "name": name or str(inside.get("name") or ""),
        "kind": kind,
        "replay_of": replay_of,
        "status": result.status,
        "exit_code": result.exit_code,
        "started_at": result.started_at,
        "ended_at": result.ended_at,
        "duration_s": round(result.duration_s, 6),
        "tags": dict(tags),
        "argv": list(argv),
        "workdir": g.workdir,
        "env": outside.env,
        "code": {
            "repo_url": g.repo_url,
            "commit": g.commit,
            "branch": g.branch,
            "dirty": g.dirty,
            "diff_sha256": diff_sha256,
            "untracked": g.untracked,
        },
        "image": dict(image) if image else None,
        "data": outside.data,
        "config": config,
        "config_source": config_source,
        "randomness": randomness_group(
            inside["seed"] if inside.get("seed") is not None else seed,
            seeds,
            outside.env.get("PYTHONHASHSEED"),
        ),
        "determinism": determinism_group(det, inside.get("nondeterministic_ops")),
        "environment": {
            "python_version": env_view.get("python_version") or outside.python.python_version,
            "packages": env_view.get("packages", outside.python.packages),
            "packages_sha256": env_view.get("packages_sha256", outside.python.packages_sha256),
            "torch_version": torch_view.get("torch_version"),
            "cuda_version": torch_view.get("cuda_version"),
            "cudnn_version": torch_view.get("cudnn_version"),
            "nccl_version": torch_view.get("nccl_version"),
            "os": env_view.get("os") or probes.os_description(),
            "kernel": probes.kernel(),
            "hostname": probes.hostname(),
            "interpreter": interpreter_info(
                interpreter, env_view.get("python_version") or outside.python.python_version
            ),
        },
        "hardware": {
            "cpu_model": probes.cpu_model(),
            "cpu_count": os.cpu_count(),
            "gpus": gpus if gpus is not None else [],
            "gpu_count": len(gpus) if gpus is not None else 0,
            "driver_version": outside.gpus.driver_version,
        },
        "outputs": {
            "artifacts": artifacts,
            "metrics": sdk_metrics.finals,
            "metric_history": {k: [list(p) for p in v] for k, v in sdk_metrics.history.items()},
            "metric_times": sdk_metrics.timed(),
            "metric_nonfinite": sdk_metrics.nonfinite,
            "log_sha256": log_sha256,
            "log_tail": log_tail or None,
        },
        "capture": dict(capture) if capture else None,
        "replay": dict(replay) if replay else None,
        "launch": probes.launch_info(argv),
    }
    if frameworks is not None:
        apply_findings(data, frameworks, sdk_metrics, inside, seed, result.started_at)
        config = data["config"]
    if config:
        from storage.manifest import config_hash

        try:
            data["config_hash"] = config_hash(config)
        except Exception:
            data["config"] = {}
    return manifest_from_data(data, source="launcher").sealed()


def probe_outside(
    opts: RecordOptions,
    cache: StatCache | None,
    interpreter: str,
    side: SideWork | None = None,
    places: list[Place] | None = None,
) -> Outside:
    """What the launcher learns before the run.  With ``side`` (started), the Python
    packages and the GPUs are left to it: :meth:`SideWork.fill` puts them in after the
    run.  The code (git) and the data are always read here, before the command starts:
    the command may change either as soon as it runs.  With ``places`` (a list), the
    locations go there as plain values and ``locations`` is left empty, for the caller
    to fill after the launch (:data:`Place`)."""
    git_state = probes.probe_git(opts.cwd)
    data_items = [parse_data_arg(d, opts.cwd) for d in opts.data]
    data, found = _data_entries(data_items, git_state.root, cache)
    if git_state.root is not None:
        found.append(("repo", "root", str(git_state.root)))
    found.append(("workdir", "cwd", str(opts.cwd.resolve())))
    if places is not None:
        places.extend(found)
    locs = _locations(found) if places is None else []
    env = probes.training_env(os.environ, opts.env_names)
    if opts.seed is not None:
        env.setdefault("PYTHONHASHSEED", str(opts.seed))
        env[SEED_ENV] = str(opts.seed)
    if opts.deterministic is not None:
        env[DETERMINISM_ENV] = "on" if opts.deterministic else "off"
    if side is not None:
        python, gpus = probes.PythonEnv(), probes.GpuProbe()
    else:
        python = probes.probe_python(interpreter) if not opts.image else probes.PythonEnv()
        gpus = probes.probe_gpus()
    return Outside(git=git_state, python=python, gpus=gpus, data=data, locations=locs, env=env)


SEQUENTIAL_ENV = "REPLAY_TUI_RECORD_SEQUENTIAL"
"""Set (to anything but ``0``): ``record`` does everything in turn, as it did before the
overlap: the probes before the command, the outputs hashed and fingerprinted with torch
after it.  The manifest is the same either way (tests/capture/test_record_overhead.py);
the benchmark uses it as its reference (bench/bench_record.py)."""
TIMINGS_ENV = "REPLAY_TUI_RECORD_TIMINGS"
"""A file path: ``record`` writes there a small JSON of when each phase began and
ended (``time.time()`` stamps) and how long the side work took."""


def _warm() -> None:
    """Import and build now what reading the outputs and keeping the run need after the
    command: the readers, the manifest's models and validators, the store."""
    import zipfile  # noqa: F401 - the torch-free checkpoint reader's

    import replay_tui.checkpoints.digest
    import replay_tui.compare.gaps
    import replay_tui.door  # noqa: F401
    import storage.objects
    import storage.store  # noqa: F401
    from storage.manifest import IntegrityInfo, RunManifest

    for model in (RunManifest, IntegrityInfo):  # built on first use (defer_build): now
        model.model_rebuild()
    _inside_checks()


class SideWork:
    """What ``record`` learns while the command runs, each part in its own thread: the
    run's Python packages (a subprocess of the run's interpreter) and the GPUs
    (``nvidia-smi``), both at a lower priority, and the imports and validators that
    reading the outputs needs.  None of it depends on what the command does."""

    def __init__(self, interpreter: str | None) -> None:
        self.python = probes.PythonEnv()
        self.gpus = probes.GpuProbe()
        self.seconds: dict[str, float] = {}
        self.ended: dict[str, float] = {}  # time.time() when each part was done
        self._errors: list[BaseException] = []
        parts: list[tuple[str, Callable[[], None], bool]] = [("gpu_probe", self._gpus, True)]
        if interpreter is not None:  # None: the command runs in an image, probed there
            parts.insert(0, ("python_probe", lambda: self._python(interpreter), True))
        self._threads = [self._thread(name, fn, low) for name, fn, low in parts]
        # the imports hold the GIL: started with the command (start_warm), not before,
        # where they would slow the probes of the code and the data down
        self._warm = self._thread("warm", _warm, False)

    def _thread(self, name: str, fn: Callable[[], None], low: bool) -> threading.Thread:
        return threading.Thread(
            target=self._part, args=(name, fn, low), name=f"replay-tui-{name}", daemon=True
        )

    def _python(self, interpreter: str) -> None:
        self.python = probes.probe_python(interpreter)

    def _gpus(self) -> None:
        self.gpus = probes.probe_gpus()

    def _part(self, name: str, fn: Callable[[], None], low: bool) -> None:
        if low:
            lower_priority()
        t0 = time.monotonic()
        try:
            fn()
        except BaseException as e:  # a probe's: raised again by fill, in record's thread
            if fn is not _warm:  # the warm-up's: only lost time (imported again after)
                self._errors.append(e)
        finally:
            self.seconds[name] = round(time.monotonic() - t0, 4)
            self.ended[name] = time.time()

    def start(self) -> SideWork:
        """Start the probes (they wait on their subprocesses, not on the GIL)."""
        for t in self._threads:
            t.start()
        return self

    def start_warm(self) -> None:
        self._warm.start()
        self._threads.append(self._warm)

    def fill(self, outside: Outside) -> None:
        """Wait for the side work and put what it learnt into ``outside``."""
        for t in self._threads:
            t.join()
        if self._errors:
            raise self._errors[0]
        outside.python = self.python
        outside.gpus = self.gpus


_LATER = (
    "pydantic",
    "storage.manifest",
    "storage.store",
    "replay_tui.compare",
    "replay_tui.checkpoints",
    "torch",
    "replay_tui.cli.runs",
    "replay_tui.cli.replay",
    "replay_tui.cli.audit",
    "replay_tui.cli.bisect",
    "replay_tui.cli.demo",
    "replay_tui.cli.importers",
)
"""Modules the launch of a local command does not need (the manifest's models, the
store, the readers of outputs, the other commands): imported while the command runs,
or never (the object store is imported before: the outputs read early are staged in
it, ``outputs.EarlyOutputs``).  Which of them were imported before the launch is in the timings."""


class _Marks:
    """When each phase of a recording ended, for ``REPLAY_TUI_RECORD_TIMINGS``."""

    def __init__(self, mode: str) -> None:
        self.path = os.environ.get(TIMINGS_ENV) or None
        self.mode = mode
        self.stamps: dict[str, float] = {"entry": time.time()}
        self.at_launch: list[str] = []

    def mark(self, name: str) -> None:
        self.stamps[name] = time.time()
        if name == "launch" and self.path is not None:
            self.at_launch = sorted(m for m in sys.modules if m.startswith(_LATER))

    def write(self, side: SideWork | None, result: ExecResult, early: EarlyOutputs | None) -> None:
        if self.path is None:
            return
        st = self.stamps
        phases = list(st)
        data = {
            "mode": self.mode,
            "stamps": st,
            "phase_s": {b: round(st[b] - st[a], 4) for a, b in itertools.pairwise(phases)},
            "before_launch_s": round(st["launch"] - st["entry"], 4),
            "command_s": round(result.duration_s, 4),
            "after_end_s": round(st["done"] - st["ran"], 4),
            "side_s": dict(side.seconds) if side else {},
            # outputs read as soon as the run closed them (outputs.EarlyOutputs)
            "early": early.timings() if early is not None else None,
            # torch imported by record itself (the torch-free digest needs none)
            "torch_imported": "torch" in sys.modules,
            # what the launch waited for and need not have (see _LATER)
            "imported_before_launch": self.at_launch,
            "side_after_end_s": (
                {k: round(max(0.0, v - st["ran"]), 4) for k, v in side.ended.items()}
                if side
                else {}
            ),
        }
        with contextlib.suppress(OSError):
            Path(self.path).write_text(json.dumps(data, indent=1) + "\n")


@dataclass(frozen=True)
class StoreLater:
    """The store to keep the run in, opened by ``record`` only once the command has
    ended: before the launch it needs the path alone (the hash cache and the object
    store lie beside it).  ``opener`` runs in the caller's thread; the caller checks
    before what it can without opening it (see ``cli.record``)."""

    path: Path
    opener: Callable[[], RunStore]


def record(
    opts: RecordOptions,
    store: RunStore | StoreLater,
    *,
    executor: Executor | None = None,
    on_line: OnLine | None = None,
    should_cancel: ShouldCancel | None = None,
    image_info: Callable[[], dict[str, Any] | None] | None = None,
) -> RecordResult:
    """Run ``opts.argv`` and store its manifest.  Returns whatever the command did.

    What does not depend on the command (its Python's packages, the GPUs, the imports
    that reading its outputs needs) is done while it runs (:class:`SideWork`); the code
    and the data are read before it starts; after it ends, each checkpoint is read once
    for its sha256 and its tensor digest, and copied into the object store in that read
    (:func:`artifact_entries` ``one_pass`` and ``objects``).  Before the launch only
    what the launch needs is imported and done; the store (a :class:`StoreLater`) is
    opened after the command ended, its modules imported while it ran.
    ``REPLAY_TUI_RECORD_SEQUENTIAL`` does it all in turn instead (the store opened first,
    each output copied after the manifest is built); the manifest is the same.
    """
    sequential = os.environ.get(SEQUENTIAL_ENV, "") not in ("", "0")
    marks = _Marks("sequential" if sequential else "overlapped")
    if sequential and isinstance(store, StoreLater):
        store = store.opener()
    store_path = store.path
    if isinstance(store, StoreLater) and store_path.name != ":memory:":
        store_path.parent.mkdir(parents=True, exist_ok=True)  # as opening it would
    if not opts.argv:
        raise BadInput("nothing to record: give the command after --")
    for pat in opts.metric_regex:
        MetricRegex(pat, opts.metric_name)  # validate before running anything
    _check_globs(opts.artifacts)
    budget = OutputBudget.chosen(opts.output_budget, flag="--output-budget")
    regexes = [MetricRegex(p, opts.metric_name) for p in opts.metric_regex]
    cache = StatCache(store_path.parent / "hashcache.db") if store_path.name else None
    # the run's Python: argv[0] when it is a python, else the interpreter a launcher
    # script names (torchrun's, accelerate's, deepspeed's shebang line)
    interpreter = probes.interpreter_for(opts.argv, sys.executable, opts.cwd)
    side = None if sequential else SideWork(None if opts.image else interpreter).start()
    places: list[Place] | None = None if sequential else []
    try:
        outside = probe_outside(opts, cache, interpreter, side, places)
        argv_cfg = parse_argv(opts.argv, opts.cwd, outside.git.root)
    finally:
        if cache is not None:
            cache.close()
    series = MetricSeries()
    t_start = time.monotonic()  # the command starts next: a printed metric's wall time

    def line(text: str) -> None:
        for rx in regexes:
            rx.feed(text, series, time.monotonic() - t_start)
        if on_line is not None:
            on_line(text)

    run_id = uuid7()
    with tempfile.TemporaryDirectory(prefix="replay-tui-rec-") as tmp:
        handoff = Path(tmp) / "handoff"
        handoff.mkdir()
        log_path = Path(tmp) / "output.log"
        env = dict(outside.env)
        env[HANDOFF_ENV] = str(handoff)
        spec = ExecSpec(opts.argv, opts.cwd, env, handoff, log_path, opts.timeout_s)
        before = stale.snapshot(opts.cwd, opts.artifacts)  # what earlier runs left there
        objects, early = None, None
        if not sequential:
            from storage.objects import ObjectStore

            objects = ObjectStore.beside(store_path)
            early = EarlyOutputs.start(
                opts.cwd, opts.artifacts, objects, before.files, budget.limit
            )
        marks.mark("launch")
        try:
            if side is not None:
                side.start_warm()
            run = (executor or LocalExecutor()).run
            result = run(spec, line, should_cancel or (lambda: False))
            marks.mark("ran")
            if early is not None:
                early.finish()
                marks.mark("early_finished")
            out = collect_outputs(
                opts.cwd,
                opts.artifacts,
                handoff,
                log_path,
                metrics_file=opts.metrics_file,
                series=series,
                succeeded=result.status == "succeeded",
                before=before,
                one_pass=not sequential,
                objects=objects,
                early=early,
                budget=budget,
            )
        finally:
            if early is not None:
                early.close()  # staged copies not taken are dropped
        marks.mark("collected")
        if side is not None:
            side.fill(outside)
            marks.mark("side_joined")
        if places is not None:
            outside.locations = _locations(places)
        if isinstance(store, StoreLater):
            store = store.opener()
            marks.mark("store_opened")
        blobs: dict[str, tuple[str, bytes]] = {}
        diff_sha = None
        if outside.git.diff is not None:
            diff_sha = hashlib.sha256(outside.git.diff).hexdigest()
            blobs[diff_sha] = ("diff", outside.git.diff)
        blobs.update(argv_cfg.blobs())
        manifest = build_manifest(
            run_id=run_id,
            name=opts.name,
            argv=opts.argv,
            tags=opts.tags,
            outside=outside,
            result=result,
            inside=out.inside,
            artifacts=out.artifacts,
            metrics=series,
            log_sha256=out.log_sha256,
            log_tail=out.log_tail,
            seed=opts.seed,
            image=image_info() if image_info else None,
            diff_sha256=diff_sha,
            capture=capture_info(opts),
            argv_config=argv_cfg,
            frameworks=out.frameworks,
            interpreter=None if opts.image else interpreter,
        )
        marks.mark("manifest")
        kept_log = keep_run(
            store, manifest, opts.cwd, out, locations=outside.locations, blobs=blobs
        )
        marks.mark("kept")
    marks.mark("done")
    marks.write(side, result, early)
    return RecordResult(manifest, result, kept_log, tuple(out.refused), tuple(out.unmatched))


def _check_globs(patterns: Sequence[str]) -> None:
    """Refuse, before anything runs, an artifact glob that could name something outside
    the working folder."""
    from replay_tui.door import glob_parts

    for pat in patterns:
        if glob_parts(pat) is None:
            raise BadInput(f"--artifact {pat!r} must be a relative glob inside the workdir")
