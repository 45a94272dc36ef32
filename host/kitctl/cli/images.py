"""`kitctl images build|list|push|pull|save|load`: the engine images compose.yaml names, through the Docker SDK.

ENGINE-or-SERVICE arguments name a compose.yaml service (`pytorch`) or an engine it serves
(`pytorch-eager`, via the service's `x-kitctl.engines`); none means every service. `--variant`
(default: env KITCTL_IMAGE_VARIANT) picks a build variant's image, e.g. CI's `cpu-ci`
(kitctl/pytorch:ci), the image `kitctl run` then uses.

Exit codes: 0 done; 1 `build --check-reproducible` found two builds that differ; 2 bad input,
no daemon, a failed build/push/pull/save/load (one line on stderr, a failed build adds its log's tail).
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..errors import EXIT_DIFFERS, EXIT_USAGE, Exit, fail
from ..images import store
from ..images.store import ImageError


images_app = typer.Typer(no_args_is_help=True,
                         help="Build, list, push, pull, save and load the engine images that compose.yaml names.")

err = Console(stderr=True, highlight=False, soft_wrap=True)

_NAMES_HELP = "Engines (pytorch-eager) or compose services (pytorch); default: every service."
_VARIANT_HELP = "Build variant from compose.yaml's x-kitctl.variants (e.g. cpu-ci)."


def _fail(msg: str) -> Exit:
    return fail(msg)


def _note(msg: str) -> None:
    err.print(Text(msg, style="dim"))


class _Activity:
    """The live line under a spinner: what runs, for how long, and the latest log line."""

    def __init__(self, what: str, width: int) -> None:
        self.what = what
        self.t0 = time.monotonic()
        self.step = ""
        self.last = ""
        self.width = max(40, width - 4)

    def line(self, text: str) -> None:
        text = " ".join(text.split())
        if not text:
            return
        if text.startswith("Step "):
            self.step = text
        self.last = text

    def __rich__(self) -> Text:
        head = f"{self.what} · {time.monotonic() - self.t0:.0f} s"
        if self.step:
            head += f" · {self.step}"
        out = Text(head[: self.width], style="bold")
        if self.last and self.last != self.step:
            out.append("\n" + self.last[: self.width], style="dim")
        return out

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def _targets(compose: Any, names: list[str] | None, variant: str | None) -> list[str]:
    """The services to act on; explicitly named ones must have the variant, others are skipped."""
    services = store.resolve_services(compose, names)
    out = []
    for svc in services:
        if store.has_variant(compose, svc, variant):
            out.append(svc)
        elif names:
            known = ", ".join(compose.service(svc).variants) or "none"
            raise ImageError(f"service {svc!r} has no build variant {variant!r} in {compose.path} "
                             f"(variants: {known})")
        else:
            _note(f"{svc}: no build variant {variant!r}, skipped")
    if not out:
        raise ImageError(f"no service of {compose.path} has the build variant {variant!r}")
    return out


def _build_args(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise ImageError(f"--build-arg {p!r}: expected KEY=VALUE")
        out[k.strip()] = v
    return out


# ---- build ------------------------------------------------------------------------------------

@images_app.command("build")
def build(
    names: Optional[List[str]] = typer.Argument(None, metavar="[ENGINE-OR-SERVICE]...", help=_NAMES_HELP),
    variant: Optional[str] = typer.Option(None, envvar="KITCTL_IMAGE_VARIANT", help=_VARIANT_HELP),
    build_arg: List[str] = typer.Option([], "--build-arg", metavar="KEY=VALUE",
                                        help="Override a build arg (repeatable), over compose.yaml's."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not use the layer cache."),
    pull: bool = typer.Option(False, "--pull", help="Pull a newer base image first."),
    tail: int = typer.Option(40, help="Build-log lines shown when a build fails."),
    network: Optional[str] = typer.Option(None, "--network", envvar="KITCTL_BUILD_NETWORK",
                                          help="Network of the build's RUN steps, e.g. none on a daemon "
                                               "started without a bridge (default: the daemon's)."),
    reproducible: bool = typer.Option(False, "--reproducible",
                                      help="SOURCE_DATE_EPOCH (env, else the last commit's time) into the build, "
                                           "BUILD_DATE = that time, timestamps rewritten after it: the image ID "
                                           "depends on the inputs only."),
    check_reproducible: bool = typer.Option(False, "--check-reproducible",
                                            help="Build each image twice from a clean cache (--reproducible) and "
                                                 "compare the IDs; name the layers and files that differ (exit 1)."),
    wheels_from_host: bool = typer.Option(False, "--wheels-from-host",
                                          help="Download the lock's wheels with this host's pip (its index, proxy "
                                               "and CA), for the base image's Python and glibc, hash-checked, into "
                                               "the image's wheels/; the build installs from them with no index."),
    log: Optional[Path] = typer.Option(None, "--log", metavar="FILE",
                                       help="Append the whole output (downloads, every build line) to FILE."),
) -> None:
    """Build engine images from compose.yaml (the files `docker compose build` reads; the classic builder)."""
    from ..images.compose import ComposeError, provenance_build_args
    from ..images import repro
    from ..runtimes.base import RuntimeUnavailable
    from ..runtimes.docker import ImageBuildError, build_image

    console = Console(highlight=False)
    variant = variant or None
    reproducible = reproducible or check_reproducible
    epoch: int | None = None
    try:
        compose = store.open_compose()
        services = _targets(compose, names, variant)
        user_args = _build_args(build_arg)
        specs = []
        for svc in services:
            context = compose.service(svc).context
            overrides = dict(provenance_build_args(context))
            if reproducible:
                epoch = repro.source_date_epoch(context)
                overrides.update(repro.reproducible_build_args(context, epoch))
            if wheels_from_host:
                overrides["PIP_NO_INDEX"] = "1"  # only the downloaded, hash-checked wheels
            overrides.update(user_args)
            specs.append(compose.build_spec(svc, variant=variant, overrides=overrides))
        client = store.open_client()
    except (ImageError, ComposeError) as exc:
        raise _fail(str(exc))
    log_file = None
    if log is not None:
        try:
            log_file = open(log, "a", encoding="utf-8")
        except OSError as exc:
            client.close()
            raise _fail(f"--log {log}: {exc.strerror or exc}")

    def to_log(line: str) -> None:
        if log_file is not None:
            log_file.write(line + "\n")
            log_file.flush()

    if wheels_from_host:
        try:
            for spec in specs:
                _fetch_wheels(console, client, spec, to_log)
        except ImageError as exc:
            client.close()
            if log_file is not None:
                log_file.close()
            raise _fail(str(exc))
    differing = 0
    builds: dict[str, Any] = {}  # --check-reproducible: the first build of each image
    try:
        for spec in (specs + specs if check_reproducible else specs):
            activity = _Activity(f"building {spec.image} ({spec.service}"
                                 f"{', variant ' + variant if variant else ''})", console.width)
            plain = not console.is_terminal

            def on_line(line: str, _a: _Activity = activity) -> None:
                to_log(line)
                _a.line(line)
                if plain and line.startswith("Step "):
                    text = " ".join(line.split())
                    console.print(Text(f"  {text[:console.width - 4]}", style="dim"), soft_wrap=True)

            try:
                with console.status(activity, spinner="dots"):
                    image_id = build_image(client, spec, on_line=on_line, nocache=no_cache or check_reproducible,
                                           pull=pull,
                                           log_lines=max(tail, 1), network_mode=network or None)
            except ImageBuildError as exc:
                err.print(Text(f"kitctl: {exc}"))
                lines = exc.log_tail.splitlines()[-max(tail, 1):]
                if lines:
                    err.print(Text(f"last {len(lines)} lines of the build log:", style="bold"))
                    for ln in lines:
                        err.print(Text(f"  {ln}"))
                raise Exit(EXIT_USAGE)
            except RuntimeUnavailable as exc:
                raise _fail(str(exc))
            labels = (client.images.get(image_id).attrs.get("Config") or {}).get("Labels") or {}
            if reproducible:
                assert epoch is not None
                try:
                    with console.status(f"rewriting {spec.image}'s timestamps to {repro.iso(epoch)}", spinner="dots"):
                        norm = repro.normalize(client, spec.image, epoch, base=spec.args.get("BASE_IMAGE"))
                except ImageError as exc:
                    raise _fail(str(exc))
                image_id = norm.id
                if check_reproducible:
                    first = builds.setdefault(spec.image, norm)
                    if first is not norm:
                        differing += _report_reproducibility(console, first, norm)
            to_log(f"built {spec.image}: {image_id} in {activity.elapsed:.0f} s")
            console.print(Text.assemble(
                ("✓ ", "green"), f"built {spec.image} ({store.short_id(image_id)}, "
                f"{labels.get(store.LABEL_ENGINE, spec.service)} {labels.get(store.LABEL_FRAMEWORK_VERSION, '?')}, "
                f"CUDA {labels.get(store.LABEL_CUDA_VERSION, '?')}) in {activity.elapsed:.0f} s"
                f"{' (SOURCE_DATE_EPOCH=' + str(epoch) + ')' if reproducible else ''}"))
    finally:
        client.close()
        if log_file is not None:
            log_file.close()
    if differing:
        raise Exit(EXIT_DIFFERS)


def _fetch_wheels(console: Console, client: Any, spec: Any, to_log: Callable[[str], None]) -> None:
    """--wheels-from-host: the lock's wheels for the base image's interpreter, into the image's wheels/."""
    from ..images import wheels

    base = wheels.base_image(spec)
    lock = wheels.lock_file(spec)
    target = wheels.probe(client, base)
    activity = _Activity(f"downloading {lock.name}'s wheels for Python {target.python} "
                         f"(glibc {target.glibc[0]}.{target.glibc[1]}, {target.machine})", console.width)
    to_log(f"$ {' '.join(wheels.pip_command(lock, lock.parent / wheels.WHEELS_DIR, target))}")

    def on_line(line: str) -> None:
        to_log(line)
        activity.line(line)

    with console.status(activity, spinner="dots"):
        fetched = wheels.download(lock, target, on_line=on_line)
    console.print(Text.assemble(("✓ ", "green"), f"{len(fetched.files)} wheels of {lock.name}, hash-checked, for "
                                f"{base}'s Python {target.python} / glibc {target.glibc[0]}.{target.glibc[1]} "
                                f"in {fetched.wheels} ({activity.elapsed:.0f} s)"))


