"""MLflow runs through the official client (``MlflowClient``).

Any tracking URI the client takes works: ``sqlite:///mlflow.db``, an ``mlruns/`` folder
(or ``file:///…``), an ``http(s)://`` tracking server.  What maps where:

- params -> ``config`` (typed only where unambiguous; the raw strings in
  ``config_source.raw``);
- every metric's full history (every step) -> ``outputs.metric_history``; the latest
  values -> ``outputs.metrics``;
- ``mlflow.source.git.commit`` / ``repoURL`` / ``branch`` -> ``code``;
  ``mlflow.docker.image.name`` / ``.id`` -> ``image``; ``mlflow.source.name`` and
  ``mlflow.project.entryPoint`` -> ``argv``;
- logged artifacts -> hashed ``outputs.artifacts``, copied into the object store;
- status and start/end times.

MLflow records no seed, no package list, no hardware, no data hashes and not whether the
tree was dirty: those stay ``None`` and show as gaps.

What the client reads on this machine is untrusted (``replay_tui.door``): an ``mlruns/``
folder is scanned before the client opens it (no link anywhere, regular files only, each
within its limit, and every metric file read as a stream that stops at
``MAX_POINTS`` lines: MLflow's own reader holds a whole file in memory, so a file past the
limit, a sparse one, or a run of more than ``MAX_METRIC_FILES`` metrics is refused before
the client opens it).  Histories are read by this module (a folder store: the files,
through the door; a database or a server: the client's pages), stopping at the limits,
so what is held is bounded by the limits, not by the store.

A run's artifacts are taken only from inside a trust root: the tracking store's own
artifact folders (the ``mlruns/`` folder named, and an ``mlartifacts/`` beside it; for
``sqlite:///``, the ``mlruns/`` and ``mlartifacts/`` folders beside the database file,
never the folder that holds it: a database in a home folder would hand out ``~/.ssh``),
a folder named with ``--trust-root`` (``--artifact-root``), or through the tracking
server the user named (``mlflow-artifacts:``).  An artifact URI anywhere else is
refused, with its path shown, before a byte of it is read.  Local artifacts are hashed
where they lie (through the door, sparse files refused, each size taken from the
import's byte budget) and copied from there into the object store.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from replay_tui.errors import BadInput, InfraError
from replay_tui.importers import (
    MAX_METRIC_FILES,
    MAX_POINTS,
    ImportBudget,
    SourceRun,
    budget_of,
    build_manifest,
    check_dense,
    git_commit,
    label_ok,
    require,
    take_file,
    timestamp_ms,
    trust_roots,
    typed_params,
)
from storage.manifest import RunManifest

TRACKER = "mlflow"
STATUS = {"FINISHED": "succeeded", "FAILED": "failed", "KILLED": "interrupted"}
IMAGE_NAME_TAG = "mlflow.docker.image.name"
IMAGE_ID_TAG = "mlflow.docker.image.id"
MAX_TAGS = 200
MAX_LINE = 4096  # one line of a metric file ("<ms> <value> <step>" is ~40 bytes)
MAX_ARTIFACTS = 10_000
PAGE = 10_000  # points asked of a database or a server at a time


class MlflowImporter:
    name = TRACKER

    def __init__(self) -> None:
        self._tmp: list[tempfile.TemporaryDirectory[str]] = []
        self._roots: list[Path] = []  # where a run's local artifacts may lie
        self._server = False  # the user named a tracking server
        self._folder: Path | None = None  # an mlruns/ folder store: histories read here

    # -- discovery -----------------------------------------------------------------

    def discover(
        self,
        source: str,
        *,
        experiments: Sequence[str] = (),
        run_ids: Sequence[str] = (),
        artifact_roots: Sequence[str] = (),
        trust_roots: Sequence[str] = (),
        budget: ImportBudget | None = None,
        **_: Any,
    ) -> Iterator[SourceRun]:
        uri = _check_uri(source)
        self._roots = _trusted([*trust_roots, *artifact_roots], _store_roots(uri))
        self._server = uri.startswith(("http://", "https://"))
        self._folder = None
        if uri.startswith("file://"):  # the client reads these files itself: look first
            from replay_tui.door import scan_tree

            self._folder = Path(uri[len("file://") :])
            scan_tree(self._folder, _mlruns_kind, "MLflow store")
            _check_metric_files(self._folder)
        client = _client(uri)
        if run_ids:
            for rid in run_ids:
                run = _call(lambda rid=rid: client.get_run(rid), uri, f"run {rid!r}")
                yield self._source_run(uri, client, run)
            return
        exps = _experiments(client, uri, experiments)
        ids = [e.experiment_id for e in exps]
        if not ids:
            return
        token = None
        while True:
            page = _call(
                lambda token=token: client.search_runs(ids, max_results=1000, page_token=token),
                uri,
                "the runs",
            )
            for run in page:
                yield self._source_run(uri, client, run)
            token = getattr(page, "token", None)
            if not token:
                return

    def _source_run(self, uri: str, client: Any, run: Any) -> SourceRun:
        info = run.info
        exp_name = None
        try:
            exp_name = client.get_experiment(info.experiment_id).name
        except Exception:  # the experiment name is only a label
            exp_name = None
        sr = SourceRun(
            TRACKER,
            uri,
            str(info.run_id),
            handle=(client, run, exp_name),
            label=f"mlflow run {info.run_id}",
        )
        if info.status not in STATUS:
            sr.skip_reason = f"status {info.status}: the run has not finished"
        return sr

    def identity(self, run: SourceRun) -> str:
        return run.run_id  # MLflow run ids are random UUIDs, unique across stores

    # -- the manifest ---------------------------------------------------------------

    def to_manifest(self, run: SourceRun) -> RunManifest:
        from replay_tui.capture.probes import scrub_url
        from replay_tui.importers import imported_run_id

        client, r, exp_name = run.handle
        info, data = r.info, r.data
        tags: dict[str, str] = dict(data.tags or {})
        config, raw = typed_params(dict(data.params or {}))
        history, finals, times = _metrics(
            client,
            run,
            dict(data.metrics or {}),
            getattr(info, "start_time", None),
            self._run_folder(info),
        )
        artifacts = self._artifacts(client, run)
        repo_url = tags.get("mlflow.source.git.repoURL") or tags.get("mlflow.gitRepoURL")
        branch = tags.get("mlflow.source.git.branch")
        started = timestamp_ms(info.start_time) or timestamp_ms(0)
        ended = timestamp_ms(info.end_time)
        duration = None
        if info.end_time is not None and info.start_time is not None:
            duration = max(0.0, (info.end_time - info.start_time) / 1000.0)
        user_tags = {
            k: v
            for k, v in sorted(tags.items())
            if not k.startswith("mlflow.") and label_ok(k) and label_ok(v)
        }
        user_tags = dict(list(user_tags.items())[:MAX_TAGS])
        name = info.run_name or tags.get("mlflow.runName") or ""
        data_out: dict[str, Any] = {
            "run_id": imported_run_id(TRACKER, self.identity(run), run.run_id),
            "name": name if label_ok(name) else "",
            "status": STATUS[info.status],
            "exit_code": None,
            "started_at": started,
            "ended_at": ended,
            "duration_s": duration,
            "tags": user_tags,
            "argv": _argv(tags, raw),
            "code": {
                "repo_url": scrub_url(repo_url) if repo_url else None,
                "commit": git_commit(tags.get("mlflow.source.git.commit")),
                "branch": branch if label_ok(branch) else None,
                "dirty": None,
                "diff_sha256": None,
                "untracked": [],
            },
            "image": _image(tags),
            "config": config,
            "config_source": {"source": "tracker", "raw": raw} if raw else None,
            "outputs": {
                "artifacts": artifacts,
                "metrics": finals,
                "metric_history": history,
                "metric_times": times,
                "log_sha256": None,
                "log_tail": None,
            },
            "source": {
                "tracker": TRACKER,
                "uri": scrub_url(run.uri),
                "run_id": run.run_id,
                "experiment": exp_name if label_ok(exp_name) else None,
            },
        }
        return build_manifest(data_out, run.label)

    def _run_folder(self, info: Any) -> Path | None:
        """The run's folder in an ``mlruns/`` folder store (``<experiment>/<run>/``)."""
        if self._folder is None:
            return None
        exp, rid = str(info.experiment_id), str(info.run_id)
        if not (_plain_name(exp) and _plain_name(rid)):
            raise BadInput(f"{self._folder}: run {rid!r} of experiment {exp!r}: odd ids")
        return self._folder / exp / rid

    def _artifacts(self, client: Any, run: SourceRun) -> list[dict[str, Any]]:
        _, r, _ = run.handle
        local = self._check_artifact_uri(str(getattr(r.info, "artifact_uri", "") or ""), run)
        if local is not None:  # hashed where they lie, copied from there
            return _local_artifacts(run, local)
        listed = _call(lambda: client.list_artifacts(run.run_id), run.uri, run.label)
        if not listed:
            return []
        _budget_listed(client, run, listed)
        tmp = tempfile.TemporaryDirectory(prefix="replay-tui-mlflow-")
        self._tmp.append(tmp)  # the files must outlive to_manifest: import_runs copies them
        dst = Path(tmp.name)
        _call(
            lambda: client.download_artifacts(run.run_id, "", str(dst)),
            run.uri,
            f"the artifacts of {run.label}",
        )
        return _local_artifacts(run, dst)

    def _check_artifact_uri(self, uri: str, run: SourceRun) -> Path | None:
        """Refuse (BadInput) artifacts that lie outside a trust root (the store's own
        artifact folders, a folder named with ``--trust-root``) or the tracking server
        named; scan a local artifact folder like an ``mlruns/`` folder.  The local folder
        (None: the server serves them, or there is none)."""
        from urllib.parse import unquote, urlparse

        from replay_tui.door import scan_tree, under_any

        if uri.startswith("mlflow-artifacts:") and self._server:
            return None  # served by the tracking server the user named
        parsed = urlparse(uri)
        if parsed.scheme not in ("", "file"):
            raise BadInput(
                f"cannot import {run.label}: its artifacts are at {uri}, not in the tracking"
                " store's artifact root nor on the tracking server named",
                "import from the tracking server that serves them",
            )
        path = Path(unquote(parsed.path) if parsed.scheme == "file" else uri)
        if not path.is_absolute() or not under_any(path, self._roots):
            roots = ", ".join(str(r) for r in self._roots) or "none"
            raise BadInput(
                f"cannot import {run.label}: its artifact location {path} is outside the"
                f" tracking store's artifact root ({roots}): refused",
                "if those files are really the run's, name their folder with --trust-root"
                " (or --artifact-root)",
            )
        if not os.path.lexists(path):
            return None
        scan_tree(path, lambda _rel: "saved file", "MLflow artifacts")
        return Path(os.path.realpath(path))


