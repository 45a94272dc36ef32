"""`kitctl doctor`'s checks, one small named function each, in the order they run (CHECKS).

Each writes its line(s) into `ctx.rep` and leaves what later checks need on `ctx`; a check that
breaks reports itself as failed, never raises.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any

from .base import FIX_CDI, FIX_DOCKER, FIX_DRIVER, FIX_TOOLKIT, Host, Report, _driver_major, _one_line, _safe_info, cuda_requirement


def check_compose(ctx: Host) -> None:
    """compose.yaml parses (the image names come from it)."""
    rep, compose_path = ctx.rep, ctx.compose_path
    compose = None
    try:
        from ..images.compose import ComposeError, load_compose

        try:
            compose = load_compose(compose_path)
            desc = "; ".join(f"{s.name}: {', '.join(s.engines) or 'no engines'}" for s in compose.services.values())
            rep.add("compose", "ok", f"{compose.path}: {len(compose.services)} service(s) ({desc})")
        except ComposeError as exc:
            rep.add("compose", "error", str(exc), "fix compose.yaml (it names every engine image); "
                    "`docker-compose -f compose.yaml config` shows what Compose makes of it")
    except Exception as exc:  # noqa: BLE001
        rep.add("compose", "error", f"reading compose.yaml failed: {_one_line(exc)}")
    ctx.compose = compose


def check_docker(ctx: Host) -> None:
    """The daemon answers; its version."""
    rep, client = ctx.rep, ctx.client
    own_client = client is None
    docker_ok = False
    try:
        if client is None:
            from ..runtimes.docker import docker_client

            client = docker_client(timeout=30)
        v = client.version()
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        rep.add("docker", "ok", f"Docker {v.get('Version', '?')} (API {v.get('ApiVersion', '?')}, "
                f"{v.get('Os', '?')}/{v.get('Arch', '?')}) answers at {host}")
        docker_ok = True
    except ImportError as exc:
        rep.add("docker", "error", f"the Docker SDK for Python is missing ({exc})", "pip install docker")
        client = None
    except Exception as exc:  # noqa: BLE001  RuntimeUnavailable, APIError, OSError
        rep.add("docker", "error", _one_line(exc), FIX_DOCKER)
        client = None
    ctx.own_client = own_client
    ctx.docker_ok = docker_ok
    ctx.client = client


def check_nvml(ctx: Host) -> None:
    """The NVIDIA driver through NVML: GPUs, driver version."""
    rep, nvml = ctx.rep, ctx.nvml
    driver: str | None = None
    gpus: list[tuple[int, Any, Any]] = []  # (index, handle, GpuInfo)
    try:
        from ..core.gpu import GpuError, Nvml

        try:
            nvml = nvml if nvml is not None else Nvml()
            n = nvml.count()
            for i in range(n):
                h = nvml.handle(i)
                gpus.append((i, h, nvml.info(i, h)))
            if gpus:
                driver = gpus[0][2].driver
                names = "; ".join(f"{i}: {g.name} {g.total_mib:,.0f} MiB {g.uuid}" for i, _, g in gpus)
                cuda = gpus[0][2].cuda_driver_version
                rep.add("nvml", "ok", f"NVIDIA driver {driver}{f' (CUDA {cuda})' if cuda else ''}, "
                        f"{len(gpus)} GPU(s): {names}")
            else:
                rep.add("nvml", "error", f"NVIDIA driver {nvml.lib.nvmlSystemGetDriverVersion()} sees no GPU",
                        "check that the GPU is attached (nvidia-smi, lspci | grep -i nvidia)")
        except GpuError as exc:
            msg = str(exc).split("; on a host without a GPU")[0]
            rep.add("nvml", "error", msg if msg.startswith("no NVIDIA driver") else f"no NVIDIA driver: {msg}",
                    FIX_DRIVER)
    except Exception as exc:  # noqa: BLE001
        rep.add("nvml", "error", f"NVML failed: {_one_line(exc)}", FIX_DRIVER)
    ctx.driver = driver
    ctx.gpus = gpus
    ctx.nvml = nvml


def check_images(ctx: Host) -> None:
    """The image `kitctl run` would use for each compose service: present and the kit's."""
    rep, compose, client, variant = ctx.rep, ctx.compose, ctx.client, ctx.variant
    rows: list[dict[str, Any]] = []
    if compose is not None:
        try:
            from ..images.store import image_rows

            rows = image_rows(client, compose, list(compose.services))  # no client: all "absent"
        except Exception as exc:  # noqa: BLE001
            rep.add("images", "error", f"listing the engine images failed: {_one_line(exc)}")
    rep.images = [{k: r[k] for k in ("service", "variant", "image", "present", "short_id", "repo_digests",
                                     "framework_version", "cuda_version", "expected_cuda_version", "unfit")}
                  for r in rows]
    run_rows = []
    if compose is not None:
        for svc in compose.services.values():
            v = variant if variant in svc.variants else None
            name = compose.image(svc.name, v)
            row = next((r for r in rows if r["image"] == name and r["service"] == svc.name), None)
            run_rows.append((svc.name, name, row))
            if client is None:
                rep.add(f"image:{svc.name}", "skip", f"{name}: not checked (no Docker daemon)")
            elif row is not None and row["present"] and row.get("unfit"):
                rep.add(f"image:{svc.name}", "error", f"{name} is present but is not the kit's {svc.name} image: "
                        f"{row['unfit']}",
                        f"kitctl images build {svc.name}{' --variant ' + v if v else ''} (it replaces the name; "
                        f"or remove the image: docker rmi {name})")
            elif row is not None and row["present"]:
                digest = f", {row['repo_digests'][0]}" if row["repo_digests"] else ""
                rep.add(f"image:{svc.name}", "ok", f"{name} present ({row['short_id']}, "
                        f"{row['framework_version'] or '?'}, CUDA {row['cuda_version'] or '?'}{digest})")
            else:
                rep.add(f"image:{svc.name}", "warn", f"{name} is not present",
                        f"kitctl images build {svc.name}{' --variant ' + v if v else ''} "
                        f"(or kitctl images pull {svc.name} --registry HOST:PORT)")
    ctx.rows = rows


