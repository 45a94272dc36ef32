"""What XLA says about the compiled step: its rematerialisation log lines and its memory analysis.

XLA's C++ logging writes to file descriptor 2, not to Python's sys.stderr, so the trial captures
that descriptor around the step's compile (capture_fd2) and parses the rematerialisation lines
(parse_rematerialization). Why it matters: XLA's HLO rematerialisation pass recomputes activations
to fit its memory limit (on the GPU, the preallocated pool), which the eager engines do not; the
max batch of a jax-xla cell is honest only if the artifact says, per candidate, that it happened.

What XLA prints (xla/hlo/transforms/simplifiers/hlo_rematerialization.cc, HloRematerialization::
RunImpl): only when the rematerialised peak is still above the limit, one LOG(WARNING)

    Can't reduce memory use below 14.16GiB (15204325068 bytes) by rematerialization; only
    reduced to 14.60GiB (15677178712 bytes), down from 22.35GiB (24000769048 bytes) originally

A rematerialisation that reaches the limit is logged at VLOG(1) only ("Peak memory usage of module
now 14.60GiB (15677178712 bytes), was 22.35GiB (24000769048 bytes)"), visible only with
TF_CPP_VMODULE=hlo_rematerialization=1; it is parsed when present. So a null result means "XLA
printed no rematerialisation line", not "XLA did not rematerialise". On the CPU the pass does not
run (no device memory limit).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from typing import Iterator

# Sizes are signed: public XLA logs show negative limits ("below -85.40GiB (-91702322813 bytes)").
_BYTES = r"\S+ \((-?\d+) bytes\)"
WARNING_RE = re.compile(rf"Can't reduce memory use below {_BYTES} by rematerialization; "
                        rf"only reduced to {_BYTES}, down from {_BYTES} originally")
VLOG_RE = re.compile(rf"Peak memory usage of module now {_BYTES}, was {_BYTES}")

NULL_MEANS = ("XLA printed no rematerialisation line while compiling the step: it warns only when "
              "rematerialisation cannot reach its memory limit (a fit is logged only with "
              "TF_CPP_VMODULE=hlo_rematerialization=1); the pass does not run on the CPU")


class Captured:
    """What capture_fd2 read back (bytes decoded as UTF-8, errors replaced); "" until it exits."""

    text: str = ""


@contextlib.contextmanager
def capture_fd2(cap: Captured | None = None) -> Iterator[Captured]:
    """Point file descriptor 2 at a temporary file for the block, then restore it and copy what
    was captured to the real stderr, so the host's stderr tail still has XLA's lines.

    No thread: the lines reach the real stderr when the block ends, not as they are written. A
    process killed inside the block (a host gate, a segfault) loses what was captured there,
    which is why the block is the compile alone."""
    cap = Captured() if cap is None else cap
    sys.stderr.flush()  # Python's own buffered text goes out before the redirect, in order
    tmp = saved = None
    try:
        tmp = tempfile.TemporaryFile()
        saved = os.dup(2)
    except OSError:  # nowhere to capture to, or no fd 2: the block runs as it is, the record is null
        if tmp is not None:
            tmp.close()
    if saved is None:
        yield cap
        return
    with tmp:
        try:
            os.dup2(tmp.fileno(), 2)
            yield cap
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)  # always restore, whatever the block raised
            os.close(saved)
            tmp.seek(0)
            data = tmp.read()
            cap.text = data.decode("utf-8", "replace")
            _write_all(2, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except OSError:  # a closed stderr must not turn a result into a crash
            return
        view = view[n:]


def parse_rematerialization(text: str) -> dict | None:
    """XLA's rematerialisation lines in text -> one summary, or None when there are none.

    The warning form gives the limit, the peak XLA reached and the peak before the pass; fitted
    is reduced_to <= limit (XLA warns only when it is false). Only the VLOG form: XLA reached its
    limit (limit unknown: that line does not print it). Several modules: the one with the largest
    peak before the pass (the training step, not a small helper), and lines counts them all."""
    lines = [ln for ln in text.splitlines() if "hlo_rematerialization" in ln]
    warned = [tuple(map(int, m.groups())) for ln in lines if (m := WARNING_RE.search(ln))]
    logged = [tuple(map(int, m.groups())) for ln in lines if (m := VLOG_RE.search(ln))]
    if warned:
        limit, reduced, original = max(warned, key=lambda t: t[2])
        form = "LOG(WARNING): rematerialisation could not reach the limit"
    elif logged:
        (reduced, original), limit = max(logged, key=lambda t: t[1]), None
        form = "VLOG(1): no warning, so rematerialisation reached the limit"
    else:
        return None
    return {"limit_bytes": limit, "reduced_to_bytes": reduced, "original_bytes": original,
            "fitted": reduced <= limit if limit is not None else True,
            "rematerialised": reduced < original, "lines": len(warned) + len(logged), "form": form}


MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
                 "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes")


def memory_analysis(compiled) -> dict | None:
    """compiled.memory_analysis() as plain ints (the fields this jaxlib has), or None where the
    backend gives none; never raises (it only describes the step)."""
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - some backends raise Unimplemented
        return None
    if stats is None:
        return None
    out = {}
    for name in MEMORY_FIELDS:
        value = getattr(stats, name, None)
        if isinstance(value, int):
            out[name.removesuffix("_in_bytes").removesuffix("_size") + "_bytes"] = value
    return out or None


def compiled_peak_mib(analysis: dict | None) -> float | None:
    """XLA's ahead-of-time peak of the compiled step (`peak_memory_bytes`) in MiB, or None where
    the analysis has none. Kept to 0.01 MiB: on the H200 the outcome split between compiled
    peaks 0.6 MiB apart (bf16 27,098 passed at 15,339.62, 27,099 failed at 15,340.17)."""
    peak = (analysis or {}).get("peak_memory_bytes")
    return None if peak is None else round(peak / 2**20, 2)
