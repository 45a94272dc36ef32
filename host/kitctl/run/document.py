"""A new engine run's artifact document: the host, the kit, the configuration, the budget and each engine with
the provenance of what its runtime will run."""
from __future__ import annotations

from typing import Any

from ..core import artifact as art
from ..core.provenance import host_info, trial_code
from ..errors import err
from .gpus import GpuContext


def _trial_code(rt: Any, engine: str) -> dict[str, Any] | None:
    """The content hash of the trial that runs: the checkout's (local) or the image's (Docker)."""
    if rt.name != "docker":
        return trial_code(engine).to_json()
    try:
        from ..runtimes.docker.client import image_trial_code

        code = image_trial_code(rt.client, rt.image_for(engine), engine)
    except Exception as exc:  # provenance is recorded, not required: the image id still says it
        why = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        err.print(f"kitctl: note: cannot hash the trial in {rt.image_for(engine)}: {why}")
        return None
    return code.to_json() if code else None


def new_doc(run_id: str, config: Any, gpuctx: GpuContext | None, rt: Any, engines: list,
            benchmark: str | None = None) -> dict[str, Any]:
    if benchmark is None:  # the benchmark whose configuration this is
        benchmark = config.BENCHMARK
    host = host_info()
    if gpuctx is not None:
        host["gpu"] = gpuctx.info.to_json()
    return art.new_document(benchmark, run_id, config.to_json(), host, {"name": rt.name},
                            gpuctx.budget.to_json() if gpuctx else None,
                            {e.name: {"label": e.label, "mode": e.mode, "framework_cap": e.framework_cap,
                                      "provenance": {}, "versions": None} for e in engines})
