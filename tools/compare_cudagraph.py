#!/usr/bin/env python3
"""PyTorch whole-step CUDA graphs and the fair compiled path, measured side by side in one process.

    python3 tools/compare_cudagraph.py --out /tmp/compare.json            # on a GPU machine
    python3 tools/compare_cudagraph.py --device cpu --dry-run --out x.json  # smoke test anywhere

Variants (each at every --precision, batch --batch):
  eager              the trial's pytorch-eager step (trials/pytorch/torch_train.build_runner)
  kit                the trial's pytorch-cudagraph step, built by the trial's own code
  legacy             the kit's capture before issue 16 (foreach capturable Adam, zero_grad
                     (set_to_none=False) inside the graph, first replay inside the timed window),
                     rebuilt here from the trial's data and model for attribution
  plain              an independent whole-step graph written the canonical way (PyTorch docs,
                     "whole network capture"): torchvision resnet50(num_classes=10), channels_last,
                     static input/target, warm-up on a side stream, grads set to None before
                     capture, fused capturable Adam
  plain-foreach      plain with foreach capturable Adam          (isolates the optimizer)
  plain-zero-inside  plain with zero_grad(set_to_none=False) in the graph (isolates grad zeroing)
  plain-kitnet       plain with the trial's ResNet-50 definition (isolates the model code)
  compiled           the trial's pytorch-compile-graphs step (torch.compile, mode reduce-overhead,
                     optimizer inside; the trial turns cuDNN autotuning on for throughput)
  plain-compiled     (opt-in) an independent compiled step: torchvision model, torch.compile of
                     forward+loss+backward+Adam, mode reduce-overhead
Graph variants run once per --cudnn-benchmark setting. Timing, the same for every variant:
after building (warm-up and capture as each variant does it) the first --steps steps are timed
once ("first window": what a trial's window would see), then --warmup more steps, then
--repeats windows of --steps steps, each ended by one synchronisation; windows of all variants
of a precision are interleaved so clock and thermal drift hit them alike; the median is reported.
On the CPU the graph variants are skipped with a message; --dry-run shrinks everything and skips
torch.compile (inductor takes minutes on a CPU).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "trials" / "common", ROOT / "trials" / "pytorch"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

GRAPH_VARIANTS = ("kit", "legacy", "plain", "plain-foreach", "plain-zero-inside", "plain-kitnet")
COMPILED_VARIANTS = ("compiled", "plain-compiled")
ALL_VARIANTS = ("eager", *GRAPH_VARIANTS, *COMPILED_VARIANTS)
DEFAULT_VARIANTS = ("eager", *GRAPH_VARIANTS, "compiled")
LR = 1e-3


class Usage(Exception):
    """Bad input: one line on stderr, exit 2."""


# ----------------------------------------------------------------------------- flags

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON file to write (its folder must exist)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny batch and windows, no torch.compile: checks the script, measures nothing")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--precision", default="fp32,bf16", help="fp32, bf16 or both comma-separated")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help=f"comma-separated from: {', '.join(ALL_VARIANTS)}")
    p.add_argument("--cudnn-benchmark", choices=["on", "off", "both"], default="both",
                   help="cuDNN autotuning for the eager and graph variants (compiled: the trial's own)")
    p.add_argument("--build-warmup", type=int, default=10,
                   help="eager steps before capture / the trial's --warmup-steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps after the first window")
    p.add_argument("--steps", type=int, default=100, help="steps per timed window")
    p.add_argument("--repeats", type=int, default=5, help="timed windows per variant")
    args = p.parse_args(argv)
    if args.dry_run:
        args.batch, args.build_warmup, args.warmup, args.steps, args.repeats = (
            min(args.batch, 2), 1, 1, 2, 2)
    for name in ("batch", "build_warmup", "steps", "repeats"):
        if getattr(args, name) < 1:
            raise Usage(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(args, name)})")
    if args.batch < 2:
        raise Usage("--batch must be >= 2 (training-mode BatchNorm on 1x1 maps needs two values)")
    if args.warmup < 0:
        raise Usage(f"--warmup must be >= 0 (got {args.warmup})")
    args.precisions = _list(args.precision, ("fp32", "bf16"), "--precision")
    args.variant_names = _list(args.variants, ALL_VARIANTS, "--variants")
    args.cudnn_settings = {"on": [True], "off": [False], "both": [True, False]}[args.cudnn_benchmark]
    out = Path(args.out)
    if not out.parent.is_dir():
        raise Usage(f"--out {out}: folder {out.parent} does not exist")
    if out.is_dir():
        raise Usage(f"--out {out} is a folder; give a file name")
    return args


def _list(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if not items or bad:
        raise Usage(f"{flag}: {', '.join(bad) or 'empty'} not in {', '.join(allowed)}")
    return list(dict.fromkeys(items))


# -------------------------------------------------------------------------- variants

@dataclass
class Variant:
    """One way to run the step. run(n) does n steps and returns the last loss (device tensor)."""
    name: str
    precision: str
    cudnn_benchmark: bool
    description: str
    status: str = "pending"  # ok | skipped | error
    reason: str | None = None
    run: Callable[[int], Any] | None = None
    settings: dict = field(default_factory=dict)
    build_seconds: float | None = None
    first_window: float | None = None  # images/s of the first timed steps after building
    windows: list[float] = field(default_factory=list)
    loss_final: float | None = None
    keep: list = field(default_factory=list)  # objects to free after the precision


DESCRIPTIONS = {
    "eager": "trial pytorch-eager (torch_train.build_runner)",
    "kit": "trial pytorch-cudagraph (torch_train.build_runner)",
    "legacy": "kit capture before issue 16: foreach Adam, zero_grad(set_to_none=False) in graph",
    "plain": "canonical whole-step graph, torchvision resnet50, fused Adam, grads None before capture",
    "plain-foreach": "plain, foreach capturable Adam",
    "plain-zero-inside": "plain, zero_grad(set_to_none=False) inside the graph",
    "plain-kitnet": "plain, the trial's ResNet-50 definition",
    "compiled": "trial pytorch-compile-graphs (torch.compile reduce-overhead, Adam inside)",
    "plain-compiled": "independent torch.compile(step, mode=reduce-overhead), torchvision, Adam inside",
}


def trial_args(mode: str, precision: str, cudnn: bool, args, device: str):
    """The trial's own flags, parsed by the trial's own parser."""
    import kittrial
    from trial import MODES

    flags = ["--benchmark", "throughput", "--batch", str(args.batch), "--precision", precision,
             "--mode", mode, "--device", device, "--warmup-steps", str(args.build_warmup),
             "--steps", str(args.steps)]
    if cudnn:
        flags.append("--cudnn-benchmark")
    return kittrial.build_parser(MODES).parse_args(flags)


def build_trial_variant(v: Variant, mode: str, args, device: str) -> None:
    import kittrial
    import torch_train

    targs = trial_args(mode, v.precision, v.cudnn_benchmark, args, device)
    result = kittrial.base_result(targs, f"pytorch-{mode}")
    dev = torch_train._setup_device(targs, result["settings"], result["versions"])
    if mode != torch_train.COMPILE_GRAPHS and result["settings"]["cudnn_benchmark"] != v.cudnn_benchmark:
        # The trial autotunes its graph engine's throughput; the off row is this tool's choice.
        import torch

        torch.backends.cudnn.benchmark = v.cudnn_benchmark
        result["settings"].update(cudnn_benchmark=v.cudnn_benchmark,
                                  cudnn_benchmark_source="set by compare_cudagraph.py")
    if mode == torch_train.COMPILE_GRAPHS:
        from torch._dynamo.utils import counters

        counters.clear()  # process-global: count this variant's graphs, breaks and skips only
    runner = torch_train.build_runner(targs, result, dev)
    warmup, _ = kittrial.step_counts(targs)
    runner.warmup(warmup)
    v.run = runner.run
    v.keep.append(runner)
    v.cudnn_benchmark = bool(result["settings"]["cudnn_benchmark"])  # compiled forces it on
    if mode == torch_train.COMPILE_GRAPHS:
        result["settings"]["compile"].update(torch_train.compile_stats())
    v.settings = result["settings"]


def _static_batch(args, device, kit_data: bool):
    import torch

    if kit_data:  # the trial's own batch: normalised CIFAR-shaped synthetic data
        import kittrial
        import torch_train

        targs = trial_args("eager", "fp32", False, args, device.type)
        images, labels, _ = kittrial.load_data(targs)
        return torch_train._to_device(images, labels, device, poison=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch,), generator=g)
    return x.to(device).contiguous(memory_format=torch.channels_last), y.to(device)


def _model(kind: str, device):
    import torch

    torch.manual_seed(0)
    if kind == "torchvision":
        import torchvision

        model = torchvision.models.resnet50(num_classes=10)
    else:
        from resnet50 import resnet50

        model = resnet50(num_classes=10)
    return model.to(device, memory_format=torch.channels_last).train()


def build_graph_variant(v: Variant, args, device) -> None:
    """plain*, legacy: a whole-step torch.cuda.CUDAGraph written out here."""
    import torch
    import torch.nn.functional as F

    legacy = v.name == "legacy"
    kitnet = legacy or v.name == "plain-kitnet"
    zero_inside = legacy or v.name == "plain-zero-inside"
    fused = not (legacy or v.name == "plain-foreach")
    model = _model("kit" if kitnet else "torchvision", device)
    x, y = _static_batch(args, device, kit_data=legacy)
    opt = (torch.optim.Adam(model.parameters(), lr=LR, fused=True, capturable=True) if fused
           else torch.optim.Adam(model.parameters(), lr=LR, foreach=True, capturable=True))
    bf16 = v.precision == "bf16"

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(args.build_warmup):
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if not zero_inside:
        opt.zero_grad(set_to_none=True)  # backward allocates .grad from the graph's pool
    torch.cuda.empty_cache()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        if zero_inside:
            opt.zero_grad(set_to_none=False)
        with autocast():
            static_loss = F.cross_entropy(model(x), y)
        static_loss.backward()
        opt.step()
    # No replay here: the first timed window shows what a first launch costs.

    def run(n: int):
        for _ in range(n):
            graph.replay()
        return static_loss.detach()

    v.run = run
    v.keep += [graph, model, opt, x, y, static_loss]
    v.settings = {"model": "kit resnet50.py" if kitnet else "torchvision resnet50(num_classes=10)",
                  "data": "trial batch" if legacy else "torch.randn, channels_last",
                  "adam": {"fused": fused, "foreach": not fused, "capturable": True},
                  "zero_grad": "set_to_none=False inside the graph" if zero_inside
                  else "set_to_none=True before capture",
                  "autocast_cache_enabled": False if bf16 else None}


def build_plain_compiled(v: Variant, args, device) -> None:
    import torch
    import torch.nn.functional as F

    model = _model("torchvision", device)
    x, y = _static_batch(args, device, kit_data=False)
    opt = torch.optim.Adam(model.parameters(), lr=LR, capturable=device.type == "cuda")
    bf16 = v.precision == "bf16"
    torch.backends.cudnn.benchmark = True
    v.cudnn_benchmark = True

    @torch.compile(mode="reduce-overhead")
    def body():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    def run(n: int):
        loss = None
        for _ in range(n):
            opt.zero_grad(set_to_none=True)
            torch.compiler.cudagraph_mark_step_begin()
            loss = body()
        return loss

    run(max(args.build_warmup, 2))
    v.run = run
    v.keep += [model, opt, x, y, body]
    v.settings = {"compile": {"mode": "reduce-overhead", "backend": "inductor"},
                  "adam": {"foreach": "default", "capturable": device.type == "cuda"},
                  "cudnn_benchmark": True}


# --------------------------------------------------------------------------- measure

def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(v: Variant, n: int, batch: int, device) -> float:
    import torch

    torch.backends.cudnn.benchmark = v.cudnn_benchmark  # eager reads it at every conv
    _sync(device)
    t0 = time.perf_counter()
    loss = v.run(n)
    _sync(device)
    dt = time.perf_counter() - t0
    v.loss_final = float(loss.item())
    return batch * n / dt


def _skip_reason(name: str, args) -> str | None:
    if args.device == "cpu" and (name in GRAPH_VARIANTS or name == "plain-compiled"):
        return "CUDA graphs need --device cuda"
    if args.dry_run and name in COMPILED_VARIANTS:
        return "--dry-run does not compile (inductor takes minutes on a cpu)"
    if name.startswith("plain") and name != "plain-kitnet" and args.device == "cuda":
        try:
            import torchvision  # noqa: F401
        except ImportError:
            return "torchvision is not installed"
    return None


def _variants_for(precision: str, args) -> list[Variant]:
    out = []
    for name in args.variant_names:
        settings = args.cudnn_settings if (name == "eager" or name in GRAPH_VARIANTS) else [True]
        if args.device == "cpu":
            settings = [False]  # no cuDNN on the cpu
        elif _skip_reason(name, args):
            settings = settings[:1]  # a skip is said once
        for cudnn in settings:
            out.append(Variant(name, precision, cudnn, DESCRIPTIONS[name]))
    return out


def _build(v: Variant, args, device) -> None:
    import torch

    torch.backends.cudnn.benchmark = v.cudnn_benchmark
    t0 = time.perf_counter()
    if v.name == "eager":
        build_trial_variant(v, "eager", args, device.type)
    elif v.name == "kit":
        build_trial_variant(v, "cudagraph", args, device.type)
    elif v.name == "compiled":
        build_trial_variant(v, "compile-graphs", args, device.type)
    elif v.name == "plain-compiled":
        build_plain_compiled(v, args, device)
    else:
        build_graph_variant(v, args, device)
    _sync(device)
    v.build_seconds = time.perf_counter() - t0


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]


def measure_precision(precision: str, args, device, log) -> list[Variant]:
    import torch

    variants = _variants_for(precision, args)
    live = []
    for v in variants:
        reason = _skip_reason(v.name, args)
        if reason:
            v.status, v.reason = "skipped", reason
            log(f"  {v.name:<18} {precision} skipped: {reason}")
            continue
        log(f"  {v.name:<18} {precision} cudnn.benchmark={'on' if v.cudnn_benchmark else 'off'}: building")
        try:
            _build(v, args, device)
            v.first_window = _timed(v, args.steps, args.batch, device)
            if args.warmup:
                v.run(args.warmup)
            _sync(device)
            live.append(v)
        except Exception as exc:  # noqa: BLE001 - one variant failing must not lose the others
            traceback.print_exc(file=sys.stderr)
            v.status, v.reason = "error", _one_line(exc)
            v.run, v.keep = None, []
            _free(device)
    for r in range(args.repeats):  # interleaved: drift hits every variant alike
        for v in live:
            if v.status == "error":
                continue
            try:
                v.windows.append(_timed(v, args.steps, args.batch, device))
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
                v.status, v.reason = "error", _one_line(exc)
    for v in live:
        if v.status != "error":
            v.status = "ok" if v.loss_final is not None and math.isfinite(v.loss_final) else "error"
            if v.status == "error":
                v.reason = f"non-finite loss {v.loss_final}"
        v.run, v.keep = None, []
    _free(device)
    if device.type == "cuda":
        torch._dynamo.reset()  # the next precision compiles afresh (and resets graph trees)
    return variants


def _free(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------- report

def summary(v: Variant) -> dict:
    w = v.windows
    return {"variant": v.name, "description": v.description, "precision": v.precision,
            "cudnn_benchmark": v.cudnn_benchmark, "status": v.status, "reason": v.reason,
            "images_per_second": {"median": statistics.median(w), "min": min(w), "max": max(w),
                                  "windows": w} if w and v.status == "ok" else None,
            "first_window_images_per_second": v.first_window,
            "build_seconds": v.build_seconds, "loss_final": v.loss_final, "settings": v.settings}


def ratios(rows: list[dict]) -> list[dict]:
    med = {(r["variant"], r["precision"], r["cudnn_benchmark"]): r["images_per_second"]["median"]
           for r in rows if r["images_per_second"]}
    out = []
    pairs = [("kit", "plain"), ("legacy", "plain"), ("kit", "legacy"), ("plain-foreach", "plain"),
             ("plain-zero-inside", "plain"), ("plain-kitnet", "plain"), ("compiled", "kit"),
             ("compiled", "plain"), ("compiled", "eager"), ("plain-compiled", "compiled")]
    for (a, pa, ca), va in med.items():
        for x, y in pairs:
            if a != x:
                continue
            # compiled variants always autotune: compare them with the autotuned others
            vb = med.get((y, pa, ca))
            if vb:
                out.append({"precision": pa, "cudnn_benchmark": ca, "a": x, "b": y,
                            "a_over_b": va / vb})
    return out


def table(rows: list[dict], rats: list[dict]) -> str:
    head = f"{'variant':<18} {'prec':<5} {'cudnn':<5} {'img/s median':>13} {'min':>9} {'max':>9} " \
           f"{'first win':>10} {'build s':>8}  status"
    lines = [head, "-" * len(head)]
    def num(x) -> str:
        if x is None:
            return "—"
        return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"  # cpu smoke runs are slow

    for r in rows:
        ips = r["images_per_second"] or {}
        build = f"{r['build_seconds']:.1f}" if r["build_seconds"] is not None else "—"
        cudnn = "on" if r["cudnn_benchmark"] else "off"
        status = r["status"] + (f": {r['reason']}" if r["reason"] else "")
        lines.append(f"{r['variant']:<18} {r['precision']:<5} {cudnn:<5} {num(ips.get('median')):>13} "
                     f"{num(ips.get('min')):>9} {num(ips.get('max')):>9} "
                     f"{num(r['first_window_images_per_second']):>10} {build:>8}  {status}")
    if rats:
        lines.append("")
        for q in rats:
            lines.append(f"{q['precision']} cudnn {'on ' if q['cudnn_benchmark'] else 'off'} "
                         f"{q['a']} / {q['b']} = {q['a_over_b']:.3f}")
    return "\n".join(lines)


def versions(device) -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
    try:
        import torchvision

        out["torchvision"] = torchvision.__version__
    except ImportError:
        out["torchvision"] = None
    if device.type == "cuda":
        out["device"] = torch.cuda.get_device_name(0)
    return out


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except Usage as exc:
        print(f"compare_cudagraph: {exc}", file=sys.stderr)
        return 2
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("compare_cudagraph: --device cuda but torch sees no CUDA device "
              "(use --device cpu for the smoke test)", file=sys.stderr)
        return 2
    device = torch.device("cuda:0" if args.device == "cuda" else "cpu")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    rows = []
    for precision in args.precisions:
        log(f"{precision}:")
        rows += [summary(v) for v in measure_precision(precision, args, device, log)]
    rats = ratios(rows)
    doc = {"tool": "tools/compare_cudagraph.py", "argv": sys.argv[1:] if argv is None else argv,
           "started_utc": started, "seconds": time.perf_counter() - t0,
           "versions": versions(device),
           "global_settings": {"tf32": device.type == "cuda", "channels_last": True,
                               "note": "TF32 and cudnn flags are process-global; each variant sets "
                                       "cudnn.benchmark before it builds and before each window"},
           "config": {"device": args.device, "dry_run": args.dry_run, "batch": args.batch,
                      "precisions": args.precisions, "variants": args.variant_names,
                      "cudnn_benchmark": args.cudnn_benchmark, "build_warmup": args.build_warmup,
                      "warmup": args.warmup, "steps": args.steps, "repeats": args.repeats},
           "results": rows, "ratios": rats}
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, out)
    print(table(rows, rats))
    print(f"\nwrote {out}")
    return 0 if all(r["status"] != "error" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
