"""Max-batch's typed configuration: built and checked once from the flags, written into the
artifact's "configuration", and rebuilt from a partial's for `--resume` through the same checks."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from .search.protocol import SearchConfig
from .search.strategies import STRATEGIES
from ...errors import Fail
from ...run.config import (BOOL, COMMON_KEYS, DEFAULT_IMAGE_SIZE, INT, STR, RunConfig, check_counts, check_min_batch,
                          engine_names)

DEFAULT_MAX_BATCH = 1 << 20

# `--engines auto` (the default): the engine list that fits the device the run resolved to. On a
# GPU, eager and torch.compile (the main job as a user meets it). On the CPU, eager only: inductor
# compiles each candidate's batch afresh in its fresh process (static shapes, as in a training run),
# about a minute per candidate on 2 cores, so torch.compile's search alone took 511 s of a first
# run there (results/reference/reports/first-run-cpu.md). It stays one flag away.
AUTO_ENGINES = "auto"
GPU_DEFAULT_ENGINES = ("pytorch-eager", "pytorch-compile")
CPU_DEFAULT_ENGINES = ("pytorch-eager",)
CPU_LEFT_OUT_NOTE = ("engines: pytorch-eager (auto, on the CPU); pytorch-compile is left out: inductor compiles "
                     "every candidate afresh, 40-60 s each on 2 cores (8.5 min for its search on such a machine); "
                     "add it with --engines pytorch-eager,pytorch-compile")


# --prestart-by: a fork server per slot (where no memory cap applies; else spares), or spares only.
PRESTART_BY = ("fork", "spares")


@dataclass(frozen=True)
class EngineChoice:
    """The engines a new run uses and, when `--engines auto` left one out, the line that says so."""

    engines: str  # comma-separated, as --engines takes them
    note: str | None = None


def engines_for(requested: str, device: str) -> EngineChoice:
    """`--engines` for a run on `device` (cuda/cpu): an explicit list as given; auto per device."""
    if requested.strip() != AUTO_ENGINES:
        return EngineChoice(requested)
    if device == "cpu":
        return EngineChoice(",".join(CPU_DEFAULT_ENGINES), CPU_LEFT_OUT_NOTE)
    return EngineChoice(",".join(GPU_DEFAULT_ENGINES))


@dataclass(frozen=True)
class MaxbatchRecorded:
    """Max-batch's own "configuration" keys as an artifact recorded them, for reports: each value as
    written, a missing key the default a reader prints (see kitctl.core.recorded; `MaxbatchConfig`
    below is the strict, checked side)."""

    start_batch: Any = None
    max_batch: Any = None
    calibration_batch: Any = None
    strategy: Any = None
    steps: Any = "?"  # what one candidate runs, as text ("one warm-up step, one measured step")
    min_batch: Any = 1  # the search's floor (older artifacts: 1)


def check_slots(slots: str, gpus: str | None, cluster: str | None, speculate: bool) -> str:
    """--slots as the configuration records it ("1", "N" or "auto"); Fail on what no run takes."""
    from ...core.slots import SlotsError, parse_slots

    try:
        n = parse_slots(slots)
    except SlotsError as exc:
        raise Fail(str(exc)) from None
    if n != 1 and (gpus is not None or cluster is not None):
        raise Fail("--slots runs several candidates on one device: it does not combine with --gpus or --cluster")
    if n != 1 and not speculate:
        raise Fail("--slots fills its slots with the candidates the search would ask for next: it needs --speculate")
    return "auto" if n is None else str(n)


@dataclass(frozen=True)
class MaxbatchConfig:
    run: RunConfig
    start_batch: int
    max_batch: int
    calibration_batch: int
    strategy: str
    gpus: str | None = None  # --gpus "0,1" | "all" | UUIDs: one lane per GPU (None: one GPU)
    cluster: str | None = None  # --cluster ray://HOST:PORT | auto: cells placed by Ray
    gpu_model: str | None = None  # --gpu-model: only nodes offering that custom resource
    # --speculate: lanes left without a cell of their own run further candidates of a running
    # cell (benchmarks/maxbatch/search/speculate.py); the answer is the sequential search's either way.
    speculate: bool = True
    # --slots: up to N candidates of one search at once on one device ("1": one at a time, "auto":
    # as many as fit; core/slots.py). Written into the configuration only when not "1", so a run
    # with one slot records exactly what a run before --slots did.
    slots: str = "1"
    # --prestart (local runtime, PyTorch trials): the next candidate's process starts and imports its framework
    # while the current one runs (runtimes/local.py). Written only when on, as slots.
    prestart: bool = False
    # How (PRESTART_BY): "fork", a fork server per slot that imports once and forks each candidate
    # (runtimes/forkserver.py), or "spares", whole processes started ahead. Written with prestart; a run recorded
    # before the choice used spares.
    prestart_by: str = "fork"

    BENCHMARK: ClassVar[str] = "maxbatch"  # `kitctl run maxbatch`, the artifact's "benchmark"
    TITLE: ClassVar[str] = "Max batch"  # in headings
    OWN_KEYS: ClassVar[dict[str, tuple[type, ...]]] = {"start_batch": INT, "max_batch": INT,
                                                        "calibration_batch": INT, "strategy": STR,
                                                        "gpus": STR + (type(None),),
                                                        "cluster": STR + (type(None),),
                                                        "gpu_model": STR + (type(None),),
                                                        "speculate": BOOL, "slots": STR, "prestart": BOOL,
                                                        "prestart_by": STR}
    # The recorded settings a resume must find exactly as a run with them would write them.
    SETTINGS: ClassVar[tuple[str, ...]] = (*COMMON_KEYS, *OWN_KEYS, "seed", "ci_level", "image_size")

    @classmethod
    def from_flags(cls, engines: str, precision: str, device: str, vram_limit: int | None, reserve: int,
                   start_batch: int, max_batch: int, timeout: float | None, runtime: str, dataset: str,
                   data_dir: str | None, cudnn_benchmark: bool, memory_limit: int | None,
                   calibration_batch: int, strategy: str, gpu: str | None,
                   gpu_request: str | None = None, gpus: str | None = None, cluster: str | None = None,
                   gpu_model: str | None = None, speculate: bool = True,
                   image_size: int = DEFAULT_IMAGE_SIZE, slots: str = "1",
                   prestart: bool = False, prestart_by: str = "fork") -> MaxbatchConfig:
        names = engine_names(engines)
        if cluster is not None:
            from ...runtimes.ray import check_form

            check_form(cluster)
            if gpus is not None or gpu is not None:
                raise Fail("--cluster: Ray places each cell on a node's GPU; --gpu and --gpus do not apply")
        if gpu_model is not None and (cluster is None or device != "cuda" or not gpu_model.strip()):
            raise Fail("--gpu-model picks the nodes of a --cluster run on --device cuda (a non-empty name)")
        if gpus is not None:
            tokens = [t.strip() for t in gpus.split(",")]
            if not all(tokens) or ("all" in tokens and len(tokens) > 1):
                raise Fail(f"--gpus takes indices or UUIDs separated by commas, or all (got {gpus!r})")
            if device != "cuda":
                raise Fail("--gpus places candidates on GPUs: it needs --device cuda")
            first = None if gpus.strip() == "all" else tokens[0]
            if gpu is not None and gpu != first:
                raise Fail("--gpu and --gpus: give one (the run starts on the first GPU --gpus lists)")
            gpus, gpu = ",".join(tokens), first
        slots = check_slots(slots, gpus, cluster, speculate)
        check_min_batch("--start-batch", start_batch)
        if max_batch <= 0:
            raise Fail(f"--max-batch must be > 0 (got {max_batch})")
        if max_batch < start_batch:
            raise Fail(f"--max-batch {max_batch} is below --start-batch {start_batch}")
        if calibration_batch <= 0:
            raise Fail(f"--calibration-batch must be > 0 (got {calibration_batch})")
        if strategy not in STRATEGIES:
            raise Fail(f"unknown --strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
        check_counts(("--start-batch", start_batch), ("--max-batch", max_batch),
                     ("--calibration-batch", calibration_batch))
        run = RunConfig.from_flags(names, precision, device, gpu, vram_limit, reserve, timeout, runtime, dataset,
                                   data_dir, cudnn_benchmark, memory_limit, gpu_request, image_size=image_size)
        if prestart_by not in PRESTART_BY:
            raise Fail(f"--prestart-by takes {' or '.join(PRESTART_BY)} (got {prestart_by!r})")
        if prestart and runtime == "docker":
            raise Fail("--prestart starts the next candidate's process early on the local runtime; Docker starts "
                       "a fresh container per candidate (use --runtime local)")
        return cls(run, start_batch, max_batch, calibration_batch, strategy, gpus, cluster, gpu_model, speculate,
                   slots, bool(prestart), prestart_by)

    @classmethod
    def from_json(cls, recorded: dict[str, Any]) -> MaxbatchConfig:
        """The configuration a run with a partial's settings would have; Fail where no run could."""
        # Partials from before --gpus/--cluster ran on one GPU.
        # Partials from before --speculate: the default (their trials are all on the path).
        # Partials from before --slots (and runs with one slot, which do not write the key): one slot.
        recorded = {"gpus": None, "cluster": None, "gpu_model": None, "speculate": True, "slots": "1",
                    "prestart": False, "prestart_by": "spares", **recorded}
        flags = RunConfig.flags_of_json(recorded, cls.OWN_KEYS)
        return cls.from_flags(start_batch=recorded["start_batch"], max_batch=recorded["max_batch"],
                              calibration_batch=recorded["calibration_batch"], strategy=recorded["strategy"],
                              gpus=recorded["gpus"], cluster=recorded["cluster"], gpu_model=recorded["gpu_model"],
                              speculate=recorded["speculate"], slots=recorded["slots"],
                              prestart=recorded["prestart"], prestart_by=recorded["prestart_by"],
                              **flags)

    def to_json(self) -> dict[str, Any]:
        return {**self.run.json_head(), "start_batch": self.start_batch, "max_batch": self.max_batch,
                "calibration_batch": self.calibration_batch, "strategy": self.strategy, "gpus": self.gpus,
                "cluster": self.cluster, "gpu_model": self.gpu_model, "speculate": self.speculate,
                **({"slots": self.slots} if self.slots != "1" else {}),
                **({"prestart": True, "prestart_by": self.prestart_by} if self.prestart else {}),
                "steps": "one warm-up step, one measured step", **self.run.json_tail()}

    def with_run(self, run: RunConfig) -> MaxbatchConfig:
        return replace(self, run=run)

    @property
    def search(self) -> SearchConfig:
        return SearchConfig(self.start_batch, self.max_batch, min_batch=self.run.min_batch)

    def cell_problem(self, cell: dict[str, Any]) -> str | None:
        """Why a partial's recorded cell is not one this search could have left, or None."""
        from .cells import cell_search, replay_problem, slot_offset
        from .results import cell_of

        typed = cell_of(cell)
        return replay_problem(typed.trials, cell_search(self.search, typed), self.strategy, slot_offset(typed))
