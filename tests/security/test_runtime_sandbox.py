"""The sandbox of every container runtime (Docker, Podman, Apptainer), from inside.

A program sent to us (an ingested run: untrusted) replays with each runtime and reports
what it could do: it reaches no network (only a loopback interface, the host's registry
refuses it), cannot write its code, can write only its bounded output folder (a write
past the bound fails with ENOSPC) and the handoff folder, has no capabilities, is not
root, and no host path it could write shows on the host.  A missing runtime fails these
tests, never skips them.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.foreign import foreign_manifest, head, ingested
from tests.support.runtimes import apptainer_first_replays, require
from tests.support.training import git, make_repo, replay_tui

pytestmark = [pytest.mark.docker, pytest.mark.podman, pytest.mark.apptainer, pytest.mark.slow]

PROBE = """\
import errno, json, os, socket, sys
facts = {}
facts['uid'] = os.getuid()
facts['interfaces'] = sorted(n for _, n in socket.if_nameindex())
try:
    socket.create_connection(('127.0.0.1', 5000), timeout=3).close()
    facts['registry'] = 'reached'
except OSError as e:
    facts['registry'] = type(e).__name__
def can_write(folder):
    p = os.path.join(folder, '.w-' + str(os.getpid()))
    try:
        with open(p, 'w') as f:
            f.write('x')
        os.unlink(p)
        return True
    except OSError:
        return False
try:
    open('probe.py', 'a').close()
    facts['code'] = 'writable'
except OSError as e:
    facts['code'] = errno.errorcode.get(e.errno, str(e.errno))
points = set()
code_mount = ('', '')
here = os.path.abspath('probe.py')
for line in open('/proc/self/mountinfo'):
    fields = line.split()
    point = fields[4].replace('\\040', ' ')
    points.add(point)
    if here.startswith(point.rstrip('/') + '/') and len(point) >= len(code_mount[0]):
        code_mount = (point, fields[5].split(',')[0])