def _report_reproducibility(console: Console, a: Any, b: Any) -> int:
    """Print whether two normalized builds of one image are the same; 1 when they differ."""
    from ..images import repro

    if a.id == b.id:
        console.print(Text.assemble(("✓ ", "green"), f"reproducible: two builds of {a.image} from a clean cache "
                                    f"are the same image ({a.id})"))
        return 0
    console.print(Text.assemble(("✗ ", "red"), f"not reproducible: {a.image} built twice is {store.short_id(a.id)} "
                                f"and {store.short_id(b.id)}"))
    diffs = repro.compare(a, b)
    if not diffs:
        console.print(Text("  every layer is the same: the configs differ (labels, env or history)"))
    for d in diffs:
        console.print(Text(f"  layer {d.index} ({' '.join(d.created_by.split())[:100]}): "
                           f"{len(d.paths)} file(s) differ"))
        for path in d.paths[:10]:
            console.print(Text(f"    {path}", style="dim"))
    return 1


# ---- list -------------------------------------------------------------------------------------

def _digest_text(digests: list[str]) -> str:
    if not digests:
        return "—"
    out = []
    for d in digests:
        repo, _, dig = d.partition("@")
        out.append(f"{repo}@{dig[:19]}…" if len(dig) > 19 else d)
    return "\n".join(out)


