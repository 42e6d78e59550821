"""The sandbox of every runtime a Slurm job can start (``--slurm-runtime``), from inside.

The probe of tests/security/test_runtime_sandbox.py (a program sent to us: an ingested,
untrusted run) replays as a Slurm job on the real one-node cluster with Docker, Podman
and Apptainer, and reports what it could do: it reaches no network (only a loopback
interface), cannot write its code (a read-only mount), can write only its output folder
(bounded by the tmpfs the job script mounted: a write past it gets ENOSPC) and the
handoff folder, has no capabilities, is not root, and its /tmp is not the node's.  A
missing cluster or runtime fails these tests, never skips them.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from replay_tui.replay.backends.docker.walls import our_mounts
from tests.security.test_runtime_sandbox import PROBE as ONE_HOST_PROBE
from tests.security.test_runtime_sandbox import _ingest
from tests.support.slurm_runtimes import apptainer_drill, cluster_ready
from tests.support.training import git, make_repo, replay_tui

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.docker,
    pytest.mark.podman,
    pytest.mark.apptainer,
    pytest.mark.slow,
]


# and its groups: a Slurm job's root is in group 0, which the container must not keep
PROBE = ONE_HOST_PROBE.replace(
    "facts['uid'] = os.getuid()\n", "facts['uid'] = os.getuid()\nfacts['groups'] = os.getgroups()\n"
)
assert PROBE != ONE_HOST_PROBE


@pytest.fixture(scope="session")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp()


@pytest.mark.parametrize("runtime", ["docker", "podman", "apptainer"])
def test_a_slurm_job_is_walled_in_whatever_runtime_it_starts(
    runtime: str, base: Path, tmp_path: Path
) -> None:
    cluster_ready()
    # apptainer: the session's Slurm spool, whose SIF cache its first drill filled
    spool = apptainer_drill(base).spool if runtime == "apptainer" else tmp_path / "spool"
    repo = make_repo(tmp_path / "repo")
    (repo / "probe.py").write_text(PROBE)
    git(repo, "add", "probe.py")
    git(repo, "commit", "-q", "-m", "probe")
    store = tmp_path / "store" / "runs.db"
    marker = f"replay-tui-marker-{uuid.uuid4().hex}"
    rid = _ingest(store, repo, marker)
    proc = replay_tui(
        store, "replay", rid, "--backend", "slurm", "--slurm-runtime", runtime,
        "--slurm-spool", str(spool), "--repo", str(repo), "--output-size", "8m",
        "--memory", "1g", timeout=1200,
    )  # fmt: skip
    said = proc.stderr + proc.stdout
    assert proc.returncode in (0, 1), said[-3000:]  # judged (the ingested hash is not ours)
    found = re.search(r"FACTS (\{.*\})", said)
    assert found is not None, said[-3000:]
    facts = json.loads(found.group(1))
    assert facts["interfaces"] == ["lo"], facts
    assert facts["registry"] != "reached", facts
    assert facts["code"] in ("EROFS", "EACCES") and facts["code_mount"] == "ro", facts
    assert facts["uid"] == 65534, facts  # root submits, nobody inside
    assert set(facts["groups"]) <= {65534}, facts  # not root's group 0
    assert int(facts["cap_eff"], 16) == 0, facts
    assert facts["writable"] == ["/replay-tui/handoff", "/workspace/out"], facts
    assert facts["fill"]["error"] == "ENOSPC", facts  # the job script's tmpfs, 8 MiB
    assert facts["fill"]["written"] <= 8 * (1 << 20), facts
    assert not Path("/tmp", marker).exists()  # its /tmp is its own, not the node's
    assert not [p for p, _ in our_mounts() if p.startswith(str(spool))]  # all unmounted
