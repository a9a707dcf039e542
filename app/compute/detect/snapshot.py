"""A streaming detector's state as bytes: a process that lacks it (a restart, another host) restores it rather than
replaying the rows that built it. Read from a database, so no pickle and no eval: a JSON header (the integers, each
array's typecode and length), then the arrays' raw bytes (every float, so NaN and -0.0 survive bit for bit), zlib
level 1 (a save is on a request's path). Fields are read off the dataclasses' type hints: a new field of a known
kind is saved with no change here, an unknown kind fails at import (never silently dropped), and LAYOUT changes
with them, so another release's state is refused (and rebuilt), never misread.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import math
import sys
import zlib
from array import array
from dataclasses import fields, is_dataclass
from itertools import islice
from typing import Any, NamedTuple, get_args, get_origin, get_type_hints

from app.compute.detect import habits, predictors, state, streaming, surprises, weekly
from app.compute.detect.native import ROOT
from app.compute.detect.state import DetectorState
from app.compute.detect.surprises import Calibration, Tail

FORMAT = 1  # this module's encoding: bump it whenever encode writes anything differently
MAX_BYTES = 1 << 25  # the largest state decode inflates (a full one is a few hundred kB): no zip bomb
# A sorted copy and the ring it sorts: rebuilt by sorting (the same array, and half the bytes) whenever it is exact.
SORTED_FROM = {"errors_sorted": "errors_ring", "ranked": "sizes"}
# A fit and the sorted array its calibration reads: the same object, which the detector updates in place.
RANKED_FOR = {"error_fit": "errors_sorted", "fit": "ranked"}
_CALIBRATION_FLOATS = [name for name, hint in get_type_hints(Calibration).items() if hint is float]
# The one array where NaN means something (a predictor that made no prediction on that row); any other non-finite
# number in a state is damage, and the detector would carry it into every later verdict of its series.
NAN_MEANS_NONE = frozenset({"chooser_ring"})


class SnapshotError(ValueError):
    """The bytes are not a state this release can read (corrupt, truncated, another layout or byte order)."""


class Rows(NamedTuple):  # a list field, saved as one array a column (a tuple's numbers in columns)
    columns: tuple[type, ...]
    tupled: bool


def _kind(hint: Any, default: Any) -> Any:
    """What a field is saved as: int, float, a typecode (an array), Rows, an optional Calibration, a dataclass."""
    if hint is array:
        return default.typecode
    if hint in (int, float) or hint == Calibration | None or is_dataclass(hint):
        return hint
    if get_origin(hint) is list:
        (item,) = get_args(hint)
        tupled = get_origin(item) is tuple
        columns = get_args(item) if tupled else (item,)
        if all(column in (int, float) for column in columns):
            return Rows(columns, tupled)
    raise TypeError(f"app.compute.detect.snapshot cannot save a field of type {hint!r}: teach it, bump FORMAT")


@functools.cache
def _classes_in_source(module_name: str) -> dict[str, ast.ClassDef]:
    """The classes a module's source defines (parsed once: three of the state's dataclasses share one module)."""
    path = ROOT.joinpath(*module_name.split(".")).with_suffix(".py")
    return {node.name: node for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef)}


def _written_hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types as its source writes them. A class compiled by mypyc (app.compute.detect.native)
    keeps only their runtime classes (list for list[float]), so they are read from the source, which is always
    there, and evaluated in the class's module as typing.get_type_hints evaluates postponed annotations."""
    namespace = vars(sys.modules[cls.__module__])
    return {item.target.id: eval(ast.unparse(item.annotation), namespace)  # noqa: S307 - our own source
            for item in _classes_in_source(cls.__module__)[cls.__name__].body
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}


def _schema(cls: type, out: dict[type, list[tuple[str, Any]]]) -> dict[type, list[tuple[str, Any]]]:
    hints, default = _written_hints(cls), cls()
    out[cls] = [(f.name, _kind(hints[f.name], getattr(default, f.name))) for f in fields(cls)]
    for _, kind in out[cls]:
        if is_dataclass(kind) and kind not in out:
            _schema(kind, out)
    return out


SCHEMA = _schema(DetectorState, {})
if set(Calibration._fields) != {"tail", "ranked", "record", *_CALIBRATION_FLOATS} or any(
        hint is not float for hint in get_type_hints(Tail).values()):
    raise TypeError("app.compute.detect.snapshot reads a Calibration as a Tail, its ranks, its record and floats")