@images_app.command("list")
def list_images(
    names: Optional[List[str]] = typer.Argument(None, metavar="[ENGINE-OR-SERVICE]...", help=_NAMES_HELP),
    variant: Optional[str] = typer.Option(None, help="Only this build variant's images (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (one object per image)."),
) -> None:
    """Per service and variant: image, id, repo digest, framework/CUDA versions, size, age."""
    console = Console(highlight=False)
    try:
        compose = store.open_compose()
        services = store.resolve_services(compose, names)
        client = store.open_client(timeout=60)
    except ImageError as exc:
        raise _fail(str(exc))
    try:
        rows = store.image_rows(client, compose, services, variant=variant or None)
    except ImageError as exc:
        raise _fail(str(exc))
    finally:
        client.close()
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return
    t = Table(title=f"Engine images ({compose.path})", title_justify="left")
    for col in ("Service", "Variant", "Image", "ID", "Repo digest", "Framework", "CUDA", "Size", "Built"):
        t.add_column(col, justify="right" if col in ("Size",) else "left", overflow="fold")
    for r in rows:
        if r["present"]:
            t.add_row(r["service"], r["variant"] or "—", r["image"], r["short_id"], _digest_text(r["repo_digests"]),
                      r["framework_version"] or "—", r["cuda_version"] or "—", store.human_size(r["size_bytes"]),
                      store.human_age(r["age_s"]))
        else:
            t.add_row(r["service"], r["variant"] or "—", r["image"], Text("not present", style="yellow"), "—",
                      Text(f"({r['expected_framework_version'] or '?'})", style="dim"),
                      Text(f"({r['expected_cuda_version'] or '?'})", style="dim"), "—", "—")
    console.print(t)
    if not any(r["present"] for r in rows):
        _note("no engine image is present: kitctl images build [ENGINE] (or kitctl images pull … --registry R)")


