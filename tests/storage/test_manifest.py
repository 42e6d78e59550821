"""The manifest format: schema round trip, hash stability and sensitivity, hostile input.

Hostile manifests go through the real command line (``replay-tui ingest`` in a child
process) against a real SQLite file that already holds one run, and the store's bytes
are compared before and after.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from replay_tui.safety import escape_control
from storage.manifest import (
    MAX_MANIFEST_BYTES,
    ManifestError,
    RunManifest,
    canonical_json,
    config_hash,
    json_schema,
    manifest_from_data,
    parse_manifest,
)
from storage.store import RunStore
from tests.conftest import MakeManifest, RunCli
from tests.support.factories import realistic_manifest, seal

# -- helpers -----------------------------------------------------------------------


def shuffled(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: shuffled(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


def store_fingerprint(path: Path) -> dict[str, str]:
    """sha256 of the store file and of its -wal file when there is one."""
    out = {}
    for p in (path, path.with_name(path.name + "-wal")):
        if p.exists():
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# -- schema round trip ---------------------------------------------------------------


def test_round_trip_dict_model_canonical_json(make_manifest: MakeManifest) -> None:
    data = make_manifest()
    m = manifest_from_data(data)
    text = m.to_json()
    again = parse_manifest(text)
    assert again == m
    assert json.loads(again.to_json()) == json.loads(text)
    # the dict we started from comes back field for field (JSON numbers compare by value)
    assert m.model_dump(mode="json") == data
    # canonical: no whitespace, keys sorted, re-serialising changes nothing
    assert canonical_json(json.loads(text)).decode() == text
    assert "\n" not in text and ", " not in text


def test_round_trip_sealed_through_the_store(make_manifest: MakeManifest, store_path: Path) -> None:
    sealed = seal(make_manifest())
    m = parse_manifest(json.dumps(sealed))
    assert m.integrity.manifest_sha256 == m.compute_sha256()
    assert m.config_hash == config_hash(m.config)
    with RunStore(store_path) as store:
        store.ingest(m)
    with RunStore(store_path) as store:
        back = store.manifest(m.run_id)
    assert back == m
    assert back.to_json() == m.to_json()


# Values the checks have always let through, where Python's regex classes are wider than
# ASCII: a manifest stored with them must still read back (the store validates on read).
STORED_ODDITIES: dict[str, tuple[str, Any]] = {
    "Arabic-Indic digits in a timestamp's fraction": ("started_at", "2025-03-01T08:21:49.\u0663Z"),
    "a superscript digit in an image tag": ("image.reference", "registry.invalid/x/train:v\u00b2"),
    "a Greek letter in an image tag": ("image.reference", "registry.invalid/x/train:\u03b1-1"),
}


@pytest.mark.parametrize("case", list(STORED_ODDITIES))
def test_what_was_accepted_before_still_reads_back(case: str, store_path: Path) -> None:
    field, value = STORED_ODDITIES[case]
    d = realistic_manifest(2)
    group, _, name = field.rpartition(".")
    (d[group] if group else d)[name] = value
    m = manifest_from_data(d)
    with RunStore(store_path) as store:
        store.ingest(m)
    with RunStore(store_path) as store:
        assert store.manifest(m.run_id).to_json() == m.sealed().to_json()


def test_every_group_is_filled_by_the_factory(make_manifest: MakeManifest) -> None:
    m = manifest_from_data(make_manifest())
    assert m.code.commit is not None and len(m.code.commit) == 40
    assert m.image is not None and m.image.digest is not None
    assert m.image.digest.startswith("sha256:")
    assert m.data and all(d.sha256 for d in m.data)
    assert m.config and m.config_hash == config_hash(m.config)
    assert m.randomness.seed is not None and m.randomness.dataloader_workers is not None
    assert m.determinism.deterministic_algorithms is True
    assert m.environment.packages is not None and len(m.environment.packages) >= 150
    assert m.hardware.gpus and m.hardware.gpu_count == len(m.hardware.gpus)
    assert m.outputs.artifacts and all(a.sha256 for a in m.outputs.artifacts)
    assert m.outputs.metrics
    assert all(len(h) == 100 for h in m.outputs.metric_history.values())


def test_schema_command_prints_a_json_schema(cli: RunCli, make_manifest: MakeManifest) -> None:
    proc = cli("schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert schema == json.loads(json.dumps(json_schema()))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert {"run_id", "status", "started_at"} <= set(schema["required"])
    sample = seal(make_manifest())
    assert set(sample) <= set(schema["properties"])
    for group in ("code", "image", "data", "config", "randomness", "determinism"):
        assert group in schema["properties"]
    for name in ("CodeInfo", "ImageInfo", "DataInfo", "EnvironmentInfo", "HardwareInfo"):
        assert schema["$defs"][name]["additionalProperties"] is False
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(sample)
    # the schema is as strict as the validator on the formats it checks
    for bad in (
        dict(sample, unknown_field=1),
        dict(sample, run_id="x"),
        dict(sample, started_at="yesterday"),
        dict(sample, code={**sample["code"], "commit": "abc"}),
        dict(sample, image={**sample["image"], "digest": "md5:00"}),
        dict(sample, outputs={**sample["outputs"], "artifacts": [{"path": "../x"}]}),
        dict(sample, outputs={**sample["outputs"], "artifacts": [{"path": "/etc/passwd"}]}),
    ):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(bad)


# -- hash stability ------------------------------------------------------------------


def test_hash_is_stable_under_key_order_and_whitespace(make_manifest: MakeManifest) -> None:
    data = make_manifest()
    reference = manifest_from_data(data)
    ref_sha = reference.compute_sha256()
    rnd = random.Random(7)
    texts = [
        json.dumps(shuffled(data, rnd)),
        json.dumps(shuffled(data, rnd), indent=4),
        json.dumps(shuffled(data, rnd), separators=(",", ":")),
        json.dumps(shuffled(data, rnd), indent="\t", ensure_ascii=True),
        "\n\n  " + json.dumps(shuffled(data, rnd), indent=1) + "\r\n\t ",
    ]
    for text in texts:
        m = parse_manifest(text)
        assert m.compute_sha256() == ref_sha
        assert config_hash(m.config) == reference.config_hash
        assert m.to_json() == reference.to_json()


def test_sealed_manifest_still_verifies_after_reformatting(make_manifest: MakeManifest) -> None:
    sealed = seal(make_manifest())
    rnd = random.Random(11)
    for _ in range(5):
        text = json.dumps(shuffled(sealed, rnd), indent=rnd.choice([None, 2, 8]))
        m = parse_manifest(text)  # would raise if the claimed hash did not match
        assert m.integrity.manifest_sha256 == sealed["integrity"]["manifest_sha256"]


def test_number_and_string_spellings_do_not_change_the_hash(make_manifest: MakeManifest) -> None:
    data = make_manifest(name="café-run", config={"lr": 0.0003, "steps": 100, "note": "é"})
    sha = manifest_from_data(data).compute_sha256()
    text = json.dumps(data, ensure_ascii=False)
    variants = [
        text.replace('"lr": 0.0003', '"lr": 3e-4'),
        text.replace('"lr": 0.0003', '"lr": 3.0E-4'),
        text.replace('"steps": 100', '"steps": 1.0e2'),  # same JSON number (RFC 8785)
        json.dumps(data, ensure_ascii=True),  # \u00e9 escapes
    ]
    for v in variants:
        assert v != text
        assert parse_manifest(v).compute_sha256() == sha


def test_hash_does_not_depend_on_sealing_or_integrity(make_manifest: MakeManifest) -> None:
    m = manifest_from_data(make_manifest())
    sealed = m.sealed()
    assert sealed.compute_sha256() == m.compute_sha256()
    assert sealed.integrity.manifest_sha256 == m.compute_sha256()
    assert sealed.sealed() == sealed
    signed = sealed.model_copy(
        update={"integrity": sealed.integrity.model_copy(update={"signature": "sig"})}
    )
    assert signed.compute_sha256() == sealed.compute_sha256()


def _fresh(m: RunManifest) -> RunManifest:
    """The same manifest as a new object, never sealed (validated, not checked)."""
    return RunManifest.model_validate(m.model_dump(mode="json"))


def _sealing_cases(data: dict[str, Any]) -> dict[str, RunManifest]:
    m = manifest_from_data(data)
    stale = m.sealed().model_dump(mode="json")
    stale["name"] = "renamed after sealing"
    wrong_config_hash = {**data, "config_hash": "0" * 64}
    return {
        "unsealed": m,
        "a config_hash that is not the config's": RunManifest.model_validate(wrong_config_hash),
        "sealed, then changed": RunManifest.model_validate(stale),
        "sealed, then copied with a change": m.sealed().model_copy(update={"name": "copied"}),
        "sealed twice": m.sealed().sealed(),
    }


@pytest.mark.parametrize(
    "case",
    [
        "unsealed",
        "a config_hash that is not the config's",
        "sealed, then changed",
        "sealed, then copied with a change",
        "sealed twice",
    ],
)
def test_a_remembered_seal_is_what_sealing_again_gives(case: str) -> None:
    """A manifest remembers its seal; whatever path made it, the remembered seal is the
    one a new object with the same fields works out."""
    m = _sealing_cases(realistic_manifest(3, seed=11))[case]
    m.seal()  # remembered from here on
    sealed = m.sealed()
    fresh = _fresh(sealed)
    assert sealed == fresh
    assert sealed.seal() == fresh.seal()
    assert sealed.integrity.manifest_sha256 == fresh.compute_sha256()
    assert sealed.config_hash == config_hash(sealed.config)
    assert sealed.to_json() == sealed.seal()[1]
    assert m.seal() == _fresh(m).seal()
    renamed = sealed.model_copy(update={"name": "another name"})
    assert renamed.seal() == _fresh(renamed).seal() != sealed.seal()
    assert sealed.model_copy().seal() == sealed.seal()


def test_a_manifest_is_canonicalised_once_from_input_to_store(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validating a sealed manifest checks its digest, and storing it needs the same
    canonical text: both come from one canonicalisation of the whole manifest.  So does
    sealing an unsealed one (as an import does) and storing the sealed copy."""
    from storage import canonical

    sealed_file = json.dumps(seal(realistic_manifest(1, seed=5)))
    unsealed = realistic_manifest(2, seed=5)
    whole: list[str] = []
    for name in ("dumps", "dumps_data"):
        original = getattr(canonical, name)

        def counted(value: Any, _original: Any = original) -> bytes:
            if isinstance(value, dict) and "run_id" in value:
                whole.append(value["run_id"])
            return bytes(_original(value))

        monkeypatch.setattr(canonical, name, counted)
    with RunStore(store_path) as store:
        from_file = parse_manifest(sealed_file)
        store.ingest(from_file)
        assert whole == [from_file.run_id]
        imported = manifest_from_data(unsealed).sealed()
        store.ingest(imported)
        assert whole == [from_file.run_id, imported.run_id]
    with RunStore(store_path) as store:
        assert store.manifest(from_file.run_id).to_json() == from_file.to_json()
        assert store.manifest(imported.run_id).to_json() == _fresh(imported).sealed().to_json()


