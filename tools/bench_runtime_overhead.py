#!/usr/bin/env python3
"""How much does the Docker runtime add per candidate, against the local runtime? (docs/docker-gpu.md, "Docker runtime overhead per candidate")

One run, both runtimes, the same trivial trial: the real trial program with a tiny fast path
(default: pytorch-eager, ResNet-50 max-batch candidate at batch 2 on the CPU). The Docker runtime
starts it in a fresh container of the engine image (create, start, wait, read logs, inspect,
remove); the local runtime as a fresh subprocess of the same trial with this host's Python. Both
run identical work, so the difference is the runtime.

Candidates alternate in ABBA order (docker, local, local, docker, …) after one warm-up of each
(not counted), so drift on a busy machine hits both alike. Reported per runtime: the median
per-candidate wall time the search sees (`runtime.run()` from call to return), the median time
from start to exit inside the runtime, and the trial's own step time (to show the work matched);
then the absolute difference of the medians, the median of the paired differences, and the ratio.
Then (`--floor N`) the runtimes' fixed cost alone: N empty candidates (/bin/true) through the
same container lifecycle and as a plain subprocess; this part does not depend on the interpreter
or the framework inside the image.

    python3 tools/bench_runtime_overhead.py                      # 10 each, image from compose.yaml
    KITCTL_IMAGE_VARIANT=cpu-ci python3 tools/bench_runtime_overhead.py -n 10

Writes results/bench-runtime-overhead-<UTC stamp>.json (kind "kitctl-bench-runtime-overhead").
Exit 0 when measured (whether or not the target is met), 2 when it could not be measured.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
try:
    import kitctl  # noqa: F401
except ImportError:  # not installed: use the checkout
    sys.path.insert(0, str(ROOT / "host"))

TARGET_S = 1.5


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--candidates", type=int, default=10, help="candidates per runtime (default 10)")
    p.add_argument("--warmup", type=int, default=1, help="uncounted candidates per runtime first (default 1)")
    p.add_argument("--engine", default="pytorch-eager")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--variant", default=os.environ.get("KITCTL_IMAGE_VARIANT") or None,
                   help="compose.yaml build variant of the engine image (default: env KITCTL_IMAGE_VARIANT)")
    p.add_argument("--image", help="engine image (default: from compose.yaml)")
    p.add_argument("--python", default=sys.executable, help="interpreter of the local runtime")
    p.add_argument("--gpu-uuid", help="GPU UUID for --device cuda (both runtimes)")
    p.add_argument("--gpu-request", default="auto", choices=["auto", "toolkit", "cdi"],
                   help="how Docker attaches the GPU on --device cuda (default: probe once, what works)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per candidate")
    p.add_argument("--floor", type=int, default=10,
                   help="also time N empty candidates (/bin/true) through each runtime's machinery (0: skip)")
    p.add_argument("--results-dir", type=Path, default=ROOT / "results")
    a = p.parse_args(argv)
    if a.candidates < 1 or a.warmup < 0 or a.batch < 2:
        p.error("need --candidates ≥ 1, --warmup ≥ 0, --batch ≥ 2")
    return a


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    wall = [r["wall_s"] for r in rows]
    inner = [r["elapsed_s"] for r in rows]
    step = [r["step_seconds"] for r in rows if r["step_seconds"] is not None]
    return {
        "n": len(rows),
        "median_wall_s": statistics.median(wall),
        "min_wall_s": min(wall),
        "max_wall_s": max(wall),
        "stdev_wall_s": statistics.stdev(wall) if len(wall) > 1 else 0.0,
        "median_elapsed_s": statistics.median(inner),
        "median_outside_s": statistics.median(w - e for w, e in zip(wall, inner)),
        "median_step_s": statistics.median(step) if step else None,
    }


def _floor(drt: Any, req: Any, n: int) -> dict[str, Any]:
    """The runtimes' own fixed cost: an empty program (/bin/true) through the same steps.

    Docker: the runtime's create kwargs (labels, limits, network off, capabilities dropped) with
    /bin/true as entrypoint, then create, start, wait, read both streams, inspect, remove — what
    DockerRuntime.run does. Local: a fresh /bin/true in its own session, as LocalRuntime starts one.
    """
    import subprocess

    kw = drt.create_kwargs(req)
    kw.update(entrypoint=["/bin/true"], command=[])
    d_total, d_create, d_run, d_down, local = [], [], [], [], []
    for i in range(n):
        kw["name"] = f"{kw['name'][:50]}-floor{i}"
        t0 = time.perf_counter()
        c = drt.client.containers.create(**kw)
        t1 = time.perf_counter()
        try:
            c.start()
            c.wait(timeout=60)
            t2 = time.perf_counter()
            c.logs(stdout=True, stderr=False)
            c.logs(stdout=False, stderr=True)
            c.reload()
        finally:
            c.remove(force=True, v=True)
        t3 = time.perf_counter()
        d_total.append(t3 - t0)
        d_create.append(t1 - t0)
        d_run.append(t2 - t1)
        d_down.append(t3 - t2)
        t0 = time.perf_counter()
        subprocess.run(["/bin/true"], start_new_session=True, stdin=subprocess.DEVNULL,
                       capture_output=True, check=True)
        local.append(time.perf_counter() - t0)
    med = statistics.median
    return {"n": n, "docker_median_s": med(d_total), "docker_create_median_s": med(d_create),
            "docker_run_median_s": med(d_run), "docker_teardown_median_s": med(d_down),
            "local_median_s": med(local), "docker_s": d_total, "local_s": local}


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    from rich.console import Console
    from rich.table import Table

    from kitctl.core.engines import ENGINES
    from kitctl.core.protocol import TrialRequest
    from kitctl.core.provenance import host_info, kit_info
    from kitctl.runtimes.base import RuntimeUnavailable
    from kitctl.runtimes.docker import DockerRuntime, compose_images, image_provenance
    from kitctl.runtimes.local import LocalRuntime

    console = Console(highlight=False)
    if a.engine not in ENGINES:
        console.print(f"bench: unknown engine {a.engine!r}")
        return 2
    eng = ENGINES[a.engine]
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        image = a.image or compose_images([a.engine], a.variant)[a.engine]
        drt = DockerRuntime(image, run_id=run_id, device=a.device, gpu_uuid=a.gpu_uuid, gpu_request=a.gpu_request)
        prov = image_provenance(drt.client, image)
        gpu_request = drt.gpu_request(a.engine).to_json() if a.device == "cuda" else {}
        docker_version = drt.client.version().get("Version")
    except RuntimeUnavailable as exc:
        console.print(f"bench: {exc}")
        return 2
    lrt = LocalRuntime(python=a.python, gpu_uuid=a.gpu_uuid)
    req = TrialRequest(engine=a.engine, mode=eng.mode, benchmark="maxbatch", batch=a.batch, precision="fp32",
                       device=a.device)
    runtimes = {"docker": drt, "local": lrt}
    versions: dict[str, Any] = {}

    def one(name: str, i: int, counted: bool) -> dict[str, Any]:
        t0 = time.perf_counter()
        out = runtimes[name].run(req, timeout_s=a.timeout)
        wall = time.perf_counter() - t0
        res = out.result or {}
        row = {"runtime": name, "index": i, "counted": counted, "wall_s": wall, "elapsed_s": out.elapsed_s,
               "load_avg_1min": round(os.getloadavg()[0], 2),
               "status": out.status.value, "step_seconds": res.get("step_seconds"),
               "warmup_seconds": res.get("warmup_seconds")}
        versions.setdefault(name, res.get("versions"))
        tag = "warm-up" if not counted else f"{i + 1}/{a.candidates}"
        console.print(f"  {name:<6} {tag:>7}: {wall:6.2f} s wall, {out.elapsed_s:6.2f} s start→exit, "
                      f"step {row['step_seconds'] or 0:.2f} s, load {row['load_avg_1min']:.1f}, {out.status.value}")
        if out.status.value != "ok":
            raise RuntimeError(f"{name} candidate failed: {out.status.value} {out.error or ''} {out.stderr_tail[-300:]}")
        return row

    console.print(f"bench: {a.engine} batch {a.batch} on {a.device}; docker image {image} "
                  f"({prov['id'][7:19]}); local python {a.python}; {a.candidates} each, ABBA order")
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    try:
        for w in range(a.warmup):
            one("docker", w, False)
            one("local", w, False)
        for i in range(a.candidates):
            order = ("docker", "local") if i % 2 == 0 else ("local", "docker")
            for name in order:
                rows.append(one(name, i, True))
        floor = _floor(drt, req, a.floor) if a.floor else None
    except (RuntimeError, RuntimeUnavailable) as exc:
        console.print(f"bench: {exc}")
        return 2
    finally:
        drt.close()
    took = time.monotonic() - t_start

    d = _summary([r for r in rows if r["runtime"] == "docker"])
    lo = _summary([r for r in rows if r["runtime"] == "local"])
    by_i = {(r["runtime"], r["index"]): r["wall_s"] for r in rows}
    paired = [by_i[("docker", i)] - by_i[("local", i)] for i in range(a.candidates)]
    added = d["median_wall_s"] - lo["median_wall_s"]
    summary = {"docker": d, "local": lo, "added_s": added, "added_paired_median_s": statistics.median(paired),
               "ratio": d["median_wall_s"] / lo["median_wall_s"], "target_s": TARGET_S, "target_met": added < TARGET_S}

    t = Table(title=f"Runtime overhead per candidate — {a.engine}, batch {a.batch}, {a.device} "
                    f"(median of {a.candidates} each)")
    for col in ("runtime", "wall / candidate", "start→exit", "outside start→exit", "trial step", "min–max wall"):
        t.add_column(col, justify="left" if col == "runtime" else "right")
    for name, s in (("docker", d), ("local", lo)):
        t.add_row(name, f"{s['median_wall_s']:.2f} s", f"{s['median_elapsed_s']:.2f} s",
                  f"{s['median_outside_s']:.2f} s",
                  f"{s['median_step_s']:.2f} s" if s["median_step_s"] is not None else "—",
                  f"{s['min_wall_s']:.2f}–{s['max_wall_s']:.2f} s")
    t.add_row("docker − local", f"{added:+.2f} s", f"{d['median_elapsed_s'] - lo['median_elapsed_s']:+.2f} s",
              f"{d['median_outside_s'] - lo['median_outside_s']:+.2f} s", "", f"paired median {summary['added_paired_median_s']:+.2f} s",
              style="bold")
    t.add_row("docker / local", f"{summary['ratio']:.2f}×", "", "", "", "")
    console.print(t)
    if floor is not None:
        summary["floor"] = floor
        console.print(f"empty candidate (/bin/true, median of {a.floor}): container {floor['docker_median_s']:.2f} s "
                      f"(create {floor['docker_create_median_s']:.2f}, start→exit {floor['docker_run_median_s']:.2f}, "
                      f"logs+inspect+remove {floor['docker_teardown_median_s']:.2f}), subprocess "
                      f"{floor['local_median_s']:.3f} s: the container's fixed cost is "
                      f"{floor['docker_median_s'] - floor['local_median_s']:+.2f} s")
    verdict = "met" if summary["target_met"] else "NOT met"
    console.print(f"added per candidate: {added:+.2f} s (target < {TARGET_S} s: {verdict}); "
                  f"ratio {summary['ratio']:.2f}×; {took:.0f} s in all")
    loads = [r["load_avg_1min"] for r in rows]
    cores = os.cpu_count() or 1
    summary["load_avg_1min_median"] = statistics.median(loads)
    if statistics.median(loads) > cores:
        console.print(f"warning: the machine was busy (median 1-min load {statistics.median(loads):.1f} on {cores} "
                      f"cores): other work shares the CPU and the numbers are noisy; the paired median is the "
                      f"steadier estimate")

    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    doc = {
        "kind": "kitctl-bench-runtime-overhead", "schema_version": 1, "created_utc": now.isoformat().replace("+00:00", "Z"),
        "argv": [sys.argv[0], *(argv if argv is not None else sys.argv[1:])], "kit": kit_info(),
        "host": {**host_info(), "docker_version": docker_version},
        "configuration": {"engine": a.engine, "mode": eng.mode, "benchmark": "maxbatch", "batch": a.batch,
                          "precision": "fp32", "device": a.device, "candidates": a.candidates, "warmup": a.warmup,
                          "order": "ABBA (docker first on even indices)", "timeout_s": a.timeout},
        "docker": {"image": image, "id": prov["id"], "repo_digests": prov["repo_digests"],
                   "framework_version": prov["framework_version"], "versions": versions.get("docker"),
                   "base": prov.get("base"), **gpu_request},
        "local": {"python": a.python, "versions": versions.get("local")},
        "summary": summary, "candidates": rows, "seconds": took,
    }
    a.results_dir.mkdir(parents=True, exist_ok=True)
    path = a.results_dir / f"bench-runtime-overhead-{stamp}.json"
    with open(path, "x", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    console.print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
