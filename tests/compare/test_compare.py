"""Comparing two runs: verdicts, artifacts, checkpoints, metrics, environment, the CLI.

Manifests are real (validated by the schema); checkpoints are real torch and
safetensors files kept in a real object store in a temp dir.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from replay_tui.checkpoints.digest import tensor_digest
from replay_tui.compare.comparison import DEFAULT_ATOL, DEFAULT_RTOL, Comparison
from replay_tui.compare.comparison import compare_runs as _compare_runs
from replay_tui.compare.environment import base_class, classify, compare_environment
from replay_tui.compare.metrics import compare_metric, is_timing_metric
from replay_tui.compare.render import comparison_text
from replay_tui.compare.stored import StoredComparisonError, comparison_from_dict
from storage.manifest import RunManifest, canonical_json, config_hash, manifest_from_data
from storage.objects import ObjectStore
from storage.records import GapCounts
from storage.store import RunStore
from tests.conftest import RunCli
from tests.support.factories import realistic_manifest

A_ID = "run-a-00000001"
B_ID = "run-b-00000002"

# --------------------------------------------------------------------------- helpers


def base(**outputs: Any) -> dict[str, Any]:
    """A valid original manifest (gap-free) with the given outputs and nothing else in them."""
    d = realistic_manifest(0)
    d["run_id"] = A_ID
    d["outputs"] = {"artifacts": [], "metrics": {}, "metric_history": {}, **outputs}
    d["capture"]["artifact_globs"] = ["**"]  # whatever artifacts a test gives: no glob unmatched
    return d


def replay(a: dict[str, Any], **outputs: Any) -> dict[str, Any]:
    """B: a replay of ``a`` on another host, later, with ``outputs`` replacing a's."""
    d = copy.deepcopy(a)
    d.update(
        run_id=B_ID,
        kind="replay",
        replay_of=a["run_id"],
        started_at="2026-01-02T00:00:00.000Z",
        ended_at="2026-01-02T01:00:00.000Z",
        duration_s=3600.0,
        replay={"backend": "docker", "environment_pinned": True},
    )
    d["environment"]["hostname"] = "replay-host-01"
    if outputs:
        d["outputs"] = {**d["outputs"], **outputs}
    return d


def m(d: dict[str, Any]) -> RunManifest:
    return manifest_from_data(d)