def _kind_name(kind: Any) -> str:
    if isinstance(kind, str):
        return f"array {kind}"
    if isinstance(kind, Rows):
        return "rows of " + ", ".join(column.__name__ for column in kind.columns) + (" tuples" if kind.tupled else "")
    return "Calibration | None" if kind == Calibration | None else kind.__name__


def _layout() -> str:
    """Field names and kinds in order, as this module reads them (so the compiled detector's classes, which keep
    no annotations as written, and the plain ones give one layout), the constants that size the state, FORMAT."""
    parts: list[Any] = [FORMAT]
    parts += [[cls.__name__, [[name, _kind_name(kind)] for name, kind in kinds]] for cls, kinds in SCHEMA.items()]
    parts += [[cls.__name__, list(cls._fields)] for cls in (Tail, Calibration)]
    sizes = {surprises: ("WINDOW_ROWS", "RECORD_ROWS", "BINS"), state: ("PREDICTORS",),
             streaming: ("SHORT_ROWS", "LONG_ROWS", "QUIET_ROWS", "WARMUP"), habits: ("MAX_MARKED",),
             predictors: ("LOCAL_ROWS", "CHOOSER_ROWS"), weekly: ("HOUR_BUCKETS",)}
    parts += [[name, getattr(module, name, None)] for module, names in sizes.items() for name in names]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


LAYOUT = _layout()


class _Writer:
    def __init__(self) -> None:
        self.ints: list[int] = []
        self.floats = array("d")
        self.arrays: list[array | None] = []  # None: a sorted copy rebuilt on reading

    def put(self, obj: Any, ranked: array | None) -> None:
        for name, kind in SCHEMA[type(obj)]:
            value = getattr(obj, name)
            if kind is int:
                self.ints.append(int(value))
            elif kind is float:
                self.floats.append(value)
            elif isinstance(kind, str):
                ring = getattr(obj, SORTED_FROM[name]) if name in SORTED_FROM else None
                exact = ring is not None and array(kind, sorted(ring)).tobytes() == value.tobytes()
                self.arrays.append(None if exact else value)
            elif isinstance(kind, Rows):
                rows = value if kind.tupled else [(item,) for item in value]
                self.arrays += [array("q" if column is int else "d", [row[i] for row in rows])
                                for i, column in enumerate(kind.columns)]
            elif kind == Calibration | None:
                self.ints.append(int(value is not None))
                if value is not None:
                    if value.ranked is not ranked or value.record is not obj.record:
                        raise ValueError("a calibration must read its signal's own sorted array and record")
                    self.floats.extend([*value.tail, *(getattr(value, n) for n in _CALIBRATION_FLOATS)])
            else:
                self.put(value, getattr(obj, RANKED_FOR[name]) if name in RANKED_FOR else None)


class _Reader:
    """Takes the values back in the order _Writer put them, checking each against what the layout expects."""

    def __init__(self, header: dict[str, Any], blob: memoryview) -> None:
        if not all(type(value) is int for value in header["ints"]):
            raise SnapshotError("an integer that is not one")
        self.ints, self.specs, self.blob, self.position = iter(header["ints"]), iter(header["arrays"]), blob, 0
        self.floats = iter(self.numbers("d"))

    def numbers(self, typecode: str) -> array | None:
        spec = next(self.specs)
        if spec is None:
            return None
        if spec[0] != typecode or type(spec[1]) is not int or spec[1] < 0:
            raise SnapshotError(f"not an array of {typecode!r}: {spec!r}")
        out, start = array(typecode), self.position
        self.position += spec[1] * out.itemsize
        if self.position > len(self.blob):
            raise SnapshotError("the arrays run past the end")
        out.frombytes(self.blob[start:self.position])
        return out

    def finished(self) -> bool:
        end = object()
        return self.position == len(self.blob) and all(next(left, end) is end
                                                       for left in (self.ints, self.floats, self.specs))

    def get(self, cls: type) -> Any:
        values: dict[str, Any] = {}
        for name, kind in SCHEMA[cls]:
            if kind is int:
                values[name] = next(self.ints)
            elif kind is float:
                values[name] = next(self.floats)
            elif isinstance(kind, str):
                values[name] = self.numbers(kind)  # None: a sorted copy, rebuilt below
            elif isinstance(kind, Rows):
                columns = [self.numbers("q" if column is int else "d") for column in kind.columns]
                if any(c is None or len(c) != len(columns[0]) for c in columns):
                    raise SnapshotError(f"{cls.__name__}.{name}: missing or uneven columns")
                values[name] = list(zip(*columns, strict=True)) if kind.tupled else columns[0].tolist()
            elif kind == Calibration | None:
                values[name] = (Tail(*islice(self.floats, len(Tail._fields))),
                                list(islice(self.floats, len(_CALIBRATION_FLOATS)))) if next(self.ints) else None
            else:
                values[name] = self.get(kind)
        values.update({name: array(kind, sorted(values[SORTED_FROM[name]])) for name, kind in SCHEMA[cls]
                       if isinstance(kind, str) and values[name] is None})  # only a sorted copy is ever None
        for name, kind in SCHEMA[cls]:
            if kind == Calibration | None and values[name] is not None:  # its ranks are its owner's: bound there
                tail, rest = values[name]
                values[name] = Calibration(tail=tail, ranked=array("d"), record=values["record"],
                                           **dict(zip(_CALIBRATION_FLOATS, rest, strict=True)))
            elif name in RANKED_FOR and values[name].calibration is not None:
                fit = values[name]
                fit.calibration = fit.calibration._replace(ranked=values[RANKED_FOR[name]])
        return cls(**values)


