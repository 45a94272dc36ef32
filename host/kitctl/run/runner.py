"""What every benchmark's runner shares: the loop over engines × precisions, one fresh process or
container per unit of work through a `Runtime`, the artifact saved after each, signals and cleanup.

A benchmark's runner (`kitctl/benchmarks/<name>/run.py`) subclasses `UnitRunner` and implements
`_run_cell(engine, precision)`: which units a cell runs and what it records (max batch: calibrate,
then search; throughput: `runs` fresh runs at one batch). The runner only sees `Runtime`,
`Watcher` and the artifact store: it never knows which runtime ran a unit, nor whether a GPU is
behind the watcher.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

from ..core import signals
from ..core.artifact import ArtifactStore, utc_iso
from ..core.budget import Budget
from ..core.engines import Engine
from ..core.outcome import TrialOutcome
from ..core.protocol import TrialRequest
from ..core.signals import Interrupted
from ..core.watch import Watcher
from ..runtimes.base import Runtime, RuntimeUnavailable


# The `what` a view is told for a speculative candidate the runner stopped (maxbatch/search/speculate.py).
CANCELLED = "cancelled"


class View(Protocol):
    def candidate_started(self, engine: str, precision: str, batch: int, what: str) -> None: ...

    def candidate_done(self, engine: str, precision: str, outcome: TrialOutcome, what: str,
                       detail: str = "") -> None: ...

    def note(self, text: str) -> None: ...


class UnitPlan(Protocol):
    """What `UnitRunner` needs of a benchmark's plan (RunPlan, ThroughputPlan)."""

    engines: list[Engine]
    precisions: list[str]
    base_request: TrialRequest  # engine/mode/batch/precision filled per unit
    timeout_s: float
    budget: Budget | None  # None on --device cpu
    watcher_factory: Callable[[float | None], Watcher] | None  # budget → watcher


def cell_key(engine: str, precision: str) -> str:
    return f"{engine}/{precision}"


def find_cell(doc: dict[str, Any], engine: str, precision: str) -> dict[str, Any] | None:
    for c in doc["results"]:
        if c["engine"] == engine and c["precision"] == precision:
            return c
    return None


@dataclass
class UnitRunner:
    """Runs every engine × precision cell of a plan, one fresh process/container per unit of work
    (a benchmark's `_run_cell` decides which units), saving the partial artifact after each;
    SIGINT/SIGTERM/SIGHUP and a runtime that goes away leave it `interrupted` and resumable, and
    the runtime is closed whatever happens."""

    plan: UnitPlan
    runtime: Runtime
    store: ArtifactStore
    doc: dict[str, Any]
    view: View
    _installed: dict[int, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        attach = getattr(self.view, "attach", None)  # the live view's "N done, M left, ETA"
        if attach is not None:
            attach(self.units_left)

    def units_left(self) -> tuple[int, bool] | None:
        """(units still to run, the running one included; whether that is only an upper bound), or
        None when the benchmark cannot say."""
        return None

    # -- signals: SIGTERM and SIGHUP take the same path as Ctrl-C ------------------------
    def _install_signals(self) -> None:
        self._installed = signals.install()

    def _restore_signals(self) -> None:
        signals.restore(self._installed)

    def save(self) -> None:
        self.doc["updated_utc"] = utc_iso()
        self.store.save_partial(self.doc)

    # -- the run -----------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self._install_signals()
        try:
            self.doc["state"] = "running"
            self.save()  # a new run's first write: its partial appears, whole and locked
            self.view.note(f"partial artifact: {self.store.partial}")
            self._run_cells([(e, p) for e in self.plan.engines for p in self.plan.precisions])
            self.doc["state"] = "complete"
            self.doc["finished_utc"] = utc_iso()
            return self.doc
        except (Interrupted, KeyboardInterrupt) as exc:
            # A second signal must not lose the partial: from here on they are ignored.
            signals.stop_interrupting()
            why = str(exc) or "SIGINT"
            if self.store.claimed:  # else nothing was written, and nothing will be
                self.doc["state"] = "interrupted"
                self.doc["interrupted_by"] = why
                self.save()
            raise Interrupted(why) from None
        except RuntimeUnavailable as exc:
            # The runtime went away mid-run (daemon stopped, GPU runtime missing): keep the
            # partial resumable and let the CLI say it in one line.
            if self.store.claimed:
                self.doc["state"] = "interrupted"
                self.doc["interrupted_by"] = f"runtime unavailable: {exc}"
                self.save()
            raise
        finally:
            self._restore_signals()
            self._close()

    def _run_cells(self, cells: list[tuple[Engine, str]]) -> None:
        """Every cell in order (a runner with several lanes runs them side by side)."""
        for engine, precision in cells:
            self._run_cell(engine, precision)

    def _close(self) -> None:
        self.runtime.close()

    def _request(self, engine: Engine, precision: str, batch: int, budget_mib: int | None) -> TrialRequest:
        return replace(self.plan.base_request, engine=engine.name, mode=engine.mode, batch=batch,
                       precision=precision, memory_budget_mib=budget_mib)

    def _watcher(self) -> Watcher | None:
        if self.plan.watcher_factory is None or self.plan.budget is None:
            return None
        return self.plan.watcher_factory(self.plan.budget.budget_mib)

    def _record_versions(self, engine: Engine, outcome: TrialOutcome) -> None:
        ent = self.doc["engines"][engine.name]
        if outcome.result and outcome.result.get("versions") and not ent.get("versions"):
            ent["versions"] = outcome.result["versions"]

    def _run_cell(self, engine: Engine, precision: str) -> None:
        """Run (or continue) one engine × precision cell; the benchmark's own."""
        raise NotImplementedError