def sha256_file(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def artifact(
    file: Path,
    path: str,
    objects: ObjectStore | None,
    *,
    kind: str = "checkpoint",
    digest: bool = True,
) -> dict[str, Any]:
    """The manifest entry for ``file`` recorded as ``path``; its bytes kept in ``objects``."""
    sha = sha256_file(file)
    if objects is not None:
        objects.put(file, sha)
    return {
        "path": path,
        "sha256": sha,
        "size_bytes": file.stat().st_size,
        "kind": kind,
        "tensor_sha256": tensor_digest(file) if digest and kind == "checkpoint" else None,
    }


def save_pt(sd: dict[str, torch.Tensor], file: Path) -> Path:
    file.parent.mkdir(parents=True, exist_ok=True)
    torch.save(sd, file)
    return file


def history(n: int = 10) -> list[list[float]]:
    return [[s, 1.0 + 0.1 * s] for s in range(1, n + 1)]


def compare_runs(a: RunManifest, b: RunManifest, **kw: Any) -> Comparison:
    """``compare_runs``, and every comparison these tests make read back from its stored
    JSON into the same typed model: same body, same text (what the TUI and the evidence
    report read is what the CLI printed)."""
    c = _compare_runs(a, b, **kw)
    stored = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    back = comparison_from_dict(stored)
    assert back.to_dict() == stored
    assert comparison_text(back) == comparison_text(c)
    assert (back.verdict, back.exit_code, back.reproduced) == (c.verdict, c.exit_code, c.reproduced)
    return c


def strict_json(c: Comparison) -> dict[str, Any]:
    body = c.to_dict()
    text = json.dumps(body, allow_nan=False)
    canonical_json(body)  # what the store hashes must accept it too
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@pytest.fixture
def objects(tmp_path: Path) -> ObjectStore:
    return ObjectStore(tmp_path / "objects")


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# --------------------------------------------------------------------------- verdicts


def test_identical(tmp_path: Path, objects: ObjectStore, gen: torch.Generator) -> None:
    sd = {"fc1.weight": torch.randn(8, 4, generator=gen), "fc1.bias": torch.randn(8, generator=gen)}
    art = artifact(save_pt(sd, tmp_path / "model.pt"), "checkpoints/model.pt", objects)
    a = base(
        artifacts=[art],
        metrics={"loss": 2.0, "throughput_samples_s": 1234.5},
        metric_history={"loss": history()},
    )
    b = replay(a)
    b["outputs"]["metrics"]["throughput_samples_s"] = 999.0  # speed is not judged
    c = compare_runs(m(a), m(b), objects=objects)
    assert c.verdict == "IDENTICAL"
    assert c.exit_code == 0
    assert c.missing == ()
    assert c.rtol == DEFAULT_RTOL == 1e-5 and c.atol == DEFAULT_ATOL == 1e-8
    assert [x.status for x in c.artifacts] == ["match"]
    assert any("same sha256" in r for r in c.reasons)
    assert any("timing metric throughput_samples_s" in r for r in c.reasons)
    assert c.b_replays_a
    body = strict_json(c)
    assert body["verdict"] == "IDENTICAL" and body["rtol"] == 1e-5 and body["atol"] == 1e-8


def test_identical_with_metrics_only() -> None:
    a = base(metrics={"loss": 2.0}, metric_history={"loss": history()})
    assert compare_runs(m(a), m(replay(a))).verdict == "IDENTICAL"


def test_history_divergence_steps() -> None:
    hist_a = history(10)
    hist_b = copy.deepcopy(hist_a)
    hist_b[4][1] += 1e-9  # step 5: differs, but far inside any tolerance used here
    hist_b[6][1] += 1e-6  # step 7: inside rtol 1e-5, outside rtol 1e-8
    a = base(metrics={"loss": hist_a[-1][1]}, metric_history={"loss": hist_a})
    b = replay(a, metric_history={"loss": hist_b})

    loose = compare_runs(m(a), m(b))
    (loss,) = loose.metrics
    assert loss.first_step_differs == 5
    assert loss.first_step_out_of_tol is None
    assert loss.within_tol and not loss.bitwise_equal
    assert loss.steps_compared == 10
    assert loose.verdict == "EQUIVALENT"
    assert loose.exit_code == 0

    tight = compare_runs(m(a), m(b), rtol=1e-8, atol=0.0)
    (loss,) = tight.metrics
    assert loss.first_step_differs == 5
    assert loss.first_step_out_of_tol == 7
    assert tight.verdict == "DIVERGED"
    assert tight.exit_code == 1
    assert any(
        "metric loss first differs at step 5, leaves tolerance at step 7" in r
        for r in tight.reasons
    )


def test_final_metric_out_of_tolerance() -> None:
    a = base(metrics={"loss": 2.0, "acc": 0.0})
    b = replay(a, metrics={"loss": 2.5, "acc": 1.0})
    c = compare_runs(m(a), m(b))
    assert c.verdict == "DIVERGED"
    by = {x.name: x for x in c.metrics}
    assert by["loss"].abs_diff == 0.5 and by["loss"].rel_diff == 0.25
    assert not by["loss"].within_tol
    assert by["acc"].rel_diff == math.inf
    assert strict_json(c)["metrics"][0]["rel_diff"] == "inf"  # acc sorts first
    assert any("metric loss final value 2.0 vs 2.5" in r for r in c.reasons)


def test_float64_vs_float32_checkpoint(
    tmp_path: Path, objects: ObjectStore, gen: torch.Generator
) -> None:
    w = torch.randn(16, 8, dtype=torch.float64, generator=gen)
    bias = torch.randn(16, dtype=torch.float64, generator=gen)
    fa = save_pt({"fc1.weight": w, "fc1.bias": bias}, tmp_path / "a" / "model.pt")
    fb = save_pt({"fc1.weight": w.float(), "fc1.bias": bias}, tmp_path / "b" / "model.pt")
    a = base(artifacts=[artifact(fa, "model.pt", objects)], metrics={"loss": 1.0})
    b = replay(a, artifacts=[artifact(fb, "model.pt", objects)])

    loose = compare_runs(m(a), m(b), objects=objects)
    assert loose.verdict == "EQUIVALENT"
    (art,) = loose.artifacts
    assert art.status == "differs" and art.checkpoint == "close"
    assert art.tensors is not None
    t = {x.name: x for x in art.tensors.tensors}
    assert t["fc1.weight"].status == "dtype_mismatch"
    assert (t["fc1.weight"].dtype_a, t["fc1.weight"].dtype_b) == ("float64", "float32")
    assert t["fc1.bias"].status == "equal"

    exact = compare_runs(m(a), m(b), objects=objects, rtol=0.0, atol=0.0)
    assert exact.verdict == "DIVERGED"
    assert exact.artifacts[0].checkpoint == "out_of_tolerance"
    assert any(
        r.startswith("tensor fc1.weight differs (float64 vs float32)") for r in exact.reasons
    )
    assert not any("fc1.bias" in r for r in exact.reasons)
    text = comparison_text(exact)
    assert "D I V E R G E D" in text and "fc1.weight" in text and "rtol=0" in text


def test_safetensors_close_and_worst_tensor(
    tmp_path: Path, objects: ObjectStore, gen: torch.Generator
) -> None:
    w = torch.randn(32, 32, generator=gen)
    fa, fb = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file({"w": w, "v": torch.ones(4)}, fa)
    save_file({"w": w * (1 + 1e-7), "v": torch.ones(4)}, fb)
    a = base(artifacts=[artifact(fa, "model.safetensors", objects)])
    b = replay(a, artifacts=[artifact(fb, "model.safetensors", objects)])
    c = compare_runs(m(a), m(b), objects=objects, rtol=1e-5)
    assert c.verdict == "EQUIVALENT"
    d = c.artifacts[0].tensors
    assert d is not None and d.n_equal == 1 and d.n_close == 1
    assert [x.name for x in d.worst] == ["w"]
    tight = compare_runs(m(a), m(b), objects=objects, rtol=1e-9, atol=0.0)
    assert tight.verdict == "DIVERGED"
    assert any(r.startswith("tensor w differs") for r in tight.reasons)


def test_added_key_and_changed_shape(
    tmp_path: Path, objects: ObjectStore, gen: torch.Generator
) -> None:
    bias = torch.randn(3, generator=gen)
    fa = save_pt({"w": torch.randn(3, 4, generator=gen), "b": bias}, tmp_path / "a" / "m.pt")
    fb = save_pt(
        {"w": torch.randn(4, 4, generator=gen), "b": bias, "extra": torch.zeros(2)},
        tmp_path / "b" / "m.pt",
    )
    a = base(artifacts=[artifact(fa, "m.pt", objects)])
    b = replay(a, artifacts=[artifact(fb, "m.pt", objects)])
    c = compare_runs(m(a), m(b), objects=objects)
    assert c.verdict == "DIVERGED"
    d = c.artifacts[0].tensors
    assert d is not None
    assert d.only_b == ("extra",) and d.only_a == ()
    statuses = {t.name: t.status for t in d.tensors}
    assert statuses == {"b": "equal", "extra": "only_b", "w": "shape_mismatch"}
    assert "tensor w shape differs: [3, 4] vs [4, 4]" in c.reasons
    assert "keys only in B: extra" in c.reasons
    body = strict_json(c)
    assert body["artifacts"][0]["tensors"]["only_b"] == ["extra"]


@pytest.mark.parametrize("with_digest", [True, False], ids=["tensor-digest", "loaded"])
def test_same_tensors_different_container(
    tmp_path: Path, objects: ObjectStore, gen: torch.Generator, with_digest: bool
) -> None:
    sd = {"layer.weight": torch.randn(5, 5, generator=gen)}
    fa = save_pt(sd, tmp_path / "a.pt")
    fb = save_pt(sd, tmp_path / "b.pt")
    assert sha256_file(fa) != sha256_file(fb)  # torch.save names the zip folder after the stem
    # With equal tensor digests nothing needs loading: no object store at all.
    store = None if with_digest else objects
    a = base(artifacts=[artifact(fa, "model.pt", store, digest=with_digest)])
    b = replay(a, artifacts=[artifact(fb, "model.pt", store, digest=with_digest)])
    c = compare_runs(m(a), m(b), objects=store)
    assert c.verdict == "EQUIVALENT"
    (art,) = c.artifacts
    assert art.status == "differs"
    assert art.checkpoint == "same_tensors"
    assert art.note == "same tensors, different container"
    assert (art.tensors is None) == with_digest
    assert any("same tensors, different container" in r for r in c.reasons)


def test_missing_artifact_in_b(tmp_path: Path, objects: ObjectStore) -> None:
    f = tmp_path / "metrics.json"
    f.write_text("{}")
    a = base(
        artifacts=[artifact(f, "out/metrics.json", objects, kind="metrics")],
        metrics={"loss": 1.0},
    )
    b = replay(a, artifacts=[])
    c = compare_runs(m(a), m(b), objects=objects)
    assert c.verdict == "INCOMPLETE"
    assert c.exit_code == 1
    assert c.missing == ("artifact out/metrics.json is in A but not in B",)
    assert c.artifacts[0].status == "only_a"
    # and the other way round
    a_without = base(metrics={"loss": 1.0})
    c2 = compare_runs(m(a_without), m(replay(a)))
    assert c2.missing == ("artifact out/metrics.json is in B but not in A",)


def test_checkpoint_not_in_object_store(tmp_path: Path, gen: torch.Generator) -> None:
    fa = save_pt({"w": torch.randn(2, generator=gen)}, tmp_path / "a" / "m.pt")
    fb = save_pt({"w": torch.randn(2, generator=gen)}, tmp_path / "b" / "m.pt")
    a = base(artifacts=[artifact(fa, "ckpt/m.pt", None)])
    b = replay(a, artifacts=[artifact(fb, "ckpt/m.pt", None)])
    c = compare_runs(m(a), m(b), objects=ObjectStore(tmp_path / "empty"))
    assert c.verdict == "INCOMPLETE"
    assert c.artifacts[0].checkpoint == "unavailable"
    assert len(c.missing) == 1 and "ckpt/m.pt" in c.missing[0]
    assert "not in the object store" in c.missing[0]
    # explicit files make the same pair comparable
    c2 = compare_runs(m(a), m(b), files_a={"ckpt/m.pt": fa}, files_b={"ckpt/m.pt": fb})
    assert c2.verdict == "DIVERGED"


def test_unreadable_checkpoint_is_incomplete(tmp_path: Path, objects: ObjectStore) -> None:
    fa, fb = tmp_path / "a.pt", tmp_path / "b.pt"
    fa.write_bytes(b"not a checkpoint")
    fb.write_bytes(b"not a checkpoint either")
    a = base(artifacts=[artifact(fa, "m.pt", objects, digest=False)])
    b = replay(a, artifacts=[artifact(fb, "m.pt", objects, digest=False)])
    c = compare_runs(m(a), m(b), objects=objects)
    assert c.verdict == "INCOMPLETE"
    assert "checkpoint m.pt could not be compared" in c.missing[0]


def test_unhashed_artifact_is_incomplete() -> None:
    art = {"path": "model.pt", "sha256": None, "size_bytes": 10, "kind": "checkpoint"}
    a = base(artifacts=[art], metrics={"loss": 1.0})
    c = compare_runs(m(a), m(replay(a)))
    assert c.verdict == "INCOMPLETE"
    assert c.artifacts[0].status == "unhashed"
    assert c.missing == ("artifact model.pt has no sha256 in A and B",)


LEFT = "left in the output folder before the run, unchanged by it"


def stale(path: str, why: str = LEFT) -> dict[str, Any]:
    """A file the run lists but did not write (an earlier run left it)."""
    return {"path": path, "sha256": None, "size_bytes": None, "kind": "file", "stale": why}


def test_stale_in_a_written_by_b_is_b_alone_in_true_words(tmp_path: Path) -> None:
    f = tmp_path / "model.pt"
    f.write_bytes(b"weights")
    written = artifact(f, "out/model.pt", None, kind="file")
    a = base(artifacts=[stale("out/model.pt")], metrics={"loss": 1.0})
    b = replay(a, artifacts=[written])
    c = compare_runs(m(a), m(b))
    (x,) = c.artifacts
    assert (x.status, x.stale_a, x.stale_b, x.sha256_b) == ("only_b", LEFT, None, written["sha256"])
    assert c.verdict == "INCOMPLETE"
    assert c.missing == (
        f"artifact out/model.pt was written by B; A did not write it (stale: {LEFT})",
    )
    text = comparison_text(c)
    assert "in B but not in A" not in text
    assert f"out/model.pt was written by B; A did not write it (stale: {LEFT})" in text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("-B  out/model"))
    assert "stale" in row and written["sha256"][:12] in row
    # and the other way round
    wrote = base(artifacts=[written], metrics={"loss": 1.0})
    c2 = compare_runs(m(wrote), m(replay(wrote, artifacts=[stale("out/model.pt")])))
    (y,) = c2.artifacts
    assert (y.status, y.stale_a, y.stale_b) == ("only_a", None, LEFT)
    assert c2.missing == (
        f"artifact out/model.pt was written by A; B did not write it (stale: {LEFT})",
    )