facts['code_mount'] = code_mount[1]
skip = ('/proc', '/sys', '/dev', '/tmp', '/var/tmp', '/run')
points |= {'/', '/etc', '/usr', '/root', '/home', '/workspace', '/var', '/opt'}
facts['writable'] = sorted(
    p for p in points
    if os.path.isdir(p) and not any(p == s or p.startswith(s + '/') for s in skip)
    and can_write(p)
)
os.makedirs('out', exist_ok=True)
written, err = 0, None
try:
    with open('out/fill.bin', 'wb') as f:
        while written < 24 * 1024 * 1024:  # never more than 24 MiB, bound or not
            f.write(b'x' * (1024 * 1024)); f.flush(); os.fsync(f.fileno())
            written += 1024 * 1024
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
os.unlink('out/fill.bin')
facts['fill'] = {'written': written, 'error': err}
marker = sys.argv[1]
open('/tmp/' + marker, 'w').write('x')
cap = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')]
facts['cap_eff'] = cap[0] if cap else None
open('out/result.txt', 'w').write('ok')
print('FACTS ' + json.dumps(facts), flush=True)
"""


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp()


def _ingest(store: Path, repo: Path, marker: str) -> str:
    ref = os.environ.get("REPLAY_TUI_TRAIN_DIGEST")
    tag = os.environ.get("REPLAY_TUI_TRAIN_IMAGE")
    if not ref or not tag:
        pytest.fail("REPLAY_TUI_TRAIN_DIGEST unset: source /var/lib/replay-tui-env/train-image.env")
    data = foreign_manifest(
        head(repo),
        ["python3", "probe.py", marker],
        image={"reference": tag, "digest": ref.split("@", 1)[1]},
        hardware={"cpu_count": 1},
        outputs={"artifacts": [{"path": "out/result.txt", "sha256": "0" * 64}]},
        capture={"artifact_globs": ["out/*"]},
    )
    return ingested(store, repo.parent, data)


@pytest.mark.parametrize("backend", ["docker", "podman", "apptainer"])
def test_a_replay_is_walled_in_whatever_runtime_runs_it(
    backend: str, base: Path, tmp_path: Path
) -> None:
    require(backend, f"{backend}-env.sh")
    extra: list[str] = []
    if backend == "apptainer":  # the session's SIF cache (converted once)
        extra = ["--apptainer-cache", str(apptainer_first_replays(base).cache)]
    repo = make_repo(tmp_path / "repo")
    (repo / "probe.py").write_text(PROBE)
    git(repo, "add", "probe.py")
    git(repo, "commit", "-q", "-m", "probe")
    store = tmp_path / "store" / "runs.db"
    marker = f"replay-tui-marker-{uuid.uuid4().hex}"
    rid = _ingest(store, repo, marker)
    proc = replay_tui(
        store,
        "replay",
        rid,
        "--backend",
        backend,
        "--repo",
        str(repo),
        "--output-size",
        "8m",
        "--memory",
        "1g",
        *extra,
    )
    said = proc.stderr + proc.stdout
    found = re.search(r"FACTS (\{.*\})", said)
    assert found is not None, said[-3000:]
    facts = json.loads(found.group(1))
    assert facts["interfaces"] == ["lo"], facts
    assert facts["registry"] != "reached", facts
    assert facts["code"] in ("EROFS", "EACCES") and facts["code_mount"] == "ro", facts
    assert facts["uid"] != 0, facts
    assert int(facts["cap_eff"], 16) == 0, facts
    assert facts["writable"] == ["/replay-tui/handoff", "/workspace/out"], facts
    assert facts["fill"]["error"] == "ENOSPC", facts
    assert facts["fill"]["written"] <= 8 * (1 << 20), facts
    assert not Path("/tmp", marker).exists()  # its /tmp is its own
    assert not (repo / "out" / "fill.bin").exists()


# -- what the runtimes' code reads: the SIF cache and the image probes beside the store --


def test_a_sif_cache_that_is_a_link_is_refused(tmp_path: Path) -> None:
    from replay_tui.errors import InfraError
    from replay_tui.replay.backends.apptainer.runtime import ApptainerRuntime

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").symlink_to(elsewhere)
    ref = "localhost:5000/replay-tui/train@sha256:" + "a" * 64
    with pytest.raises(InfraError, match="not a folder of this user"):
        ApptainerRuntime(tmp_path / "cache").ensure_sif(ref, lambda _n: None)
    assert list(elsewhere.iterdir()) == []  # no lock, no SIF written through the link


def test_a_sif_that_is_a_link_is_refused_and_never_hashed(tmp_path: Path) -> None:
    from replay_tui.errors import InfraError
    from replay_tui.replay.backends.apptainer.runtime import (
        ApptainerRuntime,
        sha256_file,
        sif_name,
    )

    digest = "sha256:" + "b" * 64
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    secret = tmp_path / "secret.sif"
    secret.write_bytes(b"not yours")
    (cache / sif_name(digest)).symlink_to(secret)
    with pytest.raises(InfraError, match="not a regular file"):
        ApptainerRuntime(cache).ensure_sif(f"r/x@{digest}", lambda _n: None)
    with pytest.raises(OSError):
        sha256_file(cache / sif_name(digest))  # O_NOFOLLOW: the link is not opened


def test_a_reference_not_by_digest_is_refused_before_any_runtime_runs() -> None:
    from replay_tui.errors import InfraError
    from replay_tui.replay.backends.runtime import requested_digest

    for bad in (
        "localhost:5000/replay-tui/train:latest",
        "x@sha256:" + "a" * 63,
        "x@sha256:" + "A" * 64,
        "--privileged@sha256:" + "a" * 64,
        "x@sha256:" + "a" * 64 + "\n",
    ):
        with pytest.raises(InfraError, match="not a reference by digest"):
            requested_digest(bad)


def test_a_planted_image_probe_link_is_not_read(tmp_path: Path) -> None:
    """The probe cache beside the store is read through the door: a link planted there
    is ignored (probed afresh), never followed."""
    from replay_tui.replay.backends import runtime as rt

    class Refuses:
        name = "podman"

        def probe_argv(self, image: Any) -> list[str]:
            return ["false"]  # a real command that fails: the probe finds nothing

        def process_env(self, req: Any) -> None:
            return None

    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"python_version": "planted"}))
    cache = tmp_path / "probes"
    cache.mkdir()
    (cache / f"podman-sha256_{'c' * 64}.json").symlink_to(secret)
    image = rt.ImageIdentity("podman", "4", "r@sha256:" + "c" * 64, "sha256:" + "c" * 64)
    got = rt.probe_environment(Refuses(), image, "sha256:" + "c" * 64, cache)  # type: ignore[arg-type]
    assert got == {}
