"""Checkpoint tensors: safe opening, content digest, per-tensor comparison (real torch files)."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from replay_tui.checkpoints.digest import tensor_digest
from replay_tui.checkpoints.formats import CheckpointError, is_checkpoint
from replay_tui.checkpoints.opening import open_checkpoint
from replay_tui.compare import tensors
from replay_tui.compare.tensors import CheckpointDiff, TensorDiff, compare_checkpoints

ROOT = Path(__file__).resolve().parents[2]


def state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "fc1.weight": torch.randn(16, 8, generator=g),
        "fc1.bias": torch.randn(16, generator=g),
        "fc2.weight": torch.randn(4, 16, generator=g),
        "fc2.bias": torch.zeros(4),
        "bn.num_batches_tracked": torch.tensor(7),
        "mask": torch.rand(5, generator=g) > 0.5,
        "scale": torch.tensor(0.5),
        "empty": torch.empty(0, 3),
    }


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry(diff: CheckpointDiff, name: str) -> TensorDiff:
    (found,) = [t for t in (*diff.tensors, *diff.metadata) if t.name == name]
    return found


def expected_max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    """Independent reference: numpy in float64."""
    x = a.numpy().astype(np.float64)
    y = b.numpy().astype(np.float64)
    return float(np.max(np.abs(x - y)))


def expected_rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    x = a.numpy().astype(np.float64)
    y = b.numpy().astype(np.float64)
    return float(np.linalg.norm(x - y) / np.linalg.norm(x))


# --------------------------------------------------------------------------- suffixes


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("model.safetensors", True),
        ("a.pt", True),
        ("b.PTH", True),
        ("last.ckpt", True),
        ("pytorch_model.bin", True),
        ("metrics.json", False),
        ("weights.pt.txt", False),
        ("pt", False),
    ],
)
def test_is_checkpoint_by_suffix(name: str, expected: bool) -> None:
    assert is_checkpoint(name) is expected
    assert is_checkpoint(Path("/x") / name) is expected


# --------------------------------------------------------------------------- same tensors


def test_same_state_dict_in_three_containers(tmp_path: Path) -> None:
    sd = state_dict()
    a, b, c = tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "c.safetensors"
    torch.save(sd, a)
    torch.save(sd, b)
    save_file(sd, c)

    # torch.save names the zip folder after the stem: the files differ, the tensors do not.
    assert sha256_file(a) != sha256_file(b)
    assert tensor_digest(a) == tensor_digest(b) == tensor_digest(c)
    assert len(tensor_digest(a)) == 64

    for other in (b, c):
        diff = compare_checkpoints(a, other)
        assert diff.same_tensors
        assert diff.within_tolerance
        assert diff.n_equal == len(sd)
        assert (diff.n_close, diff.n_differ, diff.n_mismatch) == (0, 0, 0)
        assert diff.only_a == diff.only_b == ()
        assert diff.worst == ()
        assert diff.headline(files_identical=False) == "same tensors, different container"
        assert all(t.status == "equal" and t.max_abs_diff == 0.0 for t in diff.tensors)


def test_same_name_same_bytes_and_digest_sensitivity(tmp_path: Path) -> None:
    sd = state_dict()
    torch.save(sd, tmp_path / "x.pt")
    first = sha256_file(tmp_path / "x.pt")
    torch.save(sd, tmp_path / "x.pt")
    assert sha256_file(tmp_path / "x.pt") == first

    base = tensor_digest(tmp_path / "x.pt")
    variants: dict[str, dict[str, torch.Tensor]] = {
        "value": {**sd, "scale": torch.tensor(0.25)},
        "dtype": {**sd, "scale": torch.tensor(0.5, dtype=torch.float64)},
        "shape": {**sd, "fc2.bias": torch.zeros(2, 2)},
        "name": {("head.bias" if k == "fc2.bias" else k): v for k, v in sd.items()},
        "extra": {**sd, "extra": torch.zeros(1)},
    }
    digests = set()
    for label, variant in variants.items():
        path = tmp_path / f"{label}.safetensors"
        save_file(variant, path)
        digests.add(tensor_digest(path))
    assert base not in digests
    assert len(digests) == len(variants)


def test_digest_covers_plain_values(tmp_path: Path) -> None:
    sd = state_dict()
    torch.save({"model": sd, "epoch": 3}, tmp_path / "e3.pt")
    torch.save({"model": sd, "epoch": 4}, tmp_path / "e4.pt")
    torch.save({"model": sd, "epoch": 3.0}, tmp_path / "e3f.pt")
    digests = {tensor_digest(tmp_path / n) for n in ("e3.pt", "e4.pt", "e3f.pt")}
    assert len(digests) == 3


# --------------------------------------------------------------------------- differences


def test_small_perturbation_is_close_by_default_and_differs_exactly(tmp_path: Path) -> None:
    sd = state_dict()
    sd["fc1.weight"][3, 5] = 0.75  # float32 spacing there is 6e-8: a 1e-7 change registers
    changed = dict(sd)
    changed["fc1.weight"] = sd["fc1.weight"].clone()
    changed["fc1.weight"][3, 5] += 1e-7
    save_file(sd, tmp_path / "a.safetensors")
    save_file(changed, tmp_path / "b.safetensors")
    want_max = expected_max_abs(sd["fc1.weight"], changed["fc1.weight"])
    want_unequal = int(np.count_nonzero(sd["fc1.weight"].numpy() != changed["fc1.weight"].numpy()))
    assert 0 < want_max < 2e-7 and want_unequal == 1

    loose = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    t = entry(loose, "fc1.weight")
    assert t.status == "close" and t.within_tolerance
    assert t.max_abs_diff == want_max
    assert t.n_unequal == want_unequal
    assert t.rel_l2 == pytest.approx(expected_rel_l2(sd["fc1.weight"], changed["fc1.weight"]))
    assert loose.n_close == 1 and loose.n_equal == len(sd) - 1
    assert not loose.same_tensors and loose.within_tolerance
    assert [w.name for w in loose.worst] == ["fc1.weight"]

    strict = compare_checkpoints(
        tmp_path / "a.safetensors", tmp_path / "b.safetensors", rtol=0.0, atol=0.0
    )
    t = entry(strict, "fc1.weight")
    assert t.status == "differs" and not t.within_tolerance
    assert t.max_abs_diff == want_max
    assert strict.n_differ == 1 and not strict.within_tolerance
    assert strict.worst[0].name == "fc1.weight"
    assert "outside tolerance" in strict.headline()


def test_worst_is_ranked_by_relative_l2_and_capped(tmp_path: Path) -> None:
    sd = state_dict()
    changed = dict(sd)
    changed["fc1.weight"] = sd["fc1.weight"] * (1 + 1e-3)
    changed["fc2.weight"] = sd["fc2.weight"] * (1 + 1e-1)
    changed["fc1.bias"] = sd["fc1.bias"] * (1 + 1e-2)
    save_file(sd, tmp_path / "a.safetensors")
    save_file(changed, tmp_path / "b.safetensors")
    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors", top=2)
    assert [w.name for w in diff.worst] == ["fc2.weight", "fc1.bias"]
    assert diff.n_differ == 3


def test_added_key_is_only_b_and_removed_key_only_a(tmp_path: Path) -> None:
    sd = state_dict()
    more = {**sd, "fc3.weight": torch.ones(2, 2)}
    fewer = {k: v for k, v in sd.items() if k != "mask"}
    save_file(sd, tmp_path / "a.safetensors")
    save_file(more, tmp_path / "more.safetensors")
    save_file(fewer, tmp_path / "fewer.safetensors")

    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "more.safetensors")
    assert diff.only_b == ("fc3.weight",) and diff.only_a == ()
    t = entry(diff, "fc3.weight")
    assert t.status == "only_b" and t.shape_b == (2, 2) and t.dtype_b == "float32"
    assert not diff.same_tensors and not diff.within_tolerance

    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "fewer.safetensors")
    assert diff.only_a == ("mask",) and entry(diff, "mask").dtype_a == "bool"


def test_changed_shape_is_shape_mismatch(tmp_path: Path) -> None:
    sd = state_dict()
    torch.save(sd, tmp_path / "a.pt")
    torch.save({**sd, "fc1.weight": torch.randn(8, 16)}, tmp_path / "b.pt")
    diff = compare_checkpoints(tmp_path / "a.pt", tmp_path / "b.pt")
    t = entry(diff, "fc1.weight")
    assert t.status == "shape_mismatch"
    assert (t.shape_a, t.shape_b) == ((16, 8), (8, 16))
    assert t.max_abs_diff is None and not t.within_tolerance
    assert diff.n_mismatch == 1 and not diff.within_tolerance


def test_float64_run_against_float32_run(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(1)
    w64 = torch.randn(64, 32, generator=g, dtype=torch.float64)
    w32 = w64.float()
    torch.save({"w": w32, "b": torch.zeros(3)}, tmp_path / "f32.pt")
    torch.save({"w": w64, "b": torch.zeros(3)}, tmp_path / "f64.pt")

    want = float(np.max(np.abs(w32.numpy().astype(np.float64) - w64.numpy())))
    assert want > 0

    loose = compare_checkpoints(tmp_path / "f32.pt", tmp_path / "f64.pt", rtol=1e-6)
    t = entry(loose, "w")
    assert t.status == "dtype_mismatch"
    assert (t.dtype_a, t.dtype_b) == ("float32", "float64")
    assert t.max_abs_diff == pytest.approx(want, rel=1e-12)
    assert t.n_unequal is not None and t.n_unequal > 0
    assert t.within_tolerance and loose.within_tolerance
    assert loose.n_mismatch == 1 and not loose.same_tensors

    strict = compare_checkpoints(tmp_path / "f32.pt", tmp_path / "f64.pt", rtol=0.0, atol=0.0)
    assert not entry(strict, "w").within_tolerance and not strict.within_tolerance


def test_multi_chunk_tensor_diff_is_exact(tmp_path: Path) -> None:
    n = (1 << 18) * 3 + 5  # several chunks of the difference pass and a ragged tail
    a = torch.randn(n, generator=torch.Generator().manual_seed(2))
    b = a.clone()
    b[-1] += 0.5
    b[10] -= 0.25
    b[(1 << 18) + 7] = float("inf")
    save_file({"big": a}, tmp_path / "a.safetensors")
    save_file({"big": b}, tmp_path / "b.safetensors")
    t = entry(compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors"), "big")
    assert t.status == "differs" and t.n_unequal == 3 and t.numel == n
    assert t.max_abs_diff == math.inf

    b[(1 << 18) + 7] = a[(1 << 18) + 7]
    save_file({"big": b}, tmp_path / "b.safetensors")
    t = entry(compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors"), "big")
    assert t.n_unequal == 2
    assert t.max_abs_diff == expected_max_abs(a, b)
    assert t.rel_l2 == pytest.approx(expected_rel_l2(a, b), rel=1e-5)


def test_tolerance_decided_early_or_by_atol_alone(tmp_path: Path) -> None:
    """Skipping the tolerance pass (already broken, or every difference <= atol) changes
    no number: counts and maxima still cover every chunk."""
    n = (1 << 18) * 2 + 9
    a = torch.randn(n, generator=torch.Generator().manual_seed(6))
    b = a.clone()
    b[3] += 1.0  # breaks the tolerance in the first chunk
    b[(1 << 18) + 1 :: 1000] += 1e-6  # small differences in the later chunks
    save_file({"w": a}, tmp_path / "a.safetensors")
    save_file({"w": b}, tmp_path / "b.safetensors")
    want_unequal = int(np.count_nonzero(a.numpy() != b.numpy()))
    t = entry(compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors"), "w")
    assert t.status == "differs" and not t.within_tolerance
    assert t.n_unequal == want_unequal and t.max_abs_diff == expected_max_abs(a, b)
    assert t.rel_l2 == pytest.approx(expected_rel_l2(a, b), rel=1e-5)

    b[3] = a[3]
    save_file({"w": b}, tmp_path / "b.safetensors")
    loose = compare_checkpoints(
        tmp_path / "a.safetensors", tmp_path / "b.safetensors", rtol=0.0, atol=1e-3
    )
    t = entry(loose, "w")
    assert t.status == "close" and t.within_tolerance and t.n_unequal == want_unequal - 1
    tight = compare_checkpoints(
        tmp_path / "a.safetensors", tmp_path / "b.safetensors", rtol=0.0, atol=1e-9
    )
    assert not entry(tight, "w").within_tolerance


def test_exact_counts_for_integer_chunks(tmp_path: Path) -> None:
    n = (1 << 18) + 3
    a = torch.arange(n, dtype=torch.int64) * (1 << 40)
    b = a.clone()
    b[[0, 5, n - 1]] += 1  # beyond 2**53: float64 cannot see these, the count must
    save_file({"i": a, "u": a.to(torch.int32), "m": a.clone()}, tmp_path / "a.safetensors")
    save_file({"i": b, "u": b.to(torch.int32), "m": b.to(torch.int32)}, tmp_path / "b.safetensors")
    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert entry(diff, "i").n_unequal == 3 and not entry(diff, "i").within_tolerance
    want_u = int(np.count_nonzero(a.to(torch.int32).numpy() != b.to(torch.int32).numpy()))
    assert entry(diff, "u").n_unequal == want_u
    want_m = int(torch.ne(a, b.to(torch.int32)).sum())  # mixed dtypes: torch's promotion
    assert entry(diff, "m").status == "dtype_mismatch" and entry(diff, "m").n_unequal == want_m


# --------------------------------------------------------------------------- nested, values


def training_checkpoint(epoch: int, lr: float, exp_avg: torch.Tensor) -> dict[str, object]:
    sd = state_dict()
    return {
        "model": sd,
        "optimizer": {
            "state": {0: {"step": torch.tensor(10.0), "exp_avg": exp_avg}},
            "param_groups": [{"lr": lr, "betas": (0.9, 0.999), "params": [0], "name": "all"}],
        },
        "epoch": epoch,
        "extra": {},
    }


def test_nested_optimizer_checkpoint_is_flattened(tmp_path: Path) -> None:
    exp_avg = torch.randn(16, 8, generator=torch.Generator().manual_seed(3))
    torch.save(training_checkpoint(3, 0.1, exp_avg), tmp_path / "a.ckpt")
    with open_checkpoint(tmp_path / "a.ckpt") as ckpt:
        names = ckpt.names()
        assert ckpt.format == "torch"
        assert ckpt.leaf("epoch") == 3
        assert isinstance(ckpt.leaf("optimizer.state.0.exp_avg"), torch.Tensor)
    assert names == sorted(names)
    for name in (
        "model.fc1.weight",
        "optimizer.state.0.exp_avg",
        "optimizer.state.0.step",
        "optimizer.param_groups.0.lr",
        "optimizer.param_groups.0.betas.1",
        "optimizer.param_groups.0.params.0",
        "optimizer.param_groups.0.name",
        "epoch",
        "extra",
    ):
        assert name in names

    changed = exp_avg.clone()
    changed[0, 0] += 1.0
    torch.save(training_checkpoint(4, 0.1 + 1e-12, changed), tmp_path / "b.ckpt")
    diff = compare_checkpoints(tmp_path / "a.ckpt", tmp_path / "b.ckpt")
    epoch = entry(diff, "epoch")
    assert epoch.status == "differs" and (epoch.value_a, epoch.value_b) == ("3", "4")
    assert epoch.dtype_a == "py:int" and epoch.max_abs_diff == 1.0
    lr = entry(diff, "optimizer.param_groups.0.lr")
    assert lr.status == "close" and lr.within_tolerance
    assert entry(diff, "optimizer.param_groups.0.name").status == "equal"
    assert entry(diff, "extra").status == "equal"
    avg = entry(diff, "optimizer.state.0.exp_avg")
    assert avg.status == "differs" and avg.n_unequal == 1 and avg.max_abs_diff == 1.0
    assert entry(diff, "model.fc1.weight").status == "equal"
    assert {w.name for w in diff.worst} == {"optimizer.state.0.exp_avg", "epoch", lr.name}


def test_int_and_float_value_of_same_number(tmp_path: Path) -> None:
    torch.save({"x": 1, "y": "a"}, tmp_path / "a.pt")
    torch.save({"x": 1.0, "y": "b"}, tmp_path / "b.pt")
    diff = compare_checkpoints(tmp_path / "a.pt", tmp_path / "b.pt")
    x = entry(diff, "x")
    assert x.status == "dtype_mismatch" and x.within_tolerance and x.max_abs_diff == 0.0
    y = entry(diff, "y")
    assert y.status == "differs" and (y.value_a, y.value_b) == ("'a'", "'b'")


def test_tensor_against_plain_value(tmp_path: Path) -> None:
    torch.save({"step": torch.tensor(5)}, tmp_path / "a.pt")
    torch.save({"step": 5}, tmp_path / "b.pt")
    t = entry(compare_checkpoints(tmp_path / "a.pt", tmp_path / "b.pt"), "step")
    assert t.status == "dtype_mismatch" and (t.dtype_a, t.dtype_b) == ("int64", "py:int")
    assert t.note and "plain value" in t.note


# --------------------------------------------------------------------------- exact types, NaN


def test_int_and_bool_tensors_compare_exactly(tmp_path: Path) -> None:
    big = torch.tensor([2**62, 1, 2], dtype=torch.int64)
    torch.save(
        {"i": torch.arange(10), "m": torch.ones(4, dtype=torch.bool), "big": big}, tmp_path / "a.pt"
    )
    i2 = torch.arange(10)
    i2[3] = 4
    m2 = torch.ones(4, dtype=torch.bool)
    m2[1] = False
    big2 = big.clone()
    big2[0] += 1  # equal once converted to float64: must still count
    torch.save({"i": i2, "m": m2, "big": big2}, tmp_path / "b.pt")
    diff = compare_checkpoints(tmp_path / "a.pt", tmp_path / "b.pt", rtol=1.0, atol=10.0)
    for name in ("i", "m", "big"):
        t = entry(diff, name)
        assert t.status == "differs" and t.n_unequal == 1 and not t.within_tolerance, t
    assert entry(diff, "i").max_abs_diff == 1.0


def test_nan_bitwise_identical_is_equal(tmp_path: Path) -> None:
    t = torch.tensor([1.0, float("nan"), -0.0, float("inf")])
    torch.save({"t": t}, tmp_path / "a.pt")
    save_file({"t": t.clone()}, tmp_path / "b.safetensors")
    diff = compare_checkpoints(tmp_path / "a.pt", tmp_path / "b.safetensors")
    assert diff.same_tensors and entry(diff, "t").status == "equal"
    assert tensor_digest(tmp_path / "a.pt") == tensor_digest(tmp_path / "b.safetensors")


def test_nan_positions_match_but_other_values_differ(tmp_path: Path) -> None:
    a = torch.tensor([1.0, float("nan"), 3.0, float("inf")])
    b = torch.tensor([1.0, float("nan"), 3.0 + 1e-6, float("inf")])
    save_file({"t": a}, tmp_path / "a.safetensors")
    save_file({"t": b}, tmp_path / "b.safetensors")
    t = entry(compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors"), "t")
    assert t.status == "close" and t.n_unequal == 1
    assert t.max_abs_diff == pytest.approx(float(np.float32(3.0 + 1e-6)) - 3.0)


def test_nan_against_number_differs_and_serialises(tmp_path: Path) -> None:
    save_file({"t": torch.tensor([1.0, float("nan")])}, tmp_path / "a.safetensors")
    save_file({"t": torch.tensor([1.0, 2.0])}, tmp_path / "b.safetensors")
    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors", rtol=1.0)
    t = entry(diff, "t")
    assert t.status == "differs" and t.n_unequal == 1 and not t.within_tolerance
    assert t.max_abs_diff == math.inf
    data = json.loads(json.dumps(diff.to_dict(), allow_nan=False))
    assert data["worst"][0]["max_abs_diff"] == "inf"


def test_signed_zero_is_close_not_equal(tmp_path: Path) -> None:
    save_file({"z": torch.tensor([0.0, 1.0])}, tmp_path / "a.safetensors")
    save_file({"z": torch.tensor([-0.0, 1.0])}, tmp_path / "b.safetensors")
    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors", atol=0.0)
    t = entry(diff, "z")
    assert t.status == "close" and t.max_abs_diff == 0.0 and t.n_unequal == 0
    assert not diff.same_tensors and diff.within_tolerance


def test_empty_and_zero_dim_tensors(tmp_path: Path) -> None:
    torch.save({"e": torch.empty(0, 4), "s": torch.tensor(2.0)}, tmp_path / "a.pt")
    torch.save({"e": torch.empty(0, 4), "s": torch.tensor(2.5)}, tmp_path / "b.pt")
    torch.save(
        {"e": torch.empty(0, 4, dtype=torch.float64), "s": torch.tensor(2.0)}, tmp_path / "c.pt"
    )
    diff = compare_checkpoints(tmp_path / "a.pt", tmp_path / "b.pt")
    assert entry(diff, "e").status == "equal"
    s = entry(diff, "s")
    assert s.status == "differs" and s.shape_a == () and s.max_abs_diff == 0.5
    assert s.rel_l2 == pytest.approx(0.25)
    e = entry(compare_checkpoints(tmp_path / "a.pt", tmp_path / "c.pt"), "e")
    assert e.status == "dtype_mismatch" and e.within_tolerance and e.n_unequal == 0


def test_zero_reference_gives_infinite_relative_l2(tmp_path: Path) -> None:
    save_file({"z": torch.zeros(3)}, tmp_path / "a.safetensors")
    save_file({"z": torch.tensor([0.0, 1e-3, 0.0])}, tmp_path / "b.safetensors")
    t = entry(compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors"), "z")
    assert t.rel_l2 == math.inf and t.max_abs_diff == pytest.approx(1e-3)


# --------------------------------------------------------------------------- safety, errors


class Payload:
    """Pickles to a call of ``open(marker, "w")``: a visible side effect if ever unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_arbitrary_pickle_is_refused_without_running_it(tmp_path: Path, zipfile: bool) -> None:
    marker = tmp_path / "payload-ran"
    evil = tmp_path / "evil.pt"
    payload = {"weights": torch.zeros(2), "x": Payload(marker)}
    torch.save(payload, evil, _use_new_zipfile_serialization=zipfile)
    assert not marker.exists()

    with pytest.raises(CheckpointError) as info:
        open_checkpoint(evil)
    message = str(info.value)
    assert str(evil) in message and "weights_only" in message and "open" in message
    for call in (tensor_digest, lambda p: compare_checkpoints(p, p)):
        with pytest.raises(CheckpointError):
            call(evil)
    assert not marker.exists()

    # The payload is live: an unsafe load does run it. This proves the check above means something.
    torch.load(evil, weights_only=False)
    assert marker.exists()


