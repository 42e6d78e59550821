"""Two checkpoints compared tensor by tensor: per-leaf results (:class:`TensorDiff`), their
summary (:class:`CheckpointDiff`), and the kernels that compute them (a memcmp test for
bitwise equality, then a chunked difference pass in reused buffers).

Opening a checkpoint, its leaves and its content digest are ``replay_tui.checkpoints``.
torch is imported inside functions only: importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from replay_tui.checkpoints.formats import first_line
from replay_tui.checkpoints.leaves import canonical_value
from replay_tui.checkpoints.opening import dense, dtype_name, open_checkpoint
from storage.wire import Wire, wire

if TYPE_CHECKING:
    import numpy as np
    import torch

Status = Literal[
    "equal", "close", "differs", "shape_mismatch", "dtype_mismatch", "only_a", "only_b"
]

_CHUNK = 1 << 18
"""Elements per chunk of the difference pass: its few buffers stay in the L3 cache."""
_REPR_LIMIT = 200


def _value_type(v: object) -> str:
    return f"py:{type(v).__name__}"


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class TensorDiff(Wire):
    """How one leaf compares. Diff numbers are None where they cannot be computed.

    ``rel_l2`` is ||a-b|| / ||a|| (0 when both are 0, inf when only ||a|| is);
    ``n_unequal`` counts elements whose values differ (NaN against NaN counts as equal);
    a non-finite mismatch (NaN or inf against anything else) makes the diffs ``inf``.
    Two float32 tensors are subtracted in float32 (exact for values within 2x of each
    other), anything else in float64; integers beyond 2**53 make ``max_abs_diff``
    approximate, never ``n_unequal``. Equal tensors report zeros.
    """

    name: str
    status: Status
    dtype_a: str | None = None
    dtype_b: str | None = None
    shape_a: tuple[int, ...] | None = None
    shape_b: tuple[int, ...] | None = None
    numel: int | None = None
    max_abs_diff: float | None = None
    rel_l2: float | None = None
    n_unequal: int | None = None
    within_tolerance: bool = False
    value_a: str | None = None
    value_b: str | None = None
    note: str | None = None
    state: str | None = field(default=None, metadata=wire(omit="none"))
    """What the comparison judged this tensor (``compare.states``)."""


@dataclass(frozen=True)
class CheckpointDiff(Wire):
    """Every leaf of two checkpoints compared, with a summary.

    ``same_tensors``: every leaf bitwise equal, nothing missing (when the file hashes differ
    too, that is "same tensors, different container"). ``within_tolerance``: nothing
    missing, no shape mismatch, and every leaf equal or within rtol/atol (a dtype change
    whose values agree counts as within; ``n_mismatch`` still reports it).
    """

    WIRE_ORDER = (
        "a",
        "b",
        "rtol",
        "atol",
        "same_tensors",
        "within_tolerance",
        "n_equal",
        "n_close",
        "n_differ",
        "n_mismatch",
        "only_a",
        "only_b",
        "bytes_compared",
        "worst",
        "tensors",
        "metadata",
    )

    a: str
    b: str
    rtol: float
    atol: float
    tensors: tuple[TensorDiff, ...]
    n_equal: int
    n_close: int
    n_differ: int
    n_mismatch: int
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    worst: tuple[TensorDiff, ...]
    same_tensors: bool
    within_tolerance: bool
    bytes_compared: int = field(default=0)
    metadata: tuple[TensorDiff, ...] = field(default=(), metadata=wire(omit="empty"))
    """The leaves that are neither a tensor nor a number (callback state, ``dirpath``
    strings, None), compared as metadata and reported apart: the tensors (and numbers)
    decide ``same_tensors`` and ``within_tolerance``.  Paths that differ only by the
    run's own folder are equal."""

    @property
    def metadata_differ(self) -> tuple[TensorDiff, ...]:
        return tuple(e for e in self.metadata if e.status not in ("equal", "close"))

    def headline(self, *, files_identical: bool | None = None) -> str:
        """One line for a report; pass whether the file sha256s match if known."""
        if self.same_tensors:
            meta = self.metadata_differ
            if meta:
                shown = ", ".join(e.name for e in meta[:3]) + (" …" if len(meta) > 3 else "")
                return f"same tensors; metadata differs ({len(meta)}: {shown})"
            if files_identical is False:
                return "same tensors, different container"
            return "identical tensors"
        parts = []
        if self.n_differ:
            parts.append(f"{self.n_differ} differ")
        if self.n_close:
            parts.append(f"{self.n_close} close")
        if self.n_mismatch:
            parts.append(f"{self.n_mismatch} shape/dtype mismatch")
        if self.only_a:
            parts.append(f"{len(self.only_a)} only in A")
        if self.only_b:
            parts.append(f"{len(self.only_b)} only in B")
        verdict = "within tolerance" if self.within_tolerance else "outside tolerance"
        tol = f"rtol={self.rtol:g}, atol={self.atol:g}"
        meta = self.metadata_differ
        also = (
            f"; metadata: {len(meta)} entr{'y' if len(meta) == 1 else 'ies'} differ" if meta else ""
        )
        return f"{verdict} ({tol}): {', '.join(parts)}; {self.n_equal} equal{also}"