def encode(detector_state: DetectorState) -> bytes:
    """The state as compact bytes (native byte order: a state is read on the machines that write it)."""
    writer = _Writer()
    writer.put(detector_state, None)
    arrays = [writer.floats, *writer.arrays]
    header = json.dumps({"format": FORMAT, "layout": LAYOUT, "order": sys.byteorder, "ints": writer.ints,
                         "arrays": [None if a is None else [a.typecode, len(a)] for a in arrays]},
                        separators=(",", ":")).encode()
    body = b"".join([len(header).to_bytes(4, "little"), header, *(a.tobytes() for a in arrays if a is not None)])
    return zlib.compress(body, 1)


def decode(data: bytes) -> DetectorState:
    """The state ``encode`` saved, with its shared objects shared again; SnapshotError for anything else."""
    try:
        inflater = zlib.decompressobj()
        body = inflater.decompress(data, MAX_BYTES)
        if not inflater.eof or inflater.unused_data or inflater.unconsumed_tail:
            raise SnapshotError("truncated, too large or followed by other bytes")
        size = int.from_bytes(body[:4], "little")
        header = json.loads(body[4:4 + size])
        saved = [header.get(key) for key in ("format", "layout", "order")] if isinstance(header, dict) else None
        if saved != [FORMAT, LAYOUT, sys.byteorder]:  # another release's state, or another machine's
            raise SnapshotError(f"saved as format, layout, byte order {saved}, read as {FORMAT, LAYOUT, sys.byteorder}")
        reader = _Reader(header, memoryview(body)[4 + size:])
        out = reader.get(DetectorState)
        if not reader.finished():
            raise SnapshotError("values left over")
        _check_usable(out)
        return out
    except SnapshotError:
        raise
    except Exception as exc:  # bad bytes may fail anywhere while they are read: all of it is "unreadable"
        raise SnapshotError(f"unreadable detector state: {exc!r}") from exc


def _check_usable(detector_state: DetectorState) -> None:
    """SnapshotError for a state that decodes but cannot be the detector's: a non-finite number where the detector
    keeps only finite ones, or no step once warm-up has fixed it (every later row divides by it)."""
    if detector_state.rows < 0 or detector_state.period < 0:
        raise SnapshotError("a negative count of rows or season")
    if detector_state.rows >= streaming.WARMUP and not detector_state.step > 0.0:
        raise SnapshotError(f"a warm state whose step is {detector_state.step!r}")
    _check_finite(detector_state, "state")


def _check_finite(value: Any, where: str) -> None:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SnapshotError(f"{where} is {value!r}")
    elif isinstance(value, array):
        if value.typecode != "d":
            return
        if where.rsplit(".", 1)[-1] in NAN_MEANS_NONE:
            finite = not any(map(math.isinf, value))
        else:  # NaN and infinities carry into a sum, and the detector's values are too small to overflow one
            finite = math.isfinite(sum(value))
        if not finite:
            raise SnapshotError(f"{where} holds a number that is not finite")
    elif is_dataclass(value):
        for item in fields(value):
            _check_finite(getattr(value, item.name), f"{where}.{item.name}")
    elif isinstance(value, tuple) and hasattr(value, "_fields"):  # a Calibration, a Tail
        for name in value._fields:
            if name != "ranked":  # its owner's sorted window, checked there
                _check_finite(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, list | tuple):
        for item in value:
            _check_finite(item, where)
