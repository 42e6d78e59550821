"""The one way a typed result becomes JSON and comes back: frozen dataclasses that inherit
``Wire`` get ``to_dict`` and ``from_dict`` from their fields' types and a little metadata.

Stored bodies, ``--json`` output and bundle members are all built from these models by
this module, so there is one convention:

- a field's key is its name, unless ``wire(key=...)`` names another;
- a float that is not finite is written as the string ``"inf"``, ``"-inf"`` or ``"nan"``
  (strict JSON has none) and read back from it;
- a ``pathlib.Path`` is written as its string and read back from one;
- tuples and lists are JSON arrays, mappings are objects, nested ``Wire`` models are
  objects; a ``wire(omit=...)`` field is left out when it is None, empty or its default;
- ``WIRE_EXTRA`` names derived properties written for the reader and never read back;
- reading checks every value against its field's type (``Literal`` choices included) and
  refuses a bad one with ``ValueError`` naming where it was (``noise.endpoints[2].mean``);
  an absent key takes the field's default, or is refused when the field has none.

A field whose stored form is not its Python form (a compact table of points, a lenient
legacy reading) names its own ``encode``/``decode`` in ``wire()``: the exception is
written beside the field, and the rest stays the rule.  Stored bodies are canonical JSON
(sorted keys), so the order ``to_dict`` gives keys changes no stored byte.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import types
import typing
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

Omit = Literal["none", "empty", "default", "always"]
"""When ``to_dict`` leaves a field out: it is None; it is None or empty; it equals its
default; always (a field held in memory only, never written and read as its default)."""

_META = "replay_tui.wire"
T = TypeVar("T", bound="Wire")


@dataclasses.dataclass(frozen=True)
class _Spec:
    key: str | None = None
    omit: Omit | None = None
    encode: Callable[[Any], Any] | None = None
    decode: Callable[[Any, str], Any] | None = None
    inline: bool = False


def wire(
    *,
    key: str | None = None,
    omit: Omit | None = None,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any, str], Any] | None = None,
    inline: bool = False,
) -> dict[str, Any]:
    """Field metadata: ``field(default=None, metadata=wire(omit="none"))``.

    ``encode(value)`` gives the stored form (plain JSON); ``decode(stored, where)`` reads
    it back and raises ``ValueError`` naming ``where`` for a bad one.  An ``inline``
    field's keys sit in the enclosing object: its written form (an object) is merged
    into it, and it is read from the enclosing object itself."""
    return {_META: _Spec(key, omit, encode, decode, inline)}


def json_float(x: float | None) -> float | str | None:
    """Strict JSON has no inf/nan: those become the strings "inf", "-inf", "nan"."""
    if x is None or math.isfinite(x):
        return x
    return str(x)


def read_float(v: object, where: str) -> float:
    """A float from JSON: a number, or the strings "inf", "-inf", "nan"."""
    if isinstance(v, bool):
        raise ValueError(f"{where}: expected a number, got {v!r}")
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    raise ValueError(f"{where}: expected a number, got {v!r}")


def read_int(v: object, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where}: expected an integer, got {v!r}")
    return v


# -- writing ---------------------------------------------------------------------------


def dump(value: Any) -> Any:
    """``value`` as plain JSON: Wire models by their fields, floats strict, paths as
    their strings."""
    if isinstance(value, Wire):
        return value.to_dict()
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [dump(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        raise TypeError(f"{type(value).__name__} is a dataclass that does not inherit Wire")
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _omitted(spec: _Spec, f: dataclasses.Field[Any], v: Any) -> bool:
    if spec.omit is None:
        return False
    if spec.omit == "always":
        return True
    if spec.omit == "none":
        return v is None
    if spec.omit == "empty":
        return v is None or (isinstance(v, Sized) and len(v) == 0)
    return bool(v == _default_of(f))


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


# -- reading ---------------------------------------------------------------------------


def load(tp: Any, v: Any, where: str) -> Any:
    """``v`` (plain JSON) read as ``tp``, every value checked; ``ValueError`` names
    ``where`` a bad one was."""
    if tp is Any or tp is object:
        return v
    origin = get_origin(tp)
    if origin is Union or origin is types.UnionType:
        args = get_args(tp)
        if v is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return load(rest[0], v, where)
        errors = []
        for a in rest:
            try:
                return load(a, v, where)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(errors[0] if errors else f"{where}: unexpected {v!r}")
    if origin is Literal:
        allowed = get_args(tp)
        if v not in allowed or isinstance(v, bool) != any(isinstance(a, bool) for a in allowed):
            shown = ", ".join(str(a) for a in allowed)
            raise ValueError(f"{where}: expected one of {shown}, got {v!r}")
        return v
    if origin in (tuple, list, Sequence, typing.Sequence):
        if not isinstance(v, list):
            raise ValueError(f"{where}: expected a list, got {type(v).__name__}")
        args = get_args(tp)
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            if len(v) != len(args):
                raise ValueError(f"{where}: expected {len(args)} items, got {len(v)}")
            return tuple(
                load(a, x, f"{where}[{i}]") for i, (a, x) in enumerate(zip(args, v, strict=True))
            )
        item = args[0] if args else Any
        out = [load(item, x, f"{where}[{i}]") for i, x in enumerate(v)]
        return out if origin is list else tuple(out)
    if origin in (dict, Mapping, typing.Mapping):
        if not isinstance(v, Mapping):
            raise ValueError(f"{where}: expected an object, got {type(v).__name__}")
        args = get_args(tp)
        val = args[1] if len(args) == 2 else Any
        out_d: dict[str, Any] = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: a key is not a string: {k!r}")
            out_d[k] = load(val, x, f"{where}.{k}")
        return out_d
    if isinstance(tp, type) and issubclass(tp, Wire):
        if not isinstance(v, Mapping):
            raise ValueError(f"{where}: expected an object, got {type(v).__name__}")
        return tp.from_dict(v, where)
    if tp is float:
        return read_float(v, where)
    if tp is bool:
        if not isinstance(v, bool):
            raise ValueError(f"{where}: expected true or false, got {v!r}")
        return v
    if tp is int:
        return read_int(v, where)
    if tp is str:
        if not isinstance(v, str):
            raise ValueError(f"{where}: expected a string, got {v!r}")
        return v
    if tp is pathlib.Path:
        if not isinstance(v, str):
            raise ValueError(f"{where}: expected a path, got {v!r}")
        return pathlib.Path(v)
    raise TypeError(f"{where}: no reading for the type {tp!r}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


class Wire:
    """A frozen dataclass that writes and reads itself by ``storage.wire``'s one rule."""

    WIRE_EXTRA: ClassVar[tuple[str, ...]] = ()
    """Derived properties ``to_dict`` writes too (for a reader of the JSON); never read.
    A name that is a method is written as what it returns (called without arguments)."""
    WIRE_ORDER: ClassVar[tuple[str, ...]] = ()
    """The keys ``to_dict`` writes first, in this order (extras among the fields, as
    ``--json`` has always printed them); the rest follow, fields then extras."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f, spec in _fields(type(self)):
            v = getattr(self, f.name)
            if _omitted(spec, f, v):
                continue
            written = spec.encode(v) if spec.encode else dump(v)
            if spec.inline:
                out.update(written)
            else:
                out[spec.key or f.name] = written
        for name in self.WIRE_EXTRA:
            v = getattr(self, name)
            out[name] = dump(v() if callable(v) else v)  # a method is written as its value
        if self.WIRE_ORDER:
            out = {k: out[k] for k in self.WIRE_ORDER if k in out} | out
        return out

    @classmethod
    def from_dict(cls: type[T], d: Mapping[str, Any], where: str = "") -> T:
        if not isinstance(d, Mapping):
            raise ValueError(f"{where or cls.__name__}: expected an object, got {type(d).__name__}")
        hints = _hints(cls)
        kwargs: dict[str, Any] = {}
        for f, spec in _fields(cls):
            if spec.omit == "always":
                continue
            if spec.inline:
                kwargs[f.name] = (
                    spec.decode(d, where) if spec.decode else load(hints[f.name], d, where)
                )
                continue
            key = spec.key or f.name
            at = _join(where, key)
            if key not in d:
                if _default_of(f) is dataclasses.MISSING:
                    raise ValueError(f"{at}: missing")
                continue
            raw = d[key]
            kwargs[f.name] = spec.decode(raw, at) if spec.decode else load(hints[f.name], raw, at)
        return cls(**kwargs)


_FIELDS: dict[type, tuple[tuple[dataclasses.Field[Any], _Spec], ...]] = {}
_HINTS: dict[type, dict[str, Any]] = {}
_PLAIN = _Spec()


def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], _Spec], ...]:
    got = _FIELDS.get(cls)
    if got is None:
        got = tuple((f, f.metadata.get(_META, _PLAIN)) for f in dataclasses.fields(cls) if f.init)
        _FIELDS[cls] = got
    return got


def _hints(cls: type) -> dict[str, Any]:
    got = _HINTS.get(cls)
    if got is None:
        got = typing.get_type_hints(cls)
        _HINTS[cls] = got
    return got
