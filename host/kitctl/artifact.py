"""The run's JSON artifact: partial after every candidate, exclusive final name, schema-checked.

`results/<benchmark>-<model>-<dataset>-<UTC stamp>.json`. While the run goes it lives at
`<name>.partial.json`, replaced atomically after every candidate so a killed run leaves a
readable partial that `--resume` continues. At the end the final name is created
exclusively (never overwritten) and the partial removed.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .paths import schema_path

SCHEMA_VERSION = 1
PARTIAL_SUFFIX = ".partial.json"


class ArtifactError(RuntimeError):
    """One line for the user (exit 2)."""


def utc_stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


def utc_iso(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")


def _schema() -> dict[str, Any]:
    with open(schema_path(), encoding="utf-8") as f:
        return json.load(f)


def validate(doc: dict[str, Any]) -> None:
    """Raise ArtifactError with the first schema violation, in one line."""
    try:
        import jsonschema  # lazy: the GPU machine may carry it as a wheel
    except ImportError as exc:  # pragma: no cover - depends on the host
        raise ArtifactError("jsonschema is not installed: pip install jsonschema") from exc
    validator = jsonschema.Draft202012Validator(_schema())
    err = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if err is not None:
        where = "/".join(str(p) for p in err.absolute_path) or "(top)"
        raise ArtifactError(f"artifact does not match its schema at {where}: {err.message[:200]}")


def _atomic_write(path: Path, doc: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


@dataclass
class ArtifactStore:
    """One run's pair of files."""

    partial: Path

    @classmethod
    def create(cls, results_dir: Path, benchmark: str, model: str, dataset: str,
               stamp: str | None = None) -> "ArtifactStore":
        try:
            results_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArtifactError(f"cannot write artifacts under {results_dir}: {exc.strerror or exc}") from None
        base = f"{benchmark}-{model}-{dataset}-{stamp or utc_stamp()}"
        # Claim both names now so two runs started in the same second never share a file.
        for i in range(100):
            name = base if i == 0 else f"{base}-{i}"
            p = results_dir / (name + PARTIAL_SUFFIX)
            if (results_dir / (name + ".json")).exists():
                continue
            try:
                os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            except FileExistsError:
                continue
            except OSError as exc:
                raise ArtifactError(f"cannot write artifacts under {results_dir}: {exc.strerror or exc}") from None
            return cls(p)
        raise ArtifactError(f"could not claim an artifact name under {results_dir}")

    @property
    def final(self) -> Path:
        return self.partial.with_name(self.partial.name[: -len(PARTIAL_SUFFIX)] + ".json")

    def save_partial(self, doc: dict[str, Any]) -> None:
        validate(doc)
        _atomic_write(self.partial, doc)

    def finalize(self, doc: dict[str, Any]) -> Path:
        validate(doc)
        if self.final.exists():
            raise ArtifactError(f"{self.final} already exists; artifacts are never overwritten")
        # Write a temp file, then link it to the final name: link() is atomic and fails if
        # the name exists, so the final is never half-written nor overwritten.
        tmp = self.partial.with_name(self.partial.name + ".final.tmp")
        _atomic_write(tmp, doc)
        try:
            os.chmod(tmp, 0o444)
            os.link(tmp, self.final)
        except FileExistsError:
            raise ArtifactError(f"{self.final} already exists; artifacts are never overwritten") from None
        finally:
            tmp.unlink(missing_ok=True)
        self.partial.unlink(missing_ok=True)
        return self.final


def load(path: Path) -> dict[str, Any]:
    """Read and validate an artifact (final or partial); one clear line on any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ArtifactError(f"{path} is not valid JSON (not UTF-8 text)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "kitctl-artifact":
        raise ArtifactError(f"{path} is not a kitctl artifact")
    validate(doc)
    return doc


def open_for_resume(path: Path) -> tuple[ArtifactStore, dict[str, Any]]:
    path = Path(path)
    if not path.name.endswith(PARTIAL_SUFFIX):
        raise ArtifactError(f"--resume takes a {PARTIAL_SUFFIX} file (got {path.name})")
    doc = load(path)
    if doc.get("state") == "complete":
        raise ArtifactError(f"{path} is already complete; nothing to resume")
    store = ArtifactStore(path)
    if store.final.exists():
        raise ArtifactError(f"{store.final} already exists; that run was finished")
    return store, doc