def test_stale_in_a_and_not_written_by_b_is_no_difference() -> None:
    """Neither run wrote the file: not a difference, a note; the metrics decide."""
    a = base(artifacts=[stale("out/model.pt")], metrics={"loss": 1.0})
    c = compare_runs(m(a), m(replay(a, artifacts=[])))
    (x,) = c.artifacts
    assert (x.status, x.stale_a, x.stale_b) == ("stale", LEFT, None)
    assert c.missing == ()
    assert c.verdict == "IDENTICAL"
    note = f"out/model.pt was not written by A (stale: {LEFT}) nor by B (B does not list it)"
    assert note in c.reasons
    assert not any("same sha256" in r for r in c.reasons)  # no artifact was compared
    # stale on both sides (the replay's folder was not empty either)
    later = "last changed before the run started"
    c2 = compare_runs(m(a), m(replay(a, artifacts=[stale("out/model.pt", later)])))
    (y,) = c2.artifacts
    assert (y.status, y.stale_a, y.stale_b) == ("stale", LEFT, later)
    assert f"out/model.pt was not written by A (stale: {LEFT}) nor by B (stale: {later})" in (
        c2.reasons
    )
    text = comparison_text(c2)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("--  out/model"))
    assert row.split()[3:5] == ["stale", "stale"] and row.split()[-1] == "stale"
    # a stale file alone is nothing to compare
    bare = base(artifacts=[stale("out/model.pt")])
    c3 = compare_runs(m(bare), m(replay(bare)))
    assert c3.verdict == "INCOMPLETE"
    assert "nothing to compare: neither run recorded artifacts or metrics" in c3.missing