def _as_written_by_the_tool() -> tuple[RunManifest, str]:
    m = manifest_from_data(realistic_manifest(4, seed=13)).sealed()
    return m, m.to_json()


def test_the_tools_own_sealed_json_is_read_without_the_duplicate_key_search(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sealed manifest in canonical form is its own proof that no key is repeated (its
    canonical JSON is the text), so the slower parse that finds repeated keys is left
    out; any other form still takes it."""
    import storage.manifest as manifest_module

    m, text = _as_written_by_the_tool()
    searched: list[int] = []

    def counting(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        searched.append(len(pairs))
        return dict(pairs)

    monkeypatch.setattr(manifest_module, "_no_duplicates", counting)
    back = parse_manifest(text.encode())
    assert back == m and back.to_json() == text
    assert searched == []
    assert parse_manifest(json.dumps(json.loads(text), indent=1)) == m
    assert searched
    searched.clear()
    assert parse_manifest(m.model_dump_json()) == m  # compact, but keys not sorted
    assert searched


def _twice(text: str, member: str, first: str) -> str:
    """``text`` with ``member`` given a first time, as ``first``, just before itself."""
    i = text.index(f'"{member}":')
    return text[:i] + f'"{member}":{first},' + text[i:]


CANONICAL_HOSTILE: dict[str, tuple[Callable[[str], str], str]] = {
    "a top-level key twice": (lambda t: _twice(t, "name", '"x"'), "duplicate key 'name'"),
    "a key twice in the config": (
        lambda t: _twice(t, "label_smoothing", "0.5"),
        "duplicate key 'label_smoothing'",
    ),
    "a key twice, both the same": (
        lambda t: _twice(t, "run_id", json.dumps(json.loads(t)["run_id"])),
        "duplicate key 'run_id'",
    ),
    "NaN for the exit code": (
        lambda t: t.replace('"exit_code":0', '"exit_code":NaN', 1),
        "NaN is not allowed",
    ),
    "a lone surrogate in a name": (
        lambda t: t.replace('"name":"', '"name":"\\ud800', 1),
        "lone UTF-16 surrogate",
    ),
    "an integer past 64 bits": (
        lambda t: t.replace('"exit_code":0', '"exit_code":184467440737095516160', 1),
        "exit_code",
    ),
    "changed after sealing": (
        lambda t: t.replace('"status":"succeeded"', '"status":"failed"', 1),
        "altered after sealing",
    ),
}


@pytest.mark.parametrize("case", list(CANONICAL_HOSTILE))
def test_a_hostile_manifest_in_canonical_form_is_refused_as_before(case: str) -> None:
    alter, expected = CANONICAL_HOSTILE[case]
    _, text = _as_written_by_the_tool()
    bad = alter(text)
    assert bad != text
    with pytest.raises(ManifestError) as e:
        parse_manifest(bad.encode())
    assert expected in str(e.value)


@pytest.mark.parametrize("value", [2.0**53, 1e19, 2e19, -3.5e20])
def test_a_whole_config_number_that_would_read_back_as_a_huge_integer_is_refused(
    value: float, store_path: Path
) -> None:
    """Canonical JSON writes a whole double below 1e21 as an integer: beyond +-2**53 that
    integer is outside the range a config may hold, so the store could not read the
    manifest back.  It is refused on the way in, whatever form the file has."""
    d = realistic_manifest(5, seed=19)
    d["config"] = {**d["config"], "big": value}
    d["config_hash"] = None
    sealed = RunManifest.model_validate(d).sealed()  # built without the checks
    for text in (sealed.to_json(), json.dumps(json.loads(sealed.to_json()), indent=2)):
        with pytest.raises(ManifestError, match=r"config\.big") as e:
            parse_manifest(text.encode())
        assert "beyond +-2**53" in str(e.value) or "integer outside" in str(e.value)
    with pytest.raises(ManifestError, match="beyond"):
        manifest_from_data({**d, "config_hash": None})
    with RunStore(store_path) as store:
        assert store.count_runs() == 0


@pytest.mark.parametrize("value", [1e21, 1.5e300, 2.0**53 - 1, 0.5 + 2**52, -1e-300])
def test_config_numbers_that_read_back_are_accepted_and_do(value: float, store_path: Path) -> None:
    d = realistic_manifest(6, seed=19)
    d["config"] = {**d["config"], "big": value}
    d["config_hash"] = None
    m = manifest_from_data(d).sealed()
    with RunStore(store_path) as store:
        store.ingest(parse_manifest(m.to_json().encode()))
    with RunStore(store_path) as store:
        back = store.manifest(m.run_id)
    assert back.config["big"] == value and back.to_json() == m.to_json()


def test_sealing_marks_as_set_only_what_it_changed() -> None:
    d = realistic_manifest(7, seed=19)
    del d["config"], d["config_hash"]
    m = manifest_from_data(d)
    assert "config_hash" not in m.sealed().model_fields_set
    assert "config_hash" not in m.sealed().model_dump(exclude_unset=True)


# -- hash sensitivity ------------------------------------------------------------------

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(d: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        target: Any = d
        for p in parents:
            target = target[int(p)] if isinstance(target, list) else target[p]
        if isinstance(target, list):
            target[int(leaf)] = value
        else:
            target[leaf] = value

    return mutate


def _flip_hex(s: str) -> str:
    return s[:-1] + ("0" if s[-1] != "0" else "1")


def _next_float(x: float) -> float:
    return math.nextafter(x, math.inf)


BASE = realistic_manifest(0)

NON_CONFIG_CHANGES: dict[str, Mutation] = {
    "name": _set("name", BASE["name"] + "x"),
    "status": _set("status", "failed"),
    "commit one char": _set("code.commit", _flip_hex(BASE["code"]["commit"])),
    "image digest": _set("image.digest", _flip_hex(BASE["image"]["digest"])),
    "data sha256": _set("data.0.sha256", _flip_hex(BASE["data"][0]["sha256"])),
    "data size +1": _set("data.1.size_bytes", BASE["data"][1]["size_bytes"] + 1),
    "seed +1": _set("randomness.torch", BASE["randomness"]["torch"] + 1),
    "cudnn benchmark": _set("determinism.cudnn_benchmark", True),
    "one package version": _set("environment.packages.3", BASE["environment"]["packages"][3] + "1"),
    "driver version": _set("hardware.driver_version", "550.54.14"),
    "artifact sha256": _set(
        "outputs.artifacts.0.sha256", _flip_hex(BASE["outputs"]["artifacts"][0]["sha256"])
    ),
    "final metric last bit": _set(
        "outputs.metrics.loss", _next_float(BASE["outputs"]["metrics"]["loss"])
    ),
    "history value last bit": _set(
        "outputs.metric_history.loss.57",
        [
            BASE["outputs"]["metric_history"]["loss"][57][0],
            _next_float(BASE["outputs"]["metric_history"]["loss"][57][1]),
        ],
    ),
    "env var": _set("env.OMP_NUM_THREADS", "9"),
    "argv": _set("argv.5", BASE["argv"][5] + "0"),
    "tag": _set("tags.owner", "mallory"),
    "started_at one ms": _set("started_at", BASE["started_at"][:-2] + "9Z"),
    "null instead of false": _set("code.dirty", None),
}

CONFIG_CHANGES: dict[str, Mutation] = {
    "lr": _set("config.optimizer.lr", BASE["config"]["optimizer"]["lr"] * 2),
    "dropout last bit": _set("config.model.dropout", _next_float(0.1)),
    "nested list": _set("config.optimizer.betas", [0.9, 0.98]),
    "int to bool": _set("config.data.shuffle", 1),
    "new key": _set("config.extra", None),
    "string": _set("config.notes", BASE["config"]["notes"] + " "),
}


@pytest.mark.parametrize("change", sorted(NON_CONFIG_CHANGES))
def test_each_value_change_changes_the_manifest_hash(change: str) -> None:
    data = copy.deepcopy(BASE)
    before = manifest_from_data(data)
    NON_CONFIG_CHANGES[change](data)
    after = manifest_from_data(data)
    assert after.compute_sha256() != before.compute_sha256()
    assert config_hash(after.config) == config_hash(before.config)
    assert after.sealed().config_hash == before.sealed().config_hash


@pytest.mark.parametrize("change", sorted(CONFIG_CHANGES))
def test_config_changes_change_both_hashes(change: str) -> None:
    data = copy.deepcopy(BASE)
    before = manifest_from_data(data)
    CONFIG_CHANGES[change](data)
    data["config_hash"] = config_hash(data["config"])
    after = manifest_from_data(data)
    assert after.config_hash != before.config_hash
    assert after.compute_sha256() != before.compute_sha256()


def test_every_change_gives_a_distinct_hash() -> None:
    hashes = {manifest_from_data(copy.deepcopy(BASE)).compute_sha256()}
    for mutate in [*NON_CONFIG_CHANGES.values(), *CONFIG_CHANGES.values()]:
        data = copy.deepcopy(BASE)
        mutate(data)
        data["config_hash"] = config_hash(data["config"])
        hashes.add(manifest_from_data(data).compute_sha256())
    assert len(hashes) == 1 + len(NON_CONFIG_CHANGES) + len(CONFIG_CHANGES)


# -- hostile input through the command line ------------------------------------------------


def _json(data: Any) -> bytes:
    return json.dumps(data).encode()


def _patched(**changes: Mutation) -> Callable[[dict[str, Any]], bytes]:
    def build(d: dict[str, Any]) -> bytes:
        for mutate in changes.values():
            mutate(d)
        return _json(d)

    return build


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return value


def _tampered(d: dict[str, Any]) -> bytes:
    sealed = seal(d)
    sealed["name"] = "a quietly different name"
    return _json(sealed)


def _config_hash_mismatch(d: dict[str, Any]) -> bytes:
    d["config"]["optimizer"]["lr"] = 1.0  # config changed, config_hash left as it was
    return _json(d)


def _replace(old: str, new: str) -> Callable[[dict[str, Any]], bytes]:
    def build(d: dict[str, Any]) -> bytes:
        text = json.dumps(d)
        assert old in text
        return text.replace(old, new, 1).encode()

    return build


def _dup_key(d: dict[str, Any]) -> bytes:
    text = json.dumps(d)
    return ('{"run_id": "01JZZZZZZZZZZZZZZZZZZZZZZZ", ' + text[1:]).encode()


def _latin1(d: dict[str, Any]) -> bytes:
    d["name"] = "caf\u00e9"
    return json.dumps(d, ensure_ascii=False).encode("latin-1")


def _huge_padding(d: dict[str, Any]) -> bytes:
    text = json.dumps(d)
    return (text[:-1] + " " * (9 * 1024 * 1024) + "}").encode()


# id -> (build bytes from a fresh valid manifest dict, substrings the message must hold)
# "{file}" in an expected substring stands for the manifest's path.
HOSTILE: dict[str, tuple[Callable[[dict[str, Any]], bytes], list[str]]] = {
    "wrong type: status is a number": (_patched(a=_set("status", 0)), ["status"]),
    "wrong type: argv is a string": (
        _patched(a=_set("argv", "python train.py")),
        ["argv", "valid list"],
    ),
    "wrong type: exit_code is a string": (_patched(a=_set("exit_code", "0")), ["exit_code"]),
    "wrong type: dirty is a string": (_patched(a=_set("code.dirty", "false")), ["code.dirty"]),
    "wrong type: code group is a list": (_patched(a=_set("code", [])), ["code"]),
    "wrong type: seed is a float": (_patched(a=_set("randomness.seed", 1.5)), ["randomness.seed"]),
    "traversal in artifact path": (
        _patched(a=_set("outputs.artifacts.1.path", "../../../etc/passwd")),
        ["outputs.artifacts[1].path", "'..'"],
    ),
    "traversal hidden mid-path": (
        _patched(a=_set("data.0.path", "data/../../secrets")),
        ["data[0].path", "'..'"],
    ),
    "absolute data path": (
        _patched(a=_set("data.0.path", "/etc/shadow")),
        ["data[0].path", "absolute"],
    ),
    "windows drive workdir": (_patched(a=_set("workdir", "C:/Windows")), ["workdir", "absolute"]),
    "NUL in path": (_patched(a=_set("data.1.path", "data/x\x00.bin")), ["data[1].path", "NUL"]),
    "10 MB string": (
        _patched(a=_set("name", "x" * (10 * 1024 * 1024))),
        ["bytes", f"limit is {MAX_MANIFEST_BYTES}"],
    ),
    "5 MB string inside the size limit": (
        _patched(a=_set("outputs.log_tail", "y" * (5 * 1024 * 1024))),
        ["outputs.log_tail", "at most"],
    ),
    "NaN metric": (_replace('"val_loss": ', '"val_loss": NaN, "x": '), ["NaN", "finite"]),
    "Infinity in config": (_replace('"ema_decay": 0.9999', '"ema_decay": Infinity'), ["Infinity"]),
    "-Infinity in history": (
        _replace('"loss": [[50, ', '"loss": [[50, -Infinity], [51, '),
        ["-Infinity"],
    ),
    "overflowing float 1e400": (
        _replace('"duration_s": ', '"duration_s": 1e400, "x": '),
        ["duration_s", "finite"],
    ),
    "duplicate keys": (_dup_key, ["duplicate key 'run_id'"]),
    "truncated JSON": (lambda d: _json(d)[:-40], ["invalid JSON"]),
    "wrong schema_version 2": (_patched(a=_set("schema_version", 2)), ["schema_version", "2"]),
    "schema_version as a string": (_patched(a=_set("schema_version", "1")), ["schema_version"]),
    "schema_version true": (_patched(a=_set("schema_version", True)), ["schema_version"]),
    "non-UTF-8 bytes": (_latin1, ["not UTF-8"]),
    "lone surrogate in config": (
        _replace('"notes": "', '"notes": "\\ud800'),
        ["config.notes", "surrogate"],
    ),
    "extra unknown field": (_patched(a=_set("owner", "eve")), ["owner", "Extra inputs"]),
    "extra field in a group": (_patched(a=_set("code.author", "eve")), ["code.author"]),
    "commit of 39 chars": (
        lambda d: _patched(a=_set("code.commit", d["code"]["commit"][:39]))(d),
        ["code.commit", "40-character"],
    ),
    "commit in uppercase hex": (
        lambda d: _patched(a=_set("code.commit", d["code"]["commit"].upper()))(d),
        ["code.commit", "lowercase"],
    ),
    "digest without sha256:": (
        lambda d: _patched(a=_set("image.digest", d["image"]["digest"][7:]))(d),
        ["image.digest", "sha256:"],
    ),
    "image reference with a shell payload": (
        _patched(a=_set("image.reference", "alpine; rm -rf /")),
        ["image.reference"],
    ),
    "replay without replay_of": (_patched(a=_set("kind", "replay")), ["replay_of"]),
    "deeply nested config": (
        _patched(a=_set("config.model", _nested(40))),
        ["config.model.k.k", "nested deeper"],
    ),
    "JSON nested 100k deep": (
        _replace('"config": {', '"config": {"deep": ' + "[" * 100_000 + "]" * 100_000 + ", "),
        ["nested too deeply"],
    ),
    "int beyond 2**53 in config": (
        _patched(a=_set("config.trainer.max_steps", 2**53 + 1)),
        ["config.trainer.max_steps", "2**53"],
    ),
    "int with 5000 digits": (_replace('"exit_code": 0', '"exit_code": ' + "9" * 5000), ["JSON"]),
    "env var name with '='": (
        _patched(a=_set("env.LD_PRELOAD=/tmp/evil_so X", "1")),
        ["env.LD_PRELOAD=/tmp/evil_so X", "environment variable names"],
    ),
    "negative duration": (_patched(a=_set("duration_s", -1.0)), ["duration_s", "greater than"]),
    "impossible timestamp": (
        _patched(a=_set("started_at", "2025-13-45T25:61:61.000Z")),
        ["started_at"],
    ),
    "run_id with path characters": (_patched(a=_set("run_id", "../../etc/x")), ["run_id"]),
    "tampered manifest_sha256": (_tampered, ["integrity.manifest_sha256", "altered"]),
    "config_hash does not match config": (_config_hash_mismatch, ["config_hash"]),
    "artifact listed twice": (
        lambda d: _patched(a=_set("outputs.artifacts.1.path", "checkpoints/final.pt"))(d),
        ["outputs.artifacts[1]", "listed twice"],
    ),
    "history point of three values": (
        _patched(a=_set("outputs.metric_history.loss.0", [1, 2.0, 3])),
        ["outputs.metric_history.loss[0]"],
    ),
    "wall times that do not match the history": (
        _patched(a=_set("outputs.metric_times", {"loss": [0.5]})),
        ["outputs", "metric_times['loss']", "times for"],
    ),
    "a wall time that is not a number": (
        _patched(a=_set("outputs.metric_times", {"loss": ["soon"]})),
        ["outputs.metric_times.loss[0]"],
    ),
    "non-object top level": (lambda d: _json([d]), ["top level must be a JSON object"]),
    "empty file": (lambda d: b"", ["invalid JSON"]),
    "huge file over 8 MiB": (_huge_padding, [f"limit is {MAX_MANIFEST_BYTES}"]),
    # terminal escape sequences where a label is printed (titles, tables)
    "OSC escape in name": (
        _patched(a=_set("name", "resnet\x1b]0;owned\x07")),
        ["name", "control characters"],
    ),
    "CSI line erase in a tag": (
        _patched(a=_set("tags.team", "vision\x1b[2K\rsafe")),
        ["tags.team", "control characters"],
    ),
    "carriage return in branch": (
        _patched(a=_set("code.branch", "main\rrelease")),
        ["code.branch", "control characters"],
    ),
    "backspaces in hostname": (
        _patched(a=_set("environment.hostname", "gpu01\x08\x08\x08evil")),
        ["environment.hostname", "control characters"],
    ),
}

# Accepted by ingest (a manifest records what was), refused when a replay would act on
# them: variables that run code through an innocent command.  name -> (env, variable named)
HOSTILE_ENV: dict[str, tuple[dict[str, str], str]] = {
    "PYTHONWARNINGS + BROWSER": ({"PYTHONWARNINGS": "ignore::x", "BROWSER": "sh -c id"}, "BROWSER"),
    "PYTHONINSPECT": ({"PYTHONINSPECT": "1"}, "PYTHONINSPECT"),
    "GCONV_PATH": ({"GCONV_PATH": "/tmp/g"}, "GCONV_PATH"),
    "PERL5OPT": ({"PERL5OPT": "-Mevil"}, "PERL5OPT"),
    "NODE_OPTIONS": ({"NODE_OPTIONS": "--require /tmp/x.js"}, "NODE_OPTIONS"),
    "PYTHONUSERBASE": ({"PYTHONUSERBASE": "/tmp/u"}, "PYTHONUSERBASE"),
    "NCCL_NET_PLUGIN": ({"NCCL_NET_PLUGIN": "/tmp/libx.so"}, "NCCL_NET_PLUGIN"),
    "PYTORCH_KERNEL_CACHE_PATH": ({"PYTORCH_KERNEL_CACHE_PATH": "/tmp/k"}, "PYTORCH_"),
    "LD_AUDIT": ({"LD_AUDIT": "/tmp/a.so"}, "LD_AUDIT"),
    "BASH_ENV": ({"BASH_ENV": "/tmp/rc"}, "BASH_ENV"),
    "JAVA_TOOL_OPTIONS": ({"JAVA_TOOL_OPTIONS": "-javaagent:/tmp/a.jar"}, "JAVA_TOOL_OPTIONS"),
    "GIT_SSH_COMMAND": ({"GIT_SSH_COMMAND": "sh -c id"}, "GIT_SSH_COMMAND"),
}

# Accepted by ingest (argv and URLs are free text), printed escaped everywhere.
HOSTILE_TEXT: dict[str, tuple[str, str]] = {
    "CSI erase + CR in argv": ("argv.2", "--lr=1\x1b[2K\rpython3 train.py"),
    "OSC 52 clipboard write in argv": ("argv.2", "\x1b]52;c;cm0gLXJmIH4=\x07"),
    "C1 CSI in argv": ("argv.2", "\x9b2Jx"),
    "bidi override in argv": ("argv.2", "safe\u202etxt.exe"),
    "escape in repo_url": ("code.repo_url", "https://example.invalid/\x1b[31mx.git"),
}


@pytest.fixture
def populated_store(store_path: Path, make_manifest: MakeManifest, tmp_path: Path) -> Path:
    """A store file that already holds one valid run, closed (WAL checkpointed)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(make_manifest(index=999)))
    with RunStore(store_path) as store:
        m = parse_manifest(good.read_bytes())
        store.ingest(m)
    return store_path