# --------------------------------------------------------------------------- comparing


def compare_checkpoints(
    a: str | Path,
    b: str | Path,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    top: int = 10,
) -> CheckpointDiff:
    """Compare two checkpoints leaf by leaf.

    Tolerance as ``torch.allclose``: |a-b| <= atol + rtol*|b|; integer and bool tensors
    compare exactly. Each pair is first tested for bitwise equality on the memory-mapped
    tensors (memcmp); the difference pass runs only for pairs that are not equal, chunk by
    chunk into buffers reused across tensors. Neither checkpoint is held whole in memory.
    """
    import torch

    work = _Workspace()
    entries: list[TensorDiff] = []
    meta: list[TensorDiff] = []  # leaves that are no tensor on either side
    nbytes = 0
    with open_checkpoint(a) as ca, open_checkpoint(b) as cb, _one_torch_thread():
        names_a, names_b = set(ca.names()), set(cb.names())
        for name in sorted(names_a | names_b):
            if name not in names_b:
                leaf = ca.leaf(name)
                to = meta if _is_metadata(leaf) else entries
                to.append(_one_sided(name, leaf, "only_a"))
                continue
            if name not in names_a:
                leaf = cb.leaf(name)
                to = meta if _is_metadata(leaf) else entries
                to.append(_one_sided(name, leaf, "only_b"))
                continue
            la, lb = ca.leaf(name), cb.leaf(name)
            if isinstance(la, torch.Tensor) and isinstance(lb, torch.Tensor):
                entries.append(_compare_tensors(name, la, lb, rtol, atol, work))
                nbytes += _nbytes(la) + _nbytes(lb)
            elif isinstance(la, torch.Tensor) or isinstance(lb, torch.Tensor):
                entries.append(_tensor_vs_value(name, la, lb))
            elif _is_metadata(la) or _is_metadata(lb):
                meta.append(_compare_metadata(name, la, lb, rtol, atol))
            else:  # numbers (a step count, a learning rate): judged as today
                entries.append(_compare_values(name, la, lb, rtol, atol))
    if not entries and meta:  # no tensor at all: the values are what it holds
        entries, meta = meta, []
    diff = _summarise(str(a), str(b), rtol, atol, top, entries, nbytes)
    return replace(diff, metadata=tuple(meta)) if meta else diff


def _is_metadata(leaf: object) -> bool:
    """A leaf that is neither a tensor nor a number: text, None, an empty container
    (callback state, ``dirpath`` strings)."""
    import torch

    return not isinstance(leaf, torch.Tensor) and _as_number(leaf) is None


