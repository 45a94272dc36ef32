"""Trial protocol v1, host side: the argv a trial gets and the KIT-RESULT line it prints.

docs/method.md and results/README.md describe both; every engine's trial speaks this, whichever runtime starts it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_VERSION = 1
RESULT_PREFIX = "KIT-RESULT "
REQUIRED_KEYS = ("protocol", "engine", "mode", "precision", "batch", "status")


@dataclass(frozen=True)
class TrialRequest:
    """One candidate: everything that becomes the trial's argv."""

    engine: str
    mode: str
    benchmark: str  # maxbatch | throughput
    batch: int
    precision: str  # fp32 | bf16
    device: str  # cuda | cpu
    model: str = "resnet50"
    dataset: str = "synthetic"
    data_dir: str | None = None
    memory_budget_mib: int | None = None
    cudnn_benchmark: bool = False
    seed: int = 0
    warmup_steps: int | None = None
    steps: int | None = None
    image_size: int = 32
    # Throughput's window rule (docs/method.md): the trial times whole chunks until both hold.
    window_images: int | None = None
    window_seconds: float | None = None
    steady_tolerance: float | None = None
    max_warmup_seconds: float | None = None
    extra_args: tuple[str, ...] = field(default=())

    def argv(self, data_dir: str | None = None) -> list[str]:
        """Protocol flags. `data_dir` overrides the path (a container sees its mount point)."""
        args = [
            "--benchmark", self.benchmark,
            "--batch", str(self.batch),
            "--precision", self.precision,
            "--mode", self.mode,
            "--model", self.model,
            "--dataset", self.dataset,
            "--device", self.device,
            "--seed", str(self.seed),
        ]
        d = data_dir if data_dir is not None else self.data_dir
        if d:
            args += ["--data-dir", d]
        if self.memory_budget_mib is not None:
            args += ["--memory-budget-mib", str(int(self.memory_budget_mib))]
        if self.cudnn_benchmark:
            args.append("--cudnn-benchmark")
        if self.warmup_steps is not None:
            args += ["--warmup-steps", str(self.warmup_steps)]
        if self.steps is not None:
            args += ["--steps", str(self.steps)]
        if self.image_size != 32:  # the protocol's default: a 32-pixel candidate's argv is unchanged
            args += ["--image-size", str(self.image_size)]
        for flag, value in (("--window-images", self.window_images), ("--window-seconds", self.window_seconds),
                            ("--steady-tolerance", self.steady_tolerance),
                            ("--max-warmup-seconds", self.max_warmup_seconds)):
            if value is not None:
                args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return args + list(self.extra_args)


class ResultParseError(ValueError):
    pass


def result_line(stdout: str) -> str | None:
    """The payload of the last `KIT-RESULT ` line on stdout (every trial's, the engines' and the data
    trial's), or None when there is none."""
    line = None
    for raw in stdout.splitlines():
        if raw.startswith(RESULT_PREFIX):
            line = raw[len(RESULT_PREFIX):]
    return line


def parse_result(stdout: str) -> dict[str, Any]:
    """The JSON object of the last `KIT-RESULT ` line.

    Everything else on stdout is diagnostics. A missing line, truncated or non-object JSON,
    or a line lacking the protocol's keys raises ResultParseError (the host then says `crash`).
    """
    line = result_line(stdout)
    if line is None:
        raise ResultParseError("no KIT-RESULT line on stdout")
    try:
        # NaN/Infinity are not JSON; a trial that prints them still means "not finite".
        obj = json.loads(line, parse_constant=lambda _c: None)
    except json.JSONDecodeError as exc:
        raise ResultParseError(f"KIT-RESULT line is not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ResultParseError("KIT-RESULT payload is not a JSON object")
    missing = [k for k in REQUIRED_KEYS if k not in obj]
    if missing:
        raise ResultParseError(f"KIT-RESULT lacks keys: {', '.join(missing)}")
    if type(obj["protocol"]) is not int or obj["protocol"] != PROTOCOL_VERSION:
        raise ResultParseError(f"KIT-RESULT protocol {obj['protocol']!r}, expected {PROTOCOL_VERSION}")
    return obj
