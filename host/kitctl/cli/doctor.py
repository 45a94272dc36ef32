"""`kitctl doctor`: the command (the checks and their report: kitctl.doctor)."""
from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console

from ..doctor import print_report, run_checks
from ..doctor.base import IDLE_THRESHOLD_MIB, MIN_FREE_GIB
from ..errors import Exit


def doctor(
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document: the verdict, gpu_run/cpu_run and why not, every check {name, ok, level, detail, fix}."),
    variant: Optional[str] = typer.Option(None, envvar="KITCTL_IMAGE_VARIANT",
                                          help="Check this build variant's images as the ones a run uses."),
    idle_threshold: float = typer.Option(IDLE_THRESHOLD_MIB, help="MiB in use above which a GPU is not idle."),
    min_free_gib: float = typer.Option(MIN_FREE_GIB, help="Warn when Docker's data root has less free space (GiB)."),
    probe: bool = typer.Option(True, "--probe/--no-probe", help="Start a throw-away GPU container to test the NVIDIA runtime."),
) -> None:
    """Can a GPU run start here, and a CPU run? The verdict first, then each check: Docker, NVIDIA runtime,
    driver vs image CUDA, GPU idle, images, disk, the local torch.

    Exit 0 when a GPU run can start, 1 when it cannot (the verdict says whether a CPU run can).
    """
    rep = run_checks(variant=variant or None, idle_threshold_mib=idle_threshold, min_free_gib=min_free_gib,
                     probe=probe)
    if as_json:
        print(json.dumps(rep.to_json(), indent=2))
    else:
        print_report(rep, Console(highlight=False, soft_wrap=True))
    raise Exit(rep.exit_code)
