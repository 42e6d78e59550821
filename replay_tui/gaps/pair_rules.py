"""The rules over two manifests (original and replay, or any two runs compared):
hardware, launch topology, environment, inputs and seeds.  Each registers with
``@pair_rule``."""

from __future__ import annotations

from collections.abc import Iterator

from replay_tui.gaps.registry import Gap, pair_rule
from storage.manifest import RunManifest


def _gpu_names(m: RunManifest) -> list[str]:
    return sorted(g.name for g in (m.hardware.gpus or []))


def _describe(m: RunManifest) -> str:
    names = _gpu_names(m)
    if names:
        drv = m.hardware.driver_version
        return f"{names[0]}" + (f" with driver {drv}" if drv else "")
    return "CPU"


@pair_rule
def hardware_pair(a: RunManifest, b: RunManifest) -> Iterator[Gap]:
    ga, gb = _gpu_names(a), _gpu_names(b)
    if ga and not gb:
        yield Gap(
            "PAIR_GPU_VS_CPU",
            "warning",
            "hardware.gpus",
            f"recorded on {_describe(a)}, replayed on CPU: bitwise identity is not expected",
            "replay on the recorded GPU model; judge this pair by tolerance (EQUIVALENT)",
        )
    elif ga != gb:
        yield Gap(
            "PAIR_GPU_DIFFERS",
            "warning",
            "hardware.gpus",
            f"GPU model differs ({', '.join(ga) or 'none'} vs {', '.join(gb) or 'none'}):"
            " kernels and results may differ",
            "replay on the recorded GPU model for bitwise identity",
        )
    if ga and gb and a.hardware.driver_version != b.hardware.driver_version:
        yield Gap(
            "PAIR_DRIVER_DIFFERS",
            "warning",
            "hardware.driver_version",
            f"driver {a.hardware.driver_version} vs {b.hardware.driver_version}:"
            " an expected cause of divergence",
            "pin the driver version on the replay host",
        )
    if (
        a.hardware.cpu_model
        and b.hardware.cpu_model
        and a.hardware.cpu_model != b.hardware.cpu_model
    ):
        yield Gap(
            "PAIR_CPU_DIFFERS",
            "info",
            "hardware.cpu_model",
            f"CPU differs ({a.hardware.cpu_model} vs {b.hardware.cpu_model}):"
            " vectorised kernels may sum in another order",
            "expect EQUIVALENT rather than IDENTICAL for CPU float work across CPU models",
        )


_VERSION_FIELDS = (
    ("cuda_version", "CUDA", "PAIR_CUDA_DIFFERS"),
    ("cudnn_version", "cuDNN", "PAIR_CUDNN_DIFFERS"),
    ("torch_version", "torch", "PAIR_TORCH_DIFFERS"),
    ("python_version", "Python", "PAIR_PYTHON_DIFFERS"),
)


@pair_rule
def topology_pair(a: RunManifest, b: RunManifest) -> Iterator[Gap]:
    """World size changes the numbers: each process sees another share of every batch,
    and gradients are reduced in another order (torchrun, accelerate, deepspeed)."""
    la, lb = a.launch, b.launch
    if la is None and lb is None:
        return
    shown = []
    for what in ("processes_per_node", "nodes"):
        # a command started directly is one process on one node; a launcher's unknown
        # count is unknown, not a difference
        va = getattr(la, what) if la is not None else 1
        vb = getattr(lb, what) if lb is not None else 1
        if va is not None and vb is not None and va != vb:
            shown.append(f"{what.replace('_', ' ')} {va} vs {vb}")
    if shown:
        yield Gap(
            "PAIR_TOPOLOGY_DIFFERS",
            "critical",
            "launch",
            "the launch topology differs (" + ", ".join(shown) + "): each process sees"
            " another share of the batch and gradients are reduced in another order",
            "replay with the recorded topology (the same launcher and process counts)",
        )


