"""storage.wire: the one rule by which typed results become JSON and come back."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from storage.canonical import dumps
from storage.wire import Wire, wire


@dataclass(frozen=True)
class Point(Wire):
    step: int
    value: float | None


@dataclass(frozen=True)
class Result(Wire):
    WIRE_EXTRA = ("ok",)

    name: str
    status: Literal["ok", "outside"]
    spread: float
    points: tuple[Point, ...] = ()
    by_metric: dict[str, float] = field(default_factory=dict)
    note: str | None = field(default=None, metadata=wire(omit="none"))
    renamed: int = field(default=0, metadata=wire(key="n", omit="default"))

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def test_round_trip_and_strict_floats() -> None:
    r = Result("loss", "ok", math.inf, (Point(1, math.nan), Point(2, None)), {"a": -math.inf})
    d = r.to_dict()
    assert d == {
        "name": "loss",
        "status": "ok",
        "spread": "inf",
        "points": [{"step": 1, "value": "nan"}, {"step": 2, "value": None}],
        "by_metric": {"a": "-inf"},
        "ok": True,
    }
    dumps(d)  # strict JSON: no inf or nan left
    back = Result.from_dict(d)
    assert back.spread == math.inf and back.by_metric["a"] == -math.inf
    assert back.points[0].value is not None and math.isnan(back.points[0].value)
    assert back.points[1] == Point(2, None)


def test_omitted_fields_and_keys() -> None:
    d = Result("x", "outside", 1.0, note="why", renamed=3).to_dict()
    assert d["note"] == "why" and d["n"] == 3 and "renamed" not in d
    assert Result.from_dict(d) == Result("x", "outside", 1.0, note="why", renamed=3)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"status": "ok", "spread": 1.0}, "name: missing"),
        ({"name": "x", "status": "maybe", "spread": 1.0}, "status: expected one of ok, outside"),
        ({"name": "x", "status": "ok", "spread": True}, "spread: expected a number"),
        (
            {"name": "x", "status": "ok", "spread": 1, "points": [{"step": "1", "value": 0}]},
            r"points\[0\]\.step: expected an integer",
        ),
        (
            {"name": "x", "status": "ok", "spread": 1, "by_metric": []},
            "by_metric: expected an object",
        ),
    ],
)
def test_bad_values_are_refused_with_where(body: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Result.from_dict(body)


def test_a_nested_where_names_the_path() -> None:
    with pytest.raises(ValueError, match=r"^floor\.points\[1\]\.value: expected a number"):
        Result.from_dict(
            {
                "name": "x",
                "status": "ok",
                "spread": 1,
                "points": [{"step": 1, "value": 1}, {"step": 2, "value": "x"}],
            },
            "floor",
        )


@dataclass(frozen=True)
class Said(Wire):
    WIRE_EXTRA = ("text", "loud")

    word: str

    def text(self) -> str:
        return f"said {self.word}"

    @property
    def loud(self) -> str:
        return self.word.upper()


def test_an_extra_that_is_a_method_is_written_as_its_value() -> None:
    d = Said("hi").to_dict()
    assert d == {"word": "hi", "text": "said hi", "loud": "HI"}
    assert Said.from_dict(d) == Said("hi")


@dataclass(frozen=True)
class Flat(Wire):
    """A point whose keys sit in its row, a memo never written, and extras placed."""

    WIRE_EXTRA = ("total",)
    WIRE_ORDER = ("name", "total")

    name: str
    point: Point = field(metadata=wire(inline=True))
    memo: str = field(default="", compare=False, metadata=wire(omit="always"))

    @property
    def total(self) -> float:
        return self.point.step + (self.point.value or 0.0)


def test_inline_fields_memos_and_the_written_order() -> None:
    f = Flat("x", Point(2, 0.5), memo="kept in memory")
    d = f.to_dict()
    assert list(d) == ["name", "total", "step", "value"] and d["total"] == 2.5
    back = Flat.from_dict({**d, "memo": "never read"})
    assert back == f and back.memo == ""
    with pytest.raises(ValueError, match=r"^row\.step: expected an integer"):
        Flat.from_dict({"name": "x", "step": "2", "value": 1}, "row")


@dataclass(frozen=True)
class Placed(Wire):
    path: Path
    spare: Path | None = None


def test_a_path_is_written_as_its_string_and_read_back_as_a_path() -> None:
    p = Placed(Path("/tmp/bundle/run.tar"), Path("rel/x"))
    d = p.to_dict()
    assert d == {"path": "/tmp/bundle/run.tar", "spare": "rel/x"}
    back = Placed.from_dict(d)
    assert back == p and isinstance(back.path, Path)
    assert Placed.from_dict({"path": "a", "spare": None}) == Placed(Path("a"))
    with pytest.raises(ValueError, match=r"^out\.path: expected a path, got 3$"):
        Placed.from_dict({"path": 3}, "out")
