"""What a throughput run's window cost and how steady it was: energy from NVML's total-energy
counter (read by the host's watcher beside the VRAM gate, on the wall clock the trial's window is
stamped with), SM clock and temperature over the window, and the window's two halves.

Pure functions over recorded numbers: a report or a resume re-derives every figure from the
readings a run keeps (`window_readings`), never from a summary."""
from __future__ import annotations

import math
from typing import Any, Sequence

from ...core.gpu import Telemetry

FIELDS = ("energy_mj", "sm_clock_mhz", "temperature_c", "power_w")
COUNTER = "nvmlDeviceGetTotalEnergyConsumption (mJ), whole device, read every ~50 ms by the host"


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def window_readings(series: Sequence[tuple[float, Telemetry]], start: float, end: float) -> dict[str, list] | None:
    """The readings a run keeps: those inside [start, end] and the one on each side (they bracket the
    window's ends, so the counter can be interpolated there). Column lists; None without readings."""
    if not series:
        return None
    series = sorted(series, key=lambda r: r[0])
    before = [i for i, (t, _) in enumerate(series) if t <= start]
    after = [i for i, (t, _) in enumerate(series) if t >= end]
    lo = before[-1] if before else 0
    hi = after[0] if after else len(series) - 1
    kept = series[lo:hi + 1]
    out: dict[str, list] = {"t_unix": [round(t, 4) for t, _ in kept]}
    for f in FIELDS:
        out[f] = [getattr(r, f) for _, r in kept]
    return out


def _interp(ts: list[float], ys: list[float], t: float) -> float | None:
    """y at t, linear between the readings that bracket it; None outside them."""
    for (t0, y0), (t1, y1) in zip(zip(ts, ys), zip(ts[1:], ys[1:])):
        if t0 <= t <= t1:
            return y0 if t1 == t0 else y0 + (y1 - y0) * (t - t0) / (t1 - t0)
    return None


def window_energy(readings: dict[str, list] | None, start: Any, end: Any, images: Any) -> dict[str, Any] | None:
    """Joules over the window (the counter interpolated at its start and end), per image, mean watts;
    SM clock (mean, min, max) and temperature (mean, max) over the readings inside it. None when there
    is nothing to read (no GPU watcher, a trial without window stamps); the fields NVML could not give
    are None, and `note` says why."""
    start, end, images = _num(start), _num(end), images if isinstance(images, int) and images > 0 else None
    if readings is None or start is None or end is None or end <= start:
        return None
    ts = [_num(t) for t in readings.get("t_unix") or []]
    out: dict[str, Any] = {"joules": None, "joules_per_image": None, "mean_watts": None, "sm_clock_mhz": None,
                           "temperature_c": None, "readings": len(ts), "counter": COUNTER, "note": None}
    pairs = [(t, e) for t, e in zip(ts, [_num(x) for x in readings.get("energy_mj") or []])
             if t is not None and e is not None]
    if len(pairs) < 2:
        out["note"] = "NVML gave no energy counter on this device"
    else:
        e0, e1 = _interp(*map(list, zip(*pairs)), start), _interp(*map(list, zip(*pairs)), end)
        if e0 is None or e1 is None:
            out["note"] = "the counter's readings do not cover the whole window"
        elif e1 < e0:
            out["note"] = "the energy counter went backwards (driver reloaded?)"
        else:
            joules = (e1 - e0) / 1000.0
            out.update(joules=joules, mean_watts=joules / (end - start),
                       joules_per_image=joules / images if images else None)
    inside = [i for i, t in enumerate(ts) if t is not None and start <= t <= end]

    def stats(name: str, keys: tuple[str, ...]) -> dict[str, float] | None:
        vals = [v for v in (_num((readings.get(name) or [None] * len(ts))[i]) for i in inside) if v is not None]
        if not vals:
            return None
        d = {"mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)}
        return {k: d[k] for k in keys}
    out["sm_clock_mhz"] = stats("sm_clock_mhz", ("mean", "min", "max"))
    out["temperature_c"] = stats("temperature_c", ("mean", "max"))
    return out


def run_steadiness(result: dict[str, Any] | None) -> dict[str, Any]:
    """A run's window, as the trial recorded it: its rule, length, halves and whether they agree.
    A trial from before the window rule has no `window`: steady is then None (not measured)."""
    w = (result or {}).get("window")
    if not isinstance(w, dict):
        return {"window_rule": None, "steady": None, "halves_change": None}
    steady = w.get("steady") if isinstance(w.get("steady"), bool) else None
    return {"window_rule": w.get("rule") if isinstance(w.get("rule"), str) else None, "steady": steady,
            "halves_change": _num(w.get("halves_change"))}