def check_nvidia_runtime(ctx: Host) -> None:
    """Which GPU request the daemon honours (a throw-away container per kind)."""
    rep, client, rows, gpus, probe = ctx.rep, ctx.client, ctx.rows, ctx.gpus, ctx.probe
    nvidia_ok = False
    if client is None:
        rep.add("nvidia-runtime", "skip", "not checked: no Docker daemon", FIX_DOCKER)
    else:
        present = [r["image"] for r in rows if r["present"] and not r.get("unfit")]
        info = _safe_info(client)
        runtimes = ", ".join(sorted((info.get("Runtimes") or {}).keys())) or "?"
        cdi_dirs = info.get("CDISpecDirs")
        cdi_note = ("no CDI (Docker < 25)" if cdi_dirs is None else
                    f"CDI spec dirs {', '.join(cdi_dirs)}" if cdi_dirs else "CDI off")
        daemon = f"daemon runtimes: {runtimes}; {cdi_note}"
        if not present:
            rep.add("nvidia-runtime", "warn",
                    f"cannot be probed without an engine image ({daemon})",
                    "build one first: kitctl images build")
        elif not probe:
            rep.add("nvidia-runtime", "skip", f"probe skipped (--no-probe; {daemon})")
        else:
            from ..runtimes.docker import probe_gpu_request

            try:
                found = probe_gpu_request(client, present[0], gpus[0][2].uuid if gpus else None, "auto",
                                          timeout_s=120, every=True)
                said = "; ".join(f"{r.kind}: {'works' if why is None else 'refused (' + why + ')'}"
                                 for r, why in found.tried)
                works = found.request  # the first that works in --gpu-request auto's order
            except Exception as exc:  # noqa: BLE001
                said, works = f"the probe failed: {_one_line(exc)}", None
            if works is not None:
                nvidia_ok = True
                rep.add("nvidia-runtime", "ok", f"a GPU container starts with the {works.describe()} request "
                        f"(--gpu-request auto uses {works.kind}); {said} (probe with {present[0]}, removed; "
                        f"{daemon})")
            else:
                rep.add("nvidia-runtime", "error", f"the daemon attaches a GPU by neither request — {said} "
                        f"(probe with {present[0]}; {daemon})", f"{FIX_TOOLKIT}; {FIX_CDI}")
    ctx.nvidia_ok = nvidia_ok


