"""What a resumed run must prove before it continues: a partial that some run of this kitctl could have left
(its configuration and cells replayed), the same software (runtime, images, interpreter, compiled builds) and
the same code (or, with --allow-code-change, the change recorded)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..core.engines import EngineError
from ..core.recorded import configuration
from ..core.provenance import HOST_CODE, changed_files, code_hash, kit_info, trial_code, trial_paths
from ..errors import Fail


def check_resumed(config_type: Any, doc: dict[str, Any], recorded: dict[str, Any] | None = None) -> Any:
    """Refuse a partial that no run of this kitctl could have left: its settings (types and ranges,
    as a new run's flags), and every recorded cell replayed through the benchmark (its search, its
    run count). Finished cells are then re-derived by the runner, never trusted. Returns the typed
    config the resume continues with (`config_type`: the benchmark's config class, whose BENCHMARK names it;
    `recorded`: the partial's configuration with a new --timeout)."""
    benchmark = config_type.BENCHMARK
    if doc.get("benchmark") != benchmark:
        raise Fail(f"--resume: that artifact is a {doc.get('benchmark')} run, not {benchmark}")
    recorded = configuration(doc) if recorded is None else recorded
    try:
        config = config_type.from_json(recorded)
    except (Fail, EngineError) as exc:
        raise Fail(f"--resume: the partial's configuration is not one kitctl runs ({exc}); start a new run") from None
    rebuilt = config.to_json()
    changed = [k for k in config.SETTINGS if k in rebuilt and k in recorded and recorded[k] != rebuilt[k]]
    if changed:
        raise Fail(f"--resume: the partial's configuration is not one kitctl writes ({', '.join(changed)}); "
                   "start a new run")
    seen: set[tuple[str, str]] = set()
    for cell in doc["results"]:
        key = (cell["engine"], cell["precision"])
        where = f"--resume: the partial's cell {key[0]} {key[1]}"
        if key[0] not in config.run.engines or key[1] not in config.run.precisions or key in seen:
            raise Fail(f"{where} is not one its configuration runs (or is there twice); start a new run")
        seen.add(key)
        try:
            why = config.cell_problem(cell)
        except (KeyError, TypeError, ValueError) as exc:
            why = f"a recorded candidate cannot be read ({type(exc).__name__}: {exc})"
        if why:
            raise Fail(f"{where}: {why}; the partial was edited or damaged — start a new run")
    return config


def resume_stack(doc: dict[str, Any], engines: list) -> tuple[str, dict[str, str] | None, str | None]:
    """The runtime, the images (by id) and the interpreter the partial's run started with: a resume
    continues on exactly that software, or is refused."""
    name = doc["runtime"].get("name")
    prov = {e.name: doc["engines"].get(e.name, {}).get("provenance") or {} for e in engines}
    if name == "docker":
        images = {}
        for e, p in prov.items():
            if not isinstance(p.get("id"), str) or not p["id"]:
                raise Fail(f"--resume: the partial does not record the image engine {e} ran in "
                           f"(engines.{e}.provenance.id); start a new run")
            images[e] = p["id"]
        return name, images, None
    python = None
    for e in engines:
        if not e.native:
            python = prov[e.name].get("interpreter")
            if not isinstance(python, str) or not (os.path.isfile(python) and os.access(python, os.X_OK)):
                raise Fail(f"--resume: the partial ran engine {e.name} with the interpreter {python!r}, which is "
                           "not an executable here; a resume continues with it: start a new run")
    return name, None, python


# What a build records about itself but that does not make it other software: when and how long it
# built, and which kit commit ran the build script (the trial's own sources are kit.trial_code, kept).
_BUILD_CIRCUMSTANCES = ("built_at", "stage_seconds", "total_seconds")
_BUILD_KIT_CIRCUMSTANCES = ("git_commit", "git_dirty", "git_source")


def build_identity(info: Any) -> Any:
    """A compiled trial's build_info without the circumstances of the build: two builds of the same
    sources with the same tools on twin machines are the same software (a resume may continue there)."""
    if not isinstance(info, dict):
        return info
    ident = {k: v for k, v in info.items() if k not in _BUILD_CIRCUMSTANCES}
    if isinstance(ident.get("kit"), dict):
        ident["kit"] = {k: v for k, v in ident["kit"].items() if k not in _BUILD_KIT_CIRCUMSTANCES}
    return ident


def _differences(old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        return ", ".join(f"{k} {old.get(k)!r} → {new.get(k)!r}" for k in keys)
    return f"{old!r} → {new!r}"


def check_same_stack(doc: dict[str, Any], rt: Any, engines: list) -> None:
    """What the runtime would run now is what the partial's provenance records (image id, interpreter,
    trial, compiled trial's build — the build compared by its identity, not by when it was made)."""
    keys = ("id",) if rt.name == "docker" else ("interpreter", "trial", "build_info")
    for e in engines:
        old = doc["engines"][e.name].get("provenance") or {}
        new = rt.describe(e.name)
        for k in keys:
            if k not in old:
                continue
            was, now = old[k], new.get(k)
            if k == "build_info":
                was, now = build_identity(was), build_identity(now)
            if was != now:
                raise Fail(f"--resume: engine {e.name} would now run with another {k} ({_differences(was, now)}); "
                           "a resume continues on the software it started with: start a new run")


@dataclass(frozen=True)
class CodeChange:
    """Code that hashes otherwise now than when the partial recorded it: the host package (always),
    a Python trial on the local runtime (Docker runs the image pinned by id, whose trial cannot change;
    a compiled trial is compared by its build_info)."""

    what: str                 # "kitctl (host/kitctl)" or "trial of pytorch-eager (trials/pytorch, trials/common)"
    paths: tuple[str, ...]
    old_sha256: str
    new_sha256: str
    files: tuple[str, ...]    # what git says changed under paths since the partial's commit; () unknown

    def line(self) -> str:
        which = ", ".join(self.files[:5]) + (f" and {len(self.files) - 5} more" if len(self.files) > 5 else "")
        return (f"{self.what} changed since the partial was written ({which + '; ' if which else ''}"
                f"sha256 {self.old_sha256[:12]} → {self.new_sha256[:12]})")

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "paths": list(self.paths), "old_sha256": self.old_sha256,
                "new_sha256": self.new_sha256, "files": list(self.files)}


def code_changes(doc: dict[str, Any], rt: Any, engines: list) -> list[CodeChange]:
    """Every code hash the partial recorded that the checkout no longer gives. A partial without a
    recorded hash (an image that holds no trial folder) has nothing to compare."""
    since = (doc.get("kit") or {}).get("git_commit")
    pairs: list[tuple[str, tuple[str, ...], Any, Any]] = []
    recorded = (doc.get("kit") or {}).get("code") or {}
    pairs.append((f"kitctl ({', '.join(HOST_CODE)})", HOST_CODE, recorded, code_hash(HOST_CODE)))
    if rt.name != "docker":
        for e in engines:
            if e.native:
                continue
            old = (doc["engines"].get(e.name, {}).get("provenance") or {}).get("code") or {}
            paths = trial_paths(e.name)
            pairs.append((f"the trial of {e.name} ({', '.join(paths)})", paths, old, trial_code(e.name)))
    out = []
    for what, paths, old, now in pairs:
        was = old.get("sha256") if isinstance(old, dict) else None
        if isinstance(was, str) and was != now.sha256:
            out.append(CodeChange(what, tuple(paths), was, now.sha256, changed_files(paths, since)))
    return out


def check_code(doc: dict[str, Any], rt: Any, engines: list, allow: bool) -> list[CodeChange]:
    """A resume runs the code the partial ran, or says in one line what changed; with
    --allow-code-change it goes on and the resume entry records old and new hashes (and the kit's
    commit now), so the artifact never claims one code for cells measured by two."""
    changes = code_changes(doc, rt, engines)
    if changes and not allow:
        raise Fail("--resume: " + "; ".join(c.line() for c in changes)
                   + "; a resume continues on the code it started with — start a new run, "
                   "or pass --allow-code-change to continue and record the change")
    entry = doc["resumes"][-1]
    now = kit_info()
    entry["kit"] = {k: now[k] for k in ("git_commit", "git_dirty", "git_source")} | {"code": now["code"]}
    if changes:
        entry["code_changed"] = [c.to_json() for c in changes]
    return changes
