"""Artifacts of two runs matched by path: sha256 side by side, checkpoints tensor by tensor.

A checkpoint whose file hash differs is not yet a divergence: ``torch.save`` names the
zip folder after the file stem, so equal tensors can hash differently.  Equal tensor
digests say "same tensors, different container"; otherwise both files are fetched (from
the object store by sha256, or from paths the caller gives) and compared per tensor.

A stale artifact (``ArtifactInfo.stale``: a file the run lists but did not write, left
by an earlier run) is not an output: stale on one side and absent or stale on the other
is ``stale``, no difference; stale on one side and present on the other is that other
side's alone (``only_a``/``only_b``), with ``stale_a``/``stale_b`` and ``note`` saying so.

torch is imported only when two checkpoints must actually be opened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from replay_tui.compare import unique_names
from replay_tui.compare.states import ItemState
from replay_tui.compare.tensors import CheckpointDiff
from storage.manifest import ArtifactInfo
from storage.objects import ObjectStore
from storage.wire import Wire, wire

ArtifactStatus = Literal["match", "differs", "only_a", "only_b", "unhashed", "stale"]
CheckpointState = Literal["same_tensors", "close", "out_of_tolerance", "unavailable"]

SAME_CONTAINER_NOTE = "same tensors, different container"


@dataclass(frozen=True)
class ArtifactDiff(Wire):
    """One artifact path in both runs.

    ``checkpoint`` is set when both sides are checkpoints with differing file hashes:
    ``same_tensors`` (not a divergence), ``close`` (within tolerance),
    ``out_of_tolerance``, or ``unavailable`` (a file could not be found or opened;
    ``error`` says which and why).  ``tensors`` holds the per-tensor comparison when one ran.
    ``stale_a``/``stale_b``: why that run did not write the file it lists (its ``stale``).
    """

    WIRE_ORDER = (
        "path",
        "status",
        "kind_a",
        "kind_b",
        "sha256_a",
        "sha256_b",
        "size_a",
        "size_b",
        "tensor_sha256_a",
        "tensor_sha256_b",
        "checkpoint",
        "note",
        "error",
        "stale_a",
        "stale_b",
        "tensors",
    )

    path: str
    status: ArtifactStatus
    kind_a: str | None = None
    kind_b: str | None = None
    sha256_a: str | None = None
    sha256_b: str | None = None
    size_a: int | None = None
    size_b: int | None = None
    tensor_sha256_a: str | None = None
    tensor_sha256_b: str | None = None
    checkpoint: CheckpointState | None = None
    tensors: CheckpointDiff | None = None
    note: str | None = None
    error: str | None = None
    stale_a: str | None = None
    stale_b: str | None = None
    volatile: str | None = field(default=None, metadata=wire(omit="none"))
    """The glob a run declared volatile (``record --volatile``) that names this path: a
    difference in its bytes is listed, not judged."""
    state: ItemState | None = field(default=None, metadata=wire(omit="none"))
    """What the comparison judged this artifact (``compare.states``); None in a body
    stored before states existed."""

    @property
    def is_checkpoint_pair(self) -> bool:
        return self.kind_a == "checkpoint" and self.kind_b == "checkpoint"


def _locate(
    art: ArtifactInfo,
    side: str,
    objects: ObjectStore | None,
    files: Mapping[str, str | Path] | None,
) -> tuple[Path | None, str]:
    """The local file holding ``art``'s bytes, or None and why not."""
    if files is not None and art.path in files:
        p = Path(files[art.path])
        if p.is_file():
            return p, ""
        return None, f"{side} file {p} given for {art.path} does not exist"
    if objects is not None and art.sha256 is not None:
        found = objects.get(art.sha256)
        if found is not None:
            return found, ""
        return None, (
            f"{side} checkpoint {art.path} (sha256 {art.sha256[:12]}) is not in the object store"
            f" {objects.root}"
        )
    return None, f"{side} checkpoint {art.path}: no object store or file given to load it from"


def _compare_checkpoint_pair(
    base: ArtifactDiff,
    a: ArtifactInfo,
    b: ArtifactInfo,
    *,
    objects: ObjectStore | None,
    files_a: Mapping[str, str | Path] | None,
    files_b: Mapping[str, str | Path] | None,
    rtol: float,
    atol: float,
    top: int,
) -> ArtifactDiff:
    if a.tensor_sha256 is not None and a.tensor_sha256 == b.tensor_sha256:
        return replace(base, checkpoint="same_tensors", note=SAME_CONTAINER_NOTE)
    pa, why_a = _locate(a, "A", objects, files_a)
    pb, why_b = _locate(b, "B", objects, files_b)
    if pa is None or pb is None:
        reason = "; ".join(w for w in (why_a, why_b) if w)
        return replace(base, checkpoint="unavailable", error=reason)

    from replay_tui.checkpoints.formats import CheckpointError
    from replay_tui.compare.tensors import compare_checkpoints

    try:
        diff = compare_checkpoints(pa, pb, rtol=rtol, atol=atol, top=top)
    except CheckpointError as e:
        return replace(base, checkpoint="unavailable", error=f"{a.path}: {e}")
    if diff.same_tensors:
        state: CheckpointState = "same_tensors"
    elif diff.within_tolerance:
        state = "close"
    else:
        state = "out_of_tolerance"
    return replace(
        base,
        checkpoint=state,
        tensors=diff,
        note=diff.headline(files_identical=False),
    )


