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

import json
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

EXIT_OK, EXIT_USAGE = 0, 2


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


def clean(
    images: bool = typer.Option(False, "--images", help="Also remove dangling kit images (untagged, label kit.engine)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be removed; remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print what was removed as JSON."),
) -> None:
    """Kill orphaned local trials and remove orphaned kit containers (owner process gone);
    with --images, dangling kit images too."""
    from ..images.store import ImageError, open_client
    from .runstate import sweep_local_orphans

    console = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    no_daemon = None
    try:
        client = open_client(timeout=120)
    except ImageError as exc:
        if images:  # asked for what only a daemon can do: refuse before doing anything
            err.print(Text(f"kitctl: {exc}"))
            raise typer.Exit(EXIT_USAGE)
        client, no_daemon = None, str(exc)  # a host without Docker still has local trials to clean
    processes = sweep_local_orphans(dry_run=dry_run)
    res: dict[str, Any] = {"dry_run": dry_run, "containers": [], "images": [], "kept_images": []}
    if client is not None:
        try:
            res = clean_host(client, images=images, dry_run=dry_run)
        except Exception as exc:  # noqa: BLE001  the daemon went away mid-way
            done = f" (after killing orphaned local trial(s): {'; '.join(processes)})" if processes else ""
            err.print(Text(f"kitctl: cleaning failed: {' '.join(str(exc).split())[:300]}{done}"))
            raise typer.Exit(EXIT_USAGE)
        finally:
            client.close()
    res["processes"] = processes
    res["containers_not_checked"] = no_daemon
    if as_json:
        print(json.dumps(res, indent=2))
        return
    if no_daemon:
        err.print(Text(f"kitctl: containers not checked: {no_daemon}", style="yellow"))
    verb = "would remove" if dry_run else "removed"
    for p in processes:
        console.print(Text(f"{'would kill' if dry_run else 'killed'} orphaned local trial {p}"))
    for c in res["containers"]:
        console.print(Text(f"{verb} orphaned container {c}"))
    for i in res["images"]:
        console.print(Text(f"{verb} dangling image {i}"))
    for k in res["kept_images"]:
        console.print(Text(f"kept dangling image {k}", style="yellow"))
    if not processes and not res["containers"] and not res["images"]:
        console.print("nothing to remove" + ("" if images else " (dangling kit images: kitctl clean --images)"))
    else:
        killed = f"{'would kill' if dry_run else 'killed'} {len(processes)} local trial(s); " if processes else ""
        console.print(Text(f"{killed}{verb} {len(res['containers'])} container(s), {len(res['images'])} image(s)",
                           style="bold"))