# ---- push / pull ------------------------------------------------------------------------------

def _transfer(kind: str, names: list[str] | None, registry: str | None, variant: str | None,
              digest: str | None, as_json: bool) -> None:
    console = Console(highlight=False, stderr=as_json, soft_wrap=True)
    variant = variant or None
    try:
        registry = store.check_registry(registry)
        compose = store.open_compose()
        services = _targets(compose, names, variant)
        if digest is not None and len(services) != 1:
            raise ImageError(f"--digest names one image: give exactly one engine or service "
                             f"(not {', '.join(services)})")
        client = store.open_client()
    except ImageError as exc:
        raise _fail(str(exc))
    done: list[dict[str, Any]] = []
    failed = 0
    try:
        for svc in services:
            local = compose.image(svc, variant)
            if kind == "push" and not names:
                from ..runtimes.docker import image_exists

                if not image_exists(local, client):
                    _note(f"{svc}: {local} is not present, skipped")
                    continue
            activity = _Activity(f"{'pushing' if kind == 'push' else 'pulling'} {local}", console.width)
            try:
                with console.status(activity, spinner="dots"):
                    if kind == "push":
                        tr = store.push_image(client, local, registry, on_line=activity.line)
                    else:
                        tr = store.pull_image(client, local, registry, digest=digest, on_line=activity.line)
            except ImageError as exc:
                err.print(Text(f"kitctl: {exc}"))
                failed += 1
                continue
            done.append({"service": svc, "variant": variant, **tr.to_json()})
            if kind == "push":
                console.print(Text.assemble(("✓ ", "green"), f"pushed {local} ({store.short_id(tr.id)}) → {tr.remote}"))
                console.print(Text(f"  digest {tr.repo_digest}"))
                console.print(Text(f"  elsewhere: kitctl images pull {svc} --registry {registry}"
                                   f"{' --variant ' + variant if variant else ''} --digest {tr.digest}",
                                   style="dim"))
            else:
                console.print(Text.assemble(("✓ ", "green"), f"pulled {tr.remote} → {local} ({store.short_id(tr.id)})"))
                console.print(Text(f"  digest {tr.repo_digest}"))
                if tr.replaced_id:
                    console.print(Text(f"  {local} was {store.short_id(tr.replaced_id)} before; if untagged now, "
                                       f"`kitctl clean --images` removes it", style="dim"))
    finally:
        client.close()
    if as_json:
        print(json.dumps(done, indent=2, sort_keys=True))
    if failed or not done:
        if not done and not failed:
            raise fail(f"nothing to {kind}: no engine image is present (kitctl images build)")
        raise Exit(EXIT_USAGE)


_REGISTRY_HELP = "Registry HOST:PORT (e.g. 127.0.0.1:5000); env KITCTL_REGISTRY."