def test_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        open_checkpoint(tmp_path / "absent.pt")
    for name, data in (("junk.pt", b"not a checkpoint"), ("junk.safetensors", b"\x05\x00")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CheckpointError) as info:
            open_checkpoint(tmp_path / name)
        assert name in str(info.value)
        assert str(info.value).rstrip()[-1] not in ":;"  # a reason follows the file name


def test_legacy_format_and_sniffed_bin(tmp_path: Path) -> None:
    sd = state_dict()
    torch.save(sd, tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)
    save_file(sd, tmp_path / "pytorch_model.bin")  # safetensors bytes behind a .bin name
    save_file(sd, tmp_path / "ref.safetensors")
    ref = tensor_digest(tmp_path / "ref.safetensors")
    assert tensor_digest(tmp_path / "legacy.pth") == ref
    assert tensor_digest(tmp_path / "pytorch_model.bin") == ref
    with open_checkpoint(tmp_path / "pytorch_model.bin") as ckpt:
        assert ckpt.format == "safetensors"


def test_bare_tensor_checkpoint(tmp_path: Path) -> None:
    torch.save(torch.arange(4.0), tmp_path / "t.pt")
    with open_checkpoint(tmp_path / "t.pt") as ckpt:
        assert ckpt.names() == ["(root)"]