def test_wall_times_are_optional_and_leave_older_hashes_alone(make_manifest: MakeManifest) -> None:
    """A manifest without ``metric_times`` seals to the bytes it sealed to before the
    field existed (it is left out of the JSON when empty); one with it keeps it."""
    d = make_manifest(index=3)
    assert "metric_times" not in d["outputs"]
    m = manifest_from_data(d)
    assert "metric_times" not in m.body()["outputs"]
    assert b"metric_times" not in canonical_json(m.body())
    assert b"metric_nonfinite" not in canonical_json(m.body())
    n = len(d["outputs"]["metric_history"]["loss"])
    d["outputs"]["metric_times"] = {"loss": [0.5 * i for i in range(n)]}
    timed = manifest_from_data(d)
    assert timed.outputs.metric_times["loss"][-1] == 0.5 * (n - 1)
    assert timed.body()["outputs"]["metric_times"] == d["outputs"]["metric_times"]
    assert timed.compute_sha256() != m.compute_sha256()


def test_there_are_at_least_twenty_hostile_cases() -> None:
    assert len(HOSTILE) >= 20


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_manifest_is_refused_and_store_unchanged(
    case: str, populated_store: Path, tmp_path: Path, cli: RunCli
) -> None:
    build, expected = HOSTILE[case]
    raw = build(realistic_manifest(1))
    bad = tmp_path / "incoming" / "hostile.json"
    bad.parent.mkdir()
    bad.write_bytes(raw)
    before = store_fingerprint(populated_store)

    proc = cli("ingest", bad)

    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    message = proc.stderr
    first = message.splitlines()[0]
    assert first.startswith(f"error: {bad}"), first[:300]
    for part in expected:
        assert part in first, (part, first[:500])
    assert "nothing was stored" in message
    assert len(message) < 4000, "the message should be short even for a huge input"
    assert store_fingerprint(populated_store) == before
    with RunStore(populated_store) as store:
        assert store.count_runs() == 1
        assert len(store.events()) == 1


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_manifest_is_refused_by_the_parser(case: str) -> None:
    """Same cases through the library: a ManifestError (never another exception)."""
    build, expected = HOSTILE[case]
    raw = build(realistic_manifest(1))
    with pytest.raises(ManifestError) as err:
        parse_manifest(raw, source="in.json")
    assert str(err.value).startswith("in.json")
    for part in expected:
        assert part in str(err.value)


