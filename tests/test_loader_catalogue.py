"""One catalogue of loaders (kitctl.benchmarks.data.loaders.CATALOGUE): the benchmarks' flags read it, and the
two lists that cannot import it — the trial's (trials/dataload/loaders.py, which runs inside the loader images)
and compose.yaml's x-kitctl.loaders (which image build serves which loader) — agree with it."""
from __future__ import annotations

import ast
from pathlib import Path

from kitctl.benchmarks.data.loaders import BY_NAME, CATALOGUE, GPU_LOADERS, LOADER_FORMAT, LOADER_NAMES
from kitctl.benchmarks.dataload.config import LOADERS as DATALOAD_LOADERS
from kitctl.benchmarks.train_e2e.config import LOADERS as TRAIN_E2E_LOADERS
from kitctl.images.compose import load_compose

ROOT = Path(__file__).resolve().parents[1]


def trial_literals() -> dict[str, object]:
    """The trial module's top-level literal assignments (read, not imported: it needs numpy and PIL)."""
    tree = ast.parse((ROOT / "trials" / "dataload" / "loaders.py").read_text())
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def test_names_are_unique_and_the_flags_read_the_catalogue():
    assert len(BY_NAME) == len(CATALOGUE)
    assert DATALOAD_LOADERS == LOADER_NAMES
    assert TRAIN_E2E_LOADERS == ("synthetic", *(ld.name for ld in CATALOGUE if ld.trains))


def test_the_trial_knows_the_same_loaders_formats_and_gpu_decoders():
    t = trial_literals()
    assert set(t["CPU_LOADERS"]) | set(t["GPU_LOADERS"]) == set(LOADER_NAMES)
    assert set(t["GPU_LOADERS"]) == set(GPU_LOADERS)
    assert t["FORMAT_OF"] == LOADER_FORMAT


def test_each_loader_is_served_by_its_image_and_every_served_loader_is_known():
    c = load_compose()
    services = {n[len("loader-"):]: s for n, s in c.services.items() if n.startswith("loader-") and s.loaders}
    served = {name: set(s.loaders) for name, s in services.items()}  # the default (CUDA) build of each image
    for ld in CATALOGUE:
        assert ld.name in served.get(ld.image, set()), f"{ld.name}: compose.yaml's loader-{ld.image} does not serve it"
    every = {x for s in services.values() for v in [None, *s.variants] for x in (c.loaders(s.name, v) or ())}
    assert every <= set(LOADER_NAMES), every - set(LOADER_NAMES)
