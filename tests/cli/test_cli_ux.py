"""What a user reads from the CLI: plain verdict words, honest empty results, id-prefix
search, values cut with an ellipsis (whole in --wide and --csv), and why a replay
diverged when the manifests already say so.  Real stores and real CLI processes."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from replay_tui.gaps import evaluate_pair
from replay_tui.replay.runner import compare_and_store
from storage.manifest import manifest_from_data
from storage.store import RunStore
from tests.conftest import MakeManifest, RunCli
from tests.support.bundles import replay_of


def _diverged_pair(store_path: Path, make_manifest: MakeManifest) -> tuple[str, str]:
    """An original with no seed recorded, and a replay (that recorded one) whose final
    loss left tolerance: a gap the original has alone is a probable cause."""
    orig = make_manifest(index=0)
    orig["randomness"] = {}
    rep = replay_of(orig, make_manifest(index=1)["run_id"])
    rep["randomness"] = {"seed": 7}
    name = next(iter(rep["outputs"]["metrics"]))
    rep["outputs"]["metrics"][name] = rep["outputs"]["metrics"][name] + 1.0
    with RunStore(store_path) as s:
        s.ingest(manifest_from_data(orig))
        s.ingest(manifest_from_data(rep))
    return orig["run_id"], rep["run_id"]


def test_compare_prints_the_verdict_as_a_word_and_the_probable_cause_first(
    cli: RunCli, store_path: Path, make_manifest: MakeManifest
) -> None:
    a, b = _diverged_pair(store_path, make_manifest)
    r = cli("compare", a, b)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert "verdict: DIVERGED" in r.stdout  # `compare ... | grep DIVERGED` matches
    cause = lines.index("probable cause (already in the manifests):")
    assert "no seed recorded (SEED_UNKNOWN, randomness.seed)" in lines[cause + 1]
    assert cause < lines.index("why:")
    as_json = json.loads(cli("compare", a, b, "--json").stdout)
    assert any("SEED_UNKNOWN" in c for c in as_json["probable_causes"])


def test_compare_a_run_with_itself_warns(
    cli: RunCli, store_path: Path, make_manifest: MakeManifest
) -> None:
    a, _ = _diverged_pair(store_path, make_manifest)
    r = cli("compare", a, a, "--no-store")
    assert "warning: A and B are the same run" in r.stdout


def test_a_different_seed_is_one_pair_gap(make_manifest: MakeManifest) -> None:
    a = make_manifest(index=0)
    b = replay_of(a, make_manifest(index=1)["run_id"])
    a["randomness"] = {"seed": 7, "python": 7, "numpy": 7, "torch": 7}
    b["randomness"] = {"seed": 8, "python": 8, "numpy": 8, "torch": 8}
    gaps = [
        g
        for g in evaluate_pair(manifest_from_data(a), manifest_from_data(b))
        if g.code == "PAIR_SEED_DIFFERS"
    ]
    assert len(gaps) == 1
    assert gaps[0].message == (
        "the seed differs (7 vs 8); so do the python, numpy, torch seeds: different random streams"
    )
    assert "seed seed" not in gaps[0].message


def test_runs_search_no_match_id_prefix_and_verdict_choice(
    cli: RunCli, store_path: Path, make_manifest: MakeManifest
) -> None:
    a, b = _diverged_pair(store_path, make_manifest)
    with RunStore(store_path) as s:
        compare_and_store(s, s.manifest(a), s.manifest(b))
    none = cli("runs", "--search", "zzzqqq-nothing")
    assert none.returncode == 0
    assert "no run matches" in none.stdout and "record one" not in none.stdout
    by_prefix = cli("runs", "--search", b[:10])
    assert by_prefix.returncode == 0, by_prefix.stderr
    assert b[:13] in by_prefix.stdout
    middle = cli("runs", "--search", b[-8:].lower(), "--json")  # the part one remembers
    assert middle.returncode == 0, middle.stderr
    assert [r["id"] for r in json.loads(middle.stdout)] == [b]
    lower = cli("runs", "--verdict", "diverged", "--json")
    assert lower.returncode == 0, lower.stderr
    assert [r["id"] for r in json.loads(lower.stdout)] == [b]
    bad = cli("runs", "--verdict", "GREAT")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_runs_cuts_with_an_ellipsis_and_wide_and_csv_show_values_whole(
    cli: RunCli, store_path: Path, make_manifest: MakeManifest
) -> None:
    long_name = "a-training-run-with-a-name-far-longer-than-the-column-" + "x" * 20
    m = make_manifest(index=0, name=long_name)
    with RunStore(store_path) as s:
        s.ingest(manifest_from_data(m))
    narrow = cli("runs").stdout
    assert long_name not in narrow and long_name[:27] + "…" in narrow
    wide = cli("runs", "--wide").stdout
    assert long_name in wide and m["run_id"] in wide
    rows = list(csv.reader(io.StringIO(cli("runs", "--csv").stdout)))
    assert rows[0][:3] == ["ID", "NAME", "KIND"]
    assert rows[1][0] == m["run_id"] and rows[1][1] == long_name


def test_an_image_tag_and_many_config_keys_are_never_cut_silently(
    cli: RunCli, store_path: Path, make_manifest: MakeManifest
) -> None:
    tag = "train-image-with-a-long-name:2025.11-cuda12.4-cudnn9"
    m = make_manifest(index=0, image={"reference": f"registry.example.com/ml/{tag}"})
    m["config"] = {f"key_{i:02d}": i for i in range(35)}
    m["config_hash"] = None  # sealed with the new config
    with RunStore(store_path) as s:
        s.ingest(manifest_from_data(m))
    narrow = cli("runs").stdout
    assert tag not in narrow and tag[:23] + "…" in narrow  # cut, and says so
    assert f"registry.example.com/ml/{tag}" in cli("runs", "--wide").stdout
    pinned = make_manifest(index=1)  # a reference pinned to a digest: both are shown
    with RunStore(store_path) as s:
        s.ingest(manifest_from_data(pinned))
    ref, digest = pinned["image"]["reference"], pinned["image"]["digest"]
    name_tag = ref.rsplit("/", 1)[-1]
    assert f"{name_tag}@{digest.removeprefix('sha256:')[:8]}" in cli("runs").stdout
    assert f"{ref}@{digest}" in cli("runs", "--wide").stdout
    rows = list(csv.reader(io.StringIO(cli("runs", "--csv").stdout)))
    assert f"{ref}@{digest}" in [row[6] for row in rows[1:]]
    shown = cli("show", m["run_id"]).stdout
    assert "key_29" in shown and "key_30" not in shown
    assert "… 5 more keys (`show --json` has them all)" in shown
    config = json.loads(cli("show", m["run_id"], "--json").stdout)["manifest"]["config"]
    assert len(config) == 35


def test_store_that_is_not_a_store_or_whose_folder_is_missing(cli: RunCli, tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database at all, just some notes\n" * 100)
    before = junk.read_bytes()
    r = cli("runs", store=junk)
    assert r.returncode == 2
    assert f"--store {junk}: not a replay-tui store" in r.stderr
    assert "Traceback" not in r.stderr
    assert junk.read_bytes() == before  # left as it was
    missing = tmp_path / "no" / "such" / "folder" / "store.db"
    for args in (["runs"], ["stats"], ["show", "0123abcd"]):
        r = cli(*args, store=missing)
        assert r.returncode == 2, (args, r.stderr)
        assert "does not exist" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "no").exists()  # never made silently by a read
    typo = tmp_path / "sotre.db"  # the folder exists, the store does not
    for args in (["runs"], ["gaps", "0123abcd"], ["verify-store"]):
        r = cli(*args, store=typo)
        assert r.returncode == 2, (args, r.stderr)
        assert "no store" in r.stderr and str(typo) in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr
    assert not typo.exists()


def test_long_values_that_differ_late_are_shown_where_they_differ() -> None:
    from replay_tui.compare.render import value_pair

    common = ["python", "train.py", *(f"--option-{i}" for i in range(20))]
    a, b = value_pair([*common, "--lr", "0.1"], [*common, "--lr", "0.2"])
    assert a != b and a.startswith("…") and "0.1" in a and "0.2" in b
    same = value_pair("x" * 100, "x" * 100)
    assert same[0] == same[1] and same[0].endswith("…")  # a cut value ends in an ellipsis


def test_a_command_whose_script_is_not_committed_is_a_critical_gap(tmp_path: Path) -> None:
    """`record -- python rep.py` with rep.py untracked: a replay from the recorded commit
    cannot run it, so the gap is critical (not only the untracked-files warning)."""
    import subprocess
    import sys

    from tests.helpers.repos import commit_repo
    from tests.support.app import cli_env

    repo = commit_repo(tmp_path / "repo", {"README": "x\n"}, "init")
    (repo / "rep.py").write_text("print('step 0 loss 1.0')\n")  # never added
    store = tmp_path / "store.db"
    exe = [str(Path(sys.executable).parent / "replay-tui"), "--store", str(store)]
    rec = subprocess.run(
        [*exe, "record", "--json", "--", "python", "rep.py"],
        cwd=repo, env=cli_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stderr[-2000:]
    run_id = json.loads(rec.stdout)["run_id"]
    gaps = subprocess.run(
        [*exe, "gaps", run_id, "--json"], env=cli_env(), capture_output=True, text=True, check=True
    )
    found = {g["code"]: g for g in json.loads(gaps.stdout)}
    gap = found["COMMAND_FILE_UNTRACKED"]
    assert gap["severity"] == "critical" and "rep.py" in gap["message"]
    assert "CODE_UNTRACKED_FILES" in found


NAN_SCRIPT = """\
import math
import replay_tui
run = replay_tui.start_run("nan-loss")
for step in range(6):
    loss = float("nan") if step >= 4 else 1.0 / (step + 1)
    run.log_metric("loss", loss, step)
    print(f"step {step} printed {loss}", flush=True)
