"""`kitctl doctor`: can a GPU run start here, and a CPU run? The verdict comes first, one line
("GPU run: ready / not ready because …. CPU run: ready (…) / not ready because ….");
`--json` prints one JSON document (its "verdict" the same line). Below the verdict, one line per check, ✓ (ok), ! (warning or not checked) or ✗ (error), and for each failing one
how to fix it:

  compose         compose.yaml parses (the image names come from it)
  docker          the daemon answers; its version
  nvml            the NVIDIA driver through NVML: GPUs, driver version
  nvidia-runtime  which GPU request the daemon honours: a throw-away container per kind, the NVIDIA
                  Container Toolkit's (--gpus style) and CDI's (nvidia.com/gpu=UUID)
                  (runtimes.docker.probe_gpu_request)
  cuda:<image>    the driver against each image's CUDA (label kit.cuda.version, or compose.yaml's
                  CUDA_VERSION build arg for an image not built yet): which images this host can run
  gpu-idle:<i>    the GPU holds no memory, or who holds it (gpu.check_idle)
  image:<svc>     the image `kitctl run` would use for each compose service is present and is the
                  kit's (labels kit.engine = the service, kit.trial-protocol = 1); else ✗
  disk            free space where Docker keeps images (DockerRootDir)
  orphans         kit containers whose owner is gone (`kitctl clean` removes them)
  gpu-run         can `kitctl run maxbatch --runtime docker` start on the GPU here?
  cpu-run         can a CPU run start (the local interpreter's torch, or a present image), and its
                  default memory cap

Exit 0 when the GPU run can start, 1 when it cannot, 2 only for bad input. Never a traceback:
a check that breaks reports itself as failed.
"""
from __future__ import annotations

import os
from typing import Any

from rich.console import Console
from rich.text import Text

from .base import IDLE_THRESHOLD_MIB, MIN_FREE_GIB, Host, Report
from .checks import CHECKS


def run_checks(*, client: Any = None, variant: str | None = None, idle_threshold_mib: float = IDLE_THRESHOLD_MIB,
               min_free_gib: float = MIN_FREE_GIB, probe: bool = True, nvml: Any = None,
               compose_path: Any = None) -> Report:
    """Run every check; never raises for what it finds (a broken check is a failed check).

    `client` (a Docker client), `nvml` (a gpu.Nvml) and `compose_path` default to the real ones.
    """
    h = Host(Report(), variant if variant is not None else (os.environ.get("KITCTL_IMAGE_VARIANT") or None),
             idle_threshold_mib, min_free_gib, probe, compose_path, client, nvml)
    for check in CHECKS:
        check(h)
    if h.own_client and h.client is not None:
        try:
            h.client.close()
        except Exception:  # noqa: BLE001
            pass
    return h.rep


_STYLE = {"ok": "green", "warn": "yellow", "skip": "yellow", "error": "red"}


def print_report(rep: Report, console: Console) -> None:
    console.print(Text(rep.verdict, style="bold"))  # the answer first; the checks behind it below
    console.print()
    width = min(max((len(c.name) for c in rep.checks), default=8), 16)
    for c in rep.checks:
        console.print(Text.assemble((c.symbol, _STYLE.get(c.level, "")), " ", (f"{c.name:<{width}}", "bold"),
                                    "  ", c.detail))
        if c.fix and c.level != "ok":
            console.print(Text(f"    fix: {c.fix}", style="dim"))
