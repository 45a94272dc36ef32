"""The data benchmarks (datasize, dataload, train-e2e) check a run's flags as the engine benchmarks do:
a timeout that is not a number of seconds up to a week, and any setting beside --resume, are refused in one
line, exit 2, before anything is written (the real console entry point, in a subprocess)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ENTRY = [sys.executable, "-c", "from kitctl.entry import main; main()"]
DATA = ["datasize", "dataload", "train-e2e"]


def kitctl(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def one_line(p: subprocess.CompletedProcess) -> str:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("kitctl: "), (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and p.stdout == ""
    return lines[0]


@pytest.mark.parametrize("bench", DATA)
@pytest.mark.parametrize("timeout", ["nan", "inf", "-inf", "1e12", "0", "-5"])
def test_a_timeout_that_is_no_time_is_refused_before_anything_is_written(tmp_path, bench, timeout):
    line = one_line(kitctl(tmp_path, "run", bench, "--timeout", timeout, "--results-dir", str(tmp_path / "r")))
    assert "--timeout must be > 0 and at most 604800 s" in line, line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("bench", DATA)
def test_a_setting_beside_resume_is_refused_not_ignored(tmp_path, bench):
    partial = tmp_path / "x.partial.json"
    line = one_line(kitctl(tmp_path, "run", bench, "--resume", str(partial), "--workers", "1", "--json"))
    assert "--resume continues the partial's own configuration: --workers cannot apply" in line, line
    assert "beside --resume only --json and --csv" in line, line
    # the output flags are taken beside it: what is refused then is the missing partial, not a flag
    line = one_line(kitctl(tmp_path, "run", bench, "--resume", str(partial), "--json", "--csv",
                           str(tmp_path / "t.csv")))
    assert "cannot apply" not in line and str(partial) in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("bench", DATA)
def test_a_runtime_the_data_trials_cannot_use_is_refused_in_one_line(tmp_path, bench):
    line = one_line(kitctl(tmp_path, "run", bench, "--runtime", "ray", "--results-dir", str(tmp_path / "r")))
    assert line == "kitctl: --runtime must be local or docker (got 'ray')", line
    assert not (tmp_path / "r").exists()


def test_each_benchmarks_default_timeout_is_what_docs_and_help_state():
    """Each data benchmark's DEFAULT_TIMEOUT_S (its config) is what it records without --timeout, what its help
    says, and docs/running.md's defaults table, beside the engine benchmarks' (run/config.py)."""
    from kitctl.benchmarks.dataload.config import DEFAULT_TIMEOUT_S as DATALOAD
    from kitctl.benchmarks.datasize.config import DEFAULT_TIMEOUT_S as DATASIZE
    from kitctl.benchmarks.train_e2e.config import DEFAULT_TIMEOUT_S as TRAIN_E2E
    from kitctl.run.config import DEFAULT_TIMEOUT_S as ENGINES, DataLaunch

    own = {"datasize": DATASIZE, "dataload": DATALOAD, "train-e2e": TRAIN_E2E}
    for bench, default in own.items():
        assert DataLaunch.of("local", None, None, default).timeout_s == default
        assert DataLaunch.of("docker", None, 12.5, default).timeout_s == 12.5
        p = kitctl(Path("/"), "run", bench, "--help")
        assert f"(default {default:.0f})" in " ".join(p.stdout.split()), p.stdout
    docs = (Path(__file__).resolve().parents[1] / "docs" / "running.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `--timeout` (s per unit) |"))
    cells = [c.strip().split(" ")[0].replace(",", "") for c in row.strip("|").split("|")[1:]]
    assert [float(c) for c in cells] == [ENGINES, DATASIZE, DATALOAD, TRAIN_E2E]