@pytest.mark.parametrize("case", list(HOSTILE_ENV))
def test_hostile_env_is_stored_but_a_replay_refuses_it(case: str) -> None:
    from replay_tui.errors import BadInput
    from replay_tui.replay.plan import ReplayOptions, make_plan

    env, named = HOSTILE_ENV[case]
    d = realistic_manifest(1)
    d["env"] = {**d["env"], **env}
    m = parse_manifest(_json(d), source="in.json")  # a manifest may record it...
    for backend, image in (("docker", True), ("local", False)):
        with pytest.raises(BadInput) as err:  # ...a replay never passes it on
            make_plan(
                m,
                ReplayOptions(backend=backend),
                data_locations={},
                host_has_gpu=True,
                needs_image=image,
            )
        assert named in err.value.message and "does not pass on" in err.value.message


@pytest.mark.parametrize("case", list(HOSTILE_TEXT))
def test_hostile_text_is_printed_escaped(
    case: str, store_path: Path, tmp_path: Path, cli: RunCli
) -> None:
    field, value = HOSTILE_TEXT[case]
    d = realistic_manifest(1)
    d = json.loads(_patched(a=_set(field, value))(d))
    f = tmp_path / "in.json"
    f.write_text(json.dumps(d))
    assert cli("ingest", f).returncode == 0
    for args in (("show", d["run_id"]), ("runs",), ("runs", "--wide")):
        out = cli(*args).stdout
        assert not any(c in out for c in "\x1b\x07\x9b\r\u202e"), (args, out[-400:])
    assert escape_control(value) in cli("show", d["run_id"]).stdout


