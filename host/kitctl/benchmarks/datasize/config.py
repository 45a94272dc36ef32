"""datasize's typed configuration: built and checked once from the flags, recorded in the artifact,
rebuilt from a partial's record for --resume through the same checks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import Fail
from ...run.config import DataLaunch
from ..data.checks import check_corpus, check_workers, parse_ints, parse_names

# The trial's vocabulary (trials/dataload/writers.py): the host never imports the trial.
FORMATS = ("folder", "webdataset", "ffcv")
ENCODINGS = ("jpeg50", "jpeg90", "jpeg100", "mix90", "raw")
SIDES = "256,384,512,1600"
MIX_COMPRESS_PROBABILITY = 0.75  # recorded; the writer's own constant is the one used
IMAGENET_IMAGES = 1_281_167  # ImageNet-1k's training images: what "ImageNet-equivalent" scales to (recorded)


DEFAULT_TIMEOUT_S = 3600.0  # --timeout's default: one dataset written from the whole corpus

@dataclass(frozen=True)
class DatasizeConfig:
    corpus: str
    formats: tuple[str, ...]
    encodings: tuple[str, ...]
    sides: tuple[int, ...]
    limit: int | None  # the first N corpus images (bytes per image is an average: a sample suffices)
    workers: int  # writer processes
    timeout_s: float
    python: str
    runtime: str = "local"  # local: a fresh process; docker: a fresh container of the format's writer image
    image_tag: str = "ci"  # docker: kitctl/loader-<image>:<tag>

    @classmethod
    def from_flags(cls, corpus: str, formats: str, encodings: str, sides: str, limit: int | None, workers: int,
                   timeout: float | None, python: str | None, runtime: str = "local",
                   image_tag: str = "ci") -> DatasizeConfig:
        launch = DataLaunch.of(runtime, python, timeout, DEFAULT_TIMEOUT_S)
        if limit is not None and limit <= 0:
            raise Fail(f"--limit must be > 0 (got {limit})")
        if workers <= 0:
            raise Fail(f"--workers must be > 0 (got {workers})")
        check_workers("--workers", (workers,))
        return cls(str(check_corpus(corpus)), parse_names("--formats", formats, FORMATS),
                   parse_names("--encodings", encodings, ENCODINGS), parse_ints("--sides", sides, 32), limit, workers,
                   launch.timeout_s, launch.python, launch.runtime, image_tag)

    @classmethod
    def from_json(cls, r: dict[str, Any]) -> DatasizeConfig:
        try:
            return cls.from_flags(r["corpus"], ",".join(r["formats"]), ",".join(r["encodings"]),
                                  ",".join(map(str, r["sides"])), r["limit"], r["workers"], r["timeout_s"], r["python"],
                                  r.get("runtime", "local"), r.get("image_tag", "ci"))
        except (KeyError, TypeError) as exc:
            raise Fail(f"the partial's configuration is not a datasize one ({exc})") from None

    def to_json(self) -> dict[str, Any]:
        return {"corpus": self.corpus, "formats": list(self.formats), "encodings": list(self.encodings),
                "sides": list(self.sides), "limit": self.limit, "workers": self.workers, "timeout_s": self.timeout_s,
                "python": self.python, "runtime": self.runtime, "image_tag": self.image_tag,
                "mix_compress_probability": MIX_COMPRESS_PROBABILITY,
                "imagenet_images": IMAGENET_IMAGES,
                "sizes": "payload = the encoded images alone (ffcv: Reader.alloc_table['size'] summed); file = the "
                         "files on disk (ffcv pads to 8 MiB pages, tar adds headers)"}

    def runtime_record(self) -> dict[str, Any]:
        from ..data.images import docker_runtime, loader_image
        from ..data.loaders import FORMAT_IMAGE

        if self.runtime != "docker":
            return {"name": "local", "interpreter": self.python}
        return docker_runtime({f: loader_image(FORMAT_IMAGE[f], self.image_tag) for f in self.formats})

    def units(self) -> list[tuple[str, str, int]]:
        return [(f, e, s) for e in self.encodings for s in self.sides for f in self.formats]


@dataclass(frozen=True)
class DatasizeRecorded:
    """datasize's "configuration" as an artifact recorded it, for its table and report: each value as written, a
    missing key its default (kitctl.core.recorded; `DatasizeConfig` above is the strict side)."""
    corpus: Any = None
    formats: Any = ()
    encodings: Any = ()
    sides: Any = ()
    limit: Any = None
    mix_compress_probability: Any = None
    imagenet_images: Any = IMAGENET_IMAGES
    sizes: Any = ""
