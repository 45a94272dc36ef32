"""The run's JSON artifact: partial after every candidate, exclusive final name, schema-checked.

`results/<benchmark>-<model>-<dataset>-<UTC stamp>.json`. While the run goes it lives at
`<name>.partial.json`, replaced atomically after every candidate so a killed run leaves a
readable partial that `--resume` continues. At the end the final name is created
exclusively (never overwritten) and the partial removed.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import signals
from .fileio import NotRegularFile, read_regular
from .paths import schema_path

SCHEMA_VERSION = 1
PARTIAL_SUFFIX = ".partial.json"
PARTIAL_MODE = 0o644  # readable while the run goes; the final is 0444


class ArtifactError(RuntimeError):
    """One line for the user (exit 2)."""


def utc_stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


def utc_iso(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")


def new_document(benchmark: str, run_id: str, configuration: dict[str, Any], host: dict[str, Any],
                 runtime: dict[str, Any], budget: dict[str, Any] | None = None,
                 engines: dict[str, Any] | None = None) -> dict[str, Any]:
    """A new run's artifact document, `running` and without results: the one shape every benchmark's run
    starts from (the engine benchmarks' and the data benchmarks'); the kit and the command line recorded."""
    from .provenance import kit_info

    now = utc_iso()
    return {"schema_version": SCHEMA_VERSION, "kind": "kitctl-artifact", "benchmark": benchmark, "run_id": run_id,
            "state": "running", "created_utc": now, "updated_utc": now, "finished_utc": None, "kit": kit_info(),
            "argv": sys.argv, "host": host, "runtime": runtime, "configuration": configuration, "budget": budget,
            "engines": {} if engines is None else engines, "results": []}


def _schema() -> dict[str, Any]:
    with open(schema_path(), encoding="utf-8") as f:
        return json.load(f)


def validate(doc: dict[str, Any]) -> None:
    """Raise ArtifactError with the first schema violation, in one line."""
    try:
        # lazy: the GPU machine may carry it as a wheel. Names imported from their modules, not reached as
        # attributes: a signal that ends a first import half-way drops `jsonschema` from sys.modules but keeps
        # `jsonschema.exceptions`, and the re-imported package then lacks the `exceptions` attribute (the save of
        # the interrupted run's partial failed so, with an AttributeError traceback).
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import best_match
    except ImportError as exc:  # pragma: no cover - depends on the host
        raise ArtifactError("jsonschema is not installed: pip install jsonschema") from exc
    validator = Draft202012Validator(_schema())
    err = best_match(validator.iter_errors(doc))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(top)"
        raise ArtifactError(f"artifact does not match its schema at {where}: {err.message[:200]}")


def _write_tmp(path: Path, doc: dict[str, Any], mode: int) -> str:
    """The whole document in a fresh temporary beside `path`, flushed to disk; returns its name."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp's 0600 would become the partial's mode
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def _unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _atomic_write(path: Path, doc: dict[str, Any]) -> None:
    tmp = _write_tmp(path, doc, PARTIAL_MODE)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


class ArtifactWriteError(ArtifactError):
    """The disk refused a write (full, read-only, gone): what is on disk is still whole."""

    def __init__(self, path: Path, exc: OSError) -> None:
        self.path, self.reason = path, exc.strerror or str(exc)
        super().__init__(f"cannot write {path}: {self.reason}")


class ArtifactBusy(ArtifactError):
    """Another kitctl holds the partial's lock."""


