"""Replay plans: what a manifest may ask of a replay, and the GPU decision.

There is no GPU here or in CI, so the host's GPU is a plain argument of ``make_plan``
(``host_has_gpu``); the real probe (nvidia-smi) is exercised by test_probes_without_gpu.
"""

from __future__ import annotations

from typing import Any

import pytest

from replay_tui.capture import probes
from replay_tui.errors import BadInput, InfraError
from replay_tui.replay.backends import get_backend
from replay_tui.replay.plan import ReplayOptions, image_reference, make_plan
from storage.manifest import RunManifest, manifest_from_data

DIGEST = "sha256:" + "d" * 64


def manifest(**over: Any) -> RunManifest:
    data: dict[str, Any] = {
        "schema_version": 1,
        "run_id": "01a20000-aaaa-7000-8000-000000000001",
        "status": "succeeded",
        "started_at": "2026-01-01T00:00:00Z",
        "argv": ["python3", "train.py"],
        "code": {"commit": "a" * 40, "dirty": False},
        "image": {"reference": "localhost:5000/team/train:v1", "digest": DIGEST},
        "hardware": {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}], "gpu_count": 1},
    }
    data.update(over)
    return manifest_from_data(data)


def plan(m: RunManifest, host_gpu: bool = False, **opts: Any):  # type: ignore[no-untyped-def]
    options = ReplayOptions(**opts)
    return make_plan(
        m,
        options,
        data_locations={},
        host_has_gpu=host_gpu,
        needs_image=get_backend(options.backend).needs_image,
    )


def test_gpu_run_on_gpu_host_requests_gpus() -> None:
    p = plan(manifest(), host_gpu=True)
    assert p.use_gpus and not p.cpu_fallback


def test_gpu_run_on_cpu_host_exits_3_unless_allow_cpu() -> None:
    with pytest.raises(InfraError) as e:
        plan(manifest())
    assert "H100" in e.value.message and e.value.hint and "--allow-cpu" in e.value.hint
    p = plan(manifest(), allow_cpu=True)
    assert p.cpu_fallback and not p.use_gpus


def test_gpus_none_runs_on_cpu_and_all_needs_a_gpu() -> None:
    assert not plan(manifest(), gpus="none").use_gpus
    with pytest.raises(InfraError):
        plan(manifest(hardware={"gpus": []}), gpus="all")


def test_image_is_pinned_by_digest_never_by_tag() -> None:
    assert image_reference(manifest()) == f"localhost:5000/team/train@{DIGEST}"
    tag_only = manifest(image={"reference": "localhost:5000/team/train:v1"})
    with pytest.raises(BadInput) as e:
        plan(tag_only, host_gpu=True)
    assert "only the tag" in e.value.message
    assert plan(tag_only, host_gpu=True, backend="local").image is None


def test_local_image_id_is_used_when_not_in_a_registry() -> None:
    m = manifest(image={"reference": "mine:dev", "image_id": "sha256:" + "e" * 64})
    assert plan(m, host_gpu=True).image == "sha256:" + "e" * 64


@pytest.mark.parametrize("name", ["LD_PRELOAD", "PYTHONPATH", "PATH", "DOCKER_HOST", "HOME"])
def test_manifest_env_that_changes_what_runs_is_refused(name: str) -> None:
    with pytest.raises(BadInput) as e:
        plan(manifest(env={name: "/tmp/x"}), host_gpu=True)
    assert name in e.value.message


def test_refusals_name_what_is_missing() -> None:
    with pytest.raises(BadInput, match="no recorded git commit"):
        plan(manifest(code={}), host_gpu=True)
    with pytest.raises(BadInput, match="argv is empty"):
        plan(manifest(argv=[]), host_gpu=True)
    with pytest.raises(BadInput, match="uncommitted changes that were not stored"):
        plan(manifest(code={"commit": "a" * 40, "dirty": True}), host_gpu=True)
    replay = manifest(kind="replay", replay_of="01a20000-aaaa-7000-8000-000000000000")
    with pytest.raises(BadInput, match="itself a replay"):
        plan(replay, host_gpu=True)


def test_determinism_off_sets_the_sdk_switch() -> None:
    p = plan(manifest(), host_gpu=True, determinism="off")
    assert p.env["REPLAY_TUI_DETERMINISM"] == "off"


def test_output_dirs_come_from_artifact_paths() -> None:
    m = manifest(
        outputs={
            "artifacts": [
                {"path": "out/model.pt", "sha256": "1" * 64},
                {"path": "ckpt/a/b.safetensors", "sha256": "2" * 64},
            ]
        }
    )
    assert plan(m, host_gpu=True).output_dirs == ["ckpt", "out"]


def test_probes_without_gpu() -> None:
    # No nvidia-smi on this machine: absence is recorded as absence, not as an error.
    g = probes.probe_gpus()
    assert g.gpus == [] and g.driver_version is None
    assert probes.probe_gpus("/nonexistent/nvidia-smi").gpus == []


def test_nvidia_smi_output_is_parsed(tmp_path: Any) -> None:
    # A stand-in for nvidia-smi (no GPU exists here or in CI): it prints the CSV that the
    # real tool prints for the query the probe makes, as seen on an H100 host.
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--query-gpu=name,memory.total,compute_cap,uuid,driver_version*)\n'
        "  echo 'NVIDIA H100 80GB HBM3, 81559, 9.0, GPU-0a1b, 580.159.04';;\n"
        "*) exit 2;; esac\n"
    )
    fake.chmod(0o755)
    g = probes.probe_gpus(str(fake))
    assert g.driver_version == "580.159.04"
    assert g.gpus == [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "memory_mb": 81559,
            "compute_capability": "9.0",
            "uuid": "GPU-0a1b",
        }
    ]