IMPORTER = MlflowImporter()


def _store_roots(uri: str) -> list[Path]:
    """The tracking store's own artifact folders: the ``mlruns/`` folder named and an
    ``mlartifacts/`` beside it; beside a ``sqlite:///`` database, its ``mlruns/`` and
    ``mlartifacts/`` (MLflow's defaults), never the folder itself."""
    if uri.startswith("file://"):
        folder = Path(uri[len("file://") :])
        return [folder, folder.parent / "mlartifacts"]
    if uri.startswith("sqlite:///"):
        beside = Path(uri[len("sqlite:///") :]).resolve().parent
        return [beside / "mlruns", beside / "mlartifacts"]
    return []


def _trusted(named: Sequence[str], own: Sequence[Path]) -> list[Path]:
    return trust_roots(named, own)


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\x00" not in name


def _metric_lines(f: Any, shown: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of an open metric file, as a stream: one chunk held at a
    time; a line longer than :data:`MAX_LINE` is refused before more is read."""
    from replay_tui.door import Refused

    carry = b""
    n = 0
    for chunk in f.chunks(1 << 16):
        data = carry + chunk if carry else chunk
        lines = data.split(b"\n")
        carry = lines.pop()
        for line in lines:
            n += 1
            if len(line) > MAX_LINE:
                raise Refused(f"tracker metric file {shown}: line {n} is over {MAX_LINE} bytes")
            yield n, line
        if len(carry) > MAX_LINE:
            raise Refused(f"tracker metric file {shown}: line {n + 1} is over {MAX_LINE} bytes")
    if carry:
        yield n + 1, carry


def _too_many_points(shown: str) -> BadInput:
    from replay_tui.door import Refused

    return Refused(
        f"tracker metric file {shown} holds more than {MAX_POINTS} points; the limit for one"
        f" metric's history is {MAX_POINTS}: nothing was stored",
        "import the run without that metric (a copy of its mlruns/ folder without the file)",
    )


def _check_metric_files(folder: Path) -> None:
    """Before the client opens an ``mlruns/`` folder (it reads each metric file whole to
    find the latest value): every run's metric files are counted (at most
    :data:`MAX_METRIC_FILES`) and read as streams that stop past :data:`MAX_POINTS`
    lines, refusing (``Refused``) a longer one, a sparse one, or an over-long line."""
    from replay_tui.door import Refused, open_under

    for exp in sorted(os.scandir(folder), key=lambda e: e.name):
        if not exp.is_dir(follow_symlinks=False):
            continue
        for run in sorted(os.scandir(exp.path), key=lambda e: e.name):
            metrics = Path(run.path) / "metrics"
            if not run.is_dir(follow_symlinks=False) or not metrics.is_dir():
                continue
            files = [
                Path(top, name).relative_to(folder).as_posix()
                for top, _dirs, names in os.walk(metrics)
                for name in names
            ]
            if len(files) > MAX_METRIC_FILES:
                raise Refused(
                    f"MLflow run {metrics.parent} has {len(files)} metric files; the limit for"
                    f" one run is {MAX_METRIC_FILES}: nothing was stored"
                )
            for rel in sorted(files):
                with open_under(folder, rel, "tracker metric file") as f:
                    check_dense(f.fd, f.shown, "tracker metric file")
                    for n, _line in _metric_lines(f, f.shown):
                        if n > MAX_POINTS:
                            raise _too_many_points(f.shown)


def _local_artifacts(run: SourceRun, folder: Path) -> list[dict[str, Any]]:
    """Every file under the artifact folder ``folder`` (scanned: no link, regular files
    only), hashed through the door; a sparse one or one over its limit is listed refused
    (a gap); each size comes out of the import's budget."""
    from replay_tui.capture.artifacts import rel_path_ok
    from replay_tui.door import Refused

    rels = sorted(
        Path(top, name).relative_to(folder).as_posix()
        for top, _dirs, names in os.walk(folder)
        for name in names
    )
    if len(rels) > MAX_ARTIFACTS:
        raise BadInput(
            f"cannot import {run.label}: {len(rels)} artifacts; the limit is {MAX_ARTIFACTS}"
        )
    out: list[dict[str, Any]] = []
    for rel in rels:
        if not rel_path_ok(rel):
            run.refused.append(f"artifact {rel[:200]!r}: not a plain relative path")
            continue
        try:
            out.append(take_file(run, folder, rel, rel))
        except Refused as e:
            run.refused.append(e.message if e.hint is None else f"{e.message} ({e.hint})")
            out.append({"path": rel, "sha256": None, "size_bytes": None, "kind": "file"})
        except OSError as e:
            run.refused.append(f"artifact {folder / rel}: cannot read it ({e.strerror})")
            out.append({"path": rel, "sha256": None, "size_bytes": None, "kind": "file"})
    return out