def _lock(lock_path: Path) -> int | None:
    """An exclusive flock on `lock_path` (created if absent), or None when another process holds it.

    A holder removes the file when it is done; an opener that raced with that removal holds a
    lock on a name-less file, so it checks the name still points at its file and tries again."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PARTIAL_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


@dataclass
class ArtifactStore:
    """One run's pair of files, and (while the run writes it) the lock `<partial>.lock`.

    A new run's store is `pending`: nothing is on disk until the first `save_partial`, which
    claims a free name by linking the complete first document there (never an empty file).
    Every write is whole (temporary + rename) and holds signals off (`signals.critical`)."""

    partial: Path
    claimed: bool = True
    _spec: tuple[Path, str, str, str, str] | None = field(default=None, repr=False, compare=False)
    _lock_fd: int | None = field(default=None, repr=False, compare=False)

    @classmethod
    def pending(cls, results_dir: Path, benchmark: str, model: str, dataset: str) -> "ArtifactStore":
        """A new run's store, nothing written yet; refuses now a folder that cannot be written."""
        results_dir = Path(results_dir)
        probe = results_dir
        try:  # exists() raises, not answers, for a name the file system cannot hold (ENAMETOOLONG)
            while not probe.exists() and probe != probe.parent:
                probe = probe.parent
            name_max = os.pathconf(probe, "PC_NAME_MAX") if probe.is_dir() else 255
        except OSError as exc:
            raise ArtifactError(f"cannot write artifacts under {results_dir}: {exc.strerror or exc}") from None
        missing = results_dir.parts[len(probe.parts):]
        too_long = next((p for p in missing if len(os.fsencode(p)) > name_max), None)
        if too_long is not None:
            raise ArtifactError(f"cannot write artifacts under {results_dir}: "
                                f"a folder name of {len(os.fsencode(too_long))} bytes, above the {name_max} "
                                "this file system allows")
        if not probe.is_dir():
            raise ArtifactError(f"cannot write artifacts under {results_dir}: {probe} is not a directory")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise ArtifactError(f"cannot write artifacts under {results_dir}: permission denied")
        stamp = utc_stamp()  # the run's start names it, whenever its first save comes
        name = f"{benchmark}-{model}-{dataset}-{stamp}{PARTIAL_SUFFIX}"
        return cls(results_dir / name, claimed=False, _spec=(results_dir, benchmark, model, dataset, stamp))

    @classmethod
    def create(cls, results_dir: Path, benchmark: str, model: str, dataset: str,
               stamp: str | None = None, doc: dict[str, Any] | None = None,
               lock: bool = False) -> "ArtifactStore":
        """Claim a free name. With `doc`, the partial appears whole with that content (and with
        `lock`, locked before it appears); without, an empty placeholder claims it."""
        try:
            results_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArtifactError(f"cannot write artifacts under {results_dir}: {exc.strerror or exc}") from None
        base = f"{benchmark}-{model}-{dataset}-{stamp or utc_stamp()}"
        # Claim both names now so two runs started in the same second never share a file.
        for i in range(100):
            name = base if i == 0 else f"{base}-{i}"
            p = results_dir / (name + PARTIAL_SUFFIX)
            if (results_dir / (name + ".json")).exists() or p.exists():
                continue
            fd = None
            try:
                if lock:
                    fd = _lock(_lock_path(p))
                    if fd is None:
                        continue  # another run is claiming this very name
                if doc is None:
                    os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PARTIAL_MODE))
                else:
                    tmp = _write_tmp(p, doc, PARTIAL_MODE)
                    try:
                        os.link(tmp, p)  # atomic, and fails if the name exists
                    finally:
                        _unlink_quietly(tmp)
            except FileExistsError:
                _release(p, fd)
                continue
            except OSError as exc:
                _release(p, fd)
                if doc is not None:
                    raise ArtifactWriteError(p, exc) from None
                raise ArtifactError(f"cannot write artifacts under {results_dir}: {exc.strerror or exc}") from None
            except BaseException:
                _release(p, fd)
                raise
            return cls(p, _lock_fd=fd)
        raise ArtifactError(f"could not claim an artifact name under {results_dir}")

    @property
    def final(self) -> Path:
        return self.partial.with_name(self.partial.name[: -len(PARTIAL_SUFFIX)] + ".json")

    @property
    def lock_path(self) -> Path:
        return _lock_path(self.partial)

    def lock(self) -> None:
        """Become the partial's only writer (held until `release` or exit), or ArtifactBusy."""
        if self._lock_fd is not None:
            return
        try:
            fd = _lock(self.lock_path)
        except OSError as exc:
            raise ArtifactError(f"cannot lock {self.lock_path}: {exc.strerror or exc}") from None
        if fd is None:
            raise ArtifactBusy(f"{self.partial} is being written by another kitctl (it holds "
                               f"{self.lock_path.name}); wait for that run to end")
        self._lock_fd = fd

    def release(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            _release(self.partial, fd)

    def save_partial(self, doc: dict[str, Any]) -> None:
        validate(doc)
        with signals.critical():
            try:
                if not self.claimed:
                    assert self._spec is not None
                    got = ArtifactStore.create(*self._spec, doc=doc, lock=True)
                    self.partial, self._lock_fd, self.claimed = got.partial, got._lock_fd, True
                else:
                    _atomic_write(self.partial, doc)
            except OSError as exc:
                raise ArtifactWriteError(self.partial, exc) from None

    def finalize(self, doc: dict[str, Any]) -> Path:
        validate(doc)
        if self.final.exists():
            raise ArtifactError(f"{self.final} already exists; artifacts are never overwritten")
        with signals.critical():
            # Write a temp file, then link it to the final name: link() is atomic and fails if
            # the name exists, so the final is never half-written nor overwritten.
            try:
                tmp = _write_tmp(self.final, doc, 0o444)
                try:
                    os.link(tmp, self.final)
                except FileExistsError:
                    raise ArtifactError(f"{self.final} already exists; artifacts are never overwritten") from None
                finally:
                    _unlink_quietly(tmp)
            except OSError as exc:
                raise ArtifactWriteError(self.final, exc) from None
            self.partial.unlink(missing_ok=True)
            self.release()
        return self.final


def _lock_path(partial: Path) -> Path:
    return partial.with_name(partial.name + ".lock")


def being_written(partial: Path) -> bool:
    """Whether a live kitctl holds the partial's lock. A writer holds it from its first write to its
    last, and the kernel drops it when the process dies however it dies: a "running" partial whose
    lock nobody holds was left by a process that is gone. Looks without creating anything."""
    try:
        fd = os.open(_lock_path(partial), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file: no writer (or it cannot be known here)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the shared lock this look may have taken
    return False


def _release(partial: Path, fd: int | None) -> None:
    """Remove the lock file (while still holding it: see `_lock`) and drop the lock."""
    if fd is None:
        return
    try:
        if os.stat(_lock_path(partial)).st_ino == os.fstat(fd).st_ino:
            os.unlink(_lock_path(partial))
    except OSError:
        pass
    os.close(fd)


def load(path: Path) -> dict[str, Any]:
    """Read and validate an artifact (final or partial); one clear line on any problem."""
    try:
        text = read_regular(Path(path)).decode("utf-8")
    except NotRegularFile as exc:
        raise ArtifactError(str(exc)) from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ArtifactError(f"{path} is not valid JSON (not UTF-8 text)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:  # `[[[[...`: a hostile or broken file, not a reason for a traceback
        raise ArtifactError(f"{path} is not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # an integer of more than 4,300 digits (int's conversion limit)
        raise ArtifactError(f"{path} is not valid JSON (a number too long to read: {' '.join(str(exc).split())[:60]})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "kitctl-artifact":
        raise ArtifactError(f"{path} is not a kitctl artifact")
    validate(doc)
    return doc


def open_for_resume(path: Path) -> tuple[ArtifactStore, dict[str, Any]]:
    """The partial, read after taking its lock (so no other kitctl writes it meanwhile)."""
    path = Path(path)
    if not path.name.endswith(PARTIAL_SUFFIX):
        raise ArtifactError(f"--resume takes a {PARTIAL_SUFFIX} file (got {path.name})")
    if not path.is_file():
        load(path)  # the one-line "cannot read" / "not a file" refusal, before any lock file appears
    store = ArtifactStore(path)
    store.lock()
    try:
        doc = load(path)
        if doc.get("state") == "complete":
            raise ArtifactError(f"{path} is already complete; nothing to resume")
        if store.final.exists():
            raise ArtifactError(f"{store.final} already exists; that run was finished")
    except BaseException:
        store.release()
        raise
    return store, doc