# --------------------------------------------------------------------------- contracts


def test_to_dict_is_strict_json(tmp_path: Path) -> None:
    sd = state_dict()
    save_file(sd, tmp_path / "a.safetensors")
    save_file({**sd, "fc2.bias": torch.tensor([1.0, 0.0, 0.0, 0.0])}, tmp_path / "b.safetensors")
    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    data = json.loads(json.dumps(diff.to_dict(), allow_nan=False))
    assert data["n_differ"] == 1 and data["rtol"] == 1e-5 and data["atol"] == 1e-8
    assert data["worst"][0]["name"] == "fc2.bias"
    assert data["worst"][0]["rel_l2"] == "inf"  # ||a|| == 0
    assert len(data["tensors"]) == len(sd)
    assert data["bytes_compared"] == 2 * sum(t.numel() * t.element_size() for t in sd.values())


def test_compare_leaves_torch_threads_as_found(tmp_path: Path) -> None:
    save_file(state_dict(), tmp_path / "a.safetensors")
    save_file(state_dict(seed=1), tmp_path / "b.safetensors")
    before = torch.get_num_threads()
    compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert torch.get_num_threads() == before


def test_importing_the_module_does_not_import_torch() -> None:
    code = (
        "import sys, replay_tui.compare.tensors, replay_tui.checkpoints.digest, "
        "replay_tui.checkpoints.formats as t; "
        "assert 'torch' not in sys.modules, 'torch imported'; "
        "assert 'safetensors' not in sys.modules; print(t.is_checkpoint('x.pt'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_equality_without_memcmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch.equal fallback (hosts without a libc memcmp) gives the same answers."""
    monkeypatch.setattr(tensors, "_memcmp", lambda: None)
    sd = {
        **state_dict(),
        "odd": torch.arange(3, dtype=torch.uint8),
        "nan": torch.tensor([math.nan]),
    }
    save_file(sd, tmp_path / "a.safetensors")
    torch.save(sd, tmp_path / "b.pt")
    assert compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.pt").same_tensors
    save_file({**sd, "odd": torch.tensor([0, 1, 3], dtype=torch.uint8)}, tmp_path / "c.safetensors")
    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "c.safetensors")
    assert [t.name for t in diff.tensors if t.status != "equal"] == ["odd"]


