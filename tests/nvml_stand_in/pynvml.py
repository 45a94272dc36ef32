"""A `pynvml` for a real `kitctl` process on a host without a GPU (tests only).

Put this folder first on the PYTHONPATH of a `kitctl` subprocess: its `import pynvml` (the
adapter `kitctl.core.gpu.Nvml`) then finds this module, which is the named stand-in of
tests/fake_nvml.py (`FakeNvmlLib`) with one device whose used memory rises with the
candidate's real processes (`CandidateMemory`: idle + their resident memory). No kitctl code
is replaced: the real adapter, sampler, gate and kill run against it.

Configured by the environment of that subprocess:
  KITCTL_TEST_NVML_UUID       the device's UUID (default GPU-00000000-1111-2222-3333-444444444444)
  KITCTL_TEST_NVML_TOTAL_MIB  its total memory (default 16376: a 16 GiB card)
  KITCTL_TEST_NVML_IDLE_MIB   used memory with no candidate (default 300)
  KITCTL_TEST_NVML_DOCKER     1: also count the processes of the containers kitctl owns
                              (the daemon of DOCKER_HOST)
  KITCTL_TEST_NVML_LOG        a file for CandidateMemory's JSON lines (when they rose, when gone)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fake_nvml

from fake_nvml import CandidateMemory, FakeDevice, FakeNvmlLib  # noqa: E402

_env = os.environ.get
_docker = None
if _env("KITCTL_TEST_NVML_DOCKER") == "1":
    import docker

    _docker = docker.from_env(timeout=30)

memory = CandidateMemory(os.getpid(), float(_env("KITCTL_TEST_NVML_IDLE_MIB", "300")), docker_client=_docker,
                         log_path=_env("KITCTL_TEST_NVML_LOG"))
lib = FakeNvmlLib([FakeDevice(_env("KITCTL_TEST_NVML_UUID", "GPU-00000000-1111-2222-3333-444444444444"),
                              total_mib=float(_env("KITCTL_TEST_NVML_TOTAL_MIB", "16376")),
                              used_mib=memory.used_mib, compute_processes=memory.processes)])


def __getattr__(name: str) -> Any:  # the module answers as pynvml does: nvmlInit, NVMLError, ...
    return getattr(lib, name)
