"""What every benchmark's end table shares: engine labels, ratios between engines (each against the
first listed, family bests against each other), and whether two confidence intervals overlap."""
from __future__ import annotations

from dataclasses import dataclass

from .engines import ENGINES


@dataclass(frozen=True)
class Ratio:
    """`a` against `b` with a ≥ b: "TensorFlow XLA vs PyTorch best (fp32): 1.28× larger batch".

    `bound` is "≥" when `a` is only a lower bound (censored at --max-batch), "≤" when `b` is."""

    precision: str
    a: str
    b: str
    value: float
    what: str  # "larger batch" | "faster"
    bound: str = ""
    claim: bool = False  # a side is the reference runner's claim (Row.reference_claim)

    @property
    def value_text(self) -> str:
        return (f"{self.bound + ' ' if self.bound else ''}{self.value:.2f}× {self.what}"
                + (" (reference claim)" if self.claim else ""))

    def text(self, with_precision: bool = True) -> str:
        p = f" ({self.precision})" if with_precision else ""
        return f"{self.a} vs {self.b}{p}: {self.value_text}"


def engine_label(engine: str) -> str:
    e = ENGINES.get(engine)
    return e.label if e else engine


def engine_family(engine: str) -> str:
    e = ENGINES.get(engine)
    return e.family if e else engine


def pair_ratios(items: list[tuple[str, str, float, bool]], what: str,
                 claims: frozenset[tuple[str, str]] = frozenset()) -> list[Ratio]:
    """items: (engine, precision, value > 0, value is only a lower bound) in the artifact's
    order; `claims`: the (engine, precision) whose value is the reference runner's claim. Per precision: each engine against the first listed, then family bests against each
    other (a family with one engine goes by the engine's label); a pair is stated once, the
    larger first; a pair of two lower bounds says nothing and is left out."""
    out: list[Ratio] = []
    for precision in dict.fromkeys(p for _, p, _, _ in items):
        valid = [(e, v, lb) for e, p, v, lb in items if p == precision]
        claimed = {e for e, p in claims if p == precision}
        if len(valid) < 2:
            continue
        seen: set[frozenset[str]] = set()

        def add(a: str, va: float, la: bool, b: str, vb: float, lb: bool) -> None:
            if va < vb:
                a, va, la, b, vb, lb = b, vb, lb, a, va, la
            key = frozenset((a, b))
            if key in seen or (la and lb):
                return
            seen.add(key)
            out.append(Ratio(precision, a, b, va / vb, what, "≥" if la else "≤" if lb else "",
                             bool(names_claimed & {a, b})))

        # A family best ("PyTorch best") is a claim when its best member is.
        names_claimed = {engine_label(e) for e in claimed}
        base_e, base_v, base_lb = valid[0]
        for e, v, lb in valid[1:]:
            add(engine_label(e), v, lb, engine_label(base_e), base_v, base_lb)
        fams: dict[str, list[tuple[str, float, bool]]] = {}
        for e, v, lb in valid:
            fams.setdefault(engine_family(e), []).append((e, v, lb))

        def best(fam: str) -> tuple[str, float, bool]:
            members = fams[fam]
            e, v, lb = max(members, key=lambda m: m[1])
            name = engine_label(e) if len(members) == 1 else f"{fam} best"
            if e in claimed:
                names_claimed.add(name)
            return name, v, lb

        names = list(fams)
        for i, fa in enumerate(names):
            for fb in names[i + 1:]:
                add(*best(fa), *best(fb))
    return out


def intervals_overlap(a: tuple[float | None, float | None], b: tuple[float | None, float | None]) -> bool | None:
    """Do two confidence intervals overlap? None when either is missing."""
    if None in a or None in b:
        return None
    return not (a[1] < b[0] or b[1] < a[0])
