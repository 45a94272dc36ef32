"""The toy's typed configuration, built and checked once from its flags."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kitctl.errors import Fail


@dataclass(frozen=True)
class ToyConfig:
    BENCHMARK: ClassVar[str] = "toy"
    TITLE: ClassVar[str] = "Toy"
    count: int

    @classmethod
    def from_flags(cls, count: int) -> ToyConfig:
        if count <= 0:
            raise Fail(f"--count must be > 0 (got {count})")
        return cls(count)

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count}
