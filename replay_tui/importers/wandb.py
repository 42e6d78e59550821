"""W&B run folders (``wandb/offline-run-*``, ``wandb/run-*``) read from their ``.wandb`` log.

The log is W&B's transaction log: a 7-byte header (``:W&B``, magic 0xBEE1, version 0),
then 32 KiB blocks of chunks (crc32, length, type: full/first/middle/last), each record a
``wandb.proto.wandb_internal_pb2.Record``.  The ``wandb`` package (0.31) reads this log
only in its Go core and no longer ships a Python reader, so the framing is read here,
strictly (every checksum checked, a truncated or corrupt file refused), and every record
is decoded by the package's own protobuf classes.

What maps where: config -> ``config``; every history row -> ``outputs.metric_history``
(by ``_step``); the summary's numbers -> ``outputs.metrics``; the environment record ->
git remote + commit, program and args (``argv``), Python, OS, host, CPU, GPUs, CUDA,
docker image; ``files/diff.patch`` when present -> the stored diff;
``files/requirements.txt`` -> the package list; ``files/output.log`` -> the log.

Everything in the run folder is untrusted and read through ``replay_tui.door``: no link
below the run folder is followed (``files/`` itself included), except a saved file's link
in ``files/``, which ``wandb.save`` leaves pointing at the program's own file: it is
followed only to a regular file under a trust root: the run folder's own ``files/``, or
a folder the user named with ``--trust-root`` (``--files-root``), such as the project
folder that holds the ``wandb/`` folder.  The folder that merely holds the run is never
trusted by default (a ``wandb/`` folder in a home folder would hand out ``~/.ssh``).  A
saved file anywhere else is listed as refused, without a hash (a gap), as ``record``
lists a link in its outputs.

Bounds (``replay_tui.importers``, "Bounds"): the log is read as a stream of records and
refused when sparse; the histories stop the import at ``MAX_POINTS`` points for one
metric, ``MAX_METRIC_FILES`` metrics, or the import's point budget; the log's, the
tracker files' and the saved files' bytes come out of the import's byte budget.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from replay_tui.door import LIMITS, Refused, open_under, resolve_link_under
from replay_tui.errors import BadInput
from replay_tui.importers import (
    MAX_METRIC_FILES,
    MAX_POINTS,
    ImportBudget,
    SourceRun,
    budget_of,
    build_manifest,
    check_dense,
    git_commit,
    imported_run_id,
    label_ok,
    require,
    take_file,
    trust_roots,
)
from storage.manifest import RunManifest, sha256_hex

TRACKER = "wandb"
HEADER = struct.Struct("<4sHB")
CHUNK = struct.Struct("<IHB")
BLOCK = 32768
IDENT, MAGIC, VERSION = b":W&B", 0xBEE1, 0
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MAX_RECORD = 64 * 1024 * 1024
MAX_FILE_BYTES = LIMITS["tracker file"]  # diff, requirements, log read into the store
MAX_KEYS = 10_000  # config and summary keys, saved files named by the log
MAX_ENVIRONMENTS = 64
USER_FILE_SKIP = {
    "wandb-metadata.json",
    "wandb-summary.json",
    "config.yaml",
    "requirements.txt",
    "diff.patch",
    "output.log",
}


class WandbLogError(ValueError):
    """The ``.wandb`` file is not a complete, intact W&B log."""


def read_records(path: Path, budget: ImportBudget | None = None) -> Iterator[Any]:
    """Every record of the ``.wandb`` log ``path``, decoded by the wandb package's protobuf
    classes, as a stream: read through the door (a regular file, no link, at most
    ``LIMITS["W&B log"]``), refused when sparse (:func:`check_dense`), its size taken
    from the import's ``budget``, one 32 KiB block at a time, so what is held is one
    record (at most :data:`MAX_RECORD` bytes), never the file."""
    pb = require("wandb.proto.wandb_internal_pb2", "wandb")
    with open_under(path.parent, path.name, "W&B log") as f:
        size = check_dense(f.fd, f.shown, "W&B log")
        if budget is not None:
            budget.take_bytes(size, f"W&B log {f.shown}")
        for offset, raw in _chunks(path, _blocks(f.chunks(BLOCK * 32))):
            rec = pb.Record()
            try:
                rec.ParseFromString(raw)
            except Exception as e:  # protobuf's DecodeError
                raise WandbLogError(
                    f"{path}: record at byte {offset} does not decode ({e})"
                ) from None
            yield rec


def _blocks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The log's bytes as whole 32 KiB blocks (the last one may be shorter)."""
    carry = b""
    for chunk in chunks:
        data = carry + chunk if carry else chunk
        whole = len(data) - len(data) % BLOCK
        for i in range(0, whole, BLOCK):
            yield data[i : i + BLOCK]
        carry = data[whole:]
    if carry:
        yield carry