def test_a_stale_checkpoint_next_to_written_files_keeps_their_verdict(tmp_path: Path) -> None:
    f = tmp_path / "metrics.json"
    f.write_text("{}")
    kept = artifact(f, "out/metrics.json", None, kind="metrics")
    a = base(artifacts=[kept, stale("out/model.pt")], metrics={"loss": 1.0})
    c = compare_runs(m(a), m(replay(a, artifacts=[kept])))
    assert [(x.path, x.status) for x in c.artifacts] == [
        ("out/metrics.json", "match"),
        ("out/model.pt", "stale"),
    ]
    assert c.verdict == "IDENTICAL" and c.missing == ()
    assert "all 1 artifact(s) have the same sha256" in c.reasons


def test_other_file_differs_is_not_divergence(tmp_path: Path, objects: ObjectStore) -> None:
    fa, fb = tmp_path / "a.log", tmp_path / "b.log"
    fa.write_text("12:00 start\n")
    fb.write_text("13:00 start\n")
    a = base(artifacts=[artifact(fa, "train.log", objects, kind="log")], metrics={"loss": 1.0})
    b = replay(a, artifacts=[artifact(fb, "train.log", objects, kind="log")])
    c = compare_runs(m(a), m(b), objects=objects)
    assert c.verdict == "EQUIVALENT"
    assert any(r.startswith("log train.log differs") for r in c.reasons)