def test_hostile_json_output_mode(populated_store: Path, tmp_path: Path, cli: RunCli) -> None:
    bad = tmp_path / "bad.json"
    d = realistic_manifest(1)
    d["code"]["commit"] = "abc"
    bad.write_text(json.dumps(d))
    proc = cli("ingest", "--json", bad)
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["ingested"] == []
    assert out["errors"] and str(bad) in out["errors"][0]
    assert "code.commit" in out["errors"][0]


def test_one_bad_file_stores_nothing_from_the_batch(
    populated_store: Path, tmp_path: Path, cli: RunCli, make_manifest: MakeManifest
) -> None:
    good1, good2, bad = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    good1.write_text(json.dumps(make_manifest()))
    good2.write_text(json.dumps(make_manifest()))
    bad.write_text(json.dumps(make_manifest(status="exploded")))
    before = store_fingerprint(populated_store)
    proc = cli("ingest", good1, bad, good2)
    assert proc.returncode == 2
    assert f"error: {bad} status" in proc.stderr
    assert str(good1) not in proc.stderr
    assert store_fingerprint(populated_store) == before


def test_unreadable_and_missing_files_are_refused(
    populated_store: Path, tmp_path: Path, cli: RunCli
) -> None:
    missing = tmp_path / "nope.json"
    before = store_fingerprint(populated_store)
    proc = cli("ingest", missing)
    assert proc.returncode == 2
    assert f"{missing}: cannot read" in proc.stderr
    proc = cli("ingest", tmp_path)  # a directory
    assert proc.returncode == 2
    assert store_fingerprint(populated_store) == before


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_endless_input_is_refused_without_reading_it_all(
    populated_store: Path, cli: RunCli
) -> None:
    before = store_fingerprint(populated_store)
    proc = cli("ingest", "/dev/zero")  # would never end (or exhaust memory) if read whole
    assert proc.returncode == 2
    # refused as a device by the door, before a byte is read
    assert "/dev/zero: manifest is not a regular file" in proc.stderr
    assert store_fingerprint(populated_store) == before


