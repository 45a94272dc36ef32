"""Typed records of an artifact: a frozen dataclass per record (a benchmark's cell, its runs, their parts) with one
generic way to and from the JSON the artifact holds.

`to_json` writes a record's fields in their declared order (the artifact's key order), nested records and tuples
as objects and lists. `from_json` reads any recorded version tolerantly: a field the record lacks (an artifact from
before it existed) takes its default, a key the type does not know is kept aside in `extra` (when the type has
that field) and written back after the known ones, so a record read and written again is unchanged.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")
EXTRA = "extra"  # a record's field for the keys its type does not know (written back last)


def to_json(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            if f.name == EXTRA:
                continue
            out[f.name] = to_json(getattr(obj, f.name))
        out.update(getattr(obj, EXTRA, None) or {})
        return out
    if isinstance(obj, (list, tuple)):
        return [to_json(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_json(v) for k, v in obj.items()}
    return obj


def from_json(cls: type[T], data: Any) -> T:
    """A record of type `cls` from its JSON object (RecordError where it is not an object or lacks a field with no
    default)."""
    if not isinstance(data, dict):
        raise RecordError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == EXTRA:
            continue
        if f.name in data:
            kwargs[f.name] = _value(hints[f.name], data[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"{cls.__name__}: {f.name} is missing")
    if EXTRA in known:
        kwargs[EXTRA] = {k: v for k, v in data.items() if k not in known or k == EXTRA}
    return cls(**kwargs)


class RecordError(ValueError):
    """A recorded object that is not the record it should be."""


def _value(hint: Any, v: Any) -> Any:
    """`v` as the annotated type: a nested record from its object, a tuple from a list; anything else as is."""
    if v is None:
        return None
    for t in _members(hint):
        if dataclasses.is_dataclass(t) and isinstance(v, dict):
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