def _budget_listed(client: Any, run: SourceRun, listed: Any) -> None:
    """The artifacts a server lists, their sizes taken from the budget before a byte is
    downloaded (what is downloaded is then measured again as it is hashed)."""
    budget = budget_of(run)
    total, count = 0, 0
    stack = list(listed)
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_ARTIFACTS:
            raise BadInput(f"cannot import {run.label}: more than {MAX_ARTIFACTS} artifacts")
        if item.is_dir:
            stack.extend(
                _call(lambda p=item.path: client.list_artifacts(run.run_id, p), run.uri, run.label)
            )
        else:
            total += int(item.file_size or 0)
    check = ImportBudget(budget.max_bytes, budget.max_points, budget.used_bytes)
    check.take_bytes(total, f"the artifacts of {run.label} (as the server lists them)")


def _mlruns_kind(rel: Any) -> str:
    """The door's kind of a file in an ``mlruns/`` folder, for its size limit."""
    parts = rel.parts
    if len(parts) >= 3 and parts[2] == "artifacts":
        return "saved file"
    if len(parts) >= 3 and parts[2] == "metrics":
        return "tracker metric file"
    return "tracker file"


def _check_uri(source: str) -> str:
    """A URI the client can read, refusing ones that would create an empty store."""
    if source.startswith("sqlite:///"):
        path = Path(source[len("sqlite:///") :])
        if not path.is_file():
            raise BadInput(f"{source}: no such SQLite file ({path})")
        return source
    if source.startswith(("http://", "https://", "databricks")):
        return source
    if source.startswith("file://"):
        path = Path(source[len("file://") :])
    elif "://" in source:
        return source  # another store type the client knows (postgresql://, ...)
    else:
        path = Path(source)
    if not path.is_dir():
        raise BadInput(f"{source}: no such folder (an mlruns/ folder was expected)")
    return path.resolve().as_uri()