def _chunks(path: Path, blocks: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """(byte offset, record bytes) of each record framed in ``blocks``, strictly."""
    it = iter(blocks)
    blk = next(it, b"")
    if len(blk) < HEADER.size:
        raise WandbLogError(f"{path}: {len(blk)} bytes, shorter than the W&B log header")
    ident, magic, version = HEADER.unpack_from(blk, 0)
    if ident != IDENT or magic != MAGIC:
        raise WandbLogError(f"{path}: not a W&B log (header {blk[:7]!r})")
    if version != VERSION:
        raise WandbLogError(f"{path}: W&B log version {version}; this reader knows {VERSION}")
    crc_seed = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}
    base, pos = 0, HEADER.size  # the block's offset in the file; the place in the block
    pending: bytearray | None = None
    start = pos
    while blk:
        n = len(blk)
        while pos < n:
            at = base + pos
            left = BLOCK - pos
            if left < CHUNK.size:  # block trailer: zero padding
                if blk[pos : pos + left].strip(b"\0"):
                    raise WandbLogError(f"{path}: byte {at}: block padding is not zeros")
                pos += left
                continue
            if pos + CHUNK.size > n:
                raise WandbLogError(f"{path}: truncated at byte {at} (a chunk header is cut off)")
            crc, length, kind = CHUNK.unpack_from(blk, pos)
            if kind == 0 and not blk[pos : pos + left].strip(b"\0"):
                pos += left  # the zero-filled rest of a block: nothing was written there
                continue
            if kind not in crc_seed:
                raise WandbLogError(f"{path}: byte {at}: unknown chunk type {kind}")
            body_at = pos + CHUNK.size
            if length > left - CHUNK.size or body_at + length > n:
                raise WandbLogError(f"{path}: truncated at byte {at} (a record is cut off)")
            body = blk[body_at : body_at + length]
            if zlib.crc32(body, crc_seed[kind]) & 0xFFFFFFFF != crc:
                raise WandbLogError(f"{path}: byte {at}: checksum mismatch (the file is corrupt)")
            if kind == FULL:
                if pending is not None:
                    raise WandbLogError(f"{path}: byte {at}: a split record was never finished")
                yield at, body
            elif kind == FIRST:
                if pending is not None:
                    raise WandbLogError(f"{path}: byte {at}: a split record was never finished")
                pending, start = bytearray(body), at
            else:
                if pending is None:
                    raise WandbLogError(f"{path}: byte {at}: continuation without a first chunk")
                pending += body
                if len(pending) > MAX_RECORD:
                    raise WandbLogError(f"{path}: byte {start}: a record over {MAX_RECORD} bytes")
                if kind == LAST:
                    yield start, bytes(pending)
                    pending = None
            pos = body_at + length
        base += n
        blk, pos = next(it, b""), 0
    if pending is not None:
        raise WandbLogError(f"{path}: truncated (the last record is cut off)")


# -- the run folder -------------------------------------------------------------------