def _compare_metadata(name: str, va: object, vb: object, rtol: float, atol: float) -> TensorDiff:
    """A leaf that is no tensor: as :func:`_compare_values`, and two path strings that
    differ only by the folder each run ran in (``/tmp/replay-…/out/x`` and
    ``/home/me/repo/out/x``; ``version_0`` and ``version_1`` of a Lightning log) equal."""
    d = _compare_values(name, va, vb, rtol, atol)
    if d.status in ("equal", "close") or not (isinstance(va, str) and isinstance(vb, str)):
        return d
    if _same_but_run_folder(va, vb):
        return replace(
            d,
            status="equal",
            max_abs_diff=0.0,
            rel_l2=0.0,
            n_unequal=0,
            within_tolerance=True,
            note="paths that differ only by the run's own folder",
        )
    return d


_RUN_UNIQUE = re.compile(
    r"(?<![^/])(version_\d+|checkpoint-\d+|events\.out\.tfevents\.[^/]+)(?![^/])"
)


def _same_but_run_folder(a: str, b: str) -> bool:
    """Whether two strings are paths to the same thing in two runs' folders: equal once
    the parts a framework numbers per run are patterns, or both absolute and equal
    after their differing leading folders (the common tail has at least two parts)."""
    if "/" not in a or "/" not in b or "\n" in a or "\n" in b:
        return False
    na, nb = _RUN_UNIQUE.sub("*", a), _RUN_UNIQUE.sub("*", b)
    if na == nb:
        return True
    if not (na.startswith("/") and nb.startswith("/")):
        return False
    pa, pb = na.split("/"), nb.split("/")
    tail = 0
    while tail < min(len(pa), len(pb)) and pa[-1 - tail] == pb[-1 - tail]:
        tail += 1
    return tail >= 2 and tail < min(len(pa), len(pb))


def _summarise(
    a: str,
    b: str,
    rtol: float,
    atol: float,
    top: int,
    entries: list[TensorDiff],
    nbytes: int,
) -> CheckpointDiff:
    def count(*statuses: Status) -> int:
        return sum(1 for e in entries if e.status in statuses)

    only_a = tuple(e.name for e in entries if e.status == "only_a")
    only_b = tuple(e.name for e in entries if e.status == "only_b")
    ranked = [
        e
        for e in entries
        if e.status in ("close", "differs", "dtype_mismatch")
        and e.rel_l2 is not None
        and (e.n_unequal or 0) > 0
    ]
    ranked.sort(key=lambda e: (_rank(e.rel_l2), _rank(e.max_abs_diff)), reverse=True)
    return CheckpointDiff(
        a=a,
        b=b,
        rtol=rtol,
        atol=atol,
        tensors=tuple(entries),
        n_equal=count("equal"),
        n_close=count("close"),
        n_differ=count("differs"),
        n_mismatch=count("shape_mismatch", "dtype_mismatch"),
        only_a=only_a,
        only_b=only_b,
        worst=tuple(ranked[: max(top, 0)]),
        same_tensors=all(e.status == "equal" for e in entries),
        within_tolerance=all(e.within_tolerance for e in entries),
        bytes_compared=nbytes,
    )


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """Run torch ops on the calling thread only, for the duration.

    The chunk kernels work on cache-sized buffers, where intra-op threads gain nothing,
    and on a busy 2-core host each parallel region waits for a descheduled peer: measured
    3-10x slower wall time with 2 threads, near-memory speed with 1.
    """
    import torch

    previous = torch.get_num_threads()
    if previous != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if previous != 1:
            torch.set_num_threads(previous)