def check_cuda(ctx: Host) -> None:
    """The driver against each image's CUDA: which images this host can run."""
    rep, driver, rows, client = ctx.rep, ctx.driver, ctx.rows, ctx.client
    major = _driver_major(driver)
    seen: set[str] = set()
    for r in rows:
        if r["image"] in seen:
            continue
        seen.add(r["image"])
        if r["present"] and r.get("unfit"):
            continue  # not an engine image: its image:<svc> check says why
        cuda = r["cuda_version"] if r["present"] else r["expected_cuda_version"]
        kind, need = cuda_requirement(cuda)
        where = "" if r["present"] else (" (not built; CUDA from compose.yaml)" if client is not None
                                         else " (CUDA from compose.yaml)")
        name = f"cuda:{r['image']}"
        if kind == "cpu":
            rep.add(name, "ok", f"CPU build (CUDA none){where}: runs anywhere, --device cpu only")
            if r["present"]:
                rep.cpu_only.append(r["image"])
        elif kind == "unknown" or need is None:
            rep.add(name, "warn", f"CUDA {cuda or 'unknown'}{where}: no known driver minimum",
                    "check NVIDIA's CUDA compatibility table against `nvidia-smi`")
        elif major is None:
            rep.add(name, "error", f"CUDA {cuda} needs driver ≥ {need}; no NVIDIA driver here{where}",
                    FIX_DRIVER.replace("≥ 580 for CUDA 13 images", f"≥ {need}"))
        elif major < need:
            rep.add(name, "error", f"CUDA {cuda} needs driver ≥ {need}, this host has {driver}{where}",
                    f"upgrade the NVIDIA driver to ≥ {need}, or build an image for an older CUDA "
                    f"(--build-arg CUDA_VERSION=… with a matching base and lock)")
        else:
            rep.add(name, "ok", f"CUDA {cuda} needs driver ≥ {need}; {driver} runs it{where}")
            if r["present"]:
                rep.runnable.append(r["image"])

    if seen:
        cannot = [c.name[len("cuda:"):] for c in rep.checks if c.name.startswith("cuda:") and c.level != "ok"]
        can = [*rep.runnable, *(f"{i} (--device cpu only)" for i in rep.cpu_only)]
        rep.add("cuda", "ok" if rep.runnable else "warn",
                f"this host can run: {', '.join(can) or 'no present engine image'}"
                + (f"; cannot run: {', '.join(cannot)}" if cannot else ""),
                None if rep.runnable else "a GPU run needs a present image whose CUDA this driver supports")


def check_gpu_idle(ctx: Host) -> None:
    """Each GPU holds no memory, or who holds it."""
    rep, gpus, nvml, idle_threshold_mib = ctx.rep, ctx.gpus, ctx.nvml, ctx.idle_threshold_mib
    if not gpus:
        rep.add("gpu-idle", "skip", "not checked: no GPU through NVML")
    for i, h, g in gpus:
        try:
            from ..core.gpu import check_idle

            busy = check_idle(nvml, h, idle_threshold_mib)
            if busy is None:
                rep.add(f"gpu-idle:{i}", "ok", f"GPU {i} idle ({nvml.used_mib(h):,.0f} MiB in use, "
                        f"threshold {idle_threshold_mib:,.0f} MiB)")
            else:
                rep.add(f"gpu-idle:{i}", "warn", busy,
                        "stop those processes or pick another GPU (--gpu); a busy GPU lowers the max batch "
                        "(--require-gpu-idle refuses to start)")
        except Exception as exc:  # noqa: BLE001
            rep.add(f"gpu-idle:{i}", "warn", f"GPU {i}: reading its memory failed: {_one_line(exc)}")


def check_disk(ctx: Host) -> None:
    """Free space where Docker keeps images (DockerRootDir)."""
    rep, client, min_free_gib = ctx.rep, ctx.client, ctx.min_free_gib
    if client is None:
        rep.add("disk", "skip", "not checked: no Docker daemon")
    else:
        root = _safe_info(client).get("DockerRootDir")
        try:
            if not root:
                raise OSError("the daemon did not report DockerRootDir")
            du = shutil.disk_usage(root)
            free = du.free / 2**30
            detail = f"{free:,.1f} GiB free of {du.total / 2**30:,.0f} GiB at {root} (Docker's data root)"
            if free < min_free_gib:
                rep.add("disk", "warn", f"{detail}: below {min_free_gib:.0f} GiB",
                        "free space: kitctl clean --images, docker image prune, or move Docker's data-root")
            else:
                rep.add("disk", "ok", detail)
        except OSError as exc:
            rep.add("disk", "skip", f"cannot see Docker's data root {root or '?'} from here "
                    f"({exc.strerror or exc}); a remote daemon?")


def check_orphans(ctx: Host) -> None:
    """Kit containers whose owner is gone (`kitctl clean` removes them)."""
    rep, client = ctx.rep, ctx.client
    if client is not None:
        try:
            from ..runtimes.docker import sweep_orphans

            orphans = sweep_orphans(client, dry_run=True)
            if orphans:
                rep.add("orphans", "warn", f"{len(orphans)} orphaned kit container(s): {', '.join(orphans)}",
                        "kitctl clean")
            else:
                rep.add("orphans", "ok", "no orphaned kit containers")
        except Exception as exc:  # noqa: BLE001
            rep.add("orphans", "warn", f"listing kit containers failed: {_one_line(exc)}")


