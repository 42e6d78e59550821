"""The fast canonical JSON is byte-for-byte the RFC 8785 reference, or falls back to it."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import struct
from typing import Any

import pytest
import rfc8785

from storage import canonical
from tests.support.factories import realistic_manifest

EDGE_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.1,
    1e-4,
    9.999e-5,
    1e-6,
    1e-7,
    1.5e-7,
    123456789.0,
    2.0**53,
    2.0**53 + 2,
    -(2.0**53),
    1e15,
    1e16,
    9.999999999999998e15,
    1e20,
    1e21,
    1.7976931348623157e308,
    5e-324,
    2.2250738585072014e-308,
    0.3,
    1 / 3,
    100.0,
    1e-5,
    4.35e-5,
    333333333.3333333,
]


def random_double(rnd: random.Random) -> float:
    while True:
        (x,) = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))
        if math.isfinite(x):
            return x


KEYS = ("a", "B", "é", "€", "😀", "\ue000", "aa", "a\x00", "10", "9")
"""The keys of ``random_value``'s objects by default (a number is added to each)."""
BMP_KEYS = ("a", "B", "é", "€", "\ue000", "aa", "a\x00", "10", "9", '1.0"', "\\")
"""Keys without characters outside the BMP, some of them shaped like JSON numbers."""


def random_value(
    rnd: random.Random,
    depth: int = 0,
    *,
    chars: str = 'ab"\\\n\t\x01\x7fé€😀\u2028',
    length: int | None = None,
    keys: tuple[str, ...] = KEYS,
) -> Any:
    """A random JSON document drawn from ``rnd``: numbers (edge floats among them),
    strings of ``chars`` (``length`` long, or shorter than eight when None), literals, and
    arrays and objects (keyed from ``keys``) nested at most four deep."""

    def inner() -> Any:
        return random_value(rnd, depth + 1, chars=chars, length=length, keys=keys)

    kind = rnd.randrange(9 if depth < 4 else 5)
    if kind == 0:
        return random_double(rnd)
    if kind == 1:
        return rnd.choice(EDGE_FLOATS) * rnd.choice([1, -1])
    if kind == 2:
        return rnd.randrange(-(2**53) + 1, 2**53)
    if kind == 3:
        n = rnd.randrange(8) if length is None else length
        return "".join(rnd.choice(chars) for _ in range(n))
    if kind == 4:
        return rnd.choice([True, False, None])
    if kind in (5, 6):
        return [inner() for _ in range(rnd.randrange(5))]
    return {rnd.choice(keys) + str(i): inner() for i in range(rnd.randrange(5))}


@pytest.mark.parametrize("x", EDGE_FLOATS)
def test_edge_floats_match_reference(x: float) -> None:
    for v in (x, -x, [x], {"k": x}):
        assert canonical.dumps(v) == rfc8785.dumps(v)


def test_random_documents_match_reference() -> None:
    rnd = random.Random(8785)
    for _ in range(3000):
        v = random_value(rnd)
        assert canonical.dumps(v) == rfc8785.dumps(v), v


def test_random_doubles_match_reference() -> None:
    rnd = random.Random(1)
    values = [random_double(rnd) for _ in range(50_000)]
    assert canonical.dumps(values) == rfc8785.dumps(values)


def test_realistic_manifests_match_reference() -> None:
    for i in range(50):
        d = realistic_manifest(i)
        assert canonical.dumps(d) == rfc8785.dumps(d)


def test_placeholder_lookalike_strings_fall_back_correctly() -> None:
    v = {"s": "\x00\x011\x00", "f": 1e-7, "g": [2e-9, "\x00\x010\x00"]}
    assert canonical.dumps(v) == rfc8785.dumps(v)


def test_errors_are_the_reference_errors() -> None:
    for bad in (float("nan"), 2**60, {"k": "\ud800"}):
        with pytest.raises(rfc8785.CanonicalizationError):
            canonical.dumps(bad)
        with pytest.raises(rfc8785.CanonicalizationError):
            rfc8785.dumps(bad)


def _no_slow_path(*_: Any) -> bytes:
    raise AssertionError("the slow path was taken")


def test_realistic_manifests_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(canonical, "_dumps_walk", _no_slow_path)
    for i in range(20):
        d = realistic_manifest(i)
        d["config"]["extra"] = [1.0, -0.0, 1e16, 1.5e-6, 1e-7, 1e21, 3.0e20, 1e-5, 2.5]
        assert canonical.dumps(d) == rfc8785.dumps(d)


NUMBER_LOOKALIKES = [
    'a":1.0,"b',
    "x,1.0]",
    ":-0.0}",
    "[1e+16,",
    "1.5e-6",
    '\\":2.0,',
    '\\\\":3.0,',
    '\\\\\\":4.0,',
    "\\",
    '"',
    ",1e-6]",
]


