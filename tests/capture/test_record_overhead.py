"""Recording costs the run little: the same manifest, the same hashes, less waiting.

``record`` now probes the run's Python packages and the GPUs while the command runs, and
reads each checkpoint once, memory-mapped, for both its sha256 and its tensor digest,
without torch for safetensors files and ``torch.save`` zips.  These tests hold it to
"nothing recorded changes":

- the torch-free tensor digest against the digest as it was computed before (kept here,
  self-contained, as :func:`reference_digest`), tensor by tensor and dtype by dtype, and
  against fixed values, so a stored ``tensor_sha256`` never changes for the same file;
- what the torch-free readers do not know they decline, and torch decides as before;
- ``artifact_entries`` with and without the one pass give the same entries and refusals;
- one training program recorded both ways (the overlapped path, and the plain sequential
  one of ``REPLAY_TUI_RECORD_SEQUENTIAL``) gives the same manifest field by field, but
  for what is inherently per run (:data:`PER_RUN`);
- each output is copied into the object store in the read that hashes it: the object
  holds the artifact's bytes, under their sha256, and nothing half-written is left;
- the command starts before the manifest's models, the store and the other commands are
  imported; a file that is not a store is still refused before it starts, and the
  program ends with the command's exit code once the store is closed.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import shutil
import stat
import struct
import subprocess
import sys
import zipfile
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from replay_tui.capture.artifacts import artifact_entries
from replay_tui.capture.launcher import SEQUENTIAL_ENV
from replay_tui.capture.timing import TIMINGS_ENV
from replay_tui.checkpoints.digest import tensor_digest
from replay_tui.checkpoints.digest import tensor_digest_torch_free as _digest_without_torch
from replay_tui.checkpoints.formats import CheckpointError
from storage.objects import ObjectStore
from storage.store import RunStore
from tests.helpers.commands import RECORD_OUTPUTS
from tests.support.manifests import comparable, fields_of
from tests.support.training import LOSS_REGEX, QUICK, make_repo, record_example

# -- the digest as it was: the reference ----------------------------------------------


def _canonical(v: object) -> str:
    if v is None:
        return "none"
    if isinstance(v, Mapping):
        return "dict:{}"
    if isinstance(v, bytes | bytearray):
        return f"bytes:{bytes(v).hex()}"
    if isinstance(v, str):
        return f"str:{v}"
    if isinstance(v, bool | int | float | complex):
        return f"{type(v).__name__}:{v!r}"
    if type(v) in (list, tuple):
        return "list:[]"
    return f"{type(v).__module__}.{type(v).__qualname__}:{v!r}"


def _flatten(obj: object, prefix: str, out: dict[str, object]) -> None:
    def key(k: object) -> str:
        return k if isinstance(k, str) else str(k) if isinstance(k, int) else repr(k)

    def join(p: str, k: str) -> str:
        return f"{p}.{k}" if p else k

    if isinstance(obj, Mapping) and obj:
        for k, v in obj.items():
            _flatten(v, join(prefix, key(k)), out)
    elif isinstance(obj, list | tuple) and not isinstance(obj, torch.Size) and obj:
        for i, v in enumerate(obj):
            _flatten(v, join(prefix, str(i)), out)
    else:
        name = prefix or "(root)"
        assert name not in out
        out[name] = obj


def reference_digest(path: Path) -> str:
    """``tensor_digest`` as it was before the torch-free readers: everything through
    ``safe_open`` or ``torch.load(weights_only=True, mmap=True)``."""
    from safetensors import safe_open

    head = path.read_bytes()[:9]
    leaves: dict[str, object] = {}
    if path.suffix == ".safetensors" or (
        len(head) == 9 and head[8:9] == b"{" and not head.startswith(b"PK")
    ):
        with safe_open(str(path), framework="pt") as f:
            leaves = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - not a dict
    else:
        try:
            obj = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            obj = torch.load(path, map_location="cpu", weights_only=True)
        _flatten(obj, "", leaves)
    h = hashlib.sha256(b"replay-tui/tensor-digest/v1\n")
    for name in sorted(leaves):
        leaf = leaves[name]
        if isinstance(leaf, torch.Tensor):
            t = leaf.detach()
            if t.layout != torch.strided:
                t = t.to_dense()
            t = t.cpu().contiguous()
            dtype = str(t.dtype).removeprefix("torch.")
            header = ["T", name, dtype, list(t.shape), t.numel() * t.element_size()]
            h.update(json.dumps(header).encode() + b"\n")
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(json.dumps(["V", name, _canonical(leaf)]).encode() + b"\n")
    return h.hexdigest()


def fast(path: Path) -> str | None:
    """The torch-free digest of the file's bytes; None where it declines."""
    return _digest_without_torch(path, path.read_bytes())


