"""The loader benchmarks' window rule (dataload's figure, train-e2e's loader-alone figure): checked once from the
flags, passed to the trial (trials/dataload/measure.py's WindowRule), recorded in the configuration and read back
by the table, the report and compare. docs/method.md, "Data loading"."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import Fail

# The defaults: long enough that a loader's rate is steady on an H200 host (FFCV's tables time whole ImageNet
# epochs; 50,000 images and 30 s is the throughput window's rule).
WINDOW_IMAGES, WINDOW_SECONDS, STEADY_TOLERANCE = 50_000, 30.0, 0.02
MAX_WINDOW_SECONDS = 86_400.0  # the trial's own bound on --window-seconds


@dataclass(frozen=True)
class LoaderWindow:
    """Whole epochs after a warm-up epoch until the window holds `images` images and lasts `seconds` seconds (and
    counts `epochs` epochs, dataload's --epochs, when given); a run is steady when its window's halves agree within
    `tolerance`."""

    images: int
    seconds: float
    tolerance: float
    epochs: int | None = None

    @classmethod
    def of(cls, images: Any, seconds: Any, tolerance: Any, epochs: Any = None) -> LoaderWindow:
        """From the flags (or a partial's record), each checked: a bad value is one line (Fail: exit 2)."""
        if isinstance(images, bool) or not isinstance(images, int) or images <= 0:
            raise Fail(f"--window-images must be a whole number > 0 (got {images})")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or not 0 < seconds <= MAX_WINDOW_SECONDS:
            raise Fail(f"--window-seconds must be > 0 and at most {MAX_WINDOW_SECONDS:g} (got {seconds})")
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance) \
                or not 0 < tolerance <= 1:
            raise Fail(f"--steady-tolerance must be > 0 and at most 1 (got {tolerance})")
        if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs <= 0):
            raise Fail(f"--epochs must be > 0 (got {epochs})")
        return cls(images, float(seconds), float(tolerance), epochs)

    @classmethod
    def from_json(cls, c: dict[str, Any]) -> LoaderWindow | None:
        """A configuration's recorded rule; None for one recorded before the rule (its runs timed fixed epochs)."""
        if c.get("window_images") is None and c.get("window_seconds") is None:
            return None
        return cls.of(c.get("window_images"), c.get("window_seconds"), c.get("steady_tolerance", STEADY_TOLERANCE),
                      c.get("epochs"))

    def text(self) -> str:
        """The rule as the trial words it (measure.WindowRule.text), so the configuration's and every run's agree."""
        parts = [f"at least {self.images} images", f"at least {self.seconds:g} s"]
        if self.epochs is not None and self.epochs > 1:
            parts.append(f"at least {self.epochs} epochs")
        return "whole epochs after a warm-up epoch, until " + " and ".join(parts)

    def flags(self) -> list[str]:
        """The trial's flags (`--epochs` is dataload's to pass: train's trial has none)."""
        return ["--window-images", str(self.images), "--window-seconds", f"{self.seconds:g}",
                "--steady-tolerance", f"{self.tolerance:g}"]

    def to_json(self) -> dict[str, Any]:
        return {"window_images": self.images, "window_seconds": self.seconds, "steady_tolerance": self.tolerance,
                "window_rule": self.text()}


def steady_text(steady: bool | None) -> str:
    """A cell's steadiness in a table: throughput's words."""
    return "—" if steady is None else ("yes" if steady else "NOT STEADY")