def _client(uri: str) -> Any:
    require("mlflow", "mlflow")
    # an unreachable server must fail in seconds, not after minutes of retries
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    if uri.startswith("file://"):  # reading an mlruns/ folder (MLflow 3 keeps it read-only)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    tracking = require("mlflow.tracking", "mlflow")
    try:
        return tracking.MlflowClient(tracking_uri=uri)
    except Exception as e:
        raise BadInput(f"{uri}: not a tracking URI MLflow can open ({_first_line(e)})") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def _call(fn: Any, uri: str, what: str) -> Any:
    """Run a client call; map its failures to exit codes (unknown run: 2, no server: 3)."""
    try:
        return fn()
    except Exception as e:
        msg = _first_line(e)
        code = getattr(e, "error_code", "")
        if code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE", "NOT_FOUND"):
            raise BadInput(f"{uri}: {what}: {msg}") from None
        if uri.startswith(("http://", "https://")):
            raise InfraError(
                f"{uri}: cannot read {what} from the tracking server ({msg})",
                "check that the server is running and reachable",
            ) from None
        raise BadInput(f"{uri}: cannot read {what} ({msg})") from None


def _experiments(client: Any, uri: str, names: Sequence[str]) -> list[Any]:
    if not names:
        return list(_call(lambda: client.search_experiments(), uri, "the experiments"))
    out = []
    for name in names:
        exp = _call(lambda name=name: client.get_experiment_by_name(name), uri, name)
        if exp is None:
            known = [e.name for e in _call(client.search_experiments, uri, "the experiments")]
            raise BadInput(
                f"{uri}: no experiment named {name!r}",
                f"known experiments: {', '.join(sorted(known)) or 'none'}",
            )
        out.append(exp)
    return out


