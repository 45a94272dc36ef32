"""Slow storage emulated: a loader container's reads from the datasets' block device capped (dataload --read-mbps)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import Fail


@dataclass(frozen=True)
class ReadCap:
    """Slow storage emulated the way --vram-limit emulates a smaller card: reads from the block device that holds
    the datasets capped at `mb_per_s` for a loader's container (Docker's --device-read-bps: blkio throttling on
    cgroup v1, io.max on v2). Page-cache hits are not reads from the device: a RAM source is not slowed."""
    mb_per_s: float
    device: str  # /dev/<disk>: the whole disk (throttling applies to a disk's queue, not to a partition)

    @property
    def bytes_per_s(self) -> int:
        return max(1, int(self.mb_per_s * 1_000_000))

    def to_json(self) -> dict[str, Any]:
        return {"mb_per_s": self.mb_per_s, "device": self.device,
                "via": "docker --device-read-bps (blkio throttle on cgroup v1, io.max on v2)"}


def block_device(path: Path, flag: str = "--read-mbps") -> str:
    """/dev/<disk> that holds `path` (or its nearest existing parent); Fail when it is on no block device
    (tmpfs, overlay, btrfs subvolumes, network filesystems: nothing a device cap could slow)."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    dev = os.stat(p).st_dev
    node = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    if not node.exists():
        raise Fail(f"{flag}: {path} is on no block device (device {os.major(dev)}:{os.minor(dev)}: tmpfs, overlay "
                   "or a network filesystem), so there is no read path to cap; put --data-dir on a disk")
    real = node.resolve()
    if (real / "partition").exists():
        real = real.parent
    disk = Path("/dev") / real.name
    if not disk.exists():
        raise Fail(f"{flag}: {path} is on {real.name}, which has no {disk} here to cap")
    return str(disk)