def with_data(path: Path) -> str:
    """What the launcher's one pass calls: ``tensor_digest`` given the bytes."""
    return tensor_digest(path, data=path.read_bytes())


# -- fixed tensors ----------------------------------------------------------------------

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def fixed(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    """Deterministic values of every sign and size (no random generator involved)."""
    n = math.prod(shape)
    x = torch.arange(n, dtype=torch.float64).reshape(shape) if shape else torch.tensor(7.0)
    if dtype == torch.bool:
        return (x.long() % 3 == 0).to(torch.bool)
    if dtype.is_floating_point:
        return ((x - n / 2) * 0.37).to(dtype)
    if dtype == torch.uint8:
        return (x.long() * 37 % 256).to(dtype)
    return ((x.long() * 7919) % 255 - 127).to(dtype)


def small_gpt() -> tuple[nn.Module, torch.optim.Optimizer]:
    """A small model with tied weights, trained two steps with AdamW: a nanoGPT-like
    checkpoint's parts (a state_dict with its _metadata, the optimizer state)."""
    gen = torch.Generator().manual_seed(0)

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(16, 8)
            self.ln = nn.LayerNorm(8)
            self.head = nn.Linear(8, 16, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            return self.head(self.ln(self.wte(idx)))

    with torch.no_grad():
        model = Tiny()
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.95))
    for _ in range(2):
        loss = model(torch.arange(12).reshape(3, 4) % 16).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def nanogpt_checkpoint() -> dict[str, Any]:
    model, opt = small_gpt()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "model_args": {"n_layer": 1, "n_embd": 8, "bias": False, "dropout": 0.0},
        "iter_num": 2,
        "best_val_loss": torch.tensor(1.25),
        "config": {"out_dir": "out", "lr": 1e-2, "seed": None, "compile": False, "big": 2**70},
        "empty_list": [],
        "empty_dict": {},
        "empty_od": OrderedDict(),
        "keys": {3: "a", 2.5: "b", True: "c", None: "d", "x": -(2**40)},
        "nan": float("nan"),
    }


# -- the digest: same values with and without torch ------------------------------------


def test_a_nanogpt_checkpoint_is_digested_without_torch_to_the_same_value(
    tmp_path: Path,
) -> None:
    p = tmp_path / "ckpt.pt"
    torch.save(nanogpt_checkpoint(), p)
    ref = reference_digest(p)
    assert fast(p) == ref  # accepted, not declined
    assert with_data(p) == tensor_digest(p) == ref