@pair_rule
def environment_pair(a: RunManifest, b: RunManifest) -> Iterator[Gap]:
    for attr, label, code in _VERSION_FIELDS:
        va, vb = getattr(a.environment, attr), getattr(b.environment, attr)
        if va is not None and vb is not None and va != vb:
            yield Gap(
                code,
                "warning",
                f"environment.{attr}",
                f"{label} {va} vs {vb}: an expected cause of divergence",
                f"replay in the recorded image so {label} matches",
            )
    pa, pb = a.environment.packages_sha256, b.environment.packages_sha256
    if pa and pb and pa != pb:
        la, lb = set(a.environment.packages or []), set(b.environment.packages or [])
        changed = sorted(lb - la)[:3]
        yield Gap(
            "PAIR_PACKAGES_DIFFER",
            "warning",
            "environment.packages",
            f"package sets differ ({len(la ^ lb)} entries)"
            + (f", e.g. {', '.join(changed)}" if changed else ""),
            "replay in the recorded image so packages match",
        )
    da = a.image.digest if a.image else None
    db = b.image.digest if b.image else None
    if da and db and da != db:
        yield Gap(
            "PAIR_IMAGE_DIFFERS",
            "warning",
            "image.digest",
            f"image digest differs ({da[7:19]} vs {db[7:19]})",
            "replay from the recorded digest",
        )


@pair_rule
def inputs_pair(a: RunManifest, b: RunManifest) -> Iterator[Gap]:
    if a.code.commit and b.code.commit and a.code.commit != b.code.commit:
        yield Gap(
            "PAIR_COMMIT_DIFFERS",
            "warning",
            "code.commit",
            f"code commit differs ({a.code.commit[:10]} vs {b.code.commit[:10]})",
            "diff the two commits: a code change explains any divergence",
        )
    if a.code.diff_sha256 != b.code.diff_sha256 and (a.code.dirty or b.code.dirty):
        yield Gap(
            "PAIR_DIFF_DIFFERS",
            "warning",
            "code.diff_sha256",
            "the uncommitted changes differ between the two runs",
            "compare the stored diffs",
        )
    da = {d.name: d.sha256 for d in a.data}
    db = {d.name: d.sha256 for d in b.data}
    for name in sorted(set(da) | set(db)):
        if da.get(name) != db.get(name):
            yield Gap(
                "PAIR_DATA_DIFFERS",
                "critical",
                f"data.{name}",
                f"data input {name!r} differs (or is missing on one side)",
                "train on the recorded data hash; different data is a different experiment",
            )
    if a.config_hash and b.config_hash and a.config_hash != b.config_hash:
        keys = sorted(
            k for k in set(a.config) | set(b.config) if a.config.get(k) != b.config.get(k)
        )
        yield Gap(
            "PAIR_CONFIG_DIFFERS",
            "critical",
            "config_hash",
            f"hyperparameters differ: {', '.join(keys[:5])}",
            "use the recorded config; a different config is a different experiment",
        )
    yield from _seed_pair(a, b)
    fa, fb = a.determinism, b.determinism
    for attr in (
        "deterministic_algorithms",
        "cudnn_deterministic",
        "cudnn_benchmark",
        "allow_tf32",
    ):
        va, vb = getattr(fa, attr), getattr(fb, attr)
        if va is not None and vb is not None and va != vb:
            yield Gap(
                "PAIR_DETERMINISM_DIFFERS",
                "warning",
                f"determinism.{attr}",
                f"{attr} was {va} vs {vb}",
                "replay with the recorded determinism settings",
            )


def _seed_pair(a: RunManifest, b: RunManifest) -> Iterator[Gap]:
    """One root cause, one gap: a different seed also changes every generator seeded
    from it, so the sources that differ are named in one PAIR_SEED_DIFFERS."""
    ra, rb = a.randomness, b.randomness
    differ = []
    for src in ("seed", "python", "numpy", "torch", "cuda", "dataloader_workers"):
        va, vb = getattr(ra, src), getattr(rb, src)
        if va is not None and vb is not None and va != vb:
            differ.append((src, va, vb))
    if not differ:
        return
    src, va, vb = differ[0]
    what = "the seed" if src == "seed" else f"the {src} generator's seed"
    others = [s for s, _, _ in differ[1:]]
    also = f"; so do the {', '.join(others)} seeds" if others else ""
    yield Gap(
        "PAIR_SEED_DIFFERS",
        "critical",
        f"randomness.{src}",
        f"{what} differs ({va} vs {vb}){also}: different random streams",
        "replay with the recorded seed",
    )
