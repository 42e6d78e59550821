"""Config from argv: the parser on the shapes real programs use, and the launcher
recording an uninstrumented program (a real git repo, real torch training) whose only
configuration is its command line and a config file it names."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from replay_tui.capture.argv_config import merge_config, parse_argv, split_program, typed
from replay_tui.gaps import evaluate
from storage.manifest import config_hash, manifest_from_data
from storage.store import RunStore
from tests.helpers.commands import RECORD_OUTPUTS
from tests.helpers.repos import commit_repo
from tests.support.factories import realistic_manifest
from tests.support.training import LOSS_REGEX, replay_tui

PROGRAM = Path(__file__).resolve().parents[1] / "support" / "programs" / "argparse_train.py"


# -- the parser -------------------------------------------------------------------------


def test_typed_only_where_unambiguous() -> None:
    assert typed("3e-4") == 3e-4 and isinstance(typed("3e-4"), float)
    assert typed("5") == 5 and isinstance(typed("5"), int)
    assert typed("-2") == -2
    assert typed("true") is True and typed("False") is False
    assert typed("null") is None and typed("None") is None
    for raw in ("007", "yes", "1_000", "nan", "inf", "0x10", "'scratch'", "1e999", "2**53"):
        assert typed(raw) == raw, raw
    assert typed(str(2**60)) == str(2**60)  # beyond exact doubles: kept as text
    # whole doubles that canonical JSON would write as integers beyond 2**53: kept as text
    for raw in ("1e19", "2.0e20", "1.5e19", "-9007199254740993.0"):
        assert typed(raw) == raw, raw
    assert typed("1e21") == 1e21 and typed("1e15") == 1e15 and typed("1.5e-19") == 1.5e-19


def test_a_command_line_with_any_number_makes_a_manifest_that_reads_back() -> None:
    a = parse_argv(["python", "train.py", "--max-steps", "1e19", "--lr", "3e-4", "--x", "1e21"])
    m = manifest_from_data(
        {**realistic_manifest(1), "config": a.values, "config_hash": config_hash(a.values)}
    )
    assert m.config["max-steps"] == "1e19" and m.config["lr"] == 3e-4 and m.config["x"] == 1e21
    assert manifest_from_data(json.loads(m.sealed().to_json())).config == m.config


def test_argparse_styles_flags_and_positional_in_order() -> None:
    a = parse_argv(
        [
            "python",
            "-u",
            "train.py",
            "data/in",
            "--lr=3e-4",
            "--epochs",
            "5",
            "--no-compile",
            "--offset",
            "-1.5",
            "--tag",
            "a",
            "--tag=b",
            "-v",
            "extra",
            "--",
            "--not-an-option",
        ]
    )
    assert a.program == ["python", "-u", "train.py"]
    assert a.values == {
        "lr": 3e-4,
        "epochs": 5,
        "no-compile": True,
        "offset": -1.5,
        "tag": ["a", "b"],
        "v": "extra",  # `-v extra`: the token after an option is its value
    }
    assert a.raw["lr"] == "3e-4" and a.raw["no-compile"] is None and a.raw["tag"] == ["a", "b"]
    assert a.positional == ["data/in", "--not-an-option"]
    assert a.config()["_positional"] == ["data/in", "--not-an-option"]


def test_hydra_and_fire_styles() -> None:
    a = parse_argv(
        ["python", "train.py", "trainer.max_epochs=5", "+model.depth=2", "db=null", "name=x=y"]
    )
    assert a.values == {"trainer.max_epochs": 5, "model.depth": 2, "db": None, "name": "x=y"}
    f = parse_argv(["python", "-m", "pkg.train", "fit", "--lr", "0.1", "--verbose"])
    assert f.program == ["python", "-m", "pkg.train"]
    assert f.values == {"lr": 0.1, "verbose": True} and f.positional == ["fit"]


def test_launchers_and_odd_commands() -> None:
    assert split_program(["torchrun", "--nproc_per_node=2", "train.py", "--lr=1"]) == (
        ["torchrun", "--nproc_per_node=2", "train.py"],
        ["--lr=1"],
    )
    assert split_program(["python3", "-c", "print(1)", "--x"])[1] == []
    assert split_program(["./train.sh", "--lr", "1"]) == (["./train.sh"], ["--lr", "1"])
    assert parse_argv([]).empty and parse_argv(["python", "train.py"]).empty
    long_key = "--" + "k" * 300 + "=1"
    odd = parse_argv(["python", "t.py", long_key, "--bad\x01key", "--v=" + "x" * 10_000])
    assert odd.positional[:2] == ["k" * 300 + "=1", "bad\x01key"]  # not usable as keys
    assert len(odd.values["v"]) == 4096


def test_config_files_hashed_parsed_and_never_executed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "configs").mkdir(parents=True)
    (repo / "configs" / "base.yaml").write_text("lr: 0.5\nmodel:\n  depth: 3\nwhen: 2024-01-02\n")
    (repo / "extra.json").write_text('{"batch": 32, "lr": 0.25}')
    (repo / "opt.toml").write_text("[optim]\nname = 'adam'\n")
    marker = tmp_path / "executed"
    (repo / "cfg.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nlr = 9\n")
    (repo / "broken.yaml").write_text("a: [unclosed\n")
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("seed: 3\n")
    a = parse_argv(
        [
            "python",
            "train.py",
            "--config",
            "configs/base.yaml",
            "extra.json",
            "opt=opt.toml",
            "cfg.py",
            "--bad",
            "broken.yaml",
            "--other",
            str(outside),
            "--missing",
            "nope.yaml",
            "--lr",
            "0.1",
        ],
        cwd=repo,
        repo_root=repo,
    )
    assert not marker.exists()  # a .py config is hashed, never run
    by_path = {f.path: f for f in a.files}
    assert set(by_path) == {
        "configs/base.yaml",
        "extra.json",
        "opt.toml",
        "cfg.py",
        "broken.yaml",
        str(outside),
    }
    for f in a.files:
        assert f.sha256 == hashlib.sha256(f.abs_path.read_bytes()).hexdigest()
    assert by_path["configs/base.yaml"].in_repo == "configs/base.yaml"
    assert by_path[str(outside)].in_repo is None
    assert [f.path for f in a.files if f.parsed] == [
        "configs/base.yaml",
        "extra.json",
        "opt.toml",
        str(outside),
    ]
    assert by_path["broken.yaml"].problem and not by_path["broken.yaml"].parsed
    cfg = a.config()
    # file keys fill in, the command line wins: --lr 0.1 over both files' lr
    assert cfg["lr"] == 0.1
    assert cfg["model"] == {"depth": 3} and cfg["batch"] == 32 and cfg["seed"] == 3
    assert cfg["optim"] == {"name": "adam"} and cfg["when"] == "2024-01-02"
    assert cfg["config"] == "configs/base.yaml" and cfg["opt"] == "opt.toml"
    assert set(a.blobs()) == {f.sha256 for f in a.files}


def test_sdk_config_wins_and_both_are_kept() -> None:
    a = parse_argv(["python", "train.py", "--lr=0.1"])
    config, source = merge_config({"lr": 0.2, "depth": 4}, a)
    assert config == {"lr": 0.2, "depth": 4}
    assert source is not None and source["source"] == "sdk" and source["argv"] == {"lr": 0.1}
    config, source = merge_config({}, a)
    assert config == {"lr": 0.1} and source is not None and source["source"] == "argv"
    assert source["argv"] is None and source["raw"] == {"lr": "0.1"}
    assert merge_config({"lr": 1}, parse_argv(["python", "t.py"])) == ({"lr": 1}, None)


def test_manifests_without_the_new_groups_hash_as_before() -> None:
    d = realistic_manifest(3)
    m = manifest_from_data(d).sealed()
    body = m.body()
    assert "config_source" not in body and "source" not in body
    assert "config_source" not in json.loads(m.to_json())
    assert "config_source" not in m.model_dump(mode="json")
    # the same sha the manifest had when these groups did not exist: the canonical body
    legacy = {k: v for k, v in body.items() if k not in ("config_source", "source")}
    from storage.manifest import canonical_json, sha256_hex

    assert m.integrity.manifest_sha256 == sha256_hex(canonical_json(legacy))
    # and a stored manifest of that shape parses back with the same hash
    again = manifest_from_data(json.loads(m.to_json()))
    assert again.compute_sha256() == m.integrity.manifest_sha256


def test_config_source_argv_view_is_checked_like_config() -> None:
    d = realistic_manifest(4)
    d["config_source"] = {"source": "sdk", "argv": {"x": float("nan")}}
    with pytest.raises(ValueError, match=r"config_source\.argv"):
        manifest_from_data(d)


# -- the launcher, end to end ------------------------------------------------------------


@pytest.fixture
def program_repo(tmp_path: Path) -> Path:
    files = {"train.py": PROGRAM.read_text(), "configs/small.yaml": "hidden: 4\nlr: 0.5\n"}
    return commit_repo(tmp_path / "repo", files, ignore="out/\n")


@pytest.mark.slow
def test_record_uninstrumented_program_keeps_argv_config(
    program_repo: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store" / "runs.db"
    argv = [
        sys.executable,
        "train.py",
        "--lr=3e-2",
        "--epochs",
        "2",
        "--no-compile",
        "--config",
        "configs/small.yaml",
        "trainer.max_epochs=5",
    ]
    metric = ("--metric-regex", LOSS_REGEX, "--metric-name", "loss")
    proc = replay_tui(store, *RECORD_OUTPUTS, *metric, "--", *argv, cwd=program_repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = json.loads(proc.stdout)["run_id"]
    with RunStore(store) as s:
        m = s.manifest(run_id)
        yaml_sha = hashlib.sha256((program_repo / "configs" / "small.yaml").read_bytes())
        assert s.get_blob(yaml_sha.hexdigest()) == b"hidden: 4\nlr: 0.5\n"
    assert m.config == {
        "hidden": 4,
        "lr": 0.03,
        "epochs": 2,
        "no-compile": True,
        "config": "configs/small.yaml",
        "trainer.max_epochs": 5,
    }
    assert m.config_hash == config_hash(m.config)
    cs = m.config_source
    assert cs is not None and cs.source == "argv" and cs.argv is None
    assert cs.raw["lr"] == "3e-2" and cs.raw["no-compile"] is None
    assert [(f.path, f.format, f.parsed, f.in_repo) for f in cs.files] == [
        ("configs/small.yaml", "yaml", True, "configs/small.yaml")
    ]
    assert cs.files[0].sha256 == yaml_sha.hexdigest()
    assert len(m.outputs.metric_history["loss"]) == 8  # 2 epochs x 4 batches
    codes = {g.code for g in evaluate(m)}
    assert "CONFIG_MISSING" not in codes and "CONFIG_FROM_ARGV" in codes
    assert "CONFIG_FILE_OUTSIDE_REPO" not in codes
    # gaps as the CLI shows them
    gaps = replay_tui(store, "gaps", run_id, "--json")
    assert "CONFIG_FROM_ARGV" in gaps.stdout and "CONFIG_MISSING" not in gaps.stdout
    # a replay reads the same config from the same argv in its checkout
    rep = replay_tui(store, "replay", run_id, "--backend", "local", "--json")
    assert rep.returncode == 0, (rep.stdout[-2000:], rep.stderr[-3000:])
    with RunStore(store) as s:
        replays = [r for r in s.list_runs() if r.kind == "replay"]
        assert len(replays) == 1
        rm = s.manifest(replays[0].id)
    assert rm.config == m.config and rm.config_hash == m.config_hash
    assert rm.config_source is not None and rm.config_source.files == cs.files


@pytest.mark.slow
def test_record_without_arguments_still_says_config_missing(
    program_repo: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store" / "runs.db"
    proc = replay_tui(store, "record", "--json", "--", sys.executable, "train.py", cwd=program_repo)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with RunStore(store) as s:
        m = s.manifest(json.loads(proc.stdout)["run_id"])
    assert m.config == {} and m.config_source is None
    assert "CONFIG_MISSING" in {g.code for g in evaluate(m)}


def test_a_replay_reads_config_files_only_inside_its_checkout(tmp_path: Path) -> None:
    """A replay's argv comes from a manifest: with ``confine`` a config file is read only
    inside the checkout, through the door; a host path, ``..`` or a link leading out is
    never read (its keys never reach the replay's manifest)."""
    checkout = tmp_path / "wt"
    (checkout / "configs").mkdir(parents=True)
    (checkout / "configs" / "base.yaml").write_text("depth: 3\n")
    host = tmp_path / "host" / "secret.json"
    host.parent.mkdir()
    host.write_text('{"token": 424242}')
    (checkout / "configs" / "leak.json").symlink_to(host)
    argv = [
        "python",
        "train.py",
        "--config",
        "configs/base.yaml",
        "--a",
        str(host),
        "--b",
        "../host/secret.json",
        "--c",
        "configs/leak.json",
    ]
    a = parse_argv(argv, checkout, checkout, confine=True)
    assert [(f.path, f.in_repo, f.parsed) for f in a.files] == [
        ("configs/base.yaml", "configs/base.yaml", True)
    ]
    assert a.config()["depth"] == 3 and "token" not in a.config()
    # the same argv at record time is the user's own command line: their files are read
    recorded = parse_argv(argv, checkout, checkout)
    assert recorded.config()["token"] == 424242
