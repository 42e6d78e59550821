"""Framework outputs compared as the same thing: names a framework makes unique per run
are paired, a checkpoint's text entries are metadata reported apart (the tensors decide)
and paths that differ only by the run's own folder are no divergence."""

from __future__ import annotations

from pathlib import Path

import torch

from replay_tui.compare import unique_names
from replay_tui.compare.artifacts import compare_artifacts
from replay_tui.compare.tensors import compare_checkpoints
from storage.manifest import ArtifactInfo


def _ckpt(path: Path, run_dir: str, version: int, monitor: str | None) -> None:
    w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    torch.save(
        {
            "state_dict": {"net.weight": w},
            "epoch": 1,
            "callbacks": {
                "ModelCheckpoint": {
                    "dirpath": f"{run_dir}/out/lightning_logs/version_{version}/checkpoints",
                    "best_model_path": f"out/lightning_logs/version_{version}/checkpoints/x.ckpt",
                    "monitor": monitor,
                }
            },
        },
        path,
    )


def test_checkpoint_paths_differing_by_run_folder_are_not_a_divergence(tmp_path: Path) -> None:
    _ckpt(tmp_path / "a.ckpt", "/home/me/repo", 0, None)
    _ckpt(tmp_path / "b.ckpt", "/tmp/replay-tui-1234/work", 1, None)
    d = compare_checkpoints(tmp_path / "a.ckpt", tmp_path / "b.ckpt")
    assert d.same_tensors and d.within_tolerance
    assert [t.name for t in d.tensors] == ["epoch", "state_dict.net.weight"]
    meta = {t.name: t for t in d.metadata}
    dirpath = meta["callbacks.ModelCheckpoint.dirpath"]
    assert dirpath.status == "equal" and "run's own folder" in (dirpath.note or "")
    assert meta["callbacks.ModelCheckpoint.best_model_path"].status == "equal"
    assert d.metadata_differ == ()


def test_checkpoint_text_that_differs_is_reported_apart(tmp_path: Path) -> None:
    _ckpt(tmp_path / "a.ckpt", "/r", 0, None)
    _ckpt(tmp_path / "b.ckpt", "/r", 0, "val_loss")
    d = compare_checkpoints(tmp_path / "a.ckpt", tmp_path / "b.ckpt")
    assert d.same_tensors  # the tensors decide
    (differs,) = d.metadata_differ
    assert differs.name == "callbacks.ModelCheckpoint.monitor"
    assert "metadata differs" in d.headline(files_identical=False)
    assert "None of None" not in d.headline()
    assert d.to_dict()["metadata"][0]["name"] == "callbacks.ModelCheckpoint.best_model_path"


def test_framework_unique_names_are_paired_by_what_they_are() -> None:
    a = [
        ArtifactInfo(
            path="out/lightning_logs/version_0/events.out.tfevents.1.hostA.11.0",
            sha256="a" * 64,
            size_bytes=10,
        ),
        ArtifactInfo(path="out/lightning_logs/version_0/hparams.yaml", sha256="c" * 64),
        ArtifactInfo(path="out/checkpoint-6/trainer_state.json", sha256="d" * 64),
    ]
    b = [
        ArtifactInfo(
            path="out/lightning_logs/version_3/events.out.tfevents.9.hostB.22.0",
            sha256="b" * 64,
            size_bytes=10,
        ),
        ArtifactInfo(path="out/lightning_logs/version_3/hparams.yaml", sha256="c" * 64),
        ArtifactInfo(path="out/checkpoint-6/trainer_state.json", sha256="d" * 64),
    ]
    diffs = {d.path: d for d in compare_artifacts(a, b, rtol=1e-5, atol=1e-8)}
    assert set(diffs) == {x.path for x in a}  # nothing only in A or only in B
    ev = diffs[a[0].path]
    assert ev.status == "differs" and ev.volatile is not None  # bytes hold wall times
    assert unique_names.EVENT_FILE_NOTE in (ev.note or "") and "paired with B's" in (ev.note or "")
    assert diffs[a[1].path].status == "match" and "version_3" in (diffs[a[1].path].note or "")
    assert diffs[a[2].path].status == "match" and diffs[a[2].path].note is None
    # two of a kind on one side and one on the other: not guessed
    assert (
        unique_names.pair(["out/checkpoint-2/x", "out/checkpoint-4/x"], ["out/checkpoint-4b/x"])
        == {}
    )
    assert unique_names.pair(
        ["out/checkpoint-2/x", "out/checkpoint-4/x"], ["out/checkpoint-3/x", "out/checkpoint-5/x"]
    ) == {"out/checkpoint-3/x": "out/checkpoint-2/x", "out/checkpoint-5/x": "out/checkpoint-4/x"}


def test_a_run_that_found_an_earlier_version_folder_pairs_its_own() -> None:
    """Recorded with out/ holding an earlier run (version_0, stale), the run wrote
    version_1; its replay, from an empty out/, wrote version_0."""
    a = [
        ArtifactInfo(path="out/lightning_logs/version_0/metrics.csv", stale="left before"),
        ArtifactInfo(path="out/lightning_logs/version_1/metrics.csv", sha256="e" * 64),
    ]
    b = [ArtifactInfo(path="out/lightning_logs/version_0/metrics.csv", sha256="e" * 64)]
    diffs = {d.path: d for d in compare_artifacts(a, b, rtol=1e-5, atol=1e-8)}
    assert diffs["out/lightning_logs/version_1/metrics.csv"].status == "match"
    assert diffs["out/lightning_logs/version_0/metrics.csv"].status == "stale"