run.finish()
"""


def test_a_nan_loss_is_kept_as_a_fact_not_dropped(tmp_path: Path) -> None:
    """A metric that goes NaN (the SDK and --metric-regex alike): the history keeps its
    finite points and the manifest names the steps where it was not finite, a gap says so."""
    import subprocess
    import sys

    from tests.helpers.repos import commit_repo
    from tests.support.app import cli_env

    repo = commit_repo(tmp_path / "repo", {"nan.py": NAN_SCRIPT}, "nan")
    store = tmp_path / "store.db"
    exe = [str(Path(sys.executable).parent / "replay-tui"), "--store", str(store)]
    regex = r"step (?P<step>\d+) printed (?P<value>\S+)"
    rec = subprocess.run(
        [*exe, "record", "--json", "--metric-regex", regex, "--metric-name", "printed",
         "--", "python", "nan.py"],
        cwd=repo, env=cli_env(), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stderr[-2000:]
    run_id = json.loads(rec.stdout)["run_id"]
    shown = subprocess.run(
        [*exe, "show", run_id, "--json"], env=cli_env(), capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    body = json.loads(shown.stdout)
    outputs = body["manifest"]["outputs"]
    for name in ("loss", "printed"):
        assert [s for s, _ in outputs["metric_history"][name]] == [0, 1, 2, 3]
        assert outputs["metric_nonfinite"][name] == [4, 5]
    gaps = {g["code"]: g for g in body["gaps"] if g["code"] == "METRIC_NONFINITE"}
    assert gaps and "NaN or infinite at 2 step(s) (4, 5)" in gaps["METRIC_NONFINITE"]["message"]