@pytest.mark.parametrize("dtype", [*DTYPES, torch.complex64, torch.complex128], ids=str)
def test_each_dtype_and_shape_in_a_torch_file(tmp_path: Path, dtype: torch.dtype) -> None:
    state = {
        "scalar": fixed(dtype),
        "vector": fixed(dtype, 5),
        "matrix": fixed(dtype, 3, 4),
        "cube": fixed(dtype, 2, 1, 3),
        "empty": fixed(dtype, 0, 3),
    }
    if dtype.is_complex:
        state = {k: torch.complex(v.real, -v.real * 2) for k, v in state.items()}
    p = tmp_path / "x.pt"
    torch.save(state, p)
    assert fast(p) == reference_digest(p)
    assert with_data(p) == reference_digest(p)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_each_dtype_and_shape_in_a_safetensors_file(tmp_path: Path, dtype: torch.dtype) -> None:
    state = {
        "scalar": fixed(dtype),
        "vector": fixed(dtype, 5),
        "matrix": fixed(dtype, 3, 4),
        "empty": fixed(dtype, 0, 3),
        "z.last": fixed(dtype, 2, 2, 2),
    }
    p = tmp_path / "x.safetensors"
    save_file(state, str(p), metadata={"format": "pt", "note": "fixed"})
    assert fast(p) == reference_digest(p)
    assert with_data(p) == reference_digest(p)
    # the same state_dict saved by torch: the same digest (container-independent)
    torch.save(state, tmp_path / "x.pt")
    assert fast(tmp_path / "x.pt") == fast(p)
    # and a safetensors file under another name is recognised by its first bytes
    (tmp_path / "model.bin").write_bytes(p.read_bytes())
    assert fast(tmp_path / "model.bin") == fast(p)


# Fixed values: these digests are what every version of replay-tui has stored for these
# tensors; a change here changes every stored tensor_sha256.
FIXED_STATE_DIGEST = "12ec1785da2690021c5985ff8e29994578bc431eb9a103a9806d29d15379c747"
FIXED_TENSORS_DIGEST = "aa5e31090bf5ba9110140b249165ee7704bfed9a1626413800fe029c35c3eb1c"


def fixed_state() -> dict[str, Any]:
    return {
        "w": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4,
        "b": torch.tensor([1, -2, 3], dtype=torch.int64),
        "opt": {"step": 3, "betas": (0.9, 0.95), "name": "adamw", "flag": True, "none": None},
    }


def test_fixed_tensors_keep_their_stored_digest(tmp_path: Path) -> None:
    torch.save(fixed_state(), tmp_path / "s.pt")
    tensors = {k: v for k, v in fixed_state().items() if isinstance(v, torch.Tensor)}
    save_file(tensors, str(tmp_path / "t.safetensors"))
    torch.save(tensors, tmp_path / "t.pt")
    assert reference_digest(tmp_path / "s.pt") == FIXED_STATE_DIGEST
    assert fast(tmp_path / "s.pt") == FIXED_STATE_DIGEST
    assert reference_digest(tmp_path / "t.safetensors") == FIXED_TENSORS_DIGEST
    assert fast(tmp_path / "t.safetensors") == FIXED_TENSORS_DIGEST
    assert fast(tmp_path / "t.pt") == FIXED_TENSORS_DIGEST


def test_parameters_shared_storages_views_and_a_bare_tensor(tmp_path: Path) -> None:
    base = fixed(torch.float32, 4, 6)
    cases: dict[str, object] = {
        "param.pt": nn.Parameter(fixed(torch.float32, 3, 2)),
        "params.pt": {"p": nn.Parameter(fixed(torch.float64, 2)), "q": [nn.Parameter(base)]},
        "bare.pt": fixed(torch.int16, 7),
        "rows.pt": {"all": base, "row": base[1], "tail": base[2:], "col1": base[:, 1:2][0]},
        "nested.pt": [[fixed(torch.float16, 2)], ({"a": fixed(torch.bool, 3)},)],
    }
    for name, obj in cases.items():
        p = tmp_path / name
        torch.save(obj, p)
        assert fast(p) == reference_digest(p), name  # accepted: contiguous, in bounds


def test_what_the_readers_do_not_know_is_left_to_torch(tmp_path: Path) -> None:
    """Declined (None) without torch, and then the very value torch gives."""
    base = fixed(torch.float32, 4, 6)
    cases: dict[str, object] = {
        "transposed.pt": {"t": base.t()},  # not contiguous: torch gathers it
        "strided.pt": {"s": base[:, ::2]},
        "set.pt": {"s": {1, 2}},
        "bytes.pt": {"b": b"\x00\x01"},
        "size.pt": {"shape": torch.Size([2, 3])},
        "uint16.pt": {"u": torch.arange(5).to(torch.uint16)},
    }
    for name, obj in cases.items():
        p = tmp_path / name
        torch.save(obj, p)
        assert fast(p) is None, name
        assert with_data(p) == reference_digest(p), name
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": base}, legacy, _use_new_zipfile_serialization=False)
    assert fast(legacy) is None
    assert with_data(legacy) == reference_digest(legacy)


