"""dataload's typed configuration: built and checked once from the flags, recorded in the artifact, rebuilt
from a partial's record for --resume through the same checks."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import Fail
from ...run.config import DataLaunch, check_counts
from ..data.checks import check_corpus, check_data_dir, check_workers, parse_ints, parse_names
from ..data.corpus import corpus_images
from ..data.loaders import DATA_ENCODINGS, GPU_LOADERS, LOADER_FORMAT, LOADER_NAMES
from ..data.throttle import ReadCap, block_device
from ...core.cpus import CpuPin, parse_cpus
from ...core.gpu import detect_gpu
from ...core.loader_window import LoaderWindow
from ...core.recorded import view
from ..data.recorded import DataRecorded

LOADERS = LOADER_NAMES
FORMAT_OF, ENCODINGS = LOADER_FORMAT, DATA_ENCODINGS  # which format each loader reads; what a dataset can hold
SOURCES = ("ram", "cold")
CI_LEVEL = 0.95


DEFAULT_TIMEOUT_S = 1800.0  # --timeout's default: a loader run: a warm-up epoch and a window of epochs

@dataclass(frozen=True)
class DataloadConfig:
    corpus: str
    data_dir: str  # where the datasets are written once and reused (<format>-<encoding>-<side>-n<images>)
    loaders: tuple[str, ...]
    workers: tuple[int, ...]
    sources: tuple[str, ...]
    encodings: tuple[str, ...]
    sides: tuple[int, ...]
    runs: int
    epochs: int | None  # with the window rule: a third minimum (None: none); without it (before the rule): exactly
    batch: int
    limit: int | None
    timeout_s: float
    python: str
    runtime: str = "local"  # local: a fresh process; docker: a fresh container of the loader's image
    image_tag: str = "ci"  # docker: the build of every loader image with this tag (compose.yaml: ci, cu130, ...)
    read_mbps: float | None = None  # docker, cold: the loaders' reads of the datasets capped (slow storage)
    ci_level: float = CI_LEVEL
    window: LoaderWindow | None = None  # the window rule; None: a configuration recorded before it (fixed epochs)
    cpus: CpuPin | None = None  # --cpus: each run held to some CPUs (core/cpus.py); None: the host's, as before

    @classmethod
    def from_flags(cls, corpus: str, data_dir: str | None, loaders: str, workers: str, sources: str, encodings: str,
                   sides: str, runs: int, epochs: int, batch: int, limit: int | None, timeout: float | None,
                   python: str | None, runtime: str = "local", image_tag: str = "ci",
                   read_mbps: float | None = None, window_images: int | None = None,
                   window_seconds: float | None = None, steady_tolerance: float | None = None,
                   cpus: str | None = None) -> DataloadConfig:
        """Without window_images and window_seconds (a partial recorded before the rule): exactly `epochs` timed
        epochs, as it was measured."""
        from ..data.images import serving_builds

        launch = DataLaunch.of(runtime, python, timeout, DEFAULT_TIMEOUT_S)
        if runtime == "docker":  # a loader the tag's build does not serve (GPU loader, CPU build): one line, now
            serving_builds(parse_names("--loaders", loaders, LOADERS), image_tag)
        for flag, v in (("--runs", runs), ("--epochs", epochs), ("--batch", batch)):
            if v is not None and v <= 0:
                raise Fail(f"{flag} must be > 0 (got {v})")
        # the same ceiling as the engine benchmarks' counts: --runs 1e30 was accepted and ran until stopped
        check_counts(*((f, v) for f, v in (("--runs", runs), ("--epochs", epochs), ("--batch", batch),
                                             ("--limit", limit)) if v is not None))
        if limit is not None and limit <= 0:
            raise Fail(f"--limit must be > 0 (got {limit})")
        window = None
        if window_images is not None or window_seconds is not None:
            from ...core.loader_window import STEADY_TOLERANCE

            window = LoaderWindow.of(window_images, window_seconds,
                                     STEADY_TOLERANCE if steady_tolerance is None else steady_tolerance, epochs)
        elif epochs is None:
            epochs = 2  # before the window rule: the old default of timed epochs
        on_gpu = [ld for ld in parse_names("--loaders", loaders, LOADERS) if ld in GPU_LOADERS]
        if on_gpu and runtime == "local" and detect_gpu() is None:  # through Docker, gpu_attach says it
            raise Fail(f"--loaders {','.join(on_gpu)}: {' and '.join(on_gpu)} decode on the GPU, and NVML finds no "
                       "GPU on this host; leave them out, or run where there is one")
        c = check_corpus(corpus)
        srcs = parse_names("--source", sources, SOURCES)
        ddir = str(Path(data_dir).expanduser().resolve()) if data_dir else str(c.parent / "datasets")
        if read_mbps is not None:
            if not read_mbps > 0:
                raise Fail(f"--read-mbps must be > 0 (got {read_mbps})")
            if runtime != "docker":
                raise Fail("--read-mbps caps a container's reads (Docker's --device-read-bps): use --runtime docker")
            if "cold" not in srcs:
                raise Fail("--read-mbps caps reads from storage, and a RAM source reads the page cache: "
                           "add --source cold")
        counts = check_workers("--workers", parse_ints("--workers", workers, 1, all_value=os.cpu_count() or 1))
        cfg = cls(str(c), ddir, parse_names("--loaders", loaders, LOADERS), counts,
                  srcs, parse_names("--encoding", encodings, ENCODINGS),
                  parse_ints("--side", sides, 32), runs, epochs, batch, limit, launch.timeout_s, launch.python,
                  launch.runtime, image_tag, float(read_mbps) if read_mbps is not None else None, window=window,
                  cpus=parse_cpus(cpus, counts))
        cfg.read_cap()  # a data dir on no block device is refused here, before anything runs
        n = corpus_images(str(c), limit)
        if batch > n:
            raise Fail(f"--batch {batch} is more than the {n} images of an epoch (the corpus"
                       + (f", --limit {limit}" if limit else "") + "); an epoch would be one partial batch")
        check_data_dir(cfg.data_dir, cfg.corpus, cfg.limit, cfg.datasets())
        return cfg

    def read_cap(self) -> ReadCap | None:
        """The cap on the loaders' reads: the disk that holds the data dir, at read_mbps."""
        if self.read_mbps is None:
            return None
        return ReadCap(self.read_mbps, block_device(Path(self.data_dir)))

    @classmethod
    def from_json(cls, r: dict[str, Any]) -> DataloadConfig:
        try:
            return cls.from_flags(r["corpus"], r["data_dir"], ",".join(r["loaders"]), ",".join(map(str, r["workers"])),
                                  ",".join(r["sources"]), ",".join(r["encodings"]), ",".join(map(str, r["sides"])),
                                  r["runs"], r["epochs"], r["batch"], r["limit"], r["timeout_s"], r["python"],
                                  r.get("runtime", "local"), r.get("image_tag", "ci"), r.get("read_mbps"),
                                  r.get("window_images"), r.get("window_seconds"), r.get("steady_tolerance"),
                                  r.get("cpus"))
        except (KeyError, TypeError) as exc:
            raise Fail(f"the partial's configuration is not a dataload one ({exc})") from None

    def to_json(self) -> dict[str, Any]:
        cap = self.read_cap()
        cold = ("posix_fadvise DONTNEED on every file before each epoch, checked with mincore (<= 5% resident); "
                + (f"reads from {cap.device} capped at {cap.mb_per_s:g} MB/s (docker --device-read-bps): "
                   "slow storage emulated" if cap else "local disk, not a throttled network path"))
        return {"corpus": self.corpus, "data_dir": self.data_dir, "loaders": list(self.loaders),
                "workers": list(self.workers), "sources": list(self.sources), "encodings": list(self.encodings),
                "sides": list(self.sides), "runs": self.runs, "epochs": self.epochs, "batch": self.batch,
                "limit": self.limit, "timeout_s": self.timeout_s, "python": self.python, "runtime": self.runtime,
                "image_tag": self.image_tag, "ci_level": self.ci_level, "read_mbps": self.read_mbps,
                "read_cap": cap.to_json() if cap else None, **(self.window.to_json() if self.window else {}),
                "cpus": self.cpus.given if self.cpus else None,
                "pipeline": "decode -> RandomResizedCrop 224 (scale 0.08-1, ratio 3/4-4/3) -> random horizontal flip "
                            "-> uint8 batch; one warm-up epoch, then the timed epochs",
                "sources_meaning": {"ram": "every file read into the page cache before each epoch, checked with "
                                           "mincore (>= 98% resident)",
                                    "cold": cold}}

    def trial_flags(self) -> list[str]:
        """How the trial times a run: the window rule (with --epochs as its third minimum, when given), or, for a
        configuration recorded before the rule, exactly `epochs` timed epochs."""
        if self.window is None:
            return ["--epochs", str(self.epochs)]
        return [*self.window.flags(), *(["--epochs", str(self.epochs)] if self.epochs else [])]

    def image(self, loader: str) -> str | None:
        """The image a docker run of the loader starts (None with the local runtime)."""
        from ..data.images import serving_builds

        return serving_builds([loader], self.image_tag)[loader].image if self.runtime == "docker" else None

    def runtime_record(self) -> dict[str, Any]:
        from ..data.images import loader_runtime

        return loader_runtime(self)

    def datasets(self) -> list[tuple[str, str, int]]:
        fmts = list(dict.fromkeys(FORMAT_OF[x] for x in self.loaders))
        return [(f, e, s) for e in self.encodings for s in self.sides for f in fmts]

    def cpus_for(self, workers: int) -> tuple[int, ...]:
        """The CPUs a run with this many workers is held to; () without --cpus."""
        return self.cpus.for_workers(workers) if self.cpus else ()

    def cells(self) -> list[tuple[str, str, int, str, int]]:
        return [(ld, e, s, src, w) for e in self.encodings for s in self.sides for src in self.sources
                for ld in self.loaders for w in self.workers]


@dataclass(frozen=True)
class DataloadRecorded(DataRecorded):
    """dataload's "configuration" as an artifact recorded it, for the end table, reports, compare and the agreement
    check: each value as written, a missing key its default (see kitctl.core.recorded; `DataloadConfig` above is
    the strict side, rebuilt from a partial's record for --resume). The window keys are absent before the rule."""

    workers: Any = ()
    sources: Any = ()
    encodings: Any = ()
    sides: Any = ()
    epochs: Any = None
    read_mbps: Any = None
    read_cap: Any = None
    sources_meaning: Any = None
    cpus: Any = None  # --cpus as given (absent: not pinned)


def recorded(doc: dict[str, Any]) -> DataloadRecorded:
    """What a dataload artifact's configuration recorded (read once per document by each reader)."""
    return view(DataloadRecorded, doc)
