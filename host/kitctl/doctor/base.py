"""What `kitctl doctor`'s checks share: the report they write into (one `Check` line each), what
earlier checks found (`Host`), and the fixes they name."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import EXIT_NOT_READY, EXIT_READY, EXIT_USAGE  # noqa: F401  (EXIT_USAGE: the refusal code of its checks)

# Minimum Linux driver per CUDA major version (NVIDIA's CUDA toolkit/driver compatibility table;
# forward compatibility packages aside). Images with CUDA "none" (CPU builds) run anywhere.
CUDA_MIN_DRIVER: dict[int, int] = {13: 580, 12: 525, 11: 450}
MIN_FREE_GIB = 20.0  # a CUDA engine image is ~10 GB; a rebuild needs it twice
IDLE_THRESHOLD_MIB = 1024.0

FIX_DRIVER = ("install the NVIDIA driver (≥ 580 for CUDA 13 images) and check it with nvidia-smi; "
              "on a host without a GPU use --device cpu")
FIX_TOOLKIT = ("install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker` "
               "and restart Docker (sudo systemctl restart docker)")
FIX_CDI = ("or generate a CDI spec: `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (Docker < 28.2 also "
           "needs daemon.json {\"features\": {\"cdi\": true}}) and restart Docker")
FIX_DOCKER = ("start the daemon (sudo systemctl start docker) and make its socket usable "
              "(add yourself to the docker group or set DOCKER_HOST), or use --runtime local")


@dataclass
class Check:
    name: str
    ok: bool
    level: str  # ok | warn | error | skip
    detail: str
    fix: str | None = None

    @property
    def symbol(self) -> str:
        return {"ok": "✓", "error": "✗"}.get(self.level, "!")


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    runnable: list[str] = field(default_factory=list)  # images a GPU run can use here
    cpu_only: list[str] = field(default_factory=list)  # present images that run on --device cpu only
    gpu_run: bool = False
    gpu_why: list[str] = field(default_factory=list)  # why a GPU run cannot start (empty: it can)
    cpu_run: bool = False
    cpu_why: list[str] = field(default_factory=list)  # why a CPU run cannot start
    cpu_how: str = ""  # how a CPU run would go here (runtime, framework, default memory cap)

    def add(self, name: str, level: str, detail: str, fix: str | None = None) -> Check:
        c = Check(name=name, ok=level == "ok", level=level, detail=" ".join(detail.split()), fix=fix)
        self.checks.append(c)
        return c

    def get(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    @property
    def exit_code(self) -> int:
        return EXIT_READY if self.gpu_run else EXIT_NOT_READY

    @property
    def verdict(self) -> str:
        """The answer first, in one line: can a GPU run start here, and a CPU run?"""
        gpu = "ready" if self.gpu_run else "not ready because " + ", ".join(self.gpu_why or ["of the ✗ lines below"])
        cpu = ("ready (" + self.cpu_how + ")" if self.cpu_run else
               "not ready because " + ", ".join(self.cpu_why or ["of the ✗ lines below"]))
        return f"GPU run: {gpu}; CPU run: {cpu}"

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "ok": self.gpu_run, "exit_code": self.exit_code, "gpu_run": self.gpu_run,
                "gpu_run_why": self.gpu_why, "cpu_run": self.cpu_run, "cpu_run_why": self.cpu_why,
                "cpu_run_how": self.cpu_how,
                "runnable_images": self.runnable, "cpu_only_images": self.cpu_only,
                "checks": [asdict(c) for c in self.checks], "images": self.images}


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())[:300]


def _driver_major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except (TypeError, ValueError):
        return None


def cuda_requirement(cuda: str | None) -> tuple[str, int | None]:
    """kit.cuda.version → ("cpu"|"cuda"|"unknown", minimum driver major or None)."""
    if cuda is None or str(cuda).strip() in ("", "unknown"):
        return "unknown", None
    if str(cuda).strip().lower() == "none":
        return "cpu", None
    major = _driver_major(cuda)
    if major is None:
        return "unknown", None
    return "cuda", CUDA_MIN_DRIVER.get(major)


@dataclass
class Host:
    """What the checks were given and what the earlier ones found (a check reads what it needs)."""

    rep: Report
    variant: str | None
    idle_threshold_mib: float
    min_free_gib: float
    probe: bool
    compose_path: Any
    client: Any  # a Docker client; None: none (given, or found by check_docker)
    nvml: Any
    own_client: bool = False
    compose: Any = None
    docker_ok: bool = False
    driver: str | None = None
    gpus: list[tuple[int, Any, Any]] = field(default_factory=list)  # (index, handle, GpuInfo)
    rows: list[dict[str, Any]] = field(default_factory=list)
    nvidia_ok: bool = False
    python: str | None = None  # the interpreter a local CPU run would use (default: this one)


def _safe_info(client: Any) -> dict[str, Any]:
    try:
        return client.info() or {}
    except Exception:  # noqa: BLE001
        return {}