def _metrics(
    client: Any,
    run: SourceRun,
    latest: dict[str, float],
    start_ms: int | None = None,
    folder: Path | None = None,
) -> tuple[dict[str, list[list[float]]], dict[str, float], dict[str, list[float]]]:
    """Histories, final values, and each point's wall time in seconds since the run
    started (MLflow stamps every point; ``start_ms`` is the run's start).

    Each history is read as a stream that stops past :data:`MAX_POINTS` points (from the
    run's ``folder`` in an ``mlruns/`` store, else in pages from the client), and its
    points come out of the import's point budget before they are held."""
    from replay_tui.door import Refused

    if len(latest) > MAX_METRIC_FILES:
        raise Refused(
            f"cannot import {run.label}: {len(latest)} metrics; the limit for one run is"
            f" {MAX_METRIC_FILES}: nothing was stored"
        )
    history: dict[str, list[list[float]]] = {}
    finals: dict[str, float] = {}
    times: dict[str, list[float]] = {}
    for key in sorted(latest):
        if not label_ok(key):
            continue
        if folder is not None:
            raw = _file_points(run, folder, key)
        else:
            raw = _paged_points(client, run, key)
        pts = sorted(raw, key=lambda t: (t[0], t[2]))
        kept = [(s, v, t) for s, v, t in pts if math.isfinite(v)]
        if kept:
            history[key] = [[s, v] for s, v, _ in kept]
            if isinstance(start_ms, int) and start_ms > 0:
                times[key] = [round(max(0, t - start_ms) / 1000.0, 3) for _, _, t in kept]
        value = latest[key]
        if isinstance(value, int | float) and math.isfinite(value):
            finals[key] = float(value)
    return history, finals, times


