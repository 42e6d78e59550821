"""Every manifest field of two runs side by side, each classed by what a difference means.

Classes:

- ``same``: equal on both sides.
- ``expected``: differs by nature (ids, times, host, replay details, outputs, which are
  compared elsewhere).
- ``numeric``: differs and can change the numbers (image, hardware, driver, CUDA, cuDNN,
  torch, packages, determinism switches, seeds, data hashes, config, code, environment
  variables, command).
- ``unknown``: recorded on one side, ``null`` on the other: cannot say.
- ``other``: any other difference.

This answers "what changed between these two runs?" before anything is replayed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from storage.manifest import RunManifest, canonical_json
from storage.wire import Wire, wire

EnvClass = Literal["same", "expected", "numeric", "unknown", "other"]
CLASS_ORDER: tuple[EnvClass, ...] = ("numeric", "unknown", "other", "expected", "same")
CLASS_TITLES: dict[EnvClass, str] = {
    "numeric": "differs and can change numbers",
    "unknown": "unknown on one side",
    "other": "differs (no effect on numbers expected)",
    "expected": "expected to differ",
    "same": "same",
}

# First match wins.  A rule matches a field path equal to it or below it; list items
# are written ``[*]`` in rules.
_RULES: tuple[tuple[str, EnvClass], ...] = (
    ("run_id", "expected"),
    ("name", "expected"),
    ("kind", "expected"),
    ("replay_of", "expected"),
    ("started_at", "expected"),
    ("ended_at", "expected"),
    ("duration_s", "expected"),
    ("tags", "expected"),
    ("replay", "expected"),
    ("integrity", "expected"),
    ("outputs", "expected"),
    ("environment.hostname", "expected"),
    ("hardware.gpus[*].uuid", "expected"),
    ("status", "other"),
    ("exit_code", "other"),
    ("schema_version", "other"),
    ("capture", "other"),
    ("code.repo_url", "other"),
    ("code.branch", "other"),
    ("image.reference", "other"),
    ("environment.kernel", "other"),
    ("data[*].path", "other"),
    ("randomness.seed_handed", "other"),  # what record --seed claimed, not what ran
    ("environment.interpreter", "other"),  # the path a recording found its Python at
    ("image", "numeric"),
    ("hardware", "numeric"),
    ("environment", "numeric"),
    ("determinism", "numeric"),
    ("randomness", "numeric"),
    ("data", "numeric"),
    ("config_hash", "numeric"),
    ("config", "numeric"),
    ("code.commit", "numeric"),
    ("code.diff_sha256", "numeric"),
    ("code.dirty", "numeric"),
    ("code.untracked", "numeric"),
    ("env", "numeric"),
    ("argv", "numeric"),
    ("workdir", "numeric"),
    ("launch", "numeric"),  # world size: another share of each batch, another reduction
)

_BRACKETS = re.compile(r"\[[^\]]*\]")
_ABSENT = object()
_PKG_SPLIT = re.compile(r"\s*(===|==|~=|>=|<=|!=|>|<|@)\s*")


@dataclass(frozen=True)
class EnvRow(Wire):
    """One field of both manifests; ``present_*`` is False where the field is absent."""

    path: str
    a: Any
    b: Any
    cls: EnvClass = field(metadata=wire(key="class"))
    present_a: bool = True
    present_b: bool = True


def _changed_rows(changed: tuple[tuple[str, str, str], ...]) -> list[dict[str, str]]:
    return [{"name": n, "a": va, "b": vb} for n, va, vb in changed]


def _read_changed(v: object, where: str) -> tuple[tuple[str, str, str], ...]:
    """``[{"name", "a", "b"}, ...]`` back to ``(name, version in A, version in B)``."""
    if not isinstance(v, list):
        raise ValueError(f"{where}: expected a list, got {type(v).__name__}")
    out = []
    for i, row in enumerate(v):
        if not isinstance(row, Mapping) or not all(
            isinstance(row.get(k), str) for k in ("name", "a", "b")
        ):
            raise ValueError(f"{where}[{i}]: expected {{name, a, b}} strings, got {row!r}")
        out.append((row["name"], row["a"], row["b"]))
    return tuple(out)


@dataclass(frozen=True)
class PackagesDiff(Wire):
    """How two ``name==version`` package lists differ, by normalised package name."""

    count_a: int
    count_b: int
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[tuple[str, str, str], ...] = field(
        metadata=wire(encode=_changed_rows, decode=_read_changed)
    )
    """``(name, version in A, version in B)``."""

    @property
    def same(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def summary(self) -> str:
        if self.same:
            return f"{self.count_a} packages, same"
        parts = []
        if self.changed:
            shown = ", ".join(f"{n} {va} -> {vb}" for n, va, vb in self.changed[:5])
            more = f" (+{len(self.changed) - 5} more)" if len(self.changed) > 5 else ""
            parts.append(f"{len(self.changed)} changed: {shown}{more}")
        if self.added:
            parts.append(f"{len(self.added)} only in B: {_few(self.added)}")
        if self.removed:
            parts.append(f"{len(self.removed)} only in A: {_few(self.removed)}")
        return "; ".join(parts)


def _few(names: Sequence[str], n: int = 5) -> str:
    return ", ".join(names[:n]) + (f" (+{len(names) - n} more)" if len(names) > n else "")


@dataclass(frozen=True)
class EnvironmentDiff(Wire):
    """Every field side by side (``rows``) and the package-list summary; ``counts`` is
    written beside them."""

    WIRE_EXTRA = ("counts",)
    WIRE_ORDER = ("counts", "packages", "rows")

    rows: tuple[EnvRow, ...]
    packages: PackagesDiff | None

    def of_class(self, cls: EnvClass) -> tuple[EnvRow, ...]:
        return tuple(r for r in self.rows if r.cls == cls)

    def differing(self) -> tuple[EnvRow, ...]:
        return tuple(r for r in self.rows if r.cls != "same")

    def row(self, path: str) -> EnvRow | None:
        return next((r for r in self.rows if r.path == path), None)

    def counts(self) -> dict[str, int]:
        return {c: sum(1 for r in self.rows if r.cls == c) for c in CLASS_ORDER}


# --------------------------------------------------------------------------- classing


def base_class(path: str) -> EnvClass:
    """The class a difference in ``path`` falls in (before the null rule)."""
    pattern = _BRACKETS.sub("[*]", path)
    for rule, cls in _RULES:
        if pattern == rule or pattern.startswith((rule + ".", rule + "[")):
            return cls
    return "other"


def classify(path: str, a: Any, b: Any, present_a: bool = True, present_b: bool = True) -> EnvClass:
    """``same`` / ``expected`` / ``unknown`` / ``numeric`` / ``other`` for one field."""
    if present_a == present_b and (not present_a or _equal(a, b)):
        return "same"
    cls = base_class(path)
    if cls == "expected":
        return cls
    if present_a and present_b and (a is None) != (b is None):
        return "unknown"
    return cls


def _equal(a: Any, b: Any) -> bool:
    """Equal as canonical JSON (so ``1`` equals ``1.0`` as in ``config_hash``, not ``True``)."""
    try:
        return canonical_json(a) == canonical_json(b)
    except Exception:  # a value rfc8785 refuses: fall back to Python equality
        return bool(a == b)


# --------------------------------------------------------------------------- walking


def _summarise_outputs(outputs: Mapping[str, Any]) -> dict[str, Any]:
    """Outputs are compared by artifacts.py and metrics.py: keep only a summary here."""
    history = outputs.get("metric_history") or {}
    tail = outputs.get("log_tail")
    return {
        "artifacts": f"{len(outputs.get('artifacts') or [])} artifact(s)",
        "metrics": sorted(outputs.get("metrics") or {}),
        "metric_history": f"{len(history)} series, {sum(len(v) for v in history.values())} points",
        "log_sha256": outputs.get("log_sha256"),
        "log_tail": None
        if tail is None
        else f"{len(tail)} chars, sha256 {hashlib.sha256(tail.encode()).hexdigest()[:12]}",
    }


def _prepare(m: RunManifest) -> dict[str, Any]:
    data = m.model_dump(mode="json")
    data["outputs"] = _summarise_outputs(data.get("outputs") or {})
    env = data.get("environment")
    if isinstance(env, dict) and isinstance(env.get("packages"), list):
        env["packages"] = _packages_summary(env["packages"])
    if isinstance(data.get("data"), list):
        data["data"] = _keyed_list(data["data"], "name")
    return data


def _packages_summary(pkgs: Sequence[str]) -> str:
    digest = hashlib.sha256("\n".join(pkgs).encode()).hexdigest()[:12]
    return f"{len(pkgs)} packages (list sha256 {digest})"


def _keyed_list(items: Sequence[Any], key: str) -> dict[str, Any] | Sequence[Any]:
    """A list of objects with a unique ``key`` becomes a mapping (aligns by name)."""
    out: dict[str, Any] = {}
    for item in items:
        name = item.get(key) if isinstance(item, dict) else None
        if not isinstance(name, str) or name in out:
            return items
        out[name] = {f: v for f, v in item.items() if f != key}
    return out


def _join(prefix: str, key: str, bracket: bool) -> str:
    if bracket:
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else key


def _walk(path: str, a: Any, b: Any, out: list[EnvRow], *, bracket_keys: bool = False) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            child = _join(path, str(key), bracket_keys)
            _walk(child, a.get(key, _ABSENT), b.get(key, _ABSENT), out, bracket_keys=False)
        return
    if isinstance(a, list) and isinstance(b, list) and any(isinstance(x, dict) for x in (*a, *b)):
        for i in range(max(len(a), len(b))):
            _walk(
                f"{path}[{i}]",
                a[i] if i < len(a) else _ABSENT,
                b[i] if i < len(b) else _ABSENT,
                out,
            )
        return
    if isinstance(a, dict) and b is _ABSENT:
        for key in sorted(a, key=str):
            _walk(_join(path, str(key), bracket_keys), a[key], _ABSENT, out)
        return
    if isinstance(b, dict) and a is _ABSENT:
        for key in sorted(b, key=str):
            _walk(_join(path, str(key), bracket_keys), _ABSENT, b[key], out)
        return
    pa, pb = a is not _ABSENT, b is not _ABSENT
    va, vb = (a if pa else None), (b if pb else None)
    out.append(
        EnvRow(
            path=path, a=va, b=vb, cls=classify(path, va, vb, pa, pb), present_a=pa, present_b=pb
        )
    )


def compare_environment(a: RunManifest, b: RunManifest) -> EnvironmentDiff:
    """Every field of both manifests side by side, classed."""
    da, db = _prepare(a), _prepare(b)
    rows: list[EnvRow] = []
    for key in sorted(set(da) | set(db)):
        va, vb = da.get(key, _ABSENT), db.get(key, _ABSENT)
        keyed = key == "data" and isinstance(va, dict) and isinstance(vb, dict)
        if key == "data" and not keyed:  # names not unique on one side: align by index
            va, vb = _as_list(va), _as_list(vb)
        _walk(key, va, vb, rows, bracket_keys=keyed)
    return EnvironmentDiff(rows=tuple(rows), packages=compare_packages(a, b))


def _as_list(v: Any) -> Any:
    if isinstance(v, dict):
        return [{"name": k, **item} for k, item in v.items()]
    return v


# --------------------------------------------------------------------------- packages


def _split_requirement(line: str) -> tuple[str, str]:
    parts = _PKG_SPLIT.split(line.strip(), maxsplit=1)
    name = parts[0].strip().lower().replace("_", "-").replace(".", "-")
    version = parts[2].strip() if len(parts) == 3 else ""
    return name, version


def compare_packages(a: RunManifest, b: RunManifest) -> PackagesDiff | None:
    """Added / removed / changed packages; ``None`` when either list is not recorded."""
    la, lb = a.environment.packages, b.environment.packages
    if la is None or lb is None:
        return None
    pa = dict(_split_requirement(x) for x in la)
    pb = dict(_split_requirement(x) for x in lb)
    return PackagesDiff(
        count_a=len(la),
        count_b=len(lb),
        added=tuple(sorted(set(pb) - set(pa))),
        removed=tuple(sorted(set(pa) - set(pb))),
        changed=tuple((n, pa[n], pb[n]) for n in sorted(set(pa) & set(pb)) if pa[n] != pb[n]),
    )
