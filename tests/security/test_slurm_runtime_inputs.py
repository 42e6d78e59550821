"""Attacks on what a Slurm job of Podman or Apptainer hands back (files in the spool,
untrusted) and on the kept answer of which runtime the nodes have.

- the ``identity`` a job wrote is read through the door: a link planted in its place is
  not followed, an oversized one is not read, one naming another image is refused with
  the identity that differed; none of them is approved (no ``identity.ok``);
- a probe job's answer of which runtimes the nodes have is taken only with the MAC keyed
  by its secret (fake ``sbatch``/``scontrol`` on PATH stand for the cluster here, so the
  answer can be forged: the real probe job runs in tests/replay/test_slurm_runtimes.py);
- the kept answer beside the store is read through the door: a link, a changed body or
  an old entry is not taken.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from pathlib import Path

import pytest

from replay_tui.errors import InfraError
from replay_tui.replay.backends.docker import engine as dk
from replay_tui.replay.backends.runtime import IdentityMismatch
from replay_tui.replay.backends.slurm import runtimes as rts
from replay_tui.replay.backends.slurm.engine import SlurmExecutor
from replay_tui.replay.backends.slurm.options import SlurmOptions
from replay_tui.replay.backends.slurm.spool import JobFolder

DIGEST = "sha256:" + "a" * 64
REF = f"localhost:5000/replay-tui/train@{DIGEST}"


def _executor(spool: Path) -> SlurmExecutor:
    container = dk.DockerExecutor(REF, [], dk.CONTAINER_ROOT, dk.Sandbox())
    return SlurmExecutor(container, spool, node_runtime=rts.node_runtime("podman", REF, spool))


def _identity(digest: str) -> bytes:
    found = [{"Id": "c" * 64, "Digest": digest, "RepoDigests": []}]
    return b"version\t4.3.1\n---\n" + json.dumps(found).encode()


def _answered(tmp_path: Path, plant: str, body: bytes) -> tuple[SlurmExecutor, JobFolder]:
    spool = tmp_path / "spool"
    ex = _executor(spool)
    job = JobFolder.make(spool)
    if plant == "link":
        (tmp_path / "elsewhere").write_bytes(body)
        (job.path / "identity").symlink_to(tmp_path / "elsewhere")
    else:
        job.create("identity", body)
    ex._answer_identity(job, lambda _line: None)
    return ex, job


def test_a_planted_identity_link_is_not_followed_nor_approved(tmp_path: Path) -> None:
    ex, job = _answered(tmp_path, "link", _identity(DIGEST))  # what it points at is right
    try:
        assert ex.identity is None and ex.refusal is not None
        assert "link" in ex.refusal.message
        assert not (job.path / "identity.ok").exists()
        assert (job.path / "identity.refused").is_file()
    finally:
        job.close()


def test_an_oversized_identity_is_not_read(tmp_path: Path) -> None:
    body = _identity(DIGEST) + b" " * (1 << 20)
    ex, job = _answered(tmp_path, "file", body)
    try:
        assert ex.identity is None and ex.refusal is not None
        assert "limit" in ex.refusal.message or "MiB" in ex.refusal.message
        assert not (job.path / "identity.ok").exists()
    finally:
        job.close()


def test_an_identity_naming_another_image_is_refused_naming_it(tmp_path: Path) -> None:
    other = "sha256:" + "b" * 64
    ex, job = _answered(tmp_path, "file", _identity(other))
    try:
        assert isinstance(ex.refusal, IdentityMismatch)
        assert "podman's image digest differs" in ex.refusal.message
        assert other in ex.refusal.message and DIGEST in ex.refusal.message
        assert not (job.path / "identity.ok").exists()
        with pytest.raises(IdentityMismatch):
            ex._refuse_unresolved(job, "1")  # what the replay then raises: exit 3
    finally:
        job.close()
    ex, job = _answered(tmp_path / "good", "file", _identity(DIGEST))
    try:  # the same file, right: approved with the MAC of its bytes, keyed by the secret
        assert ex.identity is not None and ex.refusal is None
        mac = (job.path / "identity.ok").read_text().strip()
        inner = hashlib.sha256(_identity(DIGEST)).hexdigest()
        assert mac == hashlib.sha256(f"{job.token}:{inner}".encode()).hexdigest()
    finally:
        job.close()


def _fake_cluster(bindir: Path, mac: str) -> None:
    """sbatch that answers for the probe job in its folder (``--chdir``): runtimes with
    the MAC ``mac`` (``right``: keyed by the folder's secret; else that text)."""
    bindir.mkdir(parents=True)
    sign = (
        'sum=$(sha256sum < "$d/runtimes"); m=$(printf "%s:%s" "$(cat "$d/job.token")"'
        ' "${sum%% *}" | sha256sum); echo "${m%% *}" > "$d/runtimes.mac"'
        if mac == "right"
        else f'echo {shlex.quote(mac)} > "$d/runtimes.mac"'
    )
    scripts = {
        "sbatch": (
            'while [ $# -gt 0 ]; do [ "$1" = --chdir ] && d=$2; shift; done\n'
            f'printf "podman 4.3.1\\napptainer 1.4.5\\n" > "$d/runtimes"\n{sign}\necho 77'
        ),
        "scontrol": "echo 'JobId=77 JobState=RUNNING Reason=None BatchHost=n1'",
        "scancel": "exit 0",
        "sacct": "exit 1",
    }
    for name, text in scripts.items():
        p = bindir / name
        p.write_text(f"#!/bin/bash\n{text}\n")
        p.chmod(0o755)


def test_a_probe_answer_without_its_mac_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_cluster(tmp_path / "bin", "0" * 64)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = tmp_path / "store" / "image-probes"
    with pytest.raises(InfraError, match="does not carry its MAC"):
        rts.detect_runtime(SlurmOptions(poll_min_s=0.05), tmp_path / "spool", cache)
    assert not cache.exists() or not list(cache.iterdir())  # nothing kept


def test_a_probe_answer_with_its_mac_is_taken_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_cluster(tmp_path / "bin", "right")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = tmp_path / "store" / "image-probes"
    opts = SlurmOptions(partition="gpu", poll_min_s=0.05)
    got = rts.detect_runtime(opts, tmp_path / "spool", cache)
    assert (got.chosen, got.probed) == ("podman", True)
    assert got.found == {"podman": "4.3.1", "apptainer": "1.4.5"}
    assert not list((tmp_path / "spool" / "jobs").iterdir())  # the probe's folder removed
    (tmp_path / "bin" / "sbatch").unlink()  # the kept answer: no job this time
    again = rts.detect_runtime(opts, tmp_path / "spool", cache)
    assert (again.chosen, again.probed) == ("podman", False)
    assert "kept from a probe job" in again.note()


def test_the_kept_answer_is_read_through_the_door(tmp_path: Path) -> None:
    cache = tmp_path / "store" / "image-probes"
    opts = SlurmOptions(partition="gpu")
    rts._keep(opts, cache, b"apptainer 1.4.5\n")
    (entry,) = cache.iterdir()
    assert rts._kept(opts, cache) == {"apptainer": "1.4.5"}
    kept = json.loads(entry.read_text())
    entry.write_text(json.dumps({**kept, "runtimes": "docker 99\n"}))  # body changed
    assert rts._kept(opts, cache) is None
    entry.write_text(json.dumps({**kept, "at": time.time() - 2 * rts.KEEP_S}))  # old
    assert rts._kept(opts, cache) is None
    entry.unlink()
    (tmp_path / "planted.json").write_text(json.dumps(kept))
    entry.symlink_to(tmp_path / "planted.json")  # a link where the entry was
    assert rts._kept(opts, cache) is None
    assert rts._kept(SlurmOptions(partition="cpu"), cache) is None  # another partition's