def _file_points(run: SourceRun, folder: Path, key: str) -> list[tuple[int, float, int]]:
    """(step, value, timestamp) of each line of the metric file ``folder/metrics/key``,
    read through the door as a stream, parsed as MLflow's own file store parses it."""
    from replay_tui.door import Refused, open_under, relative_parts

    budget = budget_of(run)
    parts = relative_parts(key, "metric", folder)
    out: list[tuple[int, float, int]] = []
    with open_under(folder, "/".join(("metrics", *parts)), "tracker metric file") as f:
        size = check_dense(f.fd, f.shown, "tracker metric file")
        budget.take_bytes(size, f"tracker metric file {f.shown}")
        for n, line in _metric_lines(f, f.shown):
            if n > MAX_POINTS:
                raise _too_many_points(f.shown)
            fields = line.strip().split(b" ")
            try:
                if len(fields) not in (2, 3, 5):
                    raise ValueError(f"{len(fields)} fields, where 2, 3 or 5 were expected")
                ts, value = int(fields[0]), float(fields[1])
                step = int(fields[2]) if len(fields) == 3 else 0
            except ValueError as e:
                raise Refused(f"tracker metric file {f.shown}: line {n}: {e}") from None
            out.append((step, value, ts))
    budget.take_points(len(out), f"metric {key!r} of {run.label}")
    return out


def _paged_points(client: Any, run: SourceRun, key: str) -> list[tuple[int, float, int]]:
    """(step, value, timestamp) of a metric's history from a database or a server, in
    pages of :data:`PAGE` points, stopping past :data:`MAX_POINTS`."""
    from replay_tui.door import Refused

    budget = budget_of(run)
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    what = f"metric {key!r} of {run.label}"
    out: list[tuple[int, float, int]] = []
    if store is None or not hasattr(store, "get_metric_history"):  # no pages: whole
        points = _call(lambda: client.get_metric_history(run.run_id, key), run.uri, what)
        if len(points) > MAX_POINTS:
            raise Refused(f"{what}: more than {MAX_POINTS} points; the limit is {MAX_POINTS}")
        budget.take_points(len(points), what)
        return [(int(p.step), float(p.value), int(p.timestamp)) for p in points]
    token = None
    while True:
        page = _call(
            lambda token=token: store.get_metric_history(
                run_id=run.run_id, metric_key=key, max_results=PAGE, page_token=token
            ),
            run.uri,
            what,
        )
        if len(out) + len(page) > MAX_POINTS:
            raise Refused(
                f"{what}: more than {MAX_POINTS} points; the limit for one metric's history"
                f" is {MAX_POINTS}: nothing was stored"
            )
        budget.take_points(len(page), what)
        out.extend((int(p.step), float(p.value), int(p.timestamp)) for p in page)
        token = getattr(page, "token", None)
        if not token:
            return out


def _image(tags: dict[str, str]) -> dict[str, Any] | None:
    from storage.manifest import _check_digest, _check_image_ref

    name, image_id = tags.get(IMAGE_NAME_TAG), tags.get(IMAGE_ID_TAG)
    ref = digest = iid = None
    if name:
        try:
            ref = _check_image_ref(name)
        except ValueError:
            ref = None
        if ref and "@sha256:" in ref:
            digest = "sha256:" + ref.split("@sha256:", 1)[1]
    if image_id:
        try:
            iid = _check_digest(image_id)
        except ValueError:
            iid = None
    if ref is None and iid is None:
        return None
    return {"reference": ref, "digest": digest, "image_id": iid, "platform": None}


def _argv(tags: dict[str, str], params: dict[str, str]) -> list[str]:
    """The command, where MLflow recorded one that runs from a checkout.

    An MLflow Project run is re-run with ``mlflow run . -e ENTRY -P k=v``; a local
    script is ``python3 SCRIPT`` (the name hosts and images share) when its path is
    relative.  An absolute path names a file on the recording host, not in the commit:
    no command is recorded then.
    """
    entry = tags.get("mlflow.project.entryPoint")
    if entry:
        argv = ["mlflow", "run", ".", "-e", entry]
        for k, v in sorted(params.items()):
            argv += ["-P", f"{k}={v}"]
        return argv
    source = tags.get("mlflow.source.name") or ""
    local = tags.get("mlflow.source.type", "LOCAL") == "LOCAL"
    if local and source.endswith(".py") and not os.path.isabs(source):
        return ["python3", source]
    return []