def test_valid_manifest_is_accepted_by_the_cli(
    populated_store: Path, tmp_path: Path, cli: RunCli, make_manifest: MakeManifest
) -> None:
    data = make_manifest()
    f = tmp_path / "ok.json"
    f.write_text(json.dumps(seal(data), indent=2))
    proc = cli("ingest", f)
    assert proc.returncode == 0, proc.stderr
    assert data["run_id"] in proc.stdout and "stored" in proc.stdout
    with RunStore(populated_store) as store:
        assert store.count_runs() == 2
        assert store.manifest(data["run_id"]) == RunManifest.model_validate(seal(data))


def test_runs_ingest_reads_with_the_collector_paused_and_turns_it_back_on(
    tmp_path: Path, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every manifest read is kept until the batch is stored, so the cyclic collector is
    off while they are read (it would walk all of them again and again), and back on
    after, whether the files were stored or refused."""
    import gc

    import replay_tui.cli.runs as runs_module
    from replay_tui.cli.runs import ingest_files

    files = []
    for i in range(70):
        f = tmp_path / f"{i:03d}.json"
        f.write_text(manifest_from_data(realistic_manifest(i, seed=17)).sealed().to_json())
        files.append(f)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**seal(realistic_manifest(99, seed=17)), "status": "lost"}))
    collecting: list[bool] = []
    real = runs_module.parse_manifest

    def watched(raw: bytes, *, source: str = "") -> RunManifest:
        collecting.append(gc.isenabled())
        return real(raw, source=source)

    monkeypatch.setattr(runs_module, "parse_manifest", watched)
    gc.enable()  # as a process starts (an app test that failed half-way may leave it off)
    with RunStore(store_path) as store:
        results, errors = ingest_files(store, [*files, bad])
        assert results == [] and len(errors) == 1 and "bad.json" in errors[0]
        assert store.count_runs() == 0
        assert gc.isenabled()
        results, errors = ingest_files(store, files)
        assert errors == [] and [r.created for r in results] == [True] * 70
        assert store.count_runs() == 70
    assert gc.isenabled()
    assert collecting == [False] * (71 + 70)
