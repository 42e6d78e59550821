"""``bisect`` on real runs in the real Docker engine, images from the real local registry.

A second image is built FROM the training image with a start-up hook (a ``.pth`` file
that scales every ``kaiming_uniform_`` initialisation by 1.001: numerics only, same
packages, same seed), with ``docker build --network none``, and pushed to the local
registry; runs record its pushed digest.  A missing engine is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from storage.store import RunStore
from tests.support.training import QUICK, git, make_repo, record_in_image, replay_tui

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REGISTRY = "localhost:5000"
HOOK = '''"""Start-up hook: every kaiming_uniform_ init is scaled by 1.001 (numerics only)."""
import torch.nn.init as _init

_orig = _init.kaiming_uniform_


def _scaled(tensor, *args, **kwargs):
    out = _orig(tensor, *args, **kwargs)
    import torch

    with torch.no_grad():
        tensor.mul_(1.001)
    return out


_init.kaiming_uniform_ = _scaled
'''


def build_and_push(tmp: Path, repository: str, extra: str = "") -> str:
    """Build the hooked image FROM the training image and push it; its digest reference."""
    ctx = tmp / f"ctx-{uuid.uuid4().hex[:8]}"
    ctx.mkdir(parents=True)
    (ctx / "perturb_init.py").write_text(HOOK)
    (ctx / "zz_perturb_init.pth").write_text("import perturb_init\n")
    (ctx / "marker").write_text(extra or "bisect test image\n")
    site = "/usr/local/lib/python3.11/dist-packages/"
    (ctx / "Dockerfile").write_text(
        f"FROM {os.environ['REPLAY_TUI_TRAIN_DIGEST']}\n"
        f"COPY perturb_init.py zz_perturb_init.pth {site}\n"
        "COPY marker /etc/bisect-test-marker\n"
    )
    tag = f"{REGISTRY}/{repository}:{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    for cmd in (
        ["docker", "build", "--network", "none", "-q", "-t", tag, str(ctx)],
        ["docker", "push", tag],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    out = subprocess.run(
        ["docker", "image", "inspect", tag, "--format", "{{json .RepoDigests}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    digests = [d for d in json.loads(out) if d.startswith(f"{REGISTRY}/{repository}@")]
    assert digests, out
    return tag


def record(store: Path, repo: Path, image: str, *script: str) -> str:
    return record_in_image(
        store, repo, image, "train_mlp.py", "--data", "data/train.npz", *QUICK, *script
    )


def harmless_code_edit(repo: Path) -> None:
    script = repo / "train_mlp.py"
    script.write_text(script.read_text() + "\n# a comment: changes no number\n")
    git(repo, "commit", "-q", "-am", "harmless edit")


def bisect(store: Path, good: str, bad: str) -> tuple[int, dict[str, Any], str]:
    proc = replay_tui(store, "bisect", good, bad, "--backend", "docker", "--json")
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {}
    return proc.returncode, data, proc.stderr + proc.stdout


def test_image_is_named_and_the_code_edit_cleared(engine: Any, tmp_path: Path) -> None:
    store = tmp_path / "store" / "runs.db"
    repo = make_repo(tmp_path / "repo")
    good = record(store, repo, os.environ["REPLAY_TUI_TRAIN_IMAGE"])
    hooked = build_and_push(tmp_path, "replay-tui/bisect-numerics")
    harmless_code_edit(repo)
    bad = record(store, repo, hooked)

    # one bisect, in words; what it found is read back from the store, where the bisect
    # keeps the same record --json prints (one run of it: each probe is a container)
    text = replay_tui(store, "bisect", good, bad, "--backend", "docker", "--quiet")
    assert text.returncode == 0, text.stderr[-4000:]
    assert "=> the divergence follows the image" in text.stdout
    assert "vs GOOD" in text.stdout and "leaves GOOD at" in text.stdout
    with RunStore(store) as s:
        facts = s.bisects_of(bad)
        assert [f["outcome"] for f in facts] == ["cause"]
        assert any(e.kind == "bisect" for e in s.events())
        assert s.count_runs() == 2  # probes are not stored as replays of GOOD
        assert s.verify().ok
    res = facts[0]["body"]
    assert res["causes"] == ["image"]
    assert res["cleared"] == ["code"]
    assert res["untestable"] == []
    assert res["confirmed"] is True
    assert res["noise_floor"]["identical"] is True
    by_swap = {(p["base"], tuple(p["swapped"])): p for p in res["probes"]}
    image_probe = by_swap[("good", ("image",))]
    assert image_probe["behaves_like"] == "BAD" and image_probe["vs_bad"] == "IDENTICAL"
    assert image_probe["first_divergent_step"] == 0
    assert by_swap[("good", ("code",))]["vs_good"] == "IDENTICAL"
    assert by_swap[("bad", ("image",))]["behaves_like"] == "GOOD"
    assert res["verdict"].startswith("the divergence follows the image")
    assert "the code change between the two commits is harmless" in res["verdict"]
    # the same packages in both images: the diff says the change is elsewhere
    assert any("the same list" in str(r["bad"]) for r in res["env_diff"])


def test_image_gone_from_the_registry_is_untestable(engine: Any, tmp_path: Path) -> None:
    store = tmp_path / "store" / "runs.db"
    repo = make_repo(tmp_path / "repo")
    good = record(store, repo, os.environ["REPLAY_TUI_TRAIN_IMAGE"])
    repository = "replay-tui/bisect-gone"
    gone = build_and_push(tmp_path, repository, extra=uuid.uuid4().hex)
    harmless_code_edit(repo)
    bad = record(store, repo, gone)
    with RunStore(store) as s:
        image = s.manifest(bad).image
    assert image is not None and image.digest is not None
    # the registry loses the image, and so does this host
    req = urllib.request.Request(
        f"http://127.0.0.1:5000/v2/{repository}/manifests/{image.digest}", method="DELETE"
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 202
    engine.images.remove(gone, force=True)
    import docker

    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(f"{REGISTRY}/{repository}@{image.digest}")

    code, res, err = bisect(store, good, bad)
    assert code == 1, err[-4000:]
    assert [u["factor"] for u in res["untestable"]] == ["image"]
    assert "no longer available" in res["untestable"][0]["reason"]
    assert res["causes"] == []
    assert res["cleared"] == ["code"]  # the rest was still bisected
    assert [(p["base"], p["swapped"]) for p in res["probes"]] == [("good", ["code"])]
    assert "image" in res["reason"] and "could not be tested" in res["reason"]
    with RunStore(store) as s:
        assert [f["outcome"] for f in s.bisects_of(good)] == ["unexplained"]
        assert s.verify().ok
