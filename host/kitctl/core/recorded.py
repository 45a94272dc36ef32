"""A read-only, typed view of what an artifact's "configuration" recorded (for reports and compare).

The run side builds its configuration once from the flags (a benchmark's `config.py`, checked,
`from_json` for `--resume`: strict). Reading a finished artifact is the other direction and must be
tolerant: an artifact written by an older kitctl lacks later keys, and a hand-written one may hold
odd but schema-valid values; the renderers decide what to print for those. So this view keeps each
recorded value exactly as written (a missing key → the field's default) and never checks or
converts it (a list stays the recorded list: the report prints what was recorded).

This module is the ONE place that reads an artifact's "configuration" (tests/test_recorded.py): `view` (a frozen
dataclass whose field names are the JSON keys, read by `read_view`) for every reader, `configuration` (the raw
mapping) only for the strict rebuild of a partial's run configuration on `--resume`. `RecordedConfig` holds the keys every
training benchmark writes (`kitctl.run.config.RunConfig.json_head`) and, in `own`, the benchmark's
own keys as the benchmark's own view type (`Benchmark.recorded`, e.g. max-batch's start/max batch).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

V = TypeVar("V")


def configuration(doc: Mapping[str, Any]) -> Any:
    """The raw recorded configuration (None if absent): for `--resume`, whose strict `from_json` checks it."""
    return doc.get("configuration")


def view(cls: type[V], doc: Mapping[str, Any]) -> V:
    """`cls`, a view of an artifact's recorded configuration (`read_view`)."""
    return read_view(cls, configuration(doc))


def read_view(cls: type[V], raw: Mapping[str, Any] | None) -> V:
    """`cls` (a dataclass whose field names are JSON keys) from `raw`: each key as recorded, a missing
    key its field's default. A raw that is not a mapping raises AttributeError, as a `.get` on it would."""
    raw = raw or {}
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.metadata.get("recorded", True):
            continue  # not a JSON key (RecordedConfig.own)
        v = raw.get(f.name, dataclasses.MISSING)
        if v is dataclasses.MISSING:
            continue  # the field's default
        kw[f.name] = v
    return cls(**kw)


@dataclass(frozen=True)
class RecordedConfig:
    """The keys both training benchmarks record (the schema requires engines, precisions, device,
    model, dataset and timeout_s; the rest may be missing from older artifacts → these defaults)."""

    engines: Any = ()
    precisions: Any = ()
    device: Any = None
    gpu: Any = None
    vram_limit_mib: Any = None
    reserve_mib: Any = None
    timeout_s: Any = None
    runtime: Any = None
    model: Any = None
    dataset: Any = None
    data_dir: Any = None
    cudnn_benchmark: Any = None
    memory_limit_mib: Any = None
    seed: Any = 0
    optimizer: Any = "?"
    loss: Any = "?"
    input: Any = "?"  # noqa: A003  (the JSON key)
    gpu_request: Any = None
    device_choice: Any = None  # how --device was decided (core/device.py)
    # The benchmark's own recorded keys, as its `Benchmark.recorded` view type (None: it has none).
    own: Any = dataclasses.field(default=None, metadata={"recorded": False})

    @classmethod
    def of_doc(cls, doc: Mapping[str, Any], own: type | None = None) -> RecordedConfig:
        """The view of an artifact's configuration, with its benchmark's own keys as `own` (None: none)."""
        return cls.of(configuration(doc), own)

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None, own: type | None = None) -> RecordedConfig:
        view = read_view(cls, raw)
        return view if own is None else dataclasses.replace(view, own=read_view(own, raw))
