"""tools/compare_cudagraph.py: its CPU smoke form, with real torch (the GPU form is the lead's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "compare_cudagraph.py"


def tool(*flags, timeout=600):
    return subprocess.run([sys.executable, str(TOOL), *map(str, flags)], capture_output=True,
                          text=True, timeout=timeout, cwd="/")


def test_dry_run_on_cpu_measures_eager_and_skips_graphs_in_one_line_each(tmp_path):
    out = tmp_path / "cmp.json"
    p = tool("--device", "cpu", "--dry-run", "--precision", "fp32",
             "--variants", "eager,kit,plain,compiled", "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(out.read_text())
    rows = {r["variant"]: r for r in doc["results"]}
    assert set(rows) == {"eager", "kit", "plain", "compiled"}
    assert len(doc["results"]) == 4  # on the cpu each variant once, not once per cuDNN setting
    eager = rows["eager"]
    assert eager["status"] == "ok" and eager["images_per_second"]["median"] > 0
    assert len(eager["images_per_second"]["windows"]) == 2  # --dry-run: two windows
    assert eager["settings"]["optimizer"]["name"] == "Adam"  # built by the trial's own code
    for name in ("kit", "plain"):
        assert rows[name]["status"] == "skipped"
        assert rows[name]["reason"] == "CUDA graphs need --device cuda"
    assert rows["compiled"]["status"] == "skipped" and "--dry-run" in rows["compiled"]["reason"]
    assert doc["config"]["batch"] == 2 and doc["versions"]["torch"]
    assert "eager" in p.stdout and f"wrote {out}" in p.stdout


@pytest.mark.parametrize("flags,message", [
    (["--variants", "eager,bogus"], "--variants: bogus not in"),
    (["--precision", "fp16"], "--precision: fp16 not in"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--batch", "1"], "--batch must be >= 2"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, flags, message):
    p = tool("--device", "cpu", "--out", tmp_path / "x.json", *flags, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and message in p.stderr, p.stderr
    assert not (tmp_path / "x.json").exists()


def test_out_folder_must_exist(tmp_path):
    p = tool("--device", "cpu", "--dry-run", "--out", tmp_path / "absent" / "x.json", timeout=120)
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr
