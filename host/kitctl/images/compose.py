"""compose.yaml, read with PyYAML: the one source of image names, build contexts and build args.

`docker compose build` reads the same file, so kitctl never repeats what it says. Only the
parts kitctl needs are read: per service `image`, `build.{context,dockerfile,args}` and the
`x-kitctl` extension (engines or data loaders served, build variants such as CI's `cpu-ci`, each
variant with its own image name, args and, for a loader image, its own loader list). `${VAR}`,
`${VAR:-default}`, `${VAR-default}`, `${VAR:?message}`, `$VAR` and `$$` are interpolated from
the environment as Compose does.

Where Docker Compose v2 is installed (`docker compose`), the standard keys are taken from
`docker compose config --format json`, i.e. as Compose itself reads them (its interpolation, its
`.env` file, its path resolution); the hand parser then only supplies the kit's `x-kitctl` keys,
which Compose does not print. Without Compose v2 (Debian 12 ships 1.29), or with
KITCTL_COMPOSE=kitctl, the hand parser reads everything. `Compose.resolved_by` says which.

Every problem is a `ComposeError` whose message is one line naming the file and the key.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

EXTENSION_KEY = "x-kitctl"


class ComposeError(ValueError):
    """compose.yaml is missing, malformed or lacks what kitctl needs (one line)."""


@dataclass(frozen=True)
class Variant:
    """A named set of build args merged over the service's, with its own image name and (a loader image's
    build) its own loader list: a CPU build serves fewer loaders than the CUDA one. None: the service's."""

    name: str
    image: str | None
    args: dict[str, str]
    loaders: tuple[str, ...] | None = None


@dataclass(frozen=True)
class BuildSpec:
    """Everything a build needs: `client.images.build(path=context, dockerfile=..., buildargs=args, tag=image)`."""

    service: str
    image: str
    context: Path  # absolute
    dockerfile: str  # relative to context, as the Docker API wants it
    args: dict[str, str]

    @property
    def dockerfile_path(self) -> Path:
        return (self.context / self.dockerfile).resolve()


@dataclass(frozen=True)
class Service:
    name: str
    image: str
    context: Path  # absolute
    dockerfile: str  # relative to context
    args: dict[str, str]
    engines: tuple[str, ...] = ()
    variants: dict[str, Variant] = field(default_factory=dict)
    loaders: tuple[str, ...] = ()  # x-kitctl.loaders: the data loaders the default build serves

    @property
    def dockerfile_path(self) -> Path:
        return (self.context / self.dockerfile).resolve()


@dataclass(frozen=True)
class Compose:
    path: Path
    services: dict[str, Service]
    resolved_by: str = "kitctl"  # "kitctl" (the hand parser) or "docker compose <version>"

    def service(self, name: str) -> Service:
        try:
            return self.services[name]
        except KeyError:
            known = ", ".join(sorted(self.services)) or "none"
            raise ComposeError(f"{self.path}: no service {name!r} (services: {known})") from None

    def service_for_engine(self, engine: str) -> Service:
        """The service holding an engine's image (engines.py's Engine.service)."""
        from ..core.engines import ENGINES

        if engine not in ENGINES:
            raise ComposeError(f"unknown engine {engine!r}")
        return self.service(ENGINES[engine].service)

    def _variant(self, svc: Service, variant: str | None) -> Variant | None:
        if variant is None:
            return None
        try:
            return svc.variants[variant]
        except KeyError:
            known = ", ".join(sorted(svc.variants)) or "none"
            raise ComposeError(
                f"{self.path}: service {svc.name!r} has no build variant {variant!r} "
                f"(variants: {known})") from None

    def image(self, service: str, variant: str | None = None) -> str:
        svc = self.service(service)
        v = self._variant(svc, variant)
        return v.image if v is not None and v.image else svc.image

    def loaders(self, service: str, variant: str | None = None) -> tuple[str, ...]:
        """The data loaders a build of the service serves: the variant's own list, else the service's."""
        svc = self.service(service)
        v = self._variant(svc, variant)
        return v.loaders if v is not None and v.loaders is not None else svc.loaders

    def build_args(self, service: str, overrides: Mapping[str, Any] | None = None,
                   variant: str | None = None) -> dict[str, str]:
        """The service's build args, then the variant's, then `overrides` (None drops a key)."""
        svc = self.service(service)
        args = dict(svc.args)
        v = self._variant(svc, variant)
        if v is not None:
            args.update(v.args)
        for k, val in (overrides or {}).items():
            if val is None:
                args.pop(k, None)
            else:
                args[str(k)] = _scalar(val)
        return args

    def build_spec(self, service: str, *, variant: str | None = None,
                   overrides: Mapping[str, Any] | None = None, image: str | None = None) -> BuildSpec:
        svc = self.service(service)
        return BuildSpec(service=svc.name, image=image or self.image(service, variant),
                         context=svc.context, dockerfile=svc.dockerfile,
                         args=self.build_args(service, overrides, variant))