def check_local_trials(ctx: Host) -> None:
    """Compiled trials (OpenNN) for `--runtime local`."""
    local_trial_checks(ctx.rep)


def check_gpu_run(ctx: Host) -> None:
    """Can `kitctl run maxbatch --runtime docker` start on the GPU here?"""
    rep, docker_ok, gpus, client, nvidia_ok = ctx.rep, ctx.docker_ok, ctx.gpus, ctx.client, ctx.nvidia_ok
    why = []
    if not docker_ok:
        why.append("no Docker daemon")
    if not gpus:
        why.append("no GPU through NVML")
    if client is not None and not nvidia_ok:
        why.append("the daemon cannot attach a GPU (neither the NVIDIA Container Toolkit nor CDI)")
    if gpus and not rep.runnable:
        why.append("no present engine image this driver can run")
    rep.gpu_run = not why
    rep.gpu_why = why
    if rep.gpu_run:
        rep.add("gpu-run", "ok", f"a GPU run can start here: kitctl run maxbatch --runtime docker "
                f"(images: {', '.join(rep.runnable)})")
    else:
        cpu = (f"; --device cpu can still run with {', '.join(rep.cpu_only)}" if rep.cpu_only and docker_ok else "")
        rep.add("gpu-run", "error", f"a GPU run cannot start here: {'; '.join(why)}{cpu}",
                "fix the ✗ lines above")


def check_cpu_run(ctx: Host) -> None:
    """Can `kitctl run maxbatch --device cpu` (what --device auto falls back to) start here: locally
    with this interpreter's PyTorch, or in a present engine image; and under which memory cap."""
    from ..core.device import available_ram_mib, default_cpu_cap

    rep = ctx.rep
    cap, _ = default_cpu_cap(available_ram_mib())
    torch_version, torch_why = _local_torch(ctx.python)
    images = [i["image"] for i in rep.images if i.get("present") and not i.get("unfit")] if ctx.docker_ok else []
    ways = []
    if torch_version:
        ways.append(f"--runtime local with torch {torch_version}")
    if images:
        ways.append(f"--runtime docker with {images[0]}")
    rep.cpu_run = bool(ways)
    if rep.cpu_run:
        rep.cpu_how = f"{' or '.join(ways)}, default memory cap {cap:,} MiB"
        rep.add("cpu-run", "ok", f"a CPU run can start here: kitctl run maxbatch --device cpu ({rep.cpu_how})")
    else:
        rep.cpu_why = [torch_why, "no engine image present" if ctx.docker_ok else "no Docker daemon"]
        rep.add("cpu-run", "error", f"a CPU run cannot start here: {'; '.join(rep.cpu_why)}",
                "install the CPU wheel here: python3 -m pip install torch --index-url "
                "https://download.pytorch.org/whl/cpu (or build an image: kitctl images build)")


def _local_torch(python: str | None) -> tuple[str | None, str]:
    """(torch's version in the local interpreter, or None with why)."""
    import subprocess
    import sys

    code = "import torch,sys; sys.stdout.write(torch.__version__)"
    try:
        p = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"the local interpreter did not answer ({_one_line(exc)})"
    if p.returncode != 0 or not p.stdout.strip():
        return None, f"no torch in the local interpreter ({python or sys.executable})"
    return p.stdout.strip(), ""


def local_trial_checks(rep: Report) -> None:
    """Compiled trials (OpenNN) for `--runtime local`: built here, and from which commit."""
    from ..core.engines import ENGINES
    from ..core.paths import native_build_info, native_trial

    for engine in {e.trial: e for e in ENGINES.values() if e.native}.values():
        exe, name = native_trial(engine.name), f"local-trial:{engine.trial}"
        if not os.access(exe, os.X_OK):
            rep.add(name, "skip", f"{engine.trial} trial not built at {exe} (only --runtime local needs it)",
                    f"images/{engine.trial}/build.sh SRC {exe.parents[1]}  (README: OpenNN)")
            continue
        try:
            info = json.loads(native_build_info(engine.name).read_text())
            commit = str(info.get(f"{engine.trial}_commit") or "?")[:12]
            built = f"commit {commit}, CUDA archs {info.get('cuda_archs', '?')}, built {info.get('built_at', '?')}"
        except (OSError, ValueError) as exc:
            built = f"no readable build-info.json ({_one_line(exc)})"
        rep.add(name, "ok", f"{engine.trial} trial for --runtime local: {exe} ({built})")


CHECKS = (check_compose, check_docker, check_nvml, check_images, check_nvidia_runtime, check_cuda, check_gpu_idle,
          check_disk, check_orphans, check_local_trials, check_gpu_run, check_cpu_run)