def test_a_declared_plain_file_that_differs_is_diverged(
    tmp_path: Path, objects: ObjectStore
) -> None:
    """Item 6 of the verdict issue (O1 of the trust round): a declared output that is
    not a checkpoint is judged by its bytes, never silently passed."""
    fa, fb = tmp_path / "a.txt", tmp_path / "b.txt"
    fa.write_text("accuracy 0.91\n")
    fb.write_text("accuracy 0.42\n")
    a = base(
        artifacts=[artifact(fa, "out/result.txt", objects, kind="file")], metrics={"loss": 1.0}
    )
    b = replay(a, artifacts=[artifact(fb, "out/result.txt", objects, kind="file")])
    c = compare_runs(m(a), m(b), objects=objects)
    assert c.verdict == "DIVERGED" and c.exit_code == 1
    assert c.reasons[0].startswith("file out/result.txt differs")
    assert "record --volatile" in c.reasons[0]


@pytest.mark.parametrize("side", ["a", "b"])
def test_a_file_declared_volatile_is_listed_not_judged(
    tmp_path: Path, objects: ObjectStore, side: str
) -> None:
    fa, fb = tmp_path / "a.txt", tmp_path / "b.txt"
    fa.write_text("took 12.1 s\n")
    fb.write_text("took 13.7 s\n")
    a = base(
        artifacts=[artifact(fa, "out/timing.txt", objects, kind="file")], metrics={"loss": 1.0}
    )
    b = replay(a, artifacts=[artifact(fb, "out/timing.txt", objects, kind="file")])
    (a if side == "a" else b)["capture"] = {"volatile_globs": ["out/**/timing.*"]}
    c = compare_runs(m(a), m(b), objects=objects)
    assert c.verdict == "EQUIVALENT" and c.exit_code == 0  # not IDENTICAL: the bytes differ
    (x,) = c.artifacts
    assert x.volatile == "out/**/timing.*" and x.to_dict()["volatile"] == "out/**/timing.*"
    assert any(
        "declared volatile at record time (--volatile out/**/timing.*)" in r for r in c.reasons
    )
    assert comparison_from_dict(c.to_dict()).artifacts[0].volatile == "out/**/timing.*"
    plain = compare_runs(m(base(metrics={"loss": 1.0})), m(replay(base(), metrics={"loss": 1.0})))
    assert "volatile" not in json.dumps(plain.to_dict())  # older bodies keep their bytes