def provenance_build_args(root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The OCI label build args a kit build fills in: kit version, git revision, build time.

    Pass them as `overrides` to `build_args`/`build_spec`; the git revision gets `-dirty` when
    the tracked tree has changes. IMAGE_SOURCE comes from compose.yaml/KITCTL_IMAGE_SOURCE.
    """
    import datetime
    import subprocess

    from .. import __version__

    if root is None:
        from ..core.paths import kit_root

        root = kit_root()

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    rev = git("rev-parse", "HEAD")
    if rev and git("status", "--porcelain", "--untracked-files=no"):
        rev += "-dirty"
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return {"KIT_VERSION": __version__, "VCS_REF": rev or "unknown",
            "BUILD_DATE": now.isoformat().replace("+00:00", "Z")}


def default_path() -> Path:
    from ..core.paths import kit_root

    return kit_root() / "compose.yaml"


def load_compose(path: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> Compose:
    p = Path(path) if path is not None else default_path()
    p = p.resolve()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ComposeError(f"{p}: no such file (compose.yaml names the engine images)") from None
    except OSError as exc:
        raise ComposeError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # a ValueError, not an OSError
        raise ComposeError(f"{p}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ComposeError(f"{p}: not valid YAML{where}: {problem}") from None
    if not isinstance(doc, dict):
        raise ComposeError(f"{p}: the top level must be a mapping with a 'services' key")
    doc = _interpolate(doc, os.environ if env is None else env, p, "")
    services = doc.get("services")
    if not isinstance(services, dict) or not services:
        raise ComposeError(f"{p}: 'services' must be a non-empty mapping")
    out: dict[str, Service] = {}
    for name, spec in services.items():
        out[str(name)] = _service(p, str(name), spec)
    compose_v2 = _compose_v2() if os.environ.get("KITCTL_COMPOSE", "auto") != "kitctl" else None
    if os.environ.get("KITCTL_COMPOSE") == "docker" and compose_v2 is None:
        raise ComposeError(f"{p}: KITCTL_COMPOSE=docker but Docker Compose v2 (`docker compose`) is not installed")
    if compose_v2 is None:
        return Compose(path=p, services=out)
    resolved = _resolve_with_compose(p, compose_v2, env)
    for name, svc in list(out.items()):
        std = resolved.get(name)
        if std is None:
            raise ComposeError(f"{p}: docker compose config printed no service {name!r}")
        out[name] = _with_standard_keys(p, svc, std)
    return Compose(path=p, services=out, resolved_by=f"docker compose {compose_v2[1]}")


# ---- Docker Compose v2 -------------------------------------------------------------------------

@functools.lru_cache(maxsize=4)
def _compose_v2_cached(docker_config: str | None, path_env: str | None) -> tuple[tuple[str, ...], str] | None:
    candidates = []
    if shutil.which("docker", path=path_env):
        candidates.append(("docker", "compose"))
    if shutil.which("docker-compose", path=path_env):
        candidates.append(("docker-compose",))
    for cmd in candidates:
        try:
            r = subprocess.run([*cmd, "version", "--short"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        version = r.stdout.strip().lstrip("v")
        if r.returncode == 0 and re.match(r"[2-9]\.", version):
            return cmd, version
    return None


def _compose_v2() -> tuple[tuple[str, ...], str] | None:
    """(command, version) of Docker Compose v2 when installed: `docker compose` (the CLI plugin) or a
    `docker-compose` that is v2. None otherwise (Compose 1.x prints YAML and is not what Docker ships now)."""
    return _compose_v2_cached(os.environ.get("DOCKER_CONFIG"), os.environ.get("PATH"))


def _resolve_with_compose(p: Path, compose_v2: tuple[tuple[str, ...], str],
                          env: Mapping[str, str] | None) -> dict[str, Any]:
    cmd, version = compose_v2
    run_env = dict(os.environ) if env is None else {
        **{k: os.environ[k] for k in ("PATH", "HOME", "DOCKER_CONFIG", "DOCKER_HOST") if k in os.environ}, **env}
    try:
        r = subprocess.run([*cmd, "-f", str(p), "--project-directory", str(p.parent), "config", "--format", "json"],
                           capture_output=True, text=True, timeout=60, env=run_env, cwd=p.parent)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ComposeError(f"{p}: docker compose {version} config did not finish ({type(exc).__name__})") from None
    if r.returncode != 0:
        lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
        raise ComposeError(f"{p}: docker compose {version} refuses it: {lines[-1] if lines else 'exit ' + str(r.returncode)}")
    try:
        doc = json.loads(r.stdout)
        services = doc["services"]
        assert isinstance(services, dict)
        return services
    except (ValueError, KeyError, AssertionError):
        raise ComposeError(f"{p}: docker compose {version} config printed no services as JSON") from None


def _with_standard_keys(p: Path, svc: Service, std: Any) -> Service:
    """The service with image, build context, dockerfile and args as Compose resolved them."""
    import dataclasses

    where = f"services.{svc.name}"
    build = std.get("build") if isinstance(std, dict) else None
    image = std.get("image") if isinstance(std, dict) else None
    if not isinstance(build, dict) or not isinstance(image, str):
        raise ComposeError(f"{p}: docker compose config gave {where} no image or build")
    context = Path(str(build.get("context") or p.parent))
    if not context.is_absolute():
        context = (p.parent / context)
    context = context.resolve()
    dockerfile = str(build.get("dockerfile") or "Dockerfile")
    if Path(dockerfile).is_absolute():
        try:
            dockerfile = str(Path(dockerfile).resolve().relative_to(context))
        except ValueError:
            pass
    # `config` prints a file Compose can read back, so a literal $ comes out escaped as $$.
    args = {str(k): _scalar(v).replace("$$", "$") for k, v in (build.get("args") or {}).items()}
    return dataclasses.replace(svc, image=image.strip().replace("$$", "$"), context=context,
                               dockerfile=dockerfile.replace("$$", "$"), args=args)


# ---- parsing ---------------------------------------------------------------------------------

def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    return str(v)


def _args(p: Path, where: str, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, dict):
        out = {}
        for k, v in raw.items():
            if isinstance(v, (dict, list)):
                raise ComposeError(f"{p}: {where}.{k} must be a scalar")
            out[str(k)] = _scalar(v)
        return out
    if isinstance(raw, list):
        out = {}
        for item in raw:
            if not isinstance(item, str):
                raise ComposeError(f"{p}: {where} entries must be strings KEY=value")
            k, sep, v = item.partition("=")
            if not sep:
                # Compose takes a bare KEY from the environment; kitctl wants it explicit.
                v = os.environ.get(k, "")
            out[k] = v
        return out
    raise ComposeError(f"{p}: {where} must be a mapping or a list of KEY=value")


def _service(p: Path, name: str, spec: Any) -> Service:
    where = f"services.{name}"
    if not isinstance(spec, dict):
        raise ComposeError(f"{p}: {where} must be a mapping")
    image = spec.get("image")
    if not isinstance(image, str) or not image.strip():
        raise ComposeError(f"{p}: {where}.image is missing (kitctl names every engine image there)")
    build = spec.get("build")
    if isinstance(build, str):
        build = {"context": build}
    if not isinstance(build, dict):
        raise ComposeError(f"{p}: {where}.build must be a mapping with context and dockerfile")
    ctx = build.get("context", ".")
    if not isinstance(ctx, str) or not ctx:
        raise ComposeError(f"{p}: {where}.build.context must be a path")
    context = (p.parent / ctx).resolve()
    if not context.is_dir():
        raise ComposeError(f"{p}: {where}.build.context {ctx!r} is not a directory ({context})")
    dockerfile = build.get("dockerfile", "Dockerfile")
    if not isinstance(dockerfile, str) or not dockerfile:
        raise ComposeError(f"{p}: {where}.build.dockerfile must be a path")
    args = _args(p, f"{where}.build.args", build.get("args"))

    ext = spec.get(EXTENSION_KEY) or {}
    if not isinstance(ext, dict):
        raise ComposeError(f"{p}: {where}.{EXTENSION_KEY} must be a mapping")
    engines = ext.get("engines") or []
    if not isinstance(engines, list) or not all(isinstance(e, str) for e in engines):
        raise ComposeError(f"{p}: {where}.{EXTENSION_KEY}.engines must be a list of engine names")
    loaders = _names(p, f"{where}.{EXTENSION_KEY}.loaders", ext.get("loaders")) or ()
    variants: dict[str, Variant] = {}
    raw_variants = ext.get("variants") or {}
    if not isinstance(raw_variants, dict):
        raise ComposeError(f"{p}: {where}.{EXTENSION_KEY}.variants must be a mapping")
    for vname, vspec in raw_variants.items():
        vwhere = f"{where}.{EXTENSION_KEY}.variants.{vname}"
        if not isinstance(vspec, dict):
            raise ComposeError(f"{p}: {vwhere} must be a mapping with image and args")
        vimage = vspec.get("image")
        if vimage is not None and (not isinstance(vimage, str) or not vimage.strip()):
            raise ComposeError(f"{p}: {vwhere}.image must be an image name")
        variants[str(vname)] = Variant(str(vname), vimage, _args(p, f"{vwhere}.args", vspec.get("args")),
                                       _names(p, f"{vwhere}.loaders", vspec.get("loaders")))
    return Service(name=name, image=image.strip(), context=context, dockerfile=dockerfile,
                   args=args, engines=tuple(engines), variants=variants, loaders=loaders)


def _names(p: Path, where: str, raw: Any) -> tuple[str, ...] | None:
    """A list of loader names (None when absent: a variant then serves the service's loaders)."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(x, str) and x.strip() for x in raw):
        raise ComposeError(f"{p}: {where} must be a list of loader names")
    return tuple(x.strip() for x in raw)


# ---- interpolation (Compose's rules, the subset compose files use) ----------------------------

_VAR = re.compile(r"""
    \$(?:
        (?P<escaped>\$) |
        \{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\} |
        (?P<named>[A-Za-z_][A-Za-z0-9_]*) |
        (?P<invalid>)
    )""", re.VERBOSE)


def interpolate(value: str, env: Mapping[str, str], *, where: str = "") -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group("escaped") is not None:
            return "$"
        name = m.group("braced") or m.group("named")
        if name is None:
            raise ValueError(f"invalid interpolation in {value!r}{' at ' + where if where else ''}")
        val = env.get(name)
        op = m.group("op")
        if op is None:
            return val or ""
        arg = m.group("arg") or ""
        unset = val is None or (op.startswith(":") and val == "")
        if op.endswith("-"):
            return arg if unset else val  # type: ignore[return-value]
        if unset:  # ?-forms: required
            raise ValueError(f"{name} is required{': ' + arg if arg else ''}")
        return val  # type: ignore[return-value]

    return _VAR.sub(sub, value)


def _interpolate(node: Any, env: Mapping[str, str], p: Path, where: str) -> Any:
    if isinstance(node, str):
        try:
            return interpolate(node, env, where=where)
        except ValueError as exc:
            raise ComposeError(f"{p}: {where or 'value'}: {exc}") from None
    if isinstance(node, dict):
        return {k: _interpolate(v, env, p, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, env, p, f"{where}[{i}]") for i, v in enumerate(node)]
    return node
