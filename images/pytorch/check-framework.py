"""Build-time check of the framework an image's interpreter imports (images/pytorch/Dockerfile).

  python check-framework.py FRAMEWORK_VERSION CUDA_VERSION [LOCK REPORT]

Exits non-zero with ONE line when torch's version (without its +local tag) or torch.version.cuda
("none" for a CPU build) is not what the build args pin. With LOCK (a base that provides the
framework instead of installing the lock), also compares every version the lock pins with what
is installed, prints the differences and writes them to REPORT: they are recorded, not fatal —
the framework and its CUDA are what the benchmark's figures depend on.
"""
from __future__ import annotations

import importlib.metadata as md
import re
import sys


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4):
        print("usage: check-framework.py FRAMEWORK_VERSION CUDA_VERSION [LOCK REPORT]", file=sys.stderr)
        return 2
    framework, cuda = argv[0], argv[1]
    import numpy
    import torch

    v, c = torch.__version__, (torch.version.cuda or "none")
    print(f"torch {v} cuda {c} numpy {numpy.__version__} ({sys.executable})", flush=True)  # before any error line
    if v.split("+")[0] != framework.split("+")[0] or c != cuda:
        print(f"torch {v} / CUDA {c} does not match FRAMEWORK_VERSION={framework} CUDA_VERSION={cuda}",
              file=sys.stderr)
        return 1
    if len(argv) == 4:
        lock, report = argv[2], argv[3]
        pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", open(lock).read(), re.M)
        lines = []
        for name, want in pins:
            try:
                have = md.version(name)
            except md.PackageNotFoundError:
                have = "absent"
            if have.split("+")[0] != want.split("+")[0]:
                lines.append(f"{name} {have} (lock {want})")
        with open(report, "w") as f:
            f.write("".join(f"{ln}\n" for ln in lines))
        print(f"the base provides the framework: nothing installed; {len(pins) - len(lines)} of {len(pins)} "
              f"pins of {lock.rsplit('/', 1)[-1]} agree"
              + (f"; differ: {', '.join(lines)}" if lines else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
