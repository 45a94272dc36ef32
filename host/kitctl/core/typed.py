"""Typed records of an artifact: a frozen dataclass per record (a benchmark's cell, its runs, their parts) with one
generic way to and from the JSON the artifact holds.

A record type derives from `Record`. `to_json` writes a new record's fields in their declared order (the artifact's
key order), nested records and tuples as objects and lists. `from_json` reads any recorded version tolerantly: a
field the record lacks (an artifact from before it existed) takes its default and stays absent when written back,
a key the type does not know is kept aside in `extra`, and the recorded key order is kept, so a record read and
written again is unchanged, whatever kitctl wrote it.
"""
from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
_OWN = ("extra", "recorded_keys")  # Record's own fields: not JSON keys of the record


@dataclass(frozen=True)
class Record:
    """The base of a typed record. Keyword-only, so a subclass declares its fields in the artifact's order, required
    ones first."""
    # Keys the type does not know (a later kitctl's), written back after the known ones.
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True, repr=False)
    # The keys as they were recorded, in their order (None: a record made here, not read; `updated` adds keys set
    # later, so a record's JSON keeps the order a dict's updates would have given it).
    recorded_keys: tuple[str, ...] | None = field(default=None, kw_only=True, repr=False, compare=False)


R = TypeVar("R", bound=Record)


def record_fields(cls_or_obj: Any) -> tuple[dataclasses.Field, ...]:
    """A record's JSON fields, in declared order (without Record's own)."""
    return tuple(f for f in dataclasses.fields(cls_or_obj) if f.name not in _OWN)


def to_json(obj: Any) -> Any:
    if isinstance(obj, Record):
        return _record_json(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_json(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def _record_json(obj: Record) -> dict[str, Any]:
    known = {f.name: f for f in record_fields(obj)}
    read = obj.recorded_keys is not None
    recorded = set(obj.recorded_keys or ())
    out: dict[str, Any] = {}
    for k in obj.recorded_keys or ():  # a record read from JSON: its keys in their order
        if k in known:
            out[k] = to_json(getattr(obj, k))
        elif k in obj.extra:
            out[k] = obj.extra[k]
    for name, f in known.items():
        if name in out:
            continue
        value = getattr(obj, name)
        if read and name not in recorded and value == _default(f):
            continue  # absent where it was read, and still its default: absent again
        out[name] = to_json(value)
    for k, v in obj.extra.items():
        out.setdefault(k, v)
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def from_json(cls: type[T], data: Any) -> T:
    """A record of type `cls` (a Record) from its JSON object (RecordError where it is not an object or lacks a field
    with no default)."""
    if not isinstance(data, dict):
        raise RecordError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    fields = record_fields(cls)
    for f in fields:
        if f.name in data:
            kwargs[f.name] = _value(hints[f.name], data[f.name])
        elif _default(f) is dataclasses.MISSING:
            raise RecordError(f"{cls.__name__}: {f.name} is missing")
    known = {f.name for f in fields}
    return cls(**kwargs, extra={k: v for k, v in data.items() if k not in known},  # type: ignore[call-arg]
               recorded_keys=tuple(data))


def updated(record: R, **changes: Any) -> R:
    """`record` with `changes`, written back as a dict's update writes them: a key it records keeps its place, a new
    one comes after the others and is written even where its value is the default (a failed cell's `energy: null`).
    A record made here (no recorded keys) writes every field anyway."""
    if record.recorded_keys is None:
        return dataclasses.replace(record, **changes)
    keys = record.recorded_keys + tuple(k for k in changes if k not in record.recorded_keys)
    return dataclasses.replace(record, **changes, recorded_keys=keys)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """A record type's resolved annotations (resolved once per type: every cell of every artifact is read)."""
    return typing.get_type_hints(cls)


class RecordError(ValueError):
    """A recorded object that is not the record it should be."""


def _value(hint: Any, v: Any) -> Any:
    """`v` as the annotated type: a nested record from its object, a tuple of them from a list; anything else as
    is."""
    if v is None:
        return None
    for t in _members(hint):
        if isinstance(t, type) and issubclass(t, Record) and isinstance(v, dict):
            return from_json(t, v)
        if typing.get_origin(t) is tuple and isinstance(v, list):
            args = typing.get_args(t)
            inner = args[0] if args else Any
            return tuple(_value(inner, x) for x in v)
    return v


def _members(hint: Any) -> tuple[Any, ...]:
    """The types of a union (X | None, Optional[X]); the hint itself otherwise."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(hint) if a is not type(None))
    return (hint,)
