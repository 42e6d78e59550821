"""Every provenance gap rule: one manifest that triggers it, one near miss that does not.

The cases start from a realistic, gap-free manifest and change as little as possible.
A last test reads the codes out of ``replay_tui/gaps.py`` so a new rule without a case
here fails the suite.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import replay_tui.gaps
from replay_tui.gaps import evaluate, evaluate_pair
from storage.manifest import RunManifest, config_hash, manifest_from_data
from tests.support.factories import realistic_manifest

Data = dict[str, Any]
Edit = Callable[[Data], None]

OTHER_SHA = "f" * 64
ARGV_FILE = {"path": "/etc/cfg.yaml", "sha256": OTHER_SHA, "size_bytes": 3, "format": "yaml"}
IN_REPO = {"in_repo": "configs/cfg.yaml"}
IMPORTED = {"tracker": "mlflow", "uri": "sqlite:///m.db", "run_id": "ab12"}


def clean() -> Data:
    d = realistic_manifest(0)
    d["run_id"] = "gaps-original-0001"
    return d


def as_replay(d: Data) -> None:
    d.update(
        run_id="gaps-replay-0002",
        kind="replay",
        replay_of="gaps-original-0001",
        replay={"backend": "docker", "environment_pinned": True},
    )


def build(*edits: Edit) -> RunManifest:
    d = clean()
    for e in edits:
        e(d)
    return manifest_from_data(d)


def nothing(d: Data) -> None:
    pass


def cpu_only(d: Data) -> None:
    d["hardware"].update(gpus=None, gpu_count=None)


def setter(path: str, value: Any) -> Edit:
    """``setter("code.commit", None)``; list items as ``data.0.sha256``."""

    def edit(d: Data) -> None:
        *parents, leaf = path.split(".")
        target: Any = d
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if isinstance(target, list):
            target[int(leaf)] = value
        else:
            target[leaf] = value

    return edit


def both(*edits: Edit) -> Edit:
    def edit(d: Data) -> None:
        for e in edits:
            e(d)

    return edit


def drop_env(name: str) -> Edit:
    def edit(d: Data) -> None:
        d["env"].pop(name, None)

    return edit


def change_config(d: Data) -> None:
    d["config"]["optimizer"]["lr"] = 0.123
    d["config_hash"] = config_hash(d["config"])


def reorder_config(d: Data) -> None:
    d["config"] = dict(reversed(list(copy.deepcopy(d["config"]).items())))
    d["config_hash"] = config_hash(d["config"])


def change_packages(d: Data) -> None:
    d["environment"]["packages"] = [*d["environment"]["packages"][1:], "extra-pkg==1.0"]
    d["environment"]["packages_sha256"] = OTHER_SHA


def rename_gpus(d: Data) -> None:
    for g in d["hardware"]["gpus"]:
        g["name"] = "NVIDIA A100-SXM4-80GB"


def new_gpu_uuids(d: Data) -> None:
    for i, g in enumerate(d["hardware"]["gpus"]):
        g["uuid"] = f"GPU-other-{i}"


def dirty_with(diff: str) -> Edit:
    return both(setter("code.dirty", True), setter("code.diff_sha256", diff))


def stale_artifact(why: str) -> Edit:
    """The first artifact listed, but not written by the run (it has no hash)."""

    def edit(d: Data) -> None:
        d["outputs"]["artifacts"][0].update(
            sha256=None, size_bytes=None, kind="file", tensor_sha256=None, stale=why
        )

    return edit


# code -> (edit that triggers it, near miss that must not)
SINGLE: dict[str, tuple[Edit, Edit]] = {
    "IMAGE_NONE": (
        setter("image", None),
        setter("image", {"reference": None, "digest": None, "image_id": "sha256:" + OTHER_SHA}),
    ),
    "IMAGE_TAG_ONLY": (
        both(setter("image.digest", None), setter("image.image_id", None)),
        setter("image.digest", None),
    ),
    "IMAGE_NOT_IN_REGISTRY": (setter("image.digest", None), setter("image.image_id", None)),
    "CODE_COMMIT_UNKNOWN": (setter("code.commit", None), setter("code.repo_url", None)),
    "CODE_DIRTY_UNKNOWN": (setter("code.dirty", None), setter("code.dirty", False)),
    "CODE_DIRTY_NO_DIFF": (setter("code.dirty", True), dirty_with(OTHER_SHA)),
    "CODE_DIRTY_DIFF_STORED": (dirty_with(OTHER_SHA), setter("code.dirty", True)),
    "CODE_UNTRACKED_FILES": (setter("code.untracked", ["notes.py"]), setter("code.untracked", [])),
    "METRIC_NONFINITE": (
        setter("outputs.metric_nonfinite", {"loss": [5, 6]}),
        setter("outputs.metric_nonfinite", {"loss": []}),
    ),
    "COMMAND_FILE_UNTRACKED": (  # the --config file the command reads is not in the commit
        setter("code.untracked", ["configs/bert-base_coco.yaml"]),
        setter("code.untracked", ["notes.py"]),
    ),
    "CODE_NO_REMOTE": (
        setter("code.repo_url", None),
        both(setter("code.repo_url", None), setter("code.commit", None)),  # commit gap instead
    ),
    "DATA_NO_HASH": (setter("data.0.sha256", None), setter("data", [])),
    "SEED_UNKNOWN": (
        lambda d: d["randomness"].update(seed=None, python=None, numpy=None, torch=None, cuda=None),
        lambda d: d["randomness"].update(python=None, numpy=None, torch=None, cuda=None),
    ),
    "SEED_SOURCE_UNKNOWN": (
        setter("randomness.numpy", None),
        both(cpu_only, setter("randomness.cuda", None)),  # cuda only counts with GPUs
    ),
    "PYTHONHASHSEED_UNSET": (
        both(setter("randomness.python_hash_seed", None), drop_env("PYTHONHASHSEED")),
        setter("randomness.python_hash_seed", None),  # still set in env
    ),
    "DETERMINISM_UNKNOWN": (
        setter("determinism.deterministic_algorithms", None),
        setter("determinism.deterministic_algorithms", False),
    ),
    "DETERMINISM_OFF": (
        setter("determinism.deterministic_algorithms", False),
        setter("determinism.deterministic_algorithms", None),
    ),
    "CUDNN_BENCHMARK_ON": (
        setter("determinism.cudnn_benchmark", True),
        setter("determinism.cudnn_benchmark", None),
    ),
    "CUBLAS_WORKSPACE_UNSET": (
        both(
            setter("determinism.cublas_workspace_config", None), drop_env("CUBLAS_WORKSPACE_CONFIG")
        ),
        both(
            cpu_only,
            setter("determinism.cublas_workspace_config", None),
            drop_env("CUBLAS_WORKSPACE_CONFIG"),
        ),
    ),
    "TF32_ON": (
        setter("determinism.allow_tf32", True),
        both(cpu_only, setter("determinism.allow_tf32", True)),
    ),
    "NONDETERMINISTIC_OPS": (
        setter("determinism.nondeterministic_ops", ["aten::index_add_"]),
        setter("determinism.nondeterministic_ops", []),
    ),
    "PACKAGES_MISSING": (
        setter("environment.packages", None),
        setter("environment.packages", []),
    ),
    "PYTHON_VERSION_UNKNOWN": (setter("environment.python_version", None), nothing),
    "HARDWARE_UNRECORDED": (
        both(cpu_only, setter("hardware.cpu_model", None)),
        setter("hardware.cpu_model", None),  # GPUs recorded
    ),
    "DRIVER_UNRECORDED": (
        setter("hardware.driver_version", None),
        both(cpu_only, setter("hardware.driver_version", None)),
    ),
    "CUDA_VERSION_UNKNOWN": (
        setter("environment.cuda_version", None),
        both(cpu_only, setter("environment.cuda_version", None)),
    ),
    "ARTIFACT_NO_HASH": (
        setter("outputs.artifacts.0.sha256", None),
        stale_artifact("left in the output folder before the run, unchanged by it"),
    ),
    "ARTIFACT_STALE": (
        stale_artifact("last changed before the run started"),
        setter("outputs.artifacts.0.sha256", None),  # unhashed, but not known to be stale
    ),
    "ARTIFACT_GLOB_EMPTY": (
        setter("capture.artifact_globs", ["checkpoints/*.pt", "out/**"]),
        setter("capture.artifact_globs", ["checkpoints/**", "**/*.log"]),
    ),
    "NO_ARTIFACTS": (
        setter("outputs.artifacts", []),
        both(setter("outputs.artifacts", []), setter("status", "failed")),
    ),
    "SEED_CONTRADICTED": (
        both(setter("randomness.seed", 42), setter("randomness.seed_handed", 7)),
        both(setter("randomness.seed", 42), setter("randomness.seed_handed", 42)),
    ),
    "METRICS_SOURCE_EMPTY": (
        setter("outputs.metric_files_unread", {"out/v/metrics.csv": "no metric in it"}),
        setter("outputs.metric_sources", {"loss": "out/v/metrics.csv"}),
    ),
    "NO_METRICS": (
        both(setter("outputs.metrics", {}), setter("outputs.metric_history", {})),
        setter("outputs.metrics", {}),  # history still there
    ),
    "CONFIG_MISSING": (
        both(setter("config", {}), setter("config_hash", None)),
        setter("config_hash", None),
    ),
    "CONFIG_FROM_ARGV": (
        setter("config_source", {"source": "argv"}),
        setter("config_source", {"source": "sdk", "argv": {"lr": 0.1}}),
    ),
    "CONFIG_FILE_OUTSIDE_REPO": (
        setter("config_source", {"source": "argv", "files": [ARGV_FILE]}),
        setter("config_source", {"source": "argv", "files": [ARGV_FILE | IN_REPO]}),
    ),
    "IMPORTED_RUN": (
        setter("source", IMPORTED),
        setter("source", None),
    ),
    "IMPORT_NO_COMMAND": (
        both(setter("source", IMPORTED), setter("argv", [])),
        setter("source", IMPORTED),
    ),
    "RUN_NOT_SUCCEEDED": (
        both(setter("status", "failed"), setter("exit_code", 1)),
        setter("exit_code", 1),
    ),
    "REPLAY_ENV_NOT_PINNED": (
        both(as_replay, setter("replay.environment_pinned", False)),
        as_replay,
    ),
    "REPLAY_CPU_FALLBACK": (
        both(as_replay, setter("replay.cpu_fallback", True)),
        as_replay,
    ),
    "REPLAY_DATA_FORCED": (
        both(as_replay, setter("replay.forced_data", True)),
        as_replay,
    ),
    "REPLAY_DETERMINISM_OFF": (
        both(as_replay, setter("replay.determinism", "off")),
        both(as_replay, setter("replay.determinism", "recorded")),
    ),
}

# code -> (edit of B that triggers it, near miss), A being the clean manifest unless
# the entry gives (edit of A, edit of B) pairs.
PAIR: dict[str, tuple[tuple[Edit, Edit], tuple[Edit, Edit]]] = {
    "PAIR_GPU_VS_CPU": ((nothing, cpu_only), (cpu_only, cpu_only)),
    "PAIR_GPU_DIFFERS": ((nothing, rename_gpus), (nothing, new_gpu_uuids)),
    "PAIR_DRIVER_DIFFERS": (
        (nothing, setter("hardware.driver_version", "535.104.05")),
        (cpu_only, both(cpu_only, setter("hardware.driver_version", "535.104.05"))),
    ),
    "PAIR_CPU_DIFFERS": (
        (nothing, setter("hardware.cpu_model", "Intel Xeon Platinum 8480+")),
        (nothing, setter("hardware.cpu_model", None)),
    ),
    "PAIR_CUDA_DIFFERS": (
        (nothing, setter("environment.cuda_version", "12.1")),
        (nothing, setter("environment.cuda_version", None)),
    ),
    "PAIR_CUDNN_DIFFERS": (
        (nothing, setter("environment.cudnn_version", "8.9.2")),
        (nothing, setter("environment.cudnn_version", None)),
    ),
    "PAIR_TORCH_DIFFERS": (
        (nothing, setter("environment.torch_version", "2.5.0+cu124")),
        (nothing, setter("environment.torch_version", None)),
    ),
    "PAIR_PYTHON_DIFFERS": (
        (nothing, setter("environment.python_version", "3.12.1")),
        (nothing, setter("environment.python_version", None)),
    ),
    "PAIR_PACKAGES_DIFFER": (
        (nothing, change_packages),
        (nothing, setter("environment.packages_sha256", None)),
    ),
    "PAIR_IMAGE_DIFFERS": (
        (nothing, setter("image.digest", "sha256:" + OTHER_SHA)),
        (nothing, setter("image.digest", None)),
    ),
    "PAIR_COMMIT_DIFFERS": (
        (nothing, setter("code.commit", "e" * 40)),
        (nothing, setter("code.commit", None)),
    ),
    "PAIR_DIFF_DIFFERS": (
        (dirty_with("a" * 64), dirty_with("b" * 64)),
        (dirty_with("a" * 64), dirty_with("a" * 64)),
    ),
    "PAIR_DATA_DIFFERS": (
        (nothing, setter("data.0.sha256", OTHER_SHA)),
        (nothing, setter("data.0.path", "data/moved/train")),
    ),
    "PAIR_CONFIG_DIFFERS": ((nothing, change_config), (nothing, reorder_config)),
    "PAIR_SEED_DIFFERS": (
        (nothing, setter("randomness.torch", 12345)),
        (nothing, setter("randomness.torch", None)),
    ),
    "PAIR_DETERMINISM_DIFFERS": (
        (nothing, setter("determinism.deterministic_algorithms", False)),
        (nothing, setter("determinism.deterministic_algorithms", None)),
    ),
    "PAIR_TOPOLOGY_DIFFERS": (
        (
            setter("launch", {"launcher": "torchrun", "processes_per_node": 2, "nodes": 1}),
            setter("launch", {"launcher": "torchrun", "processes_per_node": 1, "nodes": 1}),
        ),
        (
            setter("launch", {"launcher": "torchrun", "processes_per_node": 1, "nodes": 1}),
            nothing,  # one process through torchrun is one process
        ),
    ),
}


def codes(gaps: list[replay_tui.gaps.Gap]) -> set[str]:
    return {g.code for g in gaps}


def test_clean_manifest_has_no_gaps() -> None:
    assert evaluate(build()) == []
    assert evaluate(build(as_replay)) == []
    assert evaluate_pair(build(), build(as_replay)) == []


@pytest.mark.parametrize("code", sorted(SINGLE))
def test_single_rule(code: str) -> None:
    trigger, near_miss = SINGLE[code]
    found = evaluate(build(trigger))
    assert code in codes(found)
    gap = next(g for g in found if g.code == code)
    assert gap.message and gap.remediation and gap.field
    assert code not in codes(evaluate(build(near_miss)))


@pytest.mark.parametrize("code", sorted(PAIR))
def test_pair_rule(code: str) -> None:
    (trig_a, trig_b), (near_a, near_b) = PAIR[code]
    found = evaluate_pair(build(trig_a), build(as_replay, trig_b))
    assert code in codes(found)
    assert code not in codes(evaluate_pair(build(near_a), build(as_replay, near_b)))
    # a pair code never comes from a single manifest
    assert code not in codes(evaluate(build(as_replay, trig_b)))


def _codes_in_source() -> set[str]:
    package = Path(replay_tui.gaps.__file__).parent
    trees = [ast.parse(f.read_text(encoding="utf-8")) for f in sorted(package.glob("*.py"))]
    out: set[str] = set()
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Gap" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                out.add(first.value)
        if isinstance(node, ast.Tuple) and len(node.elts) == 3:  # _VERSION_FIELDS entries
            last = node.elts[2]
            value = last.value if isinstance(last, ast.Constant) else None
            if isinstance(value, str) and value.startswith("PAIR_"):
                out.add(value)
    return out


def test_every_rule_code_has_a_case() -> None:
    in_source = _codes_in_source()
    assert len(in_source) > 40
    assert in_source == set(SINGLE) | set(PAIR)
    assert not set(SINGLE) & set(PAIR)


@pytest.mark.parametrize(
    ("status", "exit_code", "severity"),
    [("succeeded", 0, "critical"), ("failed", 1, "warning"), ("interrupted", -2, "warning")],
)
def test_a_stale_artifact_is_critical_only_when_the_run_says_it_succeeded(
    status: str, exit_code: int, severity: str
) -> None:
    """A succeeded run whose output an earlier run left claims what is not its own; a run
    that failed is expected to have no output.  Either way the gap is the stale one (the
    file is listed without a hash), never ARTIFACT_NO_HASH with its --artifact advice."""
    found = evaluate(
        build(
            stale_artifact("last changed before the run started"),
            setter("status", status),
            setter("exit_code", exit_code),
        )
    )
    [gap] = [g for g in found if g.code == "ARTIFACT_STALE"]
    assert gap.severity == severity
    assert gap.field == "outputs.artifacts[0]"
    path = clean()["outputs"]["artifacts"][0]["path"]
    assert gap.message == (
        f"artifact {path} was not written by this run (stale: last changed before the run started)"
    )
    assert "empty output folder" in gap.remediation and "--artifact" not in gap.remediation
    assert "ARTIFACT_NO_HASH" not in codes(found)
