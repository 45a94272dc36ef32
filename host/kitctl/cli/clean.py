"""`kitctl clean`: the command (what it removes and why: kitctl.runtimes.clean)."""
from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from ..errors import fail
from ..runtimes.clean import clean_host


def clean(
    images: bool = typer.Option(False, "--images", help="Also remove dangling kit images (untagged, label kit.engine)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be removed; remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print what was removed as JSON."),
) -> None:
    """Kill orphaned local trials and remove orphaned kit containers (owner process gone);
    with --images, dangling kit images too."""
    from ..images.store import ImageError, open_client
    from ..runtimes.runstate import sweep_local_orphans

    console = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    no_daemon = None
    try:
        client = open_client(timeout=120)
    except ImageError as exc:
        if images:  # asked for what only a daemon can do: refuse before doing anything
            raise fail(exc)
        client, no_daemon = None, str(exc)  # a host without Docker still has local trials to clean
    processes = sweep_local_orphans(dry_run=dry_run)
    res: dict[str, Any] = {"dry_run": dry_run, "containers": [], "images": [], "kept_images": []}
    if client is not None:
        try:
            res = clean_host(client, images=images, dry_run=dry_run)
        except Exception as exc:  # noqa: BLE001  the daemon went away mid-way
            done = f" (after killing orphaned local trial(s): {'; '.join(processes)})" if processes else ""
            raise fail(f"cleaning failed: {' '.join(str(exc).split())[:300]}{done}")
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
