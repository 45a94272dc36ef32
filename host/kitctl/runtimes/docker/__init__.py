"""The Docker runtime: each candidate a fresh container of the engine's image (docs/method.md, "Runtimes").

  client       the daemon through the SDK: the client, the kit's container labels, orphans, an image's provenance
  gpu_request  how a container gets its GPU (NVIDIA toolkit or CDI), probed once
  build        building an image (`kitctl images build`)
  images       which image runs each engine, checked to be the kit's
  runtime      DockerRuntime (one container per candidate) and `from_cli`, the run's factory
"""
from .build import ImageBuildError, _build_context, build_image
from .client import (LABEL_BATCH, LABEL_ENGINE, LABEL_HOST, LABEL_OWNER_PID, LABEL_OWNER_START, LABEL_PRECISION,
                     LABEL_RUN_ID, daemon_available, docker_client, image_exists, image_provenance, image_trial_code,
                     owner_labels, remove_run_containers, sweep_orphans)
from .gpu_request import GPU_REQUEST_KINDS, GpuProbe, GpuRequest, gpu_request_order, probe_gpu, probe_gpu_request
from .images import compose_images
from .runtime import DockerRuntime, from_cli
from ..base import RuntimeUnavailable

__all__ = ["DockerRuntime", "GPU_REQUEST_KINDS", "GpuProbe", "GpuRequest", "ImageBuildError", "LABEL_BATCH",
           "LABEL_ENGINE", "LABEL_HOST", "LABEL_OWNER_PID", "LABEL_OWNER_START", "LABEL_PRECISION", "LABEL_RUN_ID",
           "RuntimeUnavailable", "_build_context", "build_image", "compose_images", "daemon_available",
           "docker_client", "from_cli", "gpu_request_order", "image_exists", "image_provenance", "image_trial_code",
           "owner_labels", "probe_gpu", "probe_gpu_request", "remove_run_containers", "sweep_orphans"]
