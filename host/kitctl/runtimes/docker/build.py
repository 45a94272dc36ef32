"""Building an engine image through the SDK (`kitctl images build`): its context, its log, a failure in a few lines."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .client import _daemon_down, _short, docker, requests_exceptions

class ImageBuildError(RuntimeError):
    """A build failed: one line in the message, the build log's tail in `log_tail`."""

    def __init__(self, message: str, log_tail: str = "") -> None:
        super().__init__(message)
        self.log_tail = log_tail


def build_image(client: Any, spec: Any, *, on_line: Callable[[str], None] | None = None,
                network_mode: str | None = None, nocache: bool = False, pull: bool = False,
                log_lines: int = 60) -> str:
    """Build one compose.yaml service (a `compose.BuildSpec`) through the SDK; return the image id.

    `on_line` gets each line of build output (a progress display); on failure an ImageBuildError
    carries the last `log_lines` lines. The classic builder is used (what the SDK speaks).
    """
    tail: list[str] = []
    image_id: str | None = None
    kwargs: dict[str, Any] = dict(buildargs=dict(spec.args),
                                  tag=spec.image, rm=True, forcerm=True, decode=True, nocache=nocache,
                                  pull=pull)
    if network_mode:
        kwargs["network_mode"] = network_mode
    try:
        context = _build_context(spec)
    except OSError as exc:
        raise ImageBuildError(f"building {spec.image} failed: its build context could not be read ({exc})", "")
    try:
        for chunk in client.api.build(fileobj=context, custom_context=True, dockerfile=spec.dockerfile, **kwargs):
            if "stream" in chunk:
                for line in chunk["stream"].splitlines():
                    tail.append(line)
                    del tail[:-log_lines]
                    if on_line is not None:
                        on_line(line)
            if "aux" in chunk and isinstance(chunk["aux"], dict) and chunk["aux"].get("ID"):
                image_id = chunk["aux"]["ID"]
            if "error" in chunk:
                msg = _build_failure(" ".join(str(chunk["error"]).split()), tail)
                raise ImageBuildError(f"building {spec.image} failed: {msg[:300]}", "\n".join(tail))
    except (docker.errors.DockerException, requests_exceptions.RequestException) as exc:
        if isinstance(exc, docker.errors.APIError):
            raise ImageBuildError(f"building {spec.image} failed: {_short(exc, 300)}", "\n".join(tail)) from None
        raise _daemon_down(exc) from None
    finally:
        context.close()
    if image_id is None:
        image_id = client.images.get(spec.image).id
    return image_id


def _build_context(spec: Any) -> Any:
    """The context tar the SDK would send for `path=`, less the other images' wheels/ folders.

    Every engine image's context is the repository root, and each Dockerfile copies only its own
    `images/<engine>/wheel[s]`. The other folders can hold several GB (a CUDA lock's wheels), which
    the daemon would receive and unpack for nothing; leaving them out changes no layer.
    """
    from docker.utils import build as sdk_build

    root = Path(spec.context)
    exclude: list[str] = []
    ignore = root / ".dockerignore"
    if ignore.is_file():  # as the SDK reads it (docker/api/build.py)
        exclude = [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#")]
    own = spec.dockerfile_path.parent
    for wheels in sorted(root.glob("images/*/wheels")):
        if wheels.parent.resolve() != own:
            exclude.append(wheels.relative_to(root).as_posix())
    return sdk_build.tar(str(root), exclude=exclude, dockerfile=(spec.dockerfile, None), gzip=False)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BUILDER_LINE = re.compile(r"^(Step \d+/\d+ :| ---> |Removing intermediate container|Successfully )")


def _build_failure(msg: str, tail: list[str]) -> str:
    """A failed RUN's headline is its whole command; say instead what the step itself printed last
    (e.g. the Dockerfile's one-line check), and its exit code."""
    m = re.match(r"The command '.*' returned a non-zero code: (\d+)$", msg)
    if not m:
        return msg
    step: list[str] = []
    for line in tail:  # the failed step's output only
        step = [] if line.startswith("Step ") else [*step, line]
    # The classic builder wraps the step's stderr in ESC[91m … ESC[0m: its last line first.
    last_err = last_out = None
    in_err = False
    for line in step:
        if "\x1b[91m" in line:
            in_err = True
        text = " ".join(_ANSI.sub("", line).split())
        if text and not _BUILDER_LINE.match(text):
            if in_err:
                last_err = text
            else:
                last_out = text
        if "\x1b[0m" in line:
            in_err = False
    text = last_err or last_out
    return f"{text} (a RUN step exited {m.group(1)})" if text else msg