def test_failed_run_is_incomplete() -> None:
    a = base(metrics={"loss": 1.0})
    b = replay(a)
    b.update(status="failed", exit_code=137)
    c = compare_runs(m(a), m(b))
    assert c.verdict == "INCOMPLETE"
    assert c.reasons[0] == f"run B ({B_ID}) failed (exit code 137): its outputs are not final"


def test_nothing_to_compare() -> None:
    a = base()
    c = compare_runs(m(a), m(replay(a)))
    assert c.verdict == "INCOMPLETE"
    assert c.missing == ("nothing to compare: neither run recorded artifacts or metrics",)


def test_metric_on_one_side_is_incomplete() -> None:
    a = base(metrics={"loss": 1.0, "acc": 0.5}, metric_history={"loss": history()})
    b = replay(a, metrics={"loss": 1.0}, metric_history={"loss": history(8)})
    c = compare_runs(m(a), m(b))
    assert c.verdict == "INCOMPLETE"
    assert set(c.missing) == {
        "metric acc: final value only in A",
        "metric loss: 2 history step(s) only in A",
    }
    loss = next(x for x in c.metrics if x.name == "loss")
    assert loss.steps_compared == 8 and loss.example_steps_only_a == (9, 10)
    from replay_tui.compare.render import metrics_text

    lines = "\n".join(metrics_text(c.metrics)).splitlines()
    table = {ln.split()[1]: ln.split() for ln in lines[2:4]}
    assert table["acc"][6] == "-"  # nothing of it in both runs: not "in tolerance"
    assert table["loss"][6] == "yes"  # the 8 steps in both are within tolerance


def test_divergence_wins_over_missing() -> None:
    a = base(metrics={"loss": 1.0, "acc": 0.5})
    b = replay(a, metrics={"loss": 3.0})
    c = compare_runs(m(a), m(b))
    assert c.verdict == "DIVERGED"
    assert c.missing == ("metric acc: final value only in A",)


def test_bad_tolerance_refused() -> None:
    a = base(metrics={"loss": 1.0})
    with pytest.raises(ValueError, match="rtol and atol"):
        compare_runs(m(a), m(a), rtol=math.nan)


# --------------------------------------------------------------------------- metrics


def test_metric_history_alignment() -> None:
    ha = [(1, 1.0), (2, 2.0), (2, 2.5), (4, 4.0)]
    hb = [(2, 2.0), (2, 2.5), (3, 3.0), (4, 4.0 + 1e-3)]
    d = compare_metric("loss", None, None, ha, hb, rtol=1e-5, atol=0.0)
    assert d.steps_compared == 3
    assert (d.steps_only_a, d.steps_only_b) == (1, 1)
    assert (d.example_steps_only_a, d.example_steps_only_b) == ((1,), (3,))
    assert d.first_step_differs == d.first_step_out_of_tol == 4
    assert d.a_at_out_of_tol == 4.0
    assert not d.within_tol and not d.bitwise_equal
    assert d.status == "differs"


def test_metric_tolerance_is_relative_to_a() -> None:
    # |a-b| <= atol + rtol*|a|: 0.1 <= 0.1*1.0 holds; with b as reference it would not matter
    d = compare_metric("x", 1.0, 1.1, None, None, rtol=0.1 + 1e-12, atol=0.0)
    assert d.within_tol and d.final_within_tol
    d = compare_metric("x", 1.1, 1.0, None, None, rtol=0.05, atol=0.0)
    assert not d.within_tol
    z = compare_metric("x", 0.0, -0.0, None, None, rtol=0.0, atol=0.0)
    assert z.within_tol and not z.bitwise_equal  # equal values, different bits


@pytest.mark.parametrize(
    ("name", "timing"),
    [
        ("throughput_samples_s", True),
        ("step_time", True),
        ("tokens_per_sec", True),
        ("latency_ms", True),
        ("loss", False),
        ("val_accuracy", False),
        ("AP_s", False),
        ("lr", False),
    ],
)
def test_timing_metric_names(name: str, timing: bool) -> None:
    assert is_timing_metric(name) is timing


# --------------------------------------------------------------------------- environment


