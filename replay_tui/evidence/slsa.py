"""The bundle's SLSA v1 provenance: what policy engines and ``cosign`` already read.

An in-toto Statement v1 with predicate type ``https://slsa.dev/provenance/v1``, beside
the bundle's own predicate (``statement.PREDICATE_TYPE``), in a DSSE envelope of its own
(``provenance.slsa.intoto.jsonl``), signed with the same key.  It is written before
``SHA256SUMS``, so the checksum list (and through it the main statement) covers it too.
The training run is the "build":

- ``buildDefinition.buildType``: :data:`BUILD_TYPE`, documented in docs/evidence.md;
- ``externalParameters``: the command (argv, working folder), the config and its hash,
  the seeds and the determinism settings;
- ``internalParameters``: the environment variables the run was given;
- ``resolvedDependencies``: the git commit with its repository (``source``), the image by
  digest (``image``), and each data input by content hash under its own name;
- ``runDetails.builder.id``: the host the run was recorded on
  (``https://replay-tui.dev/builder/host/<hostname>``), or the Slurm cluster for a run a
  scheduler ran (``.../builder/slurm/<partition>``);
- ``runDetails.metadata``: the run's id (``invocationId``) and its start and end times;
- ``runDetails.byproducts``: ``comparison.json`` by digest with the replay's verdict,
  replay run and the noise floor it was judged against, ``noise_floor.json`` when
  measured.

The subjects are the run's artifacts by sha256 (those of the main statement).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from replay_tui.evidence.gather import Evidence
from storage.manifest import RunManifest, sha256_hex

SLSA_PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://replay-tui.dev/buildtypes/training-run/v1"
BUILDER_HOST = "https://replay-tui.dev/builder/host/"
BUILDER_SLURM = "https://replay-tui.dev/builder/slurm/"
SLSA_NAME = "provenance.slsa.intoto.jsonl"


def builder_id(m: RunManifest) -> str:
    """The host the run was recorded on, or the Slurm cluster's partition that ran it."""
    job = m.replay.job if m.replay is not None else None
    if job is not None and job.scheduler == "slurm":
        return BUILDER_SLURM + quote(job.partition or "default", safe="")
    return BUILDER_HOST + quote(m.environment.hostname or "unknown", safe="")


def _image_uri(m: RunManifest) -> str | None:
    if m.image is None or m.image.digest is None:
        return None
    ref, digest = m.image.reference, m.image.digest
    if digest is None:
        return None
    name = (ref or "image").split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:  # drop a tag: the digest names the image
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    return f"oci://{name}@{digest}"


def resolved_dependencies(m: RunManifest) -> list[dict[str, Any]]:
    deps: list[dict[str, Any]] = []
    code = m.code
    if code.commit:
        src: dict[str, Any] = {"name": "source", "digest": {"gitCommit": code.commit}}
        if code.repo_url:
            src["uri"] = f"git+{code.repo_url}@{code.commit}"
        src["annotations"] = {
            "branch": code.branch,
            "dirty": code.dirty,
            "diff_sha256": code.diff_sha256,
        }
        deps.append(src)
    uri = _image_uri(m)
    if uri is not None and m.image is not None and m.image.digest is not None:
        algo, _, hexd = m.image.digest.partition(":")
        deps.append(
            {
                "name": "image",
                "uri": uri,
                "digest": {algo: hexd},
                "annotations": {"reference": m.image.reference, "platform": m.image.platform},
            }
        )
    for d in m.data:
        dep: dict[str, Any] = {"name": f"data:{d.name}", "uri": f"file:{quote(d.path)}"}
        if d.sha256:
            dep["digest"] = {"sha256": d.sha256}
        dep["annotations"] = {
            "path": d.path,
            "size_bytes": d.size_bytes,
            "file_count": d.file_count,
            "version": d.version,
            **({} if d.sha256 else {"hashed": False}),
        }
        deps.append(dep)
    return deps


def byproducts(ev: Evidence, member_sha: dict[str, str]) -> list[dict[str, Any]]:
    """The replay's verdict and the noise floor, bound to the bundle members that hold
    them (``member_sha``: name -> sha256 of what the bundle holds)."""
    latest = ev.latest
    floor = ev.floor.to_row() if ev.floor is not None else None
    out: list[dict[str, Any]] = [
        {
            "name": "comparison.json",
            "mediaType": "application/json",
            "digest": {"sha256": member_sha["comparison.json"]},
            "annotations": {
                "verdict": ev.verdict,
                "verdict_text": ev.verdict_text(),
                "replay_run": latest.run_id if latest else None,
                "replays": len(ev.replays),
                "noise_floor": floor,
            },
        }
    ]
    if "noise_floor.json" in member_sha:
        out.append(
            {
                "name": "noise_floor.json",
                "mediaType": "application/json",
                "digest": {"sha256": member_sha["noise_floor.json"]},
            }
        )
    return out


def slsa_predicate(ev: Evidence, member_sha: dict[str, str], tool_version: str) -> dict[str, Any]:
    m = ev.original
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "command": list(m.argv),
                "workdir": m.workdir,
                "config": m.config,
                "config_hash": m.config_hash,
                "seeds": m.randomness.model_dump(mode="json"),
                "determinism": m.determinism.model_dump(mode="json"),
            },
            "internalParameters": {"env": dict(m.env)},
            "resolvedDependencies": resolved_dependencies(m),
        },
        "runDetails": {
            "builder": {
                "id": builder_id(m),
                "version": {"replay-tui": tool_version},
            },
            "metadata": {
                "invocationId": m.run_id,
                "startedOn": m.started_at,
                "finishedOn": m.ended_at,
            },
            "byproducts": byproducts(ev, member_sha),
        },
    }


def member_digests(files: dict[str, bytes]) -> dict[str, str]:
    return {name: sha256_hex(data) for name, data in files.items()}