class _Evil:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("echo pwned > /dev/null",))


def _zip_with_pickle(path: Path, data: bytes) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", data)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")


def test_a_hostile_pickle_is_declined_and_refused_as_before(tmp_path: Path) -> None:
    p = tmp_path / "evil.pt"
    _zip_with_pickle(p, pickle.dumps({"x": _Evil()}, protocol=2))
    assert fast(p) is None
    with pytest.raises(CheckpointError):
        with_data(p)
    # an opcode torch's weights-only unpickler has no use for (protocol 4's frames)
    _zip_with_pickle(p, pickle.dumps({"x": 1}, protocol=4))
    assert fast(p) is None


def _safetensors_bytes(header: dict[str, Any], data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize(
    "name, header, data",
    [
        ("short data", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 7),
        ("long data", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 9),
        ("a gap", {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
        ("wrong size", {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8),
        ("no such dtype", {"a": {"dtype": "X9", "shape": [1], "data_offsets": [0, 1]}}, b"\0"),
        ("a float dim", {"a": {"dtype": "U8", "shape": [1.0], "data_offsets": [0, 1]}}, b"\0"),
        ("metadata", {"__metadata__": {"k": 1}}, b""),
    ],
)
def test_a_malformed_safetensors_file_is_declined(
    tmp_path: Path, name: str, header: dict[str, Any], data: bytes
) -> None:
    p = tmp_path / "bad.safetensors"
    p.write_bytes(_safetensors_bytes(header, data))
    assert fast(p) is None, name
    try:
        expected: str | type[Exception] = reference_digest(p)
    except Exception:
        expected = CheckpointError
    if isinstance(expected, str):
        assert with_data(p) == expected
    else:
        with pytest.raises(expected):
            with_data(p)


def test_the_torch_free_digest_imports_no_torch(tmp_path: Path) -> None:
    torch.save(nanogpt_checkpoint(), tmp_path / "ckpt.pt")
    save_file({"w": fixed(torch.float32, 3, 4)}, str(tmp_path / "m.safetensors"))
    code = (
        "import sys; from pathlib import Path;"
        "from replay_tui.checkpoints.digest import tensor_digest;"
        "ds = [tensor_digest(p, data=p.read_bytes()) for p in map(Path, sys.argv[1:])];"
        "print(json.dumps([ds, 'torch' in sys.modules]))"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json;" + code,
            *(str(tmp_path / n) for n in ("ckpt.pt", "m.safetensors")),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    digests, imported = json.loads(out)
    assert digests == [
        reference_digest(tmp_path / "ckpt.pt"),
        reference_digest(tmp_path / "m.safetensors"),
    ]
    assert imported is False


# -- the launcher's one pass -------------------------------------------------------------


def test_artifact_entries_one_pass_gives_the_same_entries_and_refusals(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    torch.save(nanogpt_checkpoint(), out / "ckpt.pt")
    save_file({"w": fixed(torch.float32, 3, 4)}, str(out / "model.safetensors"))
    torch.save({"t": fixed(torch.float32, 3, 4).t()}, out / "view.pth")  # torch decides
    (out / "notes.txt").write_text("hello\n")
    (out / "garbage.ckpt").write_bytes(b"not a checkpoint at all")
    (out / "empty.pt").write_bytes(b"")
    (out / "link.pt").symlink_to(out / "ckpt.pt")
    buf = io.BytesIO()
    torch.save({"w": fixed(torch.int8, 9)}, buf)
    (out / "sub").mkdir()
    (out / "sub" / "inner.pt").write_bytes(buf.getvalue())
    refused_a: list[str] = []
    refused_b: list[str] = []
    plain = artifact_entries(tmp_path, ["out/*", "out/sub/*"], ["../x.pt"], refused_a)
    one = artifact_entries(tmp_path, ["out/*", "out/sub/*"], ["../x.pt"], refused_b, one_pass=True)
    assert one == plain
    assert refused_a == refused_b and len(refused_a) == 2  # the link, the path outside
    by_path = {a["path"]: a for a in one}
    assert by_path["out/ckpt.pt"]["tensor_sha256"] == reference_digest(out / "ckpt.pt")
    assert by_path["out/view.pth"]["tensor_sha256"] == reference_digest(out / "view.pth")
    assert by_path["out/garbage.ckpt"]["tensor_sha256"] is None
    assert (
        by_path["out/ckpt.pt"]["sha256"]
        == hashlib.sha256((out / "ckpt.pt").read_bytes()).hexdigest()
    )
    # the same pass copying each output into the object store: the same entries, and
    # each object is the artifact's bytes under their sha256, owner-only
    objects = ObjectStore(tmp_path / "store" / "objects")
    refused_c: list[str] = []
    kept = artifact_entries(
        tmp_path, ["out/*", "out/sub/*"], ["../x.pt"], refused_c, one_pass=True, objects=objects
    )
    assert kept == plain and refused_c == refused_a
    for a in kept:
        if a["sha256"] is None or a["size_bytes"] == 0:
            continue  # refused; an empty file is kept after, as before
        obj = objects.path_for(a["sha256"])
        assert obj.read_bytes() == (tmp_path / a["path"]).read_bytes(), a["path"]
        assert stat.S_IMODE(obj.stat().st_mode) == 0o400
    assert not [p for p in objects.root.rglob(".*")], "a temporary copy was left behind"


def test_an_object_kept_from_a_descriptor_is_named_by_the_bytes_written(tmp_path: Path) -> None:
    objects = ObjectStore(tmp_path / "objects")
    src = tmp_path / "big.bin"
    data = os.urandom(3 * (1 << 20) + 12345)  # several blocks and a part of one
    src.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    fd = os.open(src, os.O_RDONLY)
    try:
        os.lseek(fd, 100, os.SEEK_SET)  # read from the start whatever the position
        path = objects.put_fd(fd, None, name="big.bin")
        assert os.lseek(fd, 0, os.SEEK_CUR) == 100  # and the position is left alone
        again = objects.put_fd(fd, None, name="big.bin")  # the same bytes: one object
        assert again == path == objects.path_for(digest)
        assert objects.sha256_of(path) == digest and path.read_bytes() == data
        assert objects.put_fd(fd, digest, name="big.bin") == path
        with pytest.raises(ValueError, match="no longer hashes"):
            objects.put_fd(fd, "0" * 64, name="big.bin")
    finally:
        os.close(fd)
    assert objects.verify(digest)
    assert sorted(p.name for p in objects.root.rglob("*") if p.is_file()) == [digest[2:]]
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with open(empty, "rb") as f:
        kept = objects.put_fd(f.fileno(), None, name="empty")
    assert objects.sha256_of(kept) == hashlib.sha256(b"").hexdigest()


# -- one run recorded both ways ----------------------------------------------------------


@pytest.mark.slow
def test_one_run_recorded_overlapped_and_sequential_gives_the_same_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    store = tmp_path / "store" / "runs.db"
    extra = ["--metric-regex", LOSS_REGEX, "--metric-name", "loss"]
    runs: dict[str, tuple[str, dict[str, Any]]] = {}
    for mode in ("sequential", "overlapped", "sequential again"):
        timings = tmp_path / f"{mode}.json"
        monkeypatch.setenv(TIMINGS_ENV, str(timings))
        if mode.startswith("sequential"):
            monkeypatch.setenv(SEQUENTIAL_ENV, "1")
        else:
            monkeypatch.delenv(SEQUENTIAL_ENV, raising=False)
            shutil.rmtree(store.parent / "objects")  # this way's pass writes them itself
        rec = record_example(store, repo, *QUICK, seed=3, extra=extra)
        assert rec["_returncode"] == 0, rec["_stderr"][-2000:]
        runs[mode] = (rec["run_id"], json.loads(timings.read_text()))
        if mode == "overlapped":
            objects = ObjectStore.beside(store)
            for a in stored_artifacts(store, rec["run_id"]):
                obj = objects.path_for(a.sha256)
                assert obj.read_bytes() == (repo / a.path).read_bytes(), a.path
            assert not [p for p in objects.root.rglob(".*")]
    with RunStore(store) as s:
        manifests = {mode: s.manifest(run_id) for mode, (run_id, _) in runs.items()}
    fields = {mode: fields_of(m.model_dump(mode="json")) for mode, m in manifests.items()}
    seq, ovl = comparable(fields["sequential"]), comparable(fields["overlapped"])
    assert set(seq) == set(ovl)
    differ = {k: (seq[k], ovl[k]) for k in seq if seq[k] != ovl[k]}
    assert not differ, f"fields that differ between the two ways: {differ}"
    # the control: two sequential recordings differ in exactly the same fields
    again = comparable(fields["sequential again"])
    assert again == seq
    # what was compared is real: checkpoints with tensor digests, packages, metrics
    artifacts = manifests["overlapped"].outputs.artifacts
    digests = {a.path: a.tensor_sha256 for a in artifacts}
    assert set(digests) == {"out/model.pt", "out/model.safetensors"}
    assert all(digests.values())
    assert digests["out/model.pt"] == reference_digest(repo / "out" / "model.pt")
    assert manifests["overlapped"].environment.packages
    assert manifests["overlapped"].outputs.metric_history["loss"]
    # the per-run fields really are per run
    assert fields["sequential"]["run_id"] != fields["overlapped"]["run_id"]
    # and the timings say what happened where
    t_seq, t_ovl = runs["sequential"][1], runs["overlapped"][1]
    assert (t_seq["mode"], t_ovl["mode"]) == ("sequential", "overlapped")
    assert set(t_ovl["side_s"]) == {"python_probe", "gpu_probe", "warm"}
    assert t_seq["side_s"] == {}
    assert t_ovl["torch_imported"] is False  # both checkpoints digested without torch
    assert t_seq["torch_imported"] is True
    # the command started before the manifest's models, the store, the other commands
    assert t_ovl["imported_before_launch"] == []
    assert "store_opened" in t_ovl["stamps"]
    for t in (t_seq, t_ovl):
        assert t["command_s"] > 0 and t["after_end_s"] >= 0 and t["before_launch_s"] >= 0


def stored_artifacts(store: Path, run_id: str) -> list[Any]:
    """The hashed artifacts of a stored run."""
    with RunStore(store) as s:
        return [a for a in s.manifest(run_id).outputs.artifacts if a.sha256 is not None]


# -- what stays before the command, and short or failing commands -----------------------


def _record_in_process(tmp_path: Path, argv: list[str], **opts: Any) -> Any:
    from replay_tui.capture.launcher import record
    from replay_tui.capture.options import RecordOptions

    with RunStore(tmp_path / "store" / "runs.db") as store:
        return record(RecordOptions(argv=argv, cwd=tmp_path, **opts), store)


def test_bad_data_is_refused_before_the_command_starts(tmp_path: Path) -> None:
    """The code and the data are read before the command starts, as before: a --data
    that cannot be read stops the recording before anything runs."""
    from replay_tui.errors import BadInput

    marker = tmp_path / "ran"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    with pytest.raises(BadInput, match="nope"):
        _record_in_process(tmp_path, argv, data=["nope"])
    assert not marker.exists()


@pytest.mark.parametrize("sequential", [False, True], ids=["overlapped", "sequential"])
def test_a_command_that_fails_at_once_is_recorded_with_its_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sequential: bool
) -> None:
    """A command shorter than the probes: record waits for them, the run is kept whole."""
    if sequential:
        monkeypatch.setenv(SEQUENTIAL_ENV, "1")
    else:
        monkeypatch.delenv(SEQUENTIAL_ENV, raising=False)
    timings = tmp_path / "timings.json"
    monkeypatch.setenv(TIMINGS_ENV, str(timings))
    res = _record_in_process(tmp_path, [sys.executable, "-c", "import sys; sys.exit(3)"])
    assert (res.manifest.status, res.exit.exit_code) == ("failed", 3)
    assert res.manifest.environment.packages  # the packages probe's answer is in
    marks = json.loads(timings.read_text())
    assert marks["mode"] == ("sequential" if sequential else "overlapped")
    assert bool(marks["side_s"]) is not sequential


# -- the command line: one command's module, the store checked first and closed last ---


def test_the_command_table_names_what_each_module_registers() -> None:
    """``cli.COMMANDS`` is what the lazy root group imports by; it must name every
    command each module registers, and only those."""
    import importlib

    import click

    from replay_tui.cli import COMMANDS, main

    for module in set(COMMANDS.values()):
        group = click.Group()
        importlib.import_module(module).register(group)
        assert set(group.commands) == {n for n, m in COMMANDS.items() if m == module}, module
    with click.Context(main) as ctx:
        assert main.list_commands(ctx) == sorted(COMMANDS)
        assert all(main.get_command(ctx, name) is not None for name in COMMANDS)
        assert main.get_command(ctx, "no-such-command") is None


def test_help_lists_every_command_and_record_loads_no_other(tmp_path: Path) -> None:
    from replay_tui.cli import COMMANDS

    env = {**os.environ, "REPLAY_TUI_STORE": str(tmp_path / "store.db")}
    proc = subprocess.run(
        [sys.executable, "-m", "replay_tui", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    listed = proc.stdout.split("Commands:", 1)[1].split()
    assert all(name in listed for name in COMMANDS)
    code = (
        "import sys\n"
        "from replay_tui.cli import main\n"
        "import click\n"
        "with click.Context(main) as ctx:\n"
        "    main.get_command(ctx, 'record')\n"
        "import replay_tui.capture.launcher\n"
        "print(sorted(m for m in sys.modules if m.startswith(('replay_tui.cli.', 'pydantic',"
        " 'storage.manifest', 'storage.store', 'git', 'torch'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert out.strip() == str(
        ["replay_tui.cli.common", "replay_tui.cli.record", "replay_tui.cli.root"]
    )


def test_a_file_that_is_not_a_store_is_refused_before_the_command_starts(
    tmp_path: Path,
) -> None:
    """The store is opened after the command ends; what would refuse it is checked
    before it starts, as when it was opened first."""
    junk = tmp_path / "notes.db"
    junk.write_text("not a database at all\n" * 100)
    marker = tmp_path / "ran"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "replay_tui",
            "--store",
            str(junk),
            "record",
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w').close()",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"--store {junk}: not a replay-tui store" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists()
    folder = tmp_path / "a-folder.db"
    folder.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "replay_tui", "--store", str(folder), "record", "--", "true"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "is a directory" in proc.stderr  # click says so first


@pytest.mark.parametrize("code", [0, 3])
def test_the_program_ends_with_the_command_s_code_once_the_store_is_closed(
    tmp_path: Path, code: int
) -> None:
    """``record`` ends the process at once (``os._exit``, no interpreter teardown) only
    after its store is closed: the run is in the database file itself (the WAL copied
    in and removed), the output printed, the exit code the command's."""
    store = tmp_path / "store" / "runs.db"
    out = tmp_path / "out"
    out.mkdir()
    program = f"open('out/w.bin', 'wb').write(bytes(range(256)) * 4096); raise SystemExit({code})"
    cli = [sys.executable, "-m", "replay_tui", "--store", str(store)]
    command = ["--", sys.executable, "-c", program]
    proc = subprocess.run(
        [*cli, *RECORD_OUTPUTS, *command], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == code, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["exit_code"] == code
    assert not Path(f"{store}-wal").exists()
    [artifact] = stored_artifacts(store, summary["run_id"])
    obj = ObjectStore.beside(store).path_for(artifact.sha256)
    assert obj.read_bytes() == (out / "w.bin").read_bytes()