def test_environment_classes() -> None:
    a = base(metrics={"loss": 1.0})
    b = replay(a)
    b["hardware"]["driver_version"] = "535.104.05"
    b["hardware"]["gpus"][0]["uuid"] = "GPU-other"
    b["environment"]["cuda_version"] = None
    b["environment"]["packages"] = [
        p.replace(p.split("==")[1], "99.0.0") if p.startswith("numpy==") else p
        for p in b["environment"]["packages"]
        if not p.startswith("wandb==")
    ] + ["newpkg==1.0"]
    b["environment"]["packages_sha256"] = "0" * 64
    b["data"][0]["sha256"] = "1" * 64
    b["data"][1]["path"] = "data/elsewhere/val"
    b["config"]["optimizer"]["lr"] = 0.5
    b["env"]["OMP_NUM_THREADS"] = "1"
    b["code"]["branch"] = "other-branch"
    b["image"] = None
    b["config_hash"] = config_hash(b["config"])
    ma, mb = m(a).sealed(), m(b).sealed()
    env = compare_environment(ma, mb)

    def cls(path: str) -> str:
        row = env.row(path)
        assert row is not None, path
        return row.cls

    assert cls("hardware.driver_version") == "numeric"
    assert cls("environment.hostname") == "expected"
    assert cls("environment.cuda_version") == "unknown"
    assert cls("hardware.gpus[0].uuid") == "expected"
    assert cls("hardware.gpus[0].name") == "same"
    assert cls("environment.packages") == "numeric"
    assert cls("environment.packages_sha256") == "numeric"
    dname, vname = a["data"][0]["name"], a["data"][1]["name"]
    assert cls(f"data[{dname}].sha256") == "numeric"
    assert cls(f"data[{vname}].path") == "other"
    assert cls("config.optimizer.lr") == "numeric"
    assert cls("config_hash") == "numeric"
    assert cls("env.OMP_NUM_THREADS") == "numeric"
    assert cls("code.branch") == "other"
    assert cls("image") == "unknown"
    assert cls("run_id") == "expected"
    assert cls("replay_of") == "expected"
    assert cls("replay") == "expected"
    assert cls("integrity.manifest_sha256") == "expected"
    assert cls("code.commit") == "same"
    assert env.packages is not None
    assert env.packages.changed == (("numpy", a_version(a, "numpy"), "99.0.0"),)
    assert env.packages.added == ("newpkg",)
    assert env.packages.removed == ("wandb",)
    # every field of either manifest is there, side by side
    assert env.counts()["same"] > 50
    text = comparison_text(compare_runs(ma, mb))
    assert "differs and can change numbers" in text and "hardware.driver_version" in text
    assert "1 changed: numpy" in text


def a_version(d: dict[str, Any], name: str) -> str:
    pkgs: list[str] = d["environment"]["packages"]
    return next(p.split("==")[1] for p in pkgs if p.startswith(name + "=="))


def test_classify_rules() -> None:
    assert classify("hardware.driver_version", "1", "1") == "same"
    assert classify("hardware.driver_version", "1", "2") == "numeric"
    assert classify("hardware.driver_version", None, "2") == "unknown"
    assert classify("environment.hostname", None, "h") == "expected"
    assert classify("config.lr", 1, 1.0) == "same"  # same canonical JSON, same config_hash
    assert classify("config.flag", 1, True) == "numeric"
    assert classify("status", "succeeded", "failed") == "other"
    assert classify("data[x].sha256", None, None, present_a=False) == "numeric"
    assert base_class("determinism.allow_tf32") == "numeric"
    assert base_class("randomness.torch") == "numeric"
    assert base_class("argv") == "numeric"
    assert base_class("tags.owner") == "expected"
    assert base_class("outputs.log_sha256") == "expected"


def test_pair_gaps_attached() -> None:
    a = base(metrics={"loss": 1.0})
    b = replay(a)
    b["hardware"]["driver_version"] = "535.104.05"
    c = compare_runs(m(a), m(b))
    assert [g.code for g in c.gaps] == ["PAIR_DRIVER_DIFFERS"]
    assert c.gap_counts["pair"] == GapCounts(critical=0, warning=1, info=0)
    assert strict_json(c)["gaps"][0]["code"] == "PAIR_DRIVER_DIFFERS"
    assert "PAIR_DRIVER_DIFFERS" in comparison_text(c)


# --------------------------------------------------------------------------- CLI