def _rank(x: float | None) -> float:
    return -math.inf if x is None else math.inf if math.isnan(x) else x


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _one_sided(name: str, leaf: object, status: Status) -> TensorDiff:
    import torch

    if isinstance(leaf, torch.Tensor):
        dtype, shape, value = dtype_name(leaf), tuple(leaf.shape), None
    else:
        dtype, shape, value = _value_type(leaf), None, _short_repr(leaf)
    if status == "only_a":
        return TensorDiff(name=name, status=status, dtype_a=dtype, shape_a=shape, value_a=value)
    return TensorDiff(name=name, status=status, dtype_b=dtype, shape_b=shape, value_b=value)


def _tensor_vs_value(name: str, la: object, lb: object) -> TensorDiff:
    import torch

    def side(v: object) -> tuple[str, tuple[int, ...] | None, str | None]:
        if isinstance(v, torch.Tensor):
            return dtype_name(v), tuple(v.shape), None
        return _value_type(v), None, _short_repr(v)

    (da, sa, va), (db, sb, vb) = side(la), side(lb)
    return TensorDiff(
        name=name,
        status="dtype_mismatch",
        dtype_a=da,
        dtype_b=db,
        shape_a=sa,
        shape_b=sb,
        value_a=va,
        value_b=vb,
        note="a tensor on one side, a plain value on the other",
    )


def _compare_tensors(
    name: str,
    a: torch.Tensor,
    b: torch.Tensor,
    rtol: float,
    atol: float,
    work: _Workspace,
) -> TensorDiff:
    shape_a, shape_b = tuple(a.shape), tuple(b.shape)
    result = TensorDiff(
        name=name,
        status="shape_mismatch",
        dtype_a=dtype_name(a),
        dtype_b=dtype_name(b),
        shape_a=shape_a,
        shape_b=shape_b,
    )
    if shape_a != shape_b:
        return result
    result = replace(result, numel=a.numel())
    same_dtype = a.dtype == b.dtype
    if same_dtype and _bitwise_equal(a, b):
        return replace(
            result, status="equal", max_abs_diff=0.0, rel_l2=0.0, n_unequal=0, within_tolerance=True
        )
    status: Status = "differs" if same_dtype else "dtype_mismatch"
    try:
        stats = _diff_stats(a, b, rtol, atol, work)
    except (RuntimeError, TypeError) as e:  # a dtype torch cannot convert to float64
        return replace(result, status=status, note=f"difference not computed: {first_line(e)}")
    if same_dtype and stats.within:
        status = "close"
    return replace(
        result,
        status=status,
        max_abs_diff=stats.max_abs,
        rel_l2=stats.rel_l2,
        n_unequal=stats.n_unequal,
        within_tolerance=stats.within,
    )


def _compare_values(name: str, va: object, vb: object, rtol: float, atol: float) -> TensorDiff:
    ta, tb = _value_type(va), _value_type(vb)
    result = TensorDiff(
        name=name,
        status="dtype_mismatch" if ta != tb else "differs",
        dtype_a=ta,
        dtype_b=tb,
        value_a=_short_repr(va),
        value_b=_short_repr(vb),
    )
    if canonical_value(va) == canonical_value(vb):
        return replace(
            result, status="equal", max_abs_diff=0.0, rel_l2=0.0, n_unequal=0, within_tolerance=True
        )
    x, y = _as_number(va), _as_number(vb)
    if x is None or y is None:
        return result
    same = x == y or (math.isnan(x) and math.isnan(y))
    diff = 0.0 if same else abs(x - y)
    if math.isnan(diff):
        diff = math.inf
    exact = isinstance(va, int) and isinstance(vb, int)
    within = same or (not exact and math.isfinite(diff) and diff <= atol + rtol * abs(y))
    norm = abs(x) if math.isfinite(x) else 0.0
    rel = diff / norm if norm else (0.0 if diff == 0 else math.inf)
    return replace(
        result,
        status="close" if within and ta == tb else result.status,
        max_abs_diff=diff,
        rel_l2=rel,
        n_unequal=0 if same else 1,
        within_tolerance=within,
    )


def _as_number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


def _short_repr(v: object) -> str:
    text = repr(v)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 1] + "…"


