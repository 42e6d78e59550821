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
within its limit), and a run's artifacts are taken only from inside the tracking store's
own artifact root (the ``mlruns/`` folder; for ``sqlite:///``, the folder that holds the
database file), a folder named with ``--artifact-root``, or through the tracking server the
user named (``mlflow-artifacts:``).  An artifact URI anywhere else is refused, with its
path shown, before a byte of it is read.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from replay_tui.errors import BadInput, InfraError
from replay_tui.importers import (
    SourceRun,
    build_manifest,
    git_commit,
    label_ok,
    require,
    timestamp_ms,
    typed_params,
)
from storage.manifest import RunManifest

TRACKER = "mlflow"
STATUS = {"FINISHED": "succeeded", "FAILED": "failed", "KILLED": "interrupted"}
IMAGE_NAME_TAG = "mlflow.docker.image.name"
IMAGE_ID_TAG = "mlflow.docker.image.id"
MAX_TAGS = 200


class MlflowImporter:
    name = TRACKER

    def __init__(self) -> None:
        self._tmp: list[tempfile.TemporaryDirectory[str]] = []
        self._roots: list[Path] = []  # where a run's local artifacts may lie
        self._server = False  # the user named a tracking server

    # -- discovery -----------------------------------------------------------------

    def discover(
        self,
        source: str,
        *,
        experiments: Sequence[str] = (),
        run_ids: Sequence[str] = (),
        artifact_roots: Sequence[str] = (),
        **_: Any,
    ) -> Iterator[SourceRun]:
        uri = _check_uri(source)
        self._roots = [*_store_roots(uri), *(Path(r).resolve() for r in artifact_roots)]
        self._server = uri.startswith(("http://", "https://"))
        if uri.startswith("file://"):  # the client reads these files itself: look first
            from replay_tui.door import scan_tree

            scan_tree(Path(uri[len("file://") :]), _mlruns_kind, "MLflow store")
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
            client, run, dict(data.metrics or {}), getattr(info, "start_time", None)
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

    def _artifacts(self, client: Any, run: SourceRun) -> list[dict[str, Any]]:
        from replay_tui.capture.launcher import artifact_entries

        tmp = tempfile.TemporaryDirectory(prefix="replay-tui-mlflow-")
        self._tmp.append(tmp)  # the files must outlive to_manifest: import_runs copies them
        _, r, _ = run.handle
        self._check_artifact_uri(str(getattr(r.info, "artifact_uri", "") or ""), run)
        listed = _call(lambda: client.list_artifacts(run.run_id), run.uri, run.label)
        if not listed:
            return []
        dst = Path(tmp.name)
        _call(
            lambda: client.download_artifacts(run.run_id, "", str(dst)),
            run.uri,
            f"the artifacts of {run.label}",
        )
        entries = artifact_entries(dst, ["**/*"], [], run.refused)
        for e in entries:
            if e["sha256"] is not None:
                run.files[e["sha256"]] = (dst, e["path"])
        return entries

    def _check_artifact_uri(self, uri: str, run: SourceRun) -> None:
        """Refuse (BadInput) artifacts that lie outside the store's own artifact root,
        a folder named with ``--artifact-root``, or the tracking server named; scan a
        local artifact folder like an ``mlruns/`` folder before the client copies it."""
        from urllib.parse import unquote, urlparse

        from replay_tui.door import scan_tree, under_any

        if uri.startswith("mlflow-artifacts:") and self._server:
            return  # served by the tracking server the user named
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
                "if those files are really the run's, name their folder with --artifact-root",
            )
        if path.exists():
            scan_tree(path, lambda _rel: "saved file", "MLflow artifacts")


IMPORTER = MlflowImporter()


def _store_roots(uri: str) -> list[Path]:
    """The tracking store's own artifact root: the ``mlruns/`` folder, or the folder that
    holds a ``sqlite:///`` database (MLflow's default ``./mlruns`` lies there)."""
    if uri.startswith("file://"):
        return [Path(uri[len("file://") :])]
    if uri.startswith("sqlite:///"):
        return [Path(uri[len("sqlite:///") :]).resolve().parent]
    return []


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
    client: Any, run: SourceRun, latest: dict[str, float], start_ms: int | None = None
) -> tuple[dict[str, list[list[float]]], dict[str, float], dict[str, list[float]]]:
    """Histories, final values, and each point's wall time in seconds since the run
    started (MLflow stamps every point; ``start_ms`` is the run's start)."""
    import math

    history: dict[str, list[list[float]]] = {}
    finals: dict[str, float] = {}
    times: dict[str, list[float]] = {}
    for key in sorted(latest):
        if not label_ok(key):
            continue
        points = _call(
            lambda key=key: client.get_metric_history(run.run_id, key),
            run.uri,
            f"metric {key!r} of {run.label}",
        )
        pts = sorted(
            ((int(p.step), float(p.value), int(p.timestamp)) for p in points),
            key=lambda t: (t[0], t[2]),
        )
        kept = [(s, v, t) for s, v, t in pts if math.isfinite(v)]
        if kept:
            history[key] = [[s, v] for s, v, _ in kept]
            if isinstance(start_ms, int) and start_ms > 0:
                times[key] = [round(max(0, t - start_ms) / 1000.0, 3) for _, _, t in kept]
        value = latest[key]
        if isinstance(value, int | float) and math.isfinite(value):
            finals[key] = float(value)
    return history, finals, times


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
