"""Inside a GPU engine image, without a GPU: framework and CUDA versions, and whether every CUDA library
the framework loads resolves. Run as
    docker run --rm --network none --entrypoint /opt/venv/bin/python -v "$PWD/images:/k:ro" IMAGE /k/check-gpu-image.py
Prints one JSON object. libcuda.so.1 is the driver's: the container runtime injects it, so here it is
expected to be missing and is reported apart. Exit 1 when cudart, cuBLAS, cuDNN or NCCL fails to load
through ctypes, or ldd finds any other library missing for the framework's (or Triton's) own shared
objects. The CUDA wheels' remaining libraries are listed apart, for information (see below).
"""
from __future__ import annotations

import ctypes
import glob
import importlib.metadata as md
import json
import os
import subprocess
import sys
import sysconfig

site = sysconfig.get_paths()["purelib"]
out: dict = {"python": sys.version.split()[0]}
dists = {d.metadata["Name"].lower(): d.version for d in md.distributions()}
for name in ("torch", "jax", "jaxlib", "jax-cuda13-plugin", "nvidia-cuda-runtime", "nvidia-cublas",
             "nvidia-cudnn-cu13", "nvidia-nccl-cu13"):
    if name in dists:
        out.setdefault("versions", {})[name] = dists[name]
if "torch" in dists:
    import torch

    out["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                    "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None}
wanted = {"libcudart": "libcudart.so.*", "libcublas": "libcublas.so.*", "libcublasLt": "libcublasLt.so.*",
          "libcudnn": "libcudnn.so.*", "libnccl": "libnccl.so.*"}
libs: dict = {}
for key, pattern in wanted.items():
    paths = sorted(glob.glob(os.path.join(site, "nvidia", "**", pattern), recursive=True))
    if not paths:
        libs[key] = {"found": None}
        continue
    try:
        ctypes.CDLL(paths[0])
        libs[key] = {"path": paths[0].removeprefix(site + "/"), "loads": True}
    except OSError as exc:
        libs[key] = {"path": paths[0].removeprefix(site + "/"), "loads": False, "error": str(exc)[:200]}
out["libraries"] = libs
# Every shared object the framework ships (and Triton's, which torch.compile loads): what ldd cannot
# resolve (beyond the driver's libcuda). These decide the exit status.
def ldd_missing(so: str, env: dict | None = None) -> list[str]:
    r = subprocess.run(["ldd", so], capture_output=True, text=True, env=env)
    return sorted({ln.split()[0] for ln in r.stdout.splitlines() if "not found" in ln})


unresolved: dict = {}
framework = sorted(set(glob.glob(os.path.join(site, "torch", "lib", "*.so*")) +
                       glob.glob(os.path.join(site, "triton", "**", "*.so*"), recursive=True) +
                       glob.glob(os.path.join(site, "jaxlib", "**", "*.so"), recursive=True) +
                       glob.glob(os.path.join(site, "jax_plugins", "**", "*.so"), recursive=True)))
out["ldd_checked"] = len(framework)
for so in framework:
    missing = ldd_missing(so)
    if missing:
        unresolved[so.removeprefix(site + "/")] = missing
# For information: the CUDA wheels' own libraries (nvidia/...), with their lib folders on the search
# path as they are once the framework has loaded its CUDA libraries. What is missing here belongs to
# parts that are loaded only on request (GPUDirect Storage over RDMA, NVSHMEM's MPI/UCX/InfiniBand
# transports), which a one-GPU trial does not use; it does not decide the exit status.
nvidia = sorted(glob.glob(os.path.join(site, "nvidia", "**", "*.so*"), recursive=True))
env = dict(os.environ, LD_LIBRARY_PATH=":".join(sorted({os.path.dirname(p) for p in nvidia})))
optional: dict = {}
for so in nvidia:
    missing = [m for m in ldd_missing(so, env) if m != "libcuda.so.1"]
    if missing:
        optional[so.removeprefix(site + "/")] = missing
out["cuda_wheels_ldd_checked"] = len(nvidia)
out["cuda_wheels_unresolved_optional"] = optional
out["ldd_unresolved"] = unresolved
out["only_driver_missing"] = all(set(v) <= {"libcuda.so.1"} for v in unresolved.values())
ok = all(v.get("loads") for v in libs.values()) and out["only_driver_missing"]
print(json.dumps(out, indent=1, sort_keys=True))
sys.exit(0 if ok else 1)