class RunFolder:
    """What a run folder's log and files say, gathered record by record."""

    def __init__(
        self,
        folder: Path,
        log: Path,
        files_root: Path | Sequence[Path] | None = None,
        budget: ImportBudget | None = None,
    ) -> None:
        self.folder, self.log = folder, log
        named = [files_root] if isinstance(files_root, Path) else list(files_root or ())
        self.roots = trust_roots(named, [folder / "files"])
        """Where a saved file's link may lead: the folders named, then ``files/``."""
        self.budget = budget if budget is not None else ImportBudget.from_env()
        self.points: dict[str, int] = {}
        self.output_bytes = 0
        self.run: Any = None
        self.envs: list[Any] = []
        self.config: dict[str, Any] = {}
        self.history: dict[str, list[list[float]]] = {}
        self.times: dict[str, list[float | None]] = {}  # per point: the row's _runtime
        self.summary: dict[str, Any] = {}
        self.exit: Any = None
        self.user_files: list[str] = []
        self.output: list[str] = []
        self.read()

    def read(self) -> None:
        for rec in read_records(self.log, self.budget):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                self.run = rec.run
                self._config(rec.run.config.update)
            elif kind == "config":
                self._config(rec.config.update)
            elif kind == "environment":
                if len(self.envs) >= MAX_ENVIRONMENTS:
                    self._over(f"more than {MAX_ENVIRONMENTS} environment records")
                self.envs.append(rec.environment)
            elif kind == "history":
                self._history(rec.history)
            elif kind == "summary":
                for item in rec.summary.update:
                    key = ".".join(item.nested_key) if item.nested_key else item.key
                    self.summary[key] = _json(item.value_json)
                for item in rec.summary.remove:
                    key = ".".join(item.nested_key) if item.nested_key else item.key
                    self.summary.pop(key, None)
                if len(self.summary) > MAX_KEYS:
                    self._over(f"a summary of more than {MAX_KEYS} keys")
            elif kind == "exit":
                self.exit = rec.exit
            elif kind == "output_raw":
                self.output_bytes += len(rec.output_raw.line)
                if self.output_bytes > MAX_FILE_BYTES:
                    self._over(f"more than {MAX_FILE_BYTES // (1 << 20)} MiB of output lines")
                self.output.append(rec.output_raw.line)
            elif kind == "files":
                for f in rec.files.files:
                    self.user_files.append(f.path)
                if len(self.user_files) > MAX_KEYS:
                    self._over(f"more than {MAX_KEYS} saved files")
        if self.run is None:
            raise WandbLogError(f"{self.log}: no run record: not a W&B run log")

    def _over(self, what: str) -> None:
        raise WandbLogError(f"{self.log}: {what}; refused (the limit is in the importer)")

    def _config(self, updates: Any) -> None:
        for item in updates:
            key = ".".join(item.nested_key) if item.nested_key else item.key
            if key != "_wandb":
                self.config[key] = _json(item.value_json)
        if len(self.config) > MAX_KEYS:
            self._over(f"a config of more than {MAX_KEYS} keys")

    def _history(self, h: Any) -> None:
        row: dict[str, Any] = {}
        for item in h.item:
            key = ".".join(item.nested_key) if item.nested_key else item.key
            row[key] = _json(item.value_json)
        step = row.get("_step")
        if not isinstance(step, int) or isinstance(step, bool):
            step = int(h.step.num) if h.HasField("step") else None
        if step is None:
            return
        runtime = row.get("_runtime")  # seconds since the run started, on every row
        t = (
            round(max(0.0, float(runtime)), 3)
            if isinstance(runtime, int | float)
            and not isinstance(runtime, bool)
            and math.isfinite(runtime)
            else None
        )
        for key, value in row.items():
            if key.startswith("_") or not label_ok(key):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if math.isfinite(value):
                self._count(key)
                self.history.setdefault(key, []).append([step, float(value)])
                self.times.setdefault(key, []).append(t)

    def _count(self, key: str) -> None:
        """One more point of ``key``: refused past one history's limit, the number of
        metrics a run may have, or the import's point budget (before it is held)."""
        n = self.points.get(key, 0) + 1
        if n == 1 and len(self.points) >= MAX_METRIC_FILES:
            raise WandbLogError(
                f"{self.log}: more than {MAX_METRIC_FILES} metrics; the limit for one run is"
                f" {MAX_METRIC_FILES}"
            )
        if n > MAX_POINTS:
            raise WandbLogError(
                f"{self.log}: metric {key!r} has more than {MAX_POINTS} points; the limit for"
                f" one metric's history is {MAX_POINTS}"
            )
        self.budget.take_points(1, f"metric {key!r} of {self.log}")
        self.points[key] = n

    def metric_times(self) -> dict[str, list[float]]:
        """The wall times of the histories whose every row had a ``_runtime``."""
        return {
            k: [t for t in ts if t is not None]
            for k, ts in self.times.items()
            if ts and None not in ts and len(ts) == len(self.history.get(k, ()))
        }

    def env(self, name: str) -> Any:
        """The first set value of an environment field (W&B writes two such records)."""
        for e in self.envs:
            field = e.DESCRIPTOR.fields_by_name.get(name)
            if field is None:
                return None
            value = getattr(e, name)
            if field.message_type is not None and not _is_repeated(field):
                if e.HasField(name):
                    return value
            elif value:
                return value
        return None