@images_app.command("push")
def push(
    names: Optional[List[str]] = typer.Argument(None, metavar="[ENGINE-OR-SERVICE]...", help=_NAMES_HELP),
    registry: Optional[str] = typer.Option(None, envvar="KITCTL_REGISTRY", help=_REGISTRY_HELP),
    variant: Optional[str] = typer.Option(None, envvar="KITCTL_IMAGE_VARIANT", help=_VARIANT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print what was pushed as JSON."),
) -> None:
    """Push engine images as REGISTRY/kitctl/<name>:<tag>; print each repo digest."""
    _transfer("push", names, registry, variant, None, as_json)


@images_app.command("pull")
def pull(
    names: Optional[List[str]] = typer.Argument(None, metavar="[ENGINE-OR-SERVICE]...", help=_NAMES_HELP),
    registry: Optional[str] = typer.Option(None, envvar="KITCTL_REGISTRY", help=_REGISTRY_HELP),
    variant: Optional[str] = typer.Option(None, envvar="KITCTL_IMAGE_VARIANT", help=_VARIANT_HELP),
    digest: Optional[str] = typer.Option(None, help="Pull this digest (sha256:…) instead of the tag."),
    as_json: bool = typer.Option(False, "--json", help="Print what was pulled as JSON."),
) -> None:
    """Pull engine images from a registry and tag them with compose.yaml's names for `kitctl run`."""
    _transfer("pull", names, registry, variant, digest, as_json)


# ---- save / load (no registry) ----------------------------------------------------------------

@images_app.command("save")
def save(
    names: List[str] = typer.Argument(..., metavar="ENGINE-OR-SERVICE...", help="Engines or compose services to save."),
    output: str = typer.Option(..., "-o", "--output", metavar="FILE", help="The archive to write (.tar.gz)."),
    variant: Optional[str] = typer.Option(None, envvar="KITCTL_IMAGE_VARIANT", help=_VARIANT_HELP),
    level: int = typer.Option(1, "--level", min=1, max=9, help="gzip level (1: fastest)."),
    force: bool = typer.Option(False, "--force", help="Replace FILE when it exists."),
) -> None:
    """Write engine images to one compressed file, with each image's ID, labels and lock hash."""
    from pathlib import Path

    from .. import __version__
    from ..images import travel

    console = Console(highlight=False)
    variant = variant or None
    try:
        compose = store.open_compose()
        services = _targets(compose, names, variant)
        client = store.open_client()
    except ImageError as exc:
        raise _fail(str(exc))
    try:
        activity = _Activity(f"saving {', '.join(compose.image(s, variant) for s in services)} → {output}",
                             console.width)
        with console.status(activity, spinner="dots"):
            manifest = travel.save(client, compose, [(s, variant) for s in services], Path(output), level=level,
                                   force=force, kitctl_version=__version__,
                                   on_progress=lambda n: activity.line(f"{store.human_size(n)} read"))
    except ImageError as exc:
        raise _fail(str(exc))
    finally:
        client.close()
    size = Path(output).stat().st_size
    for img in manifest.images:
        locks = ", ".join(f"{lk.path} sha256:{lk.sha256[:12]}" for lk in img.locks) or "no lock"
        console.print(Text.assemble(("✓ ", "green"), f"saved {img.image} ({store.short_id(img.id)}; {locks})"))
    console.print(Text(f"  {output}: {store.human_size(size)} in {activity.elapsed:.0f} s; "
                       f"elsewhere: kitctl images load {output}", style="dim"))


@images_app.command("load")
def load(
    archive: str = typer.Argument(..., metavar="FILE", help="An archive written by `kitctl images save`."),
) -> None:
    """Load a `kitctl images save` archive: verify each image's ID and labels, tag it as compose.yaml names it."""
    from pathlib import Path

    from ..images import travel

    console = Console(highlight=False)
    try:
        compose = store.open_compose()
        if not Path(archive).is_file():
            raise ImageError(f"{archive}: no such file")
        client = store.open_client()
    except ImageError as exc:
        raise _fail(str(exc))
    try:
        activity = _Activity(f"checking and loading {archive}", console.width)
        with console.status(activity, spinner="dots"):
            loaded = travel.load(client, compose, Path(archive),
                                 on_progress=lambda n: activity.line(f"{store.human_size(n)} checked"))
    except ImageError as exc:
        raise _fail(str(exc))
    finally:
        client.close()
    for r in loaded:
        console.print(Text.assemble(("✓ ", "green"), f"loaded {r.image} ({store.short_id(r.id)}): ID and labels "
                                    f"match the archive"))
        if r.replaced_id:
            console.print(Text(f"  {r.image} was {store.short_id(r.replaced_id)} before; if untagged now, "
                               f"`kitctl clean --images` removes it", style="dim"))
        for lk in r.lock_differs:
            err.print(Text(f"kitctl: note: {r.image} was built from another {lk} than this checkout's "
                           f"(its labels and ID are the archive's; the lock here differs)"))
