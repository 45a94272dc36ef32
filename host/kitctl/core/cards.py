"""Card sizes by name, for --vram-limit: `rtx4080` instead of 16376, and a comma list of limits (a card catalogue:
max batch on every card size in one command, benchmarks/maxbatch/catalogue.py).

Each size is the total memory NVML reports for that card (`nvidia-smi`'s "MiB" total), as printed in a public
`nvidia-smi` output whose address is kept beside it. Older drivers and ECC settings report a little less for the
same card (a T4 15,109 MiB on driver 470, an A100 40GB 40,536 MiB on 470.82): these are the sizes of recent drivers,
and a user whose card reads otherwise gives the number.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import Fail


@dataclass(frozen=True)
class Card:
    key: str  # what --vram-limit accepts
    name: str  # as nvidia-smi prints it
    total_mib: int  # NVML's memory total
    driver: str  # the driver of the output it was read from
    source: str  # where that output is published

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "name": self.name, "total_mib": self.total_mib, "driver": self.driver,
                "source": self.source}


_GH = "https://github.com/"
CARDS: tuple[Card, ...] = (
    Card("rtx3070", "NVIDIA GeForce RTX 3070", 8192, "555.58.02",
         _GH + "robocanes/omniverse_install/blob/95f23d243f9f09fc7da9645f9a6bf9d7aa313859/install.md"),
    Card("rtx3080", "NVIDIA GeForce RTX 3080", 10240, "565.72",
         _GH + "containers/ramalama/blob/eba46c8df649e3dd1065be77ba31a3386525e894/docs/ramalama-cuda.7.md"),
    Card("rtx3060", "NVIDIA GeForce RTX 3060", 12288, "580.95.05",
         _GH + "geerlingguy/raspberry-pi-pcie-devices/issues/790"),
    Card("t4", "Tesla T4", 15360, "535.129.03", _GH + "bottlerocket-os/bottlerocket/pull/3718"),
    Card("rtx4080", "NVIDIA GeForce RTX 4080", 16376, "555.42.02",
         _GH + "NCCA/Lectures/blob/64736d2f20696e35ad5cf05deb9005a2c9c9c401/SEForMedia/PyTorch/slides.md"),
    Card("v100-16g", "Tesla V100-SXM2-16GB", 16384, "570.211.01", _GH + "1CatAI/1Cat-vLLM/issues/85"),
    Card("a10g", "NVIDIA A10G", 23028, "535.247.01", _GH + "NVIDIA/DCGM/issues/232"),
    Card("l4", "NVIDIA L4", 23034, "570.133.20", _GH + "speaches-ai/speaches/pull/438"),
    Card("rtx4090", "NVIDIA GeForce RTX 4090", 24564, "550.163.01", _GH + "RLinf/RLinf/issues/255"),
    Card("rtx3090", "NVIDIA GeForce RTX 3090", 24576, "595.84", _GH + "noonghunna/club-3090/issues/1128"),
    Card("v100-32g", "Tesla V100-SXM2-32GB", 32768, "525.105.17", _GH + "Wan-Video/Wan2.1/issues/5"),
    Card("a100-40g", "NVIDIA A100-SXM4-40GB", 40960, "580.126.09",
         _GH + "bottlerocket-os/bottlerocket-core-kit/pull/834"),
    Card("l40s", "NVIDIA L40S", 46068, "595.71.05", _GH + "akash-network/provider-configs/pull/99"),
    Card("rtx-a6000", "NVIDIA RTX A6000", 49140, "560.35.03", _GH + "NVIDIA/DCGM/issues/209"),
    Card("h100-80g", "NVIDIA H100 80GB HBM3", 81559, "550.54.15", _GH + "NVIDIA/nccl/issues/1264"),
    Card("a100-80g", "NVIDIA A100-SXM4-80GB", 81920, "545.23.08", _GH + "NVIDIA/mig-parted/issues/31"),
    Card("h200", "NVIDIA H200", 143771, "590.48.01",
         _GH + "utkuozdemir/nvidia_gpu_exporter/blob/e656cd81a180e7e0e7862b53c9acd4c2fb0f590b/internal/captures/"
         "linux-x86_64__nvidia-h200__590.48.01.txt"),
)
BY_KEY = {c.key: c for c in CARDS}
NAMES = ", ".join(c.key for c in CARDS)


@dataclass(frozen=True)
class VramLimit:
    """One --vram-limit: L in MiB, and the card it names (None for a number)."""

    mib: int
    card: Card | None = None

    @property
    def label(self) -> str:
        return f"{self.card.key} ({self.mib:,} MiB)" if self.card else f"{self.mib:,} MiB"


def parse_vram_limits(text: str) -> tuple[VramLimit, ...]:
    """--vram-limit's value: MiB or a card's name, or a comma list of them (each a cell of a catalogue run).
    Bad input is one line (Fail)."""
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise Fail(f"--vram-limit takes MiB or a card's name, or a comma list of them (got {text!r})")
    out: list[VramLimit] = []
    for p in parts:
        card = BY_KEY.get(p.lower())
        if card is not None:
            out.append(VramLimit(card.total_mib, card))
            continue
        try:
            mib = int(p)
        except ValueError:
            raise Fail(f"--vram-limit {p!r}: not a number of MiB nor a card this kit knows ({NAMES})") from None
        if mib <= 0:
            raise Fail(f"--vram-limit must be > 0 (got {mib})")
        out.append(VramLimit(mib))
    seen: set[int] = set()
    for v in out:
        if v.mib in seen:
            raise Fail(f"--vram-limit lists {v.mib:,} MiB twice ({text})")
        seen.add(v.mib)
    return tuple(out)


def one_vram_limit(text: str | None, command: str) -> VramLimit | None:
    """--vram-limit where one limit applies (a list is max batch's catalogue): None when not given."""
    if text is None:
        return None
    limits = parse_vram_limits(text)
    if len(limits) > 1:
        raise Fail(f"--vram-limit takes one limit in {command} (a list of card sizes is `kitctl run maxbatch`'s)")
    return limits[0]