def test_number_lookalikes_inside_strings_are_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(canonical, "_dumps_walk", _no_slow_path)
    for s in NUMBER_LOOKALIKES:
        v: Any
        for v in (
            {"k": s, "n": 1.0, "e": 1e16},
            {s: 2.0, "z": [s, 1e-6, s, 0.0]},
            [s, 5.0, {"q": s}, 1e20, s],
            {"a": [s] * 3, "b": -0.0, "c": s + s, "d": 1.5e-6},
        ):
            assert canonical.dumps(v) == rfc8785.dumps(v), v


def test_values_after_keys_ending_in_any_delimiter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A number right after a key is fixed without counting quotes unless the key's last
    character could open a string or escape its quote: each such key, and the empty key."""
    monkeypatch.setattr(canonical, "_dumps_walk", _no_slow_path)
    for end in ["", ":", ",", "[", "{", "\\", '"', "a", "1", "]", "}"]:
        for tail in ["", 'x":1.0,', "[2.0,"]:
            v = {f"k{end}": 1.0, end: [3.0, tail, 1e16], f"{tail}{end}": {end: -0.0}}
            assert canonical.dumps(v) == rfc8785.dumps(v), v


def test_control_characters_match_reference() -> None:
    s = "".join(chr(i) for i in range(0x20)) + '\x7f"\\/\u2028é€'
    v: Any
    for v in ({"s": s}, [s, 1.0], {s: s}):
        assert canonical.dumps(v) == rfc8785.dumps(v)


def test_random_bmp_documents_match_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Like the random documents above but without characters outside the BMP, so they
    go through the fast path (numbers fixed up in the output); the few whose random bytes
    look like a non-finite double to the marshal check take the exact path."""
    slow: list[Any] = []
    exact = canonical._dumps_walk

    def counted(v: Any) -> bytes:
        slow.append(v)
        return exact(v)

    monkeypatch.setattr(canonical, "_dumps_walk", counted)
    rnd = random.Random(1785)

    for _ in range(3000):
        v = {
            "v": random_value(
                rnd, chars='ab"\\\n\t\x01\x7fé€:,[]1.0e-\u2028', length=9, keys=BMP_KEYS
            )
        }
        assert canonical.dumps(v) == rfc8785.dumps(v), v
    assert len(slow) < 60, len(slow)


def test_non_finite_and_tuples_inside_documents() -> None:
    for bad in ({"a": [1, {"b": float("nan")}]}, [float("inf")], {"x": -float("inf")}):
        with pytest.raises(rfc8785.CanonicalizationError):
            canonical.dumps(bad)
    v = {"t": (1, 2.0, (3.5, 1e-7)), "l": [(), (1e16,)]}
    assert canonical.dumps(v) == rfc8785.dumps(v)


def test_sealing_matches_the_reference() -> None:
    from storage.manifest import manifest_from_data

    for i in range(10):
        d = realistic_manifest(i)
        if i % 2:
            d["integrity"] = {"signature": "sig-" + str(i)}
        m = manifest_from_data(d)
        sealed, sha, full = m.sealed_json()
        dump = m.model_dump(mode="json")
        body = {k: v for k, v in dump.items() if k != "integrity"}
        assert sha == hashlib.sha256(rfc8785.dumps(body)).hexdigest()
        dump["integrity"]["manifest_sha256"] = sha
        assert full.encode() == rfc8785.dumps(dump)
        assert sealed.integrity.manifest_sha256 == sha == sealed.compute_sha256()


@pytest.mark.parametrize(
    "doc",
    [
        {"i": {"h": None}},
        {"a": 1.0, "i": {"h": None, "s": "x"}},
        {"i": {"h": None}, "z": [1e16, "\\"]},
        {"a": {"i": 2}, "i": {"h": "old"}, "z": {"i": {"h": 3}}},
        {"😀": 1, "i": {"h": None}},
    ],
)
def test_dumps_sealed_cuts_the_member_wherever_it_sits(doc: dict[str, Any]) -> None:
    digest, full = canonical.dumps_sealed(doc, "i", "h")
    body = {k: v for k, v in doc.items() if k != "i"}
    assert digest == hashlib.sha256(rfc8785.dumps(body)).hexdigest()
    assert full == rfc8785.dumps({**doc, "i": {**doc["i"], "h": digest}})