def _is_repeated(field: Any) -> bool:
    return bool(getattr(field, "is_repeated", False)) or getattr(field, "label", 0) == 3


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def find_log(folder: Path) -> Path:
    if not folder.is_dir():
        raise BadInput(f"{folder}: no such run folder")
    logs = sorted(p for p in folder.glob("run-*.wandb") if not p.is_symlink())
    if not logs:
        raise BadInput(
            f"{folder}: no run-*.wandb file: not a W&B run folder",
            "name a wandb/offline-run-* or wandb/run-* folder",
        )
    if len(logs) > 1:
        raise BadInput(f"{folder}: {len(logs)} .wandb files; expected one")
    return logs[0]


class WandbImporter:
    name = TRACKER

    def discover(
        self,
        source: str,
        *,
        folders: Sequence[str] = (),
        files_root: str | None = None,
        trust_roots: Sequence[str] = (),
        budget: ImportBudget | None = None,
        **_: Any,
    ) -> Iterator[SourceRun]:
        named = [*trust_roots, *([files_root] if files_root else [])]
        for n in named:
            if not Path(n).is_dir():
                raise BadInput(f"--trust-root {n}: no such folder")
        budget = budget if budget is not None else ImportBudget.from_env()
        for f in [source, *folders]:
            folder = Path(f).resolve()
            log = find_log(folder)
            try:
                rf = RunFolder(folder, log, [Path(n) for n in named], budget)
            except WandbLogError as e:
                raise BadInput(f"cannot import {folder}: {e}") from None
            except OSError as e:
                raise BadInput(f"cannot read {log}: {e.strerror}") from None
            rid = str(rf.run.run_id) or folder.name
            sr = SourceRun(TRACKER, str(folder), rid, handle=rf, label=f"W&B run {rid} ({folder})")
            sr.budget = budget
            if rf.exit is None:
                sr.skip_reason = "no exit record: the run is still running or never finished"
            yield sr

    def identity(self, run: SourceRun) -> str:
        rf: RunFolder = run.handle
        return f"{rf.run.entity}/{rf.run.project}/{rf.run.run_id}"

    def to_manifest(self, run: SourceRun) -> RunManifest:
        from replay_tui.capture.argv_config import merge_config, parse_argv
        from replay_tui.capture.probes import packages_sha256, scrub_url

        rf: RunFolder = run.handle
        r = rf.run
        start = r.start_time.seconds + r.start_time.nanos / 1e9
        runtime = _runtime(rf)
        exit_code = int(rf.exit.exit_code) if rf.exit is not None else None
        git = rf.env("git") or (r.git if r.HasField("git") else None)
        program = rf.env("code_path") or rf.env("code_path_local") or ""
        args = [str(a) for a in (rf.env("args") or [])]
        argv = ["python3", program, *args] if program.endswith(".py") else []
        config, source = merge_config(
            {k: v for k, v in rf.config.items() if label_ok(k)}, parse_argv(argv)
        )
        if source is not None and source["source"] == "sdk":
            source["source"] = "tracker"
        elif source is None and config:
            source = {"source": "tracker"}
        diff = _read(run, rf.folder, "files/diff.patch")
        diff_sha = None
        if diff:
            diff_sha = sha256_hex(diff)
            run.blobs[diff_sha] = ("diff", diff)
        log = _read(run, rf.folder, "files/output.log")
        if log is None and rf.output:
            log = "".join(rf.output).encode("utf-8", "replace")
        log_sha = None
        if log is not None:
            log_sha = sha256_hex(log)
            run.blobs[log_sha] = ("log", log)
        packages = _requirements(run, rf.folder, "files/requirements.txt")
        artifacts = _saved_files(run, rf, rf.user_files)
        gpus = [
            {
                "name": g.name,
                "memory_mb": int(g.memory_total // (1024 * 1024)) if g.memory_total else None,
                "compute_capability": None,
                "uuid": g.uuid or None,
            }
            for g in (rf.env("gpu_nvidia") or [])
            if label_ok(g.name)
        ]
        gpu_count = rf.env("gpu_count")
        cpu = rf.env("cpu")
        python = rf.env("python") or ""
        tags = {t: "" for t in r.tags if label_ok(t)}
        for key, value in (("wandb.group", r.run_group), ("wandb.job_type", r.job_type)):
            if label_ok(value):
                tags[key] = value
        finals = {
            k: float(v)
            for k, v in sorted(rf.summary.items())
            if not k.startswith("_")
            and label_ok(k)
            and isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
        }
        name = r.display_name or r.run_id
        data: dict[str, Any] = {
            "run_id": imported_run_id(TRACKER, self.identity(run), r.run_id),
            "name": name if label_ok(name) else "",
            "status": "succeeded" if exit_code == 0 else "failed",
            "exit_code": exit_code,
            "started_at": _utc(start),
            "ended_at": _utc(start + runtime) if runtime is not None else None,
            "duration_s": runtime,
            "tags": dict(list(tags.items())[:256]),
            "argv": [a[:4096] for a in argv],
            "code": {
                "repo_url": scrub_url(git.remote_url) if git and git.remote_url else None,
                "commit": git_commit(git.commit) if git else None,
                "branch": None,
                "dirty": True if diff else None,
                "diff_sha256": diff_sha,
                "untracked": [],
            },
            "image": _image(rf.env("docker")),
            "config": config,
            "config_source": source,
            "environment": {
                "python_version": python.split()[-1] if python else None,
                "packages": packages,
                "packages_sha256": packages_sha256(packages) if packages is not None else None,
                "cuda_version": rf.env("cuda_version") or None,
                "os": rf.env("os") or None,
                "hostname": rf.env("host") or (r.host or None),
            },
            "hardware": {
                "cpu_model": cpu.model if cpu is not None and label_ok(cpu.model) else None,
                "cpu_count": rf.env("cpu_count_logical") or rf.env("cpu_count"),
                "gpus": gpus or None,
                "gpu_count": int(gpu_count) if gpu_count else (len(gpus) if gpus else None),
            },
            "outputs": {
                "artifacts": artifacts,
                "metrics": finals,
                "metric_history": rf.history,
                "metric_times": rf.metric_times(),
                "log_sha256": log_sha,
                "log_tail": None,
            },
            "source": {
                "tracker": TRACKER,
                "uri": str(rf.folder),
                "run_id": r.run_id,
                "experiment": r.project if label_ok(r.project) else None,
            },
        }
        if exit_code is not None and exit_code != 0 and log is not None:
            data["outputs"]["log_tail"] = log[-4000:].decode("utf-8", "replace")
        return build_manifest(data, run.label)


IMPORTER = WandbImporter()


def _saved_files(run: SourceRun, rf: RunFolder, saved: Sequence[str]) -> list[dict[str, Any]]:
    """Files the run saved (``wandb.save``), hashed, for the object store.

    W&B keeps a saved file as a link from ``files/`` to where the program wrote it and
    uploads what the link names, so such a link is followed, but only to a regular file
    under one of ``rf.roots`` (the run's own ``files/``, a folder named with
    ``--trust-root``); a file W&B copied into ``files/`` is read where it lies.  Either
    way no other link is followed, the size is bounded (``LIMITS["saved file"]``), a
    sparse file is refused, and the size comes out of the import's byte budget (past it
    the import stops).  A file refused is listed without a hash (an ARTIFACT_NO_HASH gap)
    and why goes to ``run.refused``.  The code snapshot (``code/``) and W&B's own files
    are not outputs.
    """
    from replay_tui.capture.artifacts import rel_path_ok

    out: list[dict[str, Any]] = []
    for rel in sorted(set(saved)):
        if rel in USER_FILE_SKIP or rel.startswith("code/") or not rel_path_ok(rel):
            continue
        member = f"files/{rel}"
        try:
            root, inner = _saved_file_place(rf, member)
            out.append(take_file(run, root, inner, rel))
        except Refused as e:
            run.refused.append(e.message if e.hint is None else f"{e.message} ({e.hint})")
            out.append({"path": rel, "sha256": None, "size_bytes": None, "kind": "file"})
        except OSError as e:
            run.refused.append(f"saved file {rf.folder / member}: cannot read it ({e.strerror})")
            out.append({"path": rel, "sha256": None, "size_bytes": None, "kind": "file"})
    return out


def _saved_file_place(rf: RunFolder, member: str) -> tuple[Path, str]:
    """(root, path under it) to open a saved file by: the link's target under a trust
    root when ``member`` is a link, else ``member`` in the run folder."""
    import os
    import stat

    try:
        st = os.lstat(rf.folder / member)
    except OSError:
        return rf.folder, member  # open_under says what is missing, and where
    if not stat.S_ISLNK(st.st_mode):
        return rf.folder, member
    # the walk to the link refuses any link on the way (files/ itself); where it leads
    # is then checked against the trust roots
    target = resolve_link_under(rf.folder, member, Path("/"), "saved file")
    for top in rf.roots:
        if target.is_relative_to(top):
            return top, target.relative_to(top).as_posix()
    roots = ", ".join(str(r) for r in rf.roots)
    raise Refused(
        f"saved file {rf.folder / member} is a link to {target}, outside {roots}: refused"
        " (links are followed only into the run's own files/ folder or a folder named with"
        " --trust-root or --files-root)"
    )


def _runtime(rf: RunFolder) -> float | None:
    """Seconds the run took: the summary's ``_runtime`` (exact), else the exit record's."""
    value = rf.summary.get("_runtime")
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return max(0.0, float(value))
    if rf.exit is not None and rf.exit.runtime > 0:
        return float(rf.exit.runtime)
    return None


def _utc(seconds: float) -> str:
    from replay_tui.importers import timestamp_ms

    out = timestamp_ms(seconds * 1000.0)
    assert out is not None
    return out


def _read(run: SourceRun, folder: Path, member: str) -> bytes | None:
    """A W&B file of the run folder, None when it is not there; a link, a special file, a
    sparse file or a file over ``LIMITS["tracker file"]`` is refused (the import stops,
    naming it); its bytes come out of the import's budget."""
    from replay_tui.door import exists_under

    if not exists_under(folder, member):
        return None
    with open_under(folder, member, "tracker file") as f:
        size = check_dense(f.fd, f.shown, "tracker file")
        budget_of(run).take_bytes(size, f"tracker file {f.shown}")
        return f.read()


def _requirements(run: SourceRun, folder: Path, member: str) -> list[str] | None:
    raw = _read(run, folder, member)
    if raw is None:
        return None
    lines = raw.decode("utf-8", "replace").splitlines()
    pkgs = sorted({ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")})
    return [p[:4096] for p in pkgs][:10_000]


def _image(value: Any) -> dict[str, Any] | None:
    from storage.manifest import _check_image_ref

    if not value:
        return None
    try:
        ref = _check_image_ref(str(value))
    except ValueError:
        return None
    digest = "sha256:" + ref.split("@sha256:", 1)[1] if "@sha256:" in ref else None
    return {"reference": ref, "digest": digest, "image_id": None, "platform": None}
