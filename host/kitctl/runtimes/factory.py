"""The runtime a run uses, by name (auto, docker, local): the one place that picks it, with the notes the user
should see (a fallback to local, orphans swept)."""
from __future__ import annotations

from ..errors import Fail
from .base import RuntimeUnavailable


def make_runtime(name: str, engines: list, device: str, gpu_uuid: str | None, run_id: str,
                 memory_limit: int | None, data_dir: str | None, python: str | None, notes: list[str],
                 gpu_request: str = "auto", images: dict[str, str] | None = None):
    """The runtime the run uses; `notes` collects what the user should know (fallback, sweep).
    `images` (a resume) pins each engine's Docker image by id."""
    from .local import LocalRuntime

    if name in ("auto", "docker"):
        try:
            from . import docker as dockerrt
        except ImportError as exc:
            if name == "docker":
                raise Fail(f"--runtime docker needs the Docker SDK: pip install docker ({exc})") from None
            dockerrt = None
        if dockerrt is not None:
            fallback: list[str] = []
            try:
                rt = dockerrt.from_cli(engines=engines, device=device, gpu_uuid=gpu_uuid, run_id=run_id,
                                       memory_limit_mib=memory_limit, data_dir=data_dir,
                                       required=(name == "docker"), fallback=fallback,
                                       gpu_request=gpu_request, images=images)
            except RuntimeUnavailable as exc:
                raise Fail(str(exc)) from None
            if rt is not None:
                if rt.swept:
                    notes.append(f"removed {len(rt.swept)} orphaned kit container(s): {', '.join(rt.swept)}")
                return rt
            notes.extend(f"--runtime auto: using local ({why})" for why in fallback)
    try:
        LocalRuntime.check(engines, python)
    except RuntimeUnavailable as exc:
        raise Fail(str(exc)) from None
    return LocalRuntime(gpu_uuid=gpu_uuid, python=python, memory_limit_mib=memory_limit, run_id=run_id)
