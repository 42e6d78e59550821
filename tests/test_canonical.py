"""The fast canonical JSON is byte-for-byte the RFC 8785 reference, or falls back to it."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import pytest
import rfc8785

from storage import canonical
from tests.factories import realistic_manifest

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


def random_value(rnd: random.Random, depth: int = 0) -> Any:
    kind = rnd.randrange(9 if depth < 4 else 5)
    if kind == 0:
        return random_double(rnd)
    if kind == 1:
        return rnd.choice(EDGE_FLOATS) * rnd.choice([1, -1])
    if kind == 2:
        return rnd.randrange(-(2**53) + 1, 2**53)
    if kind == 3:
        return "".join(rnd.choice('ab"\\\n\t\x01\x7fé€😀\u2028') for _ in range(rnd.randrange(8)))
    if kind == 4:
        return rnd.choice([True, False, None])
    if kind in (5, 6):
        return [random_value(rnd, depth + 1) for _ in range(rnd.randrange(5))]
    keys = ["a", "B", "é", "€", "😀", "\ue000", "aa", "a\x00", "10", "9"]
    return {
        rnd.choice(keys) + str(i): random_value(rnd, depth + 1) for i in range(rnd.randrange(5))
    }


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