def test_non_contiguous_saved_view(tmp_path: Path) -> None:
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(4))
    torch.save({"w": x.t()}, tmp_path / "view.pt")  # stored with transposed strides
    save_file({"w": x.t().contiguous()}, tmp_path / "dense.safetensors")
    assert tensor_digest(tmp_path / "view.pt") == tensor_digest(tmp_path / "dense.safetensors")
    diff = compare_checkpoints(tmp_path / "view.pt", tmp_path / "dense.safetensors")
    assert diff.same_tensors


def test_half_precision_and_complex(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(5)
    bf = torch.randn(100, generator=g).bfloat16()
    bf2 = bf.clone()
    bf2[7] = bf2[7] * 2
    c = torch.randn(10, generator=g, dtype=torch.complex64)
    c2 = c.clone()
    c2[2] += 1j
    save_file({"bf": bf, "c": c}, tmp_path / "a.safetensors")
    save_file({"bf": bf2, "c": c2}, tmp_path / "b.safetensors")
    diff = compare_checkpoints(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    t = entry(diff, "bf")
    assert t.status == "differs" and t.n_unequal == 1
    assert t.max_abs_diff == expected_max_abs(bf.float(), bf2.float())
    t = entry(diff, "c")
    assert t.status == "differs" and t.n_unequal == 1  # the imaginary part of one element
    assert t.max_abs_diff == pytest.approx(1.0)