def test_history_json_is_the_json_module_text() -> None:
    from storage.ledger import event_hash
    from storage.records import history_json

    rnd = random.Random(7)
    for _ in range(2000):
        pts = [
            (rnd.randrange(-(2**53) + 1, 2**53), rnd.choice([*EDGE_FLOATS, random_double(rnd)]))
            for _ in range(rnd.randrange(4))
        ]
        pts += [(k, round(rnd.gauss(0, 3), rnd.randrange(8))) for k in range(20)]
        assert history_json(pts) == json.dumps(pts, separators=(",", ":"))
    for bad in ([(1, float("nan"))], [(2**70, 1.0)]):
        assert history_json(bad) == json.dumps(bad, separators=(",", ":"))
    payload = json.dumps([3, "t", "k", "é", None, "p"], separators=(",", ":"), ensure_ascii=True)
    assert event_hash(3, "t", "k", "é", None, "p") == hashlib.sha256(payload.encode()).hexdigest()


def test_types_orjson_knows_but_json_has_not_behave_as_the_reference() -> None:
    import dataclasses
    import datetime
    import enum
    import uuid

    class Colour(enum.Enum):
        RED = 1

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        pass

    @dataclasses.dataclass
    class Point:
        x: int

    odd: list[Any] = [
        Colour.RED,
        Level.HIGH,
        Name("n"),
        uuid.UUID(int=7),
        Point(1),
        datetime.datetime(2026, 1, 1),
        {"k": Name("v")},
        (1, 2.5),
        {1, 2},
        b"raw",
    ]
    for item in odd:
        v = {"a": [item], "b": 1.0}
        try:
            want: bytes | type[BaseException] = rfc8785.dumps(v)
        except Exception as e:
            want = type(e)
        try:
            got: bytes | type[BaseException] = canonical.dumps(v)
        except Exception as e:
            got = type(e)
        assert got == want, item


def test_es_float_is_the_reference_routine() -> None:
    import io

    from rfc8785._impl import _serialize_float

    rnd = random.Random(12)
    values = [*EDGE_FLOATS, *(random_double(rnd) for _ in range(20_000))]
    values += [rnd.uniform(-1e22, 1e22) for _ in range(2000)]
    values += [float(rnd.randrange(-(2**60), 2**60)) for _ in range(2000)]
    values += [10.0**e for e in range(-330, 309)] + [5e-324, 1e-7, 9.999999e-7, 1e21]
    for x in values:
        for v in (x, -x):
            sink = io.BytesIO()
            _serialize_float(v, sink)
            assert canonical._es_float(v) == sink.getvalue().decode("ascii"), v


def test_model_json_data_is_plain_json_and_seals_as_the_reference() -> None:
    """dumps_data (sealing) leaves out the odd-type and NaN checks because pydantic's
    model_dump(mode="json") never returns them: checked here for every odd value, and
    the sealed bytes (or the error) are the reference's."""
    import dataclasses
    import datetime
    import decimal
    import enum
    import uuid

    from storage.manifest import manifest_from_data

    class Colour(enum.Enum):
        RED = "red"

    class Level(enum.IntEnum):
        HIGH = 3

    class Name(str):
        pass

    class Real(float):
        pass

    @dataclasses.dataclass
    class Point:
        x: int

    odd: list[Any] = [
        float("nan"),
        float("inf"),
        -float("inf"),
        Colour.RED,
        Level.HIGH,
        Name("n"),
        Real(1.5),
        Real(2.0),
        uuid.UUID(int=7),
        Point(1),
        datetime.datetime(2026, 1, 1),
        decimal.Decimal("1.5"),
        (1, 2.5),
        {1, 2},
        b"raw",
        2**70,
        2**53 + 1,
        "\ud800",
        "😀",
        {"😀": 1.0, "\ue000": 2.0},
        [1e-7, 1e21, -0.0, 1.0],
    ]

    def plain(v: Any) -> bool:
        t = type(v)
        if t is dict:
            return all(type(k) is str and plain(x) for k, x in v.items())
        if t is list:
            return all(plain(x) for x in v)
        return t in (str, int, bool, type(None)) or (t is float and math.isfinite(v))

    m = manifest_from_data(realistic_manifest(3))
    for item, given in itertools.product(odd, (None, "0" * 64)):
        config = {"a": [item], "b": 1.0, "c": {"d": item}}
        bad = m.model_copy(update={"config": config, "config_hash": given})
        dump = bad.model_dump(mode="json")
        assert plain(dump), item
        body = {k: v for k, v in dump.items() if k != "integrity"}
        try:
            if given is None:
                body["config_hash"] = hashlib.sha256(rfc8785.dumps(config)).hexdigest()
            sha = hashlib.sha256(rfc8785.dumps(body)).hexdigest()
            sealed = {**body, "integrity": {**dump["integrity"], "manifest_sha256": sha}}
            want: Any = (sha, rfc8785.dumps(sealed).decode("utf-8"), body["config_hash"])
        except Exception as e:
            want = type(e)
        try:
            got: Any = bad.seal()
        except Exception as e:
            got = type(e)
        assert got == want, item