def _diff(
    path: str, status: ArtifactStatus, a: ArtifactInfo | None, b: ArtifactInfo | None
) -> ArtifactDiff:
    """``path`` with what each side lists of it (None for a side that does not list it)."""
    return ArtifactDiff(
        path=path,
        status=status,
        kind_a=None if a is None else a.kind,
        kind_b=None if b is None else b.kind,
        sha256_a=None if a is None else a.sha256,
        sha256_b=None if b is None else b.sha256,
        size_a=None if a is None else a.size_bytes,
        size_b=None if b is None else b.size_bytes,
        tensor_sha256_a=None if a is None else a.tensor_sha256,
        tensor_sha256_b=None if b is None else b.tensor_sha256,
        stale_a=None if a is None else a.stale,
        stale_b=None if b is None else b.stale,
    )


def _stale_diff(path: str, a: ArtifactInfo | None, b: ArtifactInfo | None) -> ArtifactDiff:
    """``path`` where at least one side lists a file it did not write (stale)."""
    diff = _diff(path, "stale", a, b)
    stale_a, stale_b = diff.stale_a, diff.stale_b
    if stale_a is not None and b is not None and stale_b is None:
        written = "written by B" if b.sha256 is not None else "listed by B without a hash"
        note = f"{path} was {written}; A did not write it (stale: {stale_a})"
        return replace(diff, status="only_b", note=note)
    if stale_b is not None and a is not None and stale_a is None:
        written = "written by A" if a.sha256 is not None else "listed by A without a hash"
        note = f"{path} was {written}; B did not write it (stale: {stale_b})"
        return replace(diff, status="only_a", note=note)
    why_a = f"stale: {stale_a}" if stale_a is not None else "A does not list it"
    why_b = f"stale: {stale_b}" if stale_b is not None else "B does not list it"
    return replace(diff, note=f"{path} was not written by A ({why_a}) nor by B ({why_b})")


def compare_artifacts(
    artifacts_a: Sequence[ArtifactInfo],
    artifacts_b: Sequence[ArtifactInfo],
    *,
    objects: ObjectStore | None = None,
    files_a: Mapping[str, str | Path] | None = None,
    files_b: Mapping[str, str | Path] | None = None,
    rtol: float,
    atol: float,
    top: int = 10,
) -> tuple[ArtifactDiff, ...]:
    """Every artifact path of either run, sorted by path.

    ``files_a``/``files_b`` map an artifact path to a local file with its bytes; they win
    over the object store.
    """
    by_a = {x.path: x for x in artifacts_a}
    by_b = {x.path: x for x in artifacts_b}
    # names a framework makes unique per run (event files, version_N/, checkpoint-N/)
    wrote_a = {p for p, x in by_a.items() if x.stale is None}  # a stale file is no output
    wrote_b = {p for p, x in by_b.items() if x.stale is None}
    paired = unique_names.pair(wrote_a - wrote_b, wrote_b - wrote_a)
    by_b = {paired.get(p, p): x for p, x in by_b.items()}
    out: list[ArtifactDiff] = []
    for path in sorted(by_a.keys() | by_b.keys()):
        a, b = by_a.get(path), by_b.get(path)
        if (a is not None and a.stale is not None) or (b is not None and b.stale is not None):
            out.append(_stale_diff(path, a, b))
            continue
        if a is None or b is None:  # neither is stale: their stale_a/_b stay None
            out.append(_diff(path, "only_b" if a is None else "only_a", a, b))
            continue
        base = _diff(path, "match", a, b)
        if a.sha256 is None or b.sha256 is None:
            missing = " and ".join(s for s, x in (("A", a), ("B", b)) if x.sha256 is None)
            out.append(replace(base, status="unhashed", error=f"{path} has no sha256 in {missing}"))
        elif a.sha256 == b.sha256:
            out.append(base)
        elif base.is_checkpoint_pair:
            out.append(
                _compare_checkpoint_pair(
                    replace(base, status="differs"),
                    a,
                    b,
                    objects=objects,
                    files_a=files_a,
                    files_b=files_b,
                    rtol=rtol,
                    atol=atol,
                    top=top,
                )
            )
        else:
            out.append(replace(base, status="differs"))
    return tuple(unique_names.marked(x, paired) for x in out)
