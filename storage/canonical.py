"""RFC 8785 (JCS) canonical JSON, fast path through ``orjson``.

The reference implementation (the ``rfc8785`` package) is pure Python and costs about
1 ms per realistic manifest.  ``orjson`` with sorted keys writes the same bytes as JCS
except in three places, each fixed up here or handed to a slower exact path:

- numbers: orjson writes integral doubles with ``.0`` (``3.0``, ``-0.0``) and uses
  exponent form from 1e16 up and below 1e-5, where ECMAScript writes ``3``, ``0``,
  ``10000000000000000`` and ``0.000001``.  The output is searched for such tokens
  (outside strings) and only those are rewritten, by the reference's own float routine
  (``_es_float``); every other double is already printed in the shortest round-trip
  form ECMAScript uses.
- key order is by UTF-16 code units, orjson's by code points: they differ only when a
  character outside the Basic Multilingual Plane is present (a 4-byte UTF-8 sequence).
- orjson writes NaN and infinities as ``null``, and writes some types JSON does not have
  (enums, dataclasses, UUIDs, subclasses).  ``marshal`` accepts only the exact built-in
  types and stores each double's bits, so one ``marshal.dumps`` (in C, faster than
  reading the output back) rules out both.  ``dumps_data``, for pydantic's JSON-mode
  output (sealing a manifest), leaves that check out: such data never holds either.

Anything not on the fast path (a top-level scalar, such a character, an out-of-range
integer, a lone surrogate, a non-finite number, an unusual type) goes through
``_dumps_walk``: the C ``json`` encoder after a Python walk that fixes number formats,
itself falling back to the reference, which then produces the output or raises its
error.  ``tests/storage/test_canonical.py`` checks all of it byte for byte against the reference.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import math
import re
import secrets
from typing import Any

import orjson
import rfc8785

_OPT = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_OPT_DATA = (
    _OPT
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
# Number tokens orjson writes unlike ECMAScript: an integral double (".0" then the end of
# the value) or exponent form.  Both patterns start with a literal, so ``re`` scans fast;
# a hit inside a string is told apart by counting the quotes before it.
_INTEGRAL = re.compile(rb"\.0(?=[,\]}])")
_EXPONENT = re.compile(rb"e[-+][0-9]")
_NUMBER_CHARS = frozenset(b"0123456789.-+e")
_NUMBER = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:e[-+][0-9]+)?")
_OPENERS = frozenset(b"\\:,[{")  # what may stand before an opening or escaped quote
_OUTSIDE_BMP = re.compile(rb"[\xf0-\xf4]")
# A double in marshal's format: type code "g" (0xe7 with its reference flag), then 8
# little-endian bytes; all exponent bits set means NaN or an infinity.  A match inside
# other data only sends the value down the exact path.
_NON_FINITE = re.compile(rb"[g\xe7].{6}[\xf0-\xff][\x7f\xff]", re.DOTALL)

_MAX = 2**53
_MAX_SAFE = _MAX - 1
_ENC = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    sort_keys=True,
    separators=(",", ":"),
    check_circular=False,
)
_MARK = "\x00\x01"
_MARK_JSON = '"\\u0000\\u0001'
_END_JSON = '\\u0000"'


class _Fallback(Exception):
    pass


def written_as_big_integer(f: float) -> bool:
    """Whether the canonical text of the double ``f`` is an integer beyond +-(2**53 - 1):
    ECMAScript writes a whole double below 1e21 without a fraction or an exponent, and
    that text reads back as an integer outside the range a double holds exactly."""
    return _MAX_SAFE < abs(f) < 1e21 and f.is_integer()


def dumps(value: Any) -> bytes:
    """Canonical JSON bytes of ``value`` (identical to ``rfc8785.dumps``)."""
    t = type(value)
    if t is not dict and t is not list:
        return _dumps_walk(value)
    try:
        out = orjson.dumps(value, option=_OPT)
    except (TypeError, ValueError):  # an unsupported type, a big int, a surrogate, depth
        return _dumps_walk(value)
    if not out.isascii() and _OUTSIDE_BMP.search(out):
        return _dumps_walk(value)  # UTF-16 key order may differ from code-point order
    try:
        packed = marshal.dumps(value)  # accepts only the exact built-in types
    except ValueError:  # a subclass, an enum, a dataclass, a UUID...: orjson's own rules
        return _dumps_walk(value)
    if _NON_FINITE.search(packed):
        return _dumps_walk(value)  # NaN or an infinity, which orjson writes as null
    return _fix_numbers(out)


def dumps_data(value: Any) -> bytes:
    """``dumps`` of JSON data as pydantic's ``model_dump(mode="json")`` returns it.

    Such data holds only the exact built-in JSON types and finite doubles (in JSON mode
    pydantic writes NaN and the infinities as None, and enums, UUIDs, subclasses and the
    rest as plain JSON types), so the ``marshal`` check for odd types and non-finite
    doubles is left out: about a third of the cost of a manifest.  Subclasses,
    dataclasses and datetimes would still be refused by orjson (passthrough, no default)
    and take the exact path; anything else orjson writes unlike the reference (an enum,
    a UUID, NaN) must not be passed here.  ``tests/storage/test_canonical.py`` checks both what
    pydantic returns for odd values and the bytes against the reference.
    """
    t = type(value)
    if t is not dict and t is not list:
        return _dumps_walk(value)
    try:
        out = orjson.dumps(value, option=_OPT_DATA)
    except (TypeError, ValueError):  # a big int, a surrogate, depth, a passthrough type
        return _dumps_walk(value)
    if not out.isascii() and _OUTSIDE_BMP.search(out):
        return _dumps_walk(value)
    return _fix_numbers(out)


def _fix_numbers(out: bytes) -> bytes:
    """Rewrite the number tokens orjson formats differently from ECMAScript."""
    hits = [m.start() for m in _INTEGRAL.finditer(out)]
    hits += [m.start() for m in _EXPONENT.finditer(out)]
    if not hits:
        return out
    hits.sort()
    neutral = b""
    escaped = False
    parts: list[bytes] = []
    done = 0  # output copied up to here
    seen = 0  # quotes counted up to here
    quotes = 0
    for pos in hits:
        if pos < done:
            continue  # inside a token already rewritten
        start = pos
        while out[start - 1] in _NUMBER_CHARS:
            start -= 1
        end = pos + 1
        while end < len(out) and out[end] in _NUMBER_CHARS:
            end += 1
        if out[start - 1] not in b":,[" or out[end] not in b",]}":
            continue  # not a whole value: part of a string
        token = out[start:end]
        if not _NUMBER.fullmatch(token):
            continue
        # A value-shaped hit may still sit in a string ("a:1.0,b").  After '":' where that
        # quote follows a character that can neither open a string nor escape the quote,
        # the quote closes a key and the token is its value (an opening quote only ever
        # follows "{", "[", ":" or ",": orjson writes no spaces).  Else count the quotes
        # before it; an escaped backslash pair is blanked first so that every remaining
        # backslash-quote is an escaped quote inside a string.
        if out[start - 1] != 0x3A or out[start - 2] != 0x22 or out[start - 3] in _OPENERS:
            if not neutral:
                escaped = b'\\"' in out  # else every quote opens or closes a string
                neutral = out.replace(b"\\\\", b"__") if escaped else out
            quotes += neutral.count(b'"', seen, pos)
            if escaped:
                quotes -= neutral.count(b'\\"', seen, pos)
            seen = pos
            if quotes & 1:
                continue
        fixed = _es_float(float(token)).encode("ascii")
        if fixed != token:
            parts.append(out[done:start])
            parts.append(fixed)
            done = end
    if not parts:
        return out
    parts.append(out[done:])
    return b"".join(parts)


def _prep(v: Any, rare: list[float]) -> Any:
    t = type(v)
    if t is str or t is bool or v is None:
        return v
    if t is int:
        if not -_MAX < v < _MAX:
            raise _Fallback
        return v
    if t is float:
        if v.is_integer():
            if -_MAX < v < _MAX:
                return int(v)
        elif 1e-4 <= abs(v) < 1e16:
            return v  # repr() here is already the ECMAScript shortest form
        if not math.isfinite(v):
            raise _Fallback
        rare.append(v)
        return f"{_MARK}{len(rare) - 1}\x00"
    if t is dict:
        out = {}
        for k, x in v.items():
            if type(k) is not str or (not k.isascii() and max(k) > "\ud7ff"):
                raise _Fallback
            out[k] = _prep(x, rare)
        return out
    if t is list or t is tuple:
        return [_prep(x, rare) for x in v]
    raise _Fallback


def _es_float(f: float) -> str:
    """ECMAScript's text of a finite double: the reference's ``_serialize_float`` step
    for step, without its byte sink (a quarter of the cost)."""
    if f == 0:
        return "0"
    if f < 0:
        return "-" + _es_float(-f)
    s = repr(f)
    exp_str = ""
    exp = 0
    q = s.find("e")
    if q > 0:
        exp_str = s[q:]
        if exp_str[2:3] == "0":
            exp_str = exp_str[:2] + exp_str[3:]
        s = s[:q]
        exp = int(exp_str[1:])
    first, dot, last = s, "", ""
    q = s.find(".")
    if q > 0:
        dot, first, last = ".", s[:q], s[q + 1 :]
    if last == "0":
        dot = last = ""
    if 0 < exp < 21:
        first += last
        return first + "0" * (exp - len(first) + 1)
    if -7 < exp < 0:
        return "0." + "0" * (-exp - 1) + first + last
    return f"{first}{dot}{last}{exp_str}"


def _dumps_walk(value: Any) -> bytes:
    """The exact slow path: C ``json`` encoder after a Python walk, else the reference."""
    rare: list[float] = []
    try:
        prepped = _prep(value, rare)
    except _Fallback:
        return rfc8785.dumps(value)
    text = _ENC.encode(prepped)
    if rare:
        parts = text.split(_MARK_JSON)
        if len(parts) != len(rare) + 1:
            return rfc8785.dumps(value)  # a real string looked like a placeholder
        out = [parts[0]]
        for p in parts[1:]:
            idx, rest = p.split(_END_JSON, 1)
            out.append(_es_float(rare[int(idx)]))
            out.append(rest)
        text = "".join(out)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return rfc8785.dumps(value)  # lone surrogate: the reference raises its error


def dumps_sealed(
    doc: dict[str, Any], member: str, field: str, *, model_data: bool = False
) -> tuple[str, bytes]:
    """Seal ``doc`` in one pass: ``(digest, canonical bytes)`` where ``digest`` is the
    sha256 (hex) of the canonical JSON of ``doc`` without ``member``, and the bytes are the
    canonical JSON of ``doc`` with ``doc[member][field]`` set to that digest.

    The whole document is canonicalised once with a random 64-hex placeholder in that
    field; the member is cut out for the digest, then the placeholder is overwritten (a
    64-hex string for another never changes the order of anything).  ``model_data``:
    ``doc`` is a ``model_dump(mode="json")``, canonicalised by ``dumps_data``.
    """
    nonce = secrets.token_hex(32).encode("ascii")
    inner = {**doc[member], field: nonce.decode("ascii")}
    full = (dumps_data if model_data else dumps)({**doc, member: inner})
    piece = dumps(member) + b":" + dumps(inner)
    i = full.find(piece)
    if i <= 0 or full.count(nonce) != 1:
        raise ValueError(f"{member!r} is not an object member of the document")
    end = i + len(piece)
    if full[i - 1 : i] == b",":
        body = full[: i - 1] + full[end:]
    elif full[end : end + 1] == b",":
        body = full[:i] + full[end + 1 :]
    else:
        body = full[:i] + full[end:]
    digest = hashlib.sha256(body).hexdigest()
    j = full.index(nonce, i)
    return digest, full[:j] + digest.encode("ascii") + full[j + len(nonce) :]