# --------------------------------------------------------------------------- kernels


@functools.cache
def _memcmp() -> Callable[[int, int, int], int] | None:
    """libc memcmp (about twice the speed of ``torch.equal`` here), or None where absent."""
    try:
        libc = ctypes.CDLL(None)
        fn = libc.memcmp
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return fn


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype and shape assumed. Bitwise, so NaN matches the identical NaN."""
    import torch

    a, b = dense(a), dense(b)
    nbytes = _nbytes(a)
    if nbytes == 0:
        return True
    memcmp = _memcmp()
    if memcmp is not None:
        return memcmp(a.data_ptr(), b.data_ptr(), nbytes) == 0
    word = next(
        dt
        for dt, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2), (torch.uint8, 1))
        if nbytes % size == 0 and a.data_ptr() % size == 0 and b.data_ptr() % size == 0
    )
    wa = a.reshape(-1).view(torch.uint8).view(word)
    wb = b.reshape(-1).view(torch.uint8).view(word)
    return bool(torch.equal(wa, wb))


class _Workspace:
    """Chunk buffers per dtype, allocated on first use and reused for every tensor."""

    def __init__(self, chunk: int = _CHUNK) -> None:
        self.chunk = chunk
        self._bufs: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self._mask: np.ndarray[Any, np.dtype[np.bool_]] | None = None

    def buffers(self, dtype: torch.dtype, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if dtype not in self._bufs:
            self._bufs[dtype] = (
                torch.empty(self.chunk, dtype=dtype),
                torch.empty(self.chunk, dtype=dtype),
            )
        x, y = self._bufs[dtype]
        return x[:n], y[:n]

    def mask(self, n: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """A bool buffer for element tests (numpy counts bools several times faster)."""
        import numpy as np

        if self._mask is None:
            self._mask = np.empty(self.chunk, dtype=np.bool_)
        return self._mask[:n]


@dataclass
class _Stats:
    max_abs: float = 0.0
    sum_sq_diff: float = 0.0
    sum_sq_a: float = 0.0
    n_unequal: int = 0
    within: bool = True

    @property
    def rel_l2(self) -> float:
        if self.sum_sq_a == 0.0:
            return 0.0 if self.sum_sq_diff == 0.0 else math.inf
        return math.sqrt(self.sum_sq_diff) / math.sqrt(self.sum_sq_a)


def _diff_stats(
    a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float, work: _Workspace
) -> _Stats:
    """Differences of same-shape tensors, chunk by chunk, into reused buffers.

    Two float32 (or two float64) tensors are subtracted in their own dtype straight from
    the mapped file (a difference of close floats is exact); anything else (half types,
    mixed dtypes, integers) is first converted chunk-wise into float64 buffers.
    """
    import torch

    if a.is_complex() or b.is_complex():  # compare real and imaginary parts as floats
        a = torch.view_as_real(a.to(torch.complex128).resolve_conj())
        b = torch.view_as_real(b.to(torch.complex128).resolve_conj())
    exact = not (a.is_floating_point() or b.is_floating_point())
    direct = a.dtype == b.dtype and a.dtype in (torch.float32, torch.float64)
    fa, fb = dense(a).reshape(-1), dense(b).reshape(-1)
    stats = _Stats()
    n = fa.numel()
    for start in range(0, n, work.chunk):
        stop = min(n, start + work.chunk)
        ca, cb = fa[start:stop], fb[start:stop]
        counted = stats.n_unequal
        mask = work.mask(stop - start)
        if direct:
            d, t = work.buffers(a.dtype, stop - start)
            done = _fast_chunk(ca, cb, d, t, mask, rtol, atol, stats)
        else:
            x, y = work.buffers(torch.float64, stop - start)
            x.copy_(ca)
            y.copy_(cb)
            done = _fast_chunk(x, y, x, y, mask, rtol, atol, stats)
        if not done:
            x, y = work.buffers(torch.float64, stop - start)
            x.copy_(ca)
            y.copy_(cb)
            _careful_chunk(x, y, rtol, atol, stats)
        if exact:  # float64 cannot tell int64s beyond 2**53 apart: count on the originals
            stats.n_unequal = counted + _count_unequal(ca, cb, mask)
    if exact:
        stats.within = stats.n_unequal == 0
    return stats


def _fast_chunk(
    xa: torch.Tensor,
    xb: torch.Tensor,
    d: torch.Tensor,
    t: torch.Tensor,
    mask: np.ndarray[Any, np.dtype[np.bool_]],
    rtol: float,
    atol: float,
    s: _Stats,
) -> bool:
    """Chunk whose values are all finite: a few cache-resident passes; ``d``/``t`` may alias.

    Returns False, having added nothing, when a NaN, an inf or an overflow shows up. The
    tolerance pass (|a-b| - rtol*|b| against atol) is skipped where its answer is already
    known: an earlier chunk broke the tolerance, or no difference exceeds atol at all.
    """
    import numpy as np
    import torch

    sum_sq_a = float(torch.dot(xa, xa))
    torch.sub(xa, xb, out=d)
    sum_sq_diff = float(torch.dot(d, d))
    d.abs_()
    max_abs = float(torch.amax(d))
    if not (math.isfinite(max_abs) and math.isfinite(sum_sq_a) and math.isfinite(sum_sq_diff)):
        return False
    if sum_sq_a == 0.0 or (sum_sq_diff == 0.0 and max_abs > 0.0):
        return False  # zeros or squares that underflowed: redo in float64 with care
    n_unequal = int(np.count_nonzero(np.not_equal(d.numpy(), 0, out=mask)))
    within = s.within
    if within and max_abs > atol:  # |a-b| <= atol everywhere: within, whatever rtol says
        torch.abs(xb, out=t)
        torch.sub(d, t, alpha=rtol, out=t)  # |a-b| - rtol*|b|
        within = float(torch.amax(t)) <= atol
    s.sum_sq_a += sum_sq_a
    s.sum_sq_diff += sum_sq_diff
    s.max_abs = max(s.max_abs, max_abs)
    s.n_unequal += n_unequal
    s.within = within
    return True


def _count_unequal(
    a: torch.Tensor, b: torch.Tensor, mask: np.ndarray[Any, np.dtype[np.bool_]]
) -> int:
    """Elements that differ between two same-length 1-D chunks (exact for integers)."""
    import numpy as np
    import torch

    if a.dtype == b.dtype:  # mixed dtypes: torch's promotion rules, as before
        try:
            na, nb = a.numpy(), b.numpy()
        except (TypeError, RuntimeError):  # a dtype numpy lacks
            pass
        else:
            return int(np.count_nonzero(np.not_equal(na, nb, out=mask)))
    return int(torch.ne(a, b).sum())


def _careful_chunk(x: torch.Tensor, y: torch.Tensor, rtol: float, atol: float, s: _Stats) -> None:
    """Chunk with NaN or inf: matching NaNs/infs are equal, any other non-finite is inf apart."""
    import torch

    finite = torch.isfinite(x) & torch.isfinite(y)
    same = torch.eq(x, y) | (torch.isnan(x) & torch.isnan(y))
    fx = torch.where(torch.isfinite(x), x, 0.0)
    s.sum_sq_a += float(torch.dot(fx, fx))
    allowed = y.abs().mul_(rtol).add_(atol)
    torch.sub(x, y, out=x)
    x.abs_()
    x.masked_fill_(same, 0.0)
    x.masked_fill_(~same & ~finite, math.inf)
    s.max_abs = max(s.max_abs, float(x.max()))
    s.sum_sq_diff += float(torch.dot(x, x))
    s.n_unequal += int((~same).sum())
    violates = ~same & (~finite | (x > allowed))
    s.within = s.within and not bool(violates.any())
