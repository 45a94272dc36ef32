"""`kitctl clean`: remove what kit runs and builds leave behind.

* orphaned local trials: process groups that a local-runtime run recorded in its run-state file
  and whose controller is gone (runtimes.runstate.sweep_local_orphans; every run sweeps them at
  start too). A live run's trials and a process that merely reuses a recorded PID are left alone.
* orphaned kit containers: labelled `kit.owner-pid`/`kit.host` by this host, owner process gone
  (runtimes.docker.sweep_orphans; every run sweeps them at start too). Containers of live runs
  and of other hosts sharing the daemon are left alone.
* with `--images`: dangling kit images, i.e. untagged (`<none>`) images labelled `kit.engine`:
  the previous build after a rebuild re-tagged the name, an image a pull replaced, and the build
  stages of a multi-stage build (the Docker SDK's legacy builder keeps each stage's last image
  untagged; images/*/Dockerfile label those stages `kit.engine` + `kit.stage`, so they are found
  by label like the rest and nothing unlabelled is ever taken). An image a container still uses is
  kept (and said so). Build stages made before those labels existed carry none and stay.

`--dry-run` says what would go and removes nothing. Exit 0 (when no daemon answers, after the
local trials, with a note that containers were not checked); 2 when `--images` needs a daemon
that does not answer.
"""
from __future__ import annotations

from typing import Any


def clean_host(client: Any, *, images: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Do (or with dry_run, plan) the cleaning; return {dry_run, containers, images, kept_images}."""
    import docker.errors

    from ..images.store import dangling_kit_images, describe_image, one_line
    from .docker import sweep_orphans

    out: dict[str, Any] = {"dry_run": dry_run, "containers": sweep_orphans(client, dry_run=dry_run),
                           "images": [], "kept_images": []}
    if images:
        for img in dangling_kit_images(client):
            desc = describe_image(img)
            if dry_run:
                out["images"].append(desc)
                continue
            try:
                client.images.remove(img.id, force=False, noprune=False)
            except docker.errors.ImageNotFound:
                continue  # gone meanwhile
            except docker.errors.APIError as exc:
                out["kept_images"].append(f"{desc}: {one_line(exc, 160)}")
                continue
            out["images"].append(desc)
    return out
