"""The factors two runs can differ in, from a fixed vocabulary, and what each one swaps.

A factor is a group of *inputs* a replay can set: what the program is given, not what
it reported back.  Recorded outputs that follow from the inputs (the seed the SDK saw,
the determinism flags as the code set them, the hyperparameters the program logged, the
package list probed from the image) are never swapped on their own; when they differ
while their inputs do not, that is said in ``notes`` (another factor moved them).

- ``code``: the git commit and the stored uncommitted diff.
- ``image``: the container image, by digest (its packages, Python, CUDA libraries).
- ``data``: every data input, by content hash.
- ``config``: the command line (argv, seed values and a launcher's process counts
  masked) and the working folder.
- ``topology``: the launch topology (processes per node, nodes) a distributed launcher's
  command line gives (``torchrun --nproc-per-node``, ``accelerate launch
  --num_processes``, ``deepspeed --num_gpus``); it differs when ``compare`` says so
  (the gap ``PAIR_TOPOLOGY_DIFFERS``, one rule) and is swapped by putting the other run's
  counts into the launcher's options.  Only between two runs of the same launcher, on
  one machine: a command started directly against one started through a launcher (the
  config factor swaps the whole command line, launcher and all), or a run on several
  nodes, is untestable, with the reason.
- ``seed``: the seed given to the program: ``REPLAY_TUI_SEED`` / ``PYTHONHASHSEED`` (the
  SDK's ``seed_everything`` takes ``REPLAY_TUI_SEED`` over its argument) and the value
  of a ``--seed`` style option on the command line.
- ``determinism``: the environment variables that set determinism switches.
- ``environment``: every other recorded environment variable a replay passes on.

``hardware`` (CPU model, GPUs, driver) cannot be swapped by a replay: when it differs it
is always reported as untestable, never ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.manifest import RunManifest
from storage.wire import Wire, wire

FACTORS: tuple[str, ...] = (
    "code",
    "image",
    "data",
    "config",
    "topology",
    "seed",
    "determinism",
    "environment",
)
UNSWAPPABLE: tuple[str, ...] = ("hardware",)

SEED_ENV = frozenset({"REPLAY_TUI_SEED", "PYTHONHASHSEED"})
DETERMINISM_ENV = frozenset(
    {
        "REPLAY_TUI_DETERMINISM",
        "CUBLAS_WORKSPACE_CONFIG",
        "TORCH_DETERMINISTIC",
        "NVIDIA_TF32_OVERRIDE",
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
        "TORCH_CUDNN_V8_API_ENABLED",
        "CUDA_LAUNCH_BLOCKING",
    }
)

# ``--seed 7``, ``--random-seed 7``, ``-seed 7`` (value in the next word)
_SEED_FLAG = re.compile(r"^--?(?:random[-_]?|manual[-_]?|global[-_]?)?seed$", re.IGNORECASE)
# ``--seed=7``, ``seed=7``, ``+seed=7``, ``++trainer.seed=7`` (value after '=')
_SEED_EQ = re.compile(
    r"^((?:--?|\+\+?)?(?:[\w.]*\.)?(?:random[-_]?|manual[-_]?|global[-_]?)?seed=)(.*)$",
    re.IGNORECASE,
)
_SEED_CONFIG_KEY = re.compile(r"^(?:random_?|manual_?|global_?)?seed$", re.IGNORECASE)
MASK = "<seed>"


def seed_slots(argv: list[str]) -> list[tuple[int, str]]:
    """Where the command line carries a seed: (index, prefix before the value)."""
    out: list[tuple[int, str]] = []
    for i, word in enumerate(argv):
        if _SEED_FLAG.match(word) and i + 1 < len(argv):
            out.append((i + 1, ""))
        elif m := _SEED_EQ.match(word):
            out.append((i, m.group(1)))
    return out


def seed_values(argv: list[str]) -> list[str]:
    return [argv[i][len(prefix) :] for i, prefix in seed_slots(argv)]


def masked_argv(argv: list[str]) -> list[str]:
    """``argv`` with every seed value replaced by ``<seed>`` (the config factor's view)."""
    out = list(argv)
    for i, prefix in seed_slots(argv):
        out[i] = prefix + MASK
    return out


def with_seed_values(argv: list[str], values: list[str]) -> list[str]:
    """``argv`` with its seed values replaced, slot by slot, by ``values``.

    When the two command lines do not have the same seed slots, the ones that pair up
    are replaced and the rest are left as they are.
    """
    out = list(argv)
    for (i, prefix), value in zip(seed_slots(argv), values, strict=False):
        out[i] = prefix + value
    return out


# -- the launch topology on the command line ------------------------------------------

TOPOLOGY_OPTIONS: dict[str, tuple[str, ...]] = {
    "torchrun": ("nproc_per_node", "nnodes"),
    "accelerate": ("num_processes", "num_machines"),
    "deepspeed": ("num_gpus", "num_nodes"),
}
"""Each launcher's options that give its process counts (as ``capture.probes`` reads them)."""
TOPOLOGY_MASK = "<topology>"


def _launcher_start(argv: list[str]) -> tuple[str, int, frozenset[str]] | None:
    """(launcher, index of its first option, its options that take no value) when
    ``argv`` starts a distributed launcher (``capture.probes.launch_info``), else None."""
    from replay_tui.capture import probes

    info = probes.launch_info(argv)
    if info is None:
        return None
    kind = str(info["launcher"])
    flags = {
        "torchrun": probes.TORCHRUN_FLAGS,
        "accelerate": probes.ACCELERATE_FLAGS,
        "deepspeed": probes.DEEPSPEED_FLAGS,
    }.get(kind, frozenset())
    if Path(argv[0]).name == "accelerate":
        return kind, 2, flags
    if kind and probes.PYTHON_NAME.fullmatch(Path(argv[0]).name):
        for i, w in enumerate(argv):
            if w == "-m" and i + 1 < len(argv):
                return kind, i + 2, flags
            if w.startswith("-m") and len(w) > 2:
                return kind, i + 1, flags
        return None
    return kind, 1, flags


def topology_slots(argv: list[str]) -> dict[str, tuple[int, str]]:
    """Where a launcher's command line gives its process counts: option name (as
    :data:`TOPOLOGY_OPTIONS` spells it) -> (index of the value's word, what precedes the
    value in that word: ``--nproc-per-node=`` or nothing).  Empty for a direct command."""
    start = _launcher_start(argv)
    if start is None:
        return {}
    kind, i, flags = start
    wanted = TOPOLOGY_OPTIONS.get(kind, ())
    out: dict[str, tuple[int, str]] = {}
    while i < len(argv):
        w = argv[i]
        if w == "--" or not w.startswith("-") or w == "-":
            break  # the training script: its own options are not the launcher's
        name, eq, value = w.lstrip("-").partition("=")
        canon = name.replace("-", "_")
        if eq:
            if canon in wanted:
                out.setdefault(canon, (i, w[: len(w) - len(value)]))
        elif canon not in flags:
            if canon in wanted and i + 1 < len(argv):
                out.setdefault(canon, (i + 1, ""))
            i += 1
        i += 1
    return out


def launcher_of(argv: list[str]) -> str | None:
    start = _launcher_start(argv)
    return None if start is None else start[0]


def with_topology(argv: list[str], donor: list[str]) -> list[str]:
    """``argv`` with the process counts of ``donor``'s command line: each count option
    ``donor`` gives replaces ``argv``'s (or is put first among the launcher's options).
    Only between two command lines of the same launcher; otherwise ``argv`` as it is."""
    start = _launcher_start(argv)
    if start is None or launcher_of(donor) != start[0]:
        return list(argv)
    out = list(argv)
    mine, theirs = topology_slots(argv), topology_slots(donor)
    missing: list[str] = []
    for name, (j, prefix) in theirs.items():
        value = donor[j][len(prefix) :]
        if name in mine:
            k, p = mine[name]
            out[k] = p + value
        else:
            missing.append(f"--{name}={value}")
    return out[: start[1]] + missing + out[start[1] :]


def _masked_topology(argv: list[str]) -> list[str]:
    out = list(argv)
    for j, prefix in topology_slots(argv).values():
        out[j] = prefix + TOPOLOGY_MASK
    return out


def topology_of(m: RunManifest) -> dict[str, Any]:
    """The launch topology as the manifest records it (a direct command: one process on
    one node, as ``compare``'s gap counts it)."""
    la = m.launch
    if la is None:
        return {"launcher": None, "processes_per_node": 1, "nodes": 1}
    return {
        "launcher": la.launcher,
        "processes_per_node": la.processes_per_node,
        "nodes": la.nodes,
    }


def topology_differs(good: RunManifest, bad: RunManifest) -> bool:
    """The rule ``compare`` uses (the gap ``PAIR_TOPOLOGY_DIFFERS``)."""
    from replay_tui.gaps.pair_rules import topology_pair

    return any(g.code == "PAIR_TOPOLOGY_DIFFERS" for g in topology_pair(good, bad))


def _env_part(env: Mapping[str, str], names: frozenset[str] | None) -> dict[str, str]:
    """The env vars of one factor (``names``) or, with ``None``, of the rest."""
    if names is None:
        return {k: v for k, v in env.items() if k not in SEED_ENV and k not in DETERMINISM_ENV}
    return {k: v for k, v in env.items() if k in names}


def env_of(m: RunManifest, factor: str) -> dict[str, str]:
    if factor == "seed":
        return _env_part(m.env, SEED_ENV)
    if factor == "determinism":
        return _env_part(m.env, DETERMINISM_ENV)
    if factor == "environment":
        return _env_part(m.env, None)
    raise ValueError(f"{factor} is not carried by environment variables")


def image_key(m: RunManifest) -> str | None:
    img = m.image
    if img is None:
        return None
    return img.digest or img.image_id


def factor_value(m: RunManifest, factor: str) -> Any:
    """What a factor is in one run, as comparable plain data."""
    if factor == "code":
        return {"commit": m.code.commit, "diff_sha256": m.code.diff_sha256}
    if factor == "image":
        return image_key(m)
    if factor == "data":
        return {d.name: {"path": d.path, "sha256": d.sha256} for d in m.data}
    if factor == "config":
        return {"argv": _masked_topology(masked_argv(m.argv)), "workdir": m.workdir}
    if factor == "topology":
        return topology_of(m)
    if factor == "seed":
        return {"argv": seed_values(m.argv), "env": env_of(m, "seed")}
    if factor in ("determinism", "environment"):
        return env_of(m, factor)
    if factor == "hardware":
        hw = m.hardware
        return {
            "cpu_model": hw.cpu_model,
            "gpus": sorted(g.name for g in hw.gpus or []),
            "driver_version": hw.driver_version,
        }
    raise ValueError(f"unknown factor {factor!r}")


def _short(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, str) and len(v) > 24 and v.startswith("sha256:"):
        return v[:19]
    return str(v)


def describe(m_good: RunManifest, m_bad: RunManifest, factor: str) -> list[str]:
    """A few lines saying how ``factor`` differs (GOOD -> BAD)."""
    a, b = factor_value(m_good, factor), factor_value(m_bad, factor)
    out: list[str] = []
    if factor == "code":
        if a["commit"] != b["commit"]:
            out.append(f"commit {str(a['commit'])[:12]} -> {str(b['commit'])[:12]}")
        if a["diff_sha256"] != b["diff_sha256"]:
            out.append(
                f"uncommitted diff {str(a['diff_sha256'] or 'none')[:12]}"
                f" -> {str(b['diff_sha256'] or 'none')[:12]}"
            )
    elif factor == "image":
        out.append(f"image {_short(a)} -> {_short(b)}")
    elif factor == "data":
        for name in sorted(set(a) | set(b)):
            da, db = a.get(name), b.get(name)
            if da == db:
                continue
            sa = (da or {}).get("sha256") or "absent"
            sb = (db or {}).get("sha256") or "absent"
            out.append(f"data {name!r}: sha256 {sa[:12]} -> {sb[:12]}")
    elif factor == "config":
        if a["workdir"] != b["workdir"]:
            out.append(f"workdir {a['workdir']} -> {b['workdir']}")
        if a["argv"] != b["argv"]:
            out.append(f"argv {' '.join(a['argv'])!r} -> {' '.join(b['argv'])!r}"[:300])
    elif factor == "topology":
        for k in ("launcher", "processes_per_node", "nodes"):
            if a[k] != b[k]:
                out.append(f"{k.replace('_', ' ')} {_short(a[k])} -> {_short(b[k])}")
    elif factor == "seed":
        if a["argv"] != b["argv"]:
            out.append(f"seed on the command line {a['argv']} -> {b['argv']}")
        out.extend(_env_lines(a["env"], b["env"]))
    elif factor in ("determinism", "environment"):
        out.extend(_env_lines(a, b))
    elif factor == "hardware":
        for k in ("cpu_model", "gpus", "driver_version"):
            if a[k] != b[k]:
                out.append(f"{k} {_short(a[k])} -> {_short(b[k])}")
    return out


def _env_lines(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"{k}={a.get(k, '(unset)')} -> {b.get(k, '(unset)')}")
    return out


@dataclass
class FactorDiff(Wire):
    """One factor of the vocabulary that differs between GOOD and BAD."""

    name: str = field(metadata=wire(key="factor"))
    detail: list[str]
    testable: bool = True
    reason: str | None = None  # why it is untestable


@dataclass
class FactorReport:
    """Which factors differ (in vocabulary order), the untestable ones, and notes."""

    differing: list[FactorDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    launched: bool = False
    """Either run was started through a distributed launcher (it has a topology to say)."""

    @property
    def testable(self) -> list[str]:
        return [f.name for f in self.differing if f.testable]

    @property
    def untestable(self) -> list[FactorDiff]:
        return [f for f in self.differing if not f.testable]

    def get(self, name: str) -> FactorDiff | None:
        return next((f for f in self.differing if f.name == name), None)

    def mark_untestable(self, name: str, reason: str) -> None:
        f = self.get(name)
        if f is not None and f.testable:
            f.testable = False
            f.reason = reason


def _config_without_seed(m: RunManifest) -> dict[str, Any]:
    return {k: v for k, v in m.config.items() if not _SEED_CONFIG_KEY.match(k)}


def diff_factors(good: RunManifest, bad: RunManifest) -> FactorReport:
    """Every factor that differs between GOOD and BAD, and recorded differences that
    follow from other factors (notes)."""
    rep = FactorReport(launched=good.launch is not None or bad.launch is not None)
    for name in (*FACTORS, *UNSWAPPABLE):
        if name == "topology":
            if not topology_differs(good, bad):
                continue
        elif factor_value(good, name) == factor_value(bad, name):
            continue
        fd = FactorDiff(name, describe(good, bad, name))
        if name == "hardware":
            fd.testable = False
            fd.reason = (
                "hardware and drivers cannot be swapped by a replay: every probe runs on this host"
            )
        rep.differing.append(fd)
    differs = {f.name for f in rep.differing}
    if "config" not in differs and _config_without_seed(good) != _config_without_seed(bad):
        keys = sorted(
            k
            for k in set(_config_without_seed(good)) | set(_config_without_seed(bad))
            if good.config.get(k) != bad.config.get(k)
        )
        rep.notes.append(
            "the hyperparameters the program logged differ ("
            + ", ".join(keys[:8])
            + ") although the command line is the same: they come from the code or the data"
        )
    if "seed" not in differs and good.randomness.seed != bad.randomness.seed:
        rep.notes.append(
            f"the seed the program used differs ({good.randomness.seed} vs"
            f" {bad.randomness.seed}) although the seed given to it is the same:"
            " something else (code, image) changed it"
        )
    det_a = good.determinism.model_dump(exclude={"nondeterministic_ops"})
    det_b = bad.determinism.model_dump(exclude={"nondeterministic_ops"})
    if "determinism" not in differs and det_a != det_b:
        rep.notes.append(
            "the determinism switches as set during the run differ although the variables"
            " that set them do not: the code or the image set them"
        )
    ea, eb = good.environment, bad.environment
    soft = ("python_version", "torch_version", "cuda_version", "cudnn_version", "packages_sha256")
    moved = [k for k in soft if getattr(ea, k) != getattr(eb, k)]
    if moved and "image" not in differs:
        rep.notes.append(
            "the software environment differs (" + ", ".join(moved) + ") with the same"
            " image: these runs did not run in a pinned image"
        )
    return rep
