"""Where the kit's own files are: the repo root holding trials/, compose.yaml and the schema.

kitctl is installed editable from its checkout (README), so the root is found from this
file; KITCTL_HOME overrides it for unusual layouts.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from .engines import ENGINES


@lru_cache(maxsize=1)
def kit_root() -> Path:
    env = os.environ.get("KITCTL_HOME")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "trials").is_dir() and (parent / "compose.yaml").is_file():
            return parent
    # Fall back to the checkout layout host/kitctl/core/paths.py -> repo root.
    return here.parents[3]


def trial_script(engine: str) -> Path:
    return kit_root() / "trials" / ENGINES[engine].trial / "trial.py"


def native_prefix(engine: str) -> Path:
    """Where images/<x>/build.sh installed a compiled trial for the local runtime:
    KITCTL_<TRIAL>_PREFIX, else build/<trial>/ in the checkout (git-ignored)."""
    trial = ENGINES[engine].trial
    env = os.environ.get(f"KITCTL_{trial.upper()}_PREFIX")
    return Path(env).resolve() if env else kit_root() / "build" / trial


def native_trial(engine: str) -> Path:
    return native_prefix(engine) / "bin" / f"kit-{ENGINES[engine].trial}-trial"


def native_build_info(engine: str) -> Path:
    return native_prefix(engine) / "share" / f"kit-{ENGINES[engine].trial}" / "build-info.json"


def schema_path() -> Path:
    return Path(__file__).resolve().parents[1] / "schema" / "artifact.schema.json"
