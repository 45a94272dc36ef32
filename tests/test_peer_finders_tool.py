"""tools/peer_batch_finders.py (Lightning's and accelerate's batch finders on the kit's question; not part of the
kit) on this host: every refusal is one line, exit 2, before any finder starts; the cap it takes from a kitctl
artifact is the allocator fraction that artifact's candidates ran under. Its finder runs need pytorch_lightning
or accelerate and are not exercised here (results/reference/reports say where they ran)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "peer_batch_finders.py"
ARTIFACT = ROOT / "results" / "reference" / "maxbatch-resnet50-synthetic-20261129T195932Z.json"  # H200, L 16,376


def tool(*flags) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, str(TOOL), *map(str, flags)], capture_output=True, text=True, timeout=120,
                       cwd="/")
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("flags, says", [
    ((), "a GPU run needs the allocator cap"),
    (("--memory-fraction", "1.5"), "a GPU run needs the allocator cap"),
    (("--device", "cpu"), "a CPU run needs --cap-mib N"),
    (("--device", "cpu", "--cap-mib", "-3"), "a CPU run needs --cap-mib N"),
    (("--device", "cpu", "--memory-fraction", "0.5"), "--memory-fraction and --like cap a GPU's allocator"),
    (("--cap-mib", "100"), "--cap-mib caps a CPU process"),
    (("--finders", "keras", "--device", "cpu", "--cap-mib", "100"), "--finders: 'keras'"),
    (("--device", "cpu", "--cap-mib", "100", "--lightning-margin", "1"), "--lightning-margin must be in [0, 1)"),
    (("--like", "/nonexistent.json"), "--like /nonexistent.json: cannot read it as JSON"),
    (("--like", ARTIFACT, "--engine", "jax-xla"), "no jax-xla fp32 cell"),
])
def test_bad_input_is_one_line_exit_2(flags, says):
    rc, out, err = tool(*flags)
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("peer_batch_finders: "), (rc, err)
    assert says in lines[0], lines[0]


def test_the_cap_from_an_artifact_is_its_candidates_allocator_fraction():
    sys.path.insert(0, str(TOOL.parent))
    try:
        spec = importlib.util.spec_from_file_location("peer_batch_finders", TOOL)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(TOOL.parent))
    f = mod.fraction_of(ARTIFACT, "pytorch-eager", "fp32")
    # the pytorch-eager fp32 cell at L 16,376: its framework budget (at most the trial's 64 MiB slack under it)
    # of the 143,155.9 MiB of the H200 that PyTorch sees
    cell = next(c for c in json.loads(ARTIFACT.read_text())["results"]
                if (c["engine"], c["precision"]) == ("pytorch-eager", "fp32"))
    assert cell["framework_budget_mib"] - 65 <= f * 143155.9 <= cell["framework_budget_mib"] + 1, f
    with pytest.raises(mod.Refusal, match="not maxbatch"):
        mod.fraction_of(ROOT / "results" / "reference" / "throughput-resnet50-synthetic-20261203T171214Z.json",
                        "pytorch-eager", "fp32")
