"""The max-batch search strategies by name (`--strategy`): `protocol` (protocol.py) and `guided` (guided.py),
and `run_search`, which drives one against an oracle (tests, simulations, replays of recorded runs)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

from .guided import guided_strategy
from .protocol import Decision, SearchConfig, Trial, protocol_strategy

STRATEGIES: dict[str, Callable[[Sequence[Trial], SearchConfig], Decision]] = {
    "protocol": protocol_strategy,
    "guided": guided_strategy,
}


def run_search(oracle: Callable[[int], Any], cfg: SearchConfig, strategy: str = "protocol",
               history: Iterable[Trial] = ()) -> tuple[Decision, list[Trial]]:
    """Drive a strategy against `oracle(batch) -> Status | (Status, peak MiB | None[, compiled
    peak MiB | None])` (tests, simulations, replays of recorded runs)."""
    hist = list(history)
    decide = STRATEGIES[strategy]
    while True:
        d = decide(hist, cfg)
        if d.done:
            return d, hist
        answer = oracle(d.batch)
        hist.append((d.batch, *answer) if isinstance(answer, tuple) else (d.batch, answer))
