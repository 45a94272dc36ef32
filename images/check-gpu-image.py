"""Inside a GPU engine image, without a GPU: framework and CUDA versions, and whether every CUDA library
the framework loads resolves. Run as
    docker run --rm --network none --entrypoint /opt/venv/bin/python -v "$PWD/images:/k:ro" IMAGE /k/check-gpu-image.py
Prints one JSON object. libcuda.so.1 is the driver's: the container runtime injects it, so here it is
expected to be missing and is reported apart. Exit 1 when any other library fails to load.
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
# Every shared object the framework ships: what ldd cannot resolve (beyond the driver's libcuda).
unresolved: dict = {}
for so in sorted(glob.glob(os.path.join(site, "torch", "lib", "*.so*")) +
                 glob.glob(os.path.join(site, "jaxlib", "**", "*.so"), recursive=True) +
                 glob.glob(os.path.join(site, "jax_plugins", "**", "*.so"), recursive=True)):
    r = subprocess.run(["ldd", so], capture_output=True, text=True)
    missing = sorted({ln.split()[0] for ln in r.stdout.splitlines() if "not found" in ln})
    if missing:
        unresolved[so.removeprefix(site + "/")] = missing
out["ldd_unresolved"] = unresolved
out["only_driver_missing"] = all(set(v) <= {"libcuda.so.1"} for v in unresolved.values())
ok = all(v.get("loads") for v in libs.values()) and out["only_driver_missing"]
print(json.dumps(out, indent=1, sort_keys=True))
sys.exit(0 if ok else 1)