def test_cli_compare_and_gaps(
    tmp_path: Path, store_path: Path, cli: RunCli, gen: torch.Generator
) -> None:
    objects = ObjectStore.beside(store_path)
    sd = {"w": torch.randn(4, 4, generator=gen)}
    fa = save_pt(sd, tmp_path / "a" / "m.pt")
    fb = save_pt({"w": sd["w"] + 1.0}, tmp_path / "b" / "m.pt")
    a = base(artifacts=[artifact(fa, "m.pt", objects)], metrics={"loss": 1.0})
    same = replay(a)
    other = replay(a, artifacts=[artifact(fb, "m.pt", objects)])
    other["run_id"] = "run-c-00000003"
    with RunStore(store_path) as store:
        for d in (a, same, other):
            store.ingest(m(d))

    ok = cli("compare", A_ID, B_ID, "--json")
    assert ok.returncode == 0, ok.stderr
    body = json.loads(ok.stdout)
    assert body["verdict"] == "IDENTICAL" and body["rtol"] == 1e-5 and body["atol"] == 1e-8

    bad = cli("compare", A_ID, "run-c", "--json", "--rtol", "1e-3", "--atol", "0")
    assert bad.returncode == 1, bad.stderr
    body = json.loads(bad.stdout)
    assert body["verdict"] == "DIVERGED" and body["rtol"] == 1e-3
    assert any("tensor w differs" in r for r in body["reasons"])

    text = cli("compare", A_ID, "run-c", "--no-store")
    assert text.returncode == 1
    assert "D I V E R G E D" in text.stdout and "rtol=1e-05" in text.stdout

    usage = cli("compare", A_ID, "nope-no-such-run")
    assert usage.returncode == 2

    with RunStore(store_path) as store:
        facts = store.facts("comparisons")
        assert [(f["a_run"], f["b_run"], f["verdict"]) for f in facts] == [
            (A_ID, B_ID, "IDENTICAL"),
            (A_ID, "run-c-00000003", "DIVERGED"),
        ]
        assert facts[1]["rtol"] == 1e-3 and facts[1]["atol"] == 0.0
        assert facts[1]["body"]["verdict"] == "DIVERGED"
        assert store.get_run(B_ID).last_verdict == "IDENTICAL"
        assert store.get_run("run-c-00000003").last_verdict == "DIVERGED"
        assert store.get_run(A_ID).last_verdict is None

    gaps = cli("gaps", A_ID, "--json")
    assert gaps.returncode == 0, gaps.stderr
    assert json.loads(gaps.stdout) == []
    d = base()
    d["run_id"] = "run-d-00000004"
    d["code"]["commit"] = None
    with RunStore(store_path) as store:
        store.ingest(m(d))
    gaps = cli("gaps", "run-d", "--json")
    codes = [g["code"] for g in json.loads(gaps.stdout)]
    assert "CODE_COMMIT_UNKNOWN" in codes and "NO_ARTIFACTS" in codes
    text = cli("gaps", "run-d")
    assert text.returncode == 0 and "CODE_COMMIT_UNKNOWN" in text.stdout


def test_stored_comparison_read_back_from_an_older_body() -> None:
    """A body without the fields later versions added still reads; absent parts take
    their defaults; NaN and infinity (stored as strings) come back as floats."""
    body = {
        "a_run": A_ID,
        "b_run": B_ID,
        "verdict": "DIVERGED",
        "rtol": 1e-5,
        "atol": 1e-8,
        "reasons": ["metric loss final value nan vs 1.0"],
        "metrics": [
            {
                "name": "loss",
                "a": "nan",
                "b": 1.0,
                "abs_diff": "inf",
                "rel_diff": None,
                "final_bitwise_equal": False,
                "final_within_tol": False,
                "bitwise_equal": False,
                "within_tol": False,
                "timing": False,
                "has_history": False,
            }
        ],
    }
    c = comparison_from_dict(body)
    assert c.verdict == "DIVERGED" and c.exit_code == 1
    (loss,) = c.metrics
    assert loss.a is not None and math.isnan(loss.a) and loss.abs_diff == math.inf
    assert loss.status == "differs"
    assert c.probable_causes == () and c.artifacts == () and c.environment.rows == ()
    assert "DIVERGED" in comparison_text(c)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "a comparison is a JSON object, not list"),
        ({"a_run": A_ID, "b_run": B_ID}, "the comparison has no verdict"),
        (
            {"a_run": A_ID, "b_run": B_ID, "verdict": "IDENTICAL", "metrics": [{"name": "x"}]},
            "metric 'x'",
        ),
    ],
)
def test_stored_comparison_that_is_not_one_is_refused(body: Any, message: str) -> None:
    with pytest.raises(StoredComparisonError, match=message):
        comparison_from_dict(body)


def test_stored_artifact_rows_without_stale_fields_read_back() -> None:
    """Bodies stored before stale artifacts existed have no stale_a/stale_b: they read
    back as not stale, with their wording unchanged."""
    body = {
        "a_run": A_ID,
        "b_run": B_ID,
        "verdict": "INCOMPLETE",
        "missing": ["artifact out/model.pt is in A but not in B"],
        "artifacts": [{"path": "out/model.pt", "status": "only_a", "kind_a": "file"}],
    }
    c = comparison_from_dict(body)
    (x,) = c.artifacts
    assert (x.status, x.stale_a, x.stale_b) == ("only_a", None, None)
    assert x.to_dict()["stale_a"] is None
    assert "stale" not in comparison_text(c)
