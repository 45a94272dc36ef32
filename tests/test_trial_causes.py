"""A trial that cannot start is refused up front in one line where that can be known (an interpreter
that is no Python or lacks torch, a KITCTL_HOME that is no kit); otherwise the first error line shows
in the terminal and in the cell's reason (so in the report), not only in stderr_tail. Before, each
of these wrote a complete artifact of "crash then crash" with the cause only in the JSON."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kitctl.core.artifact import load
from kitctl.core.outcome import Status, TrialOutcome

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
CPU = ["run", "maxbatch", "--device", "cpu", "--runtime", "local", "--start-batch", "2", "--max-batch", "2"]


def kitctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*ENTRY, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def refused(p: subprocess.CompletedProcess, match: str, results: Path) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert match in p.stderr, p.stderr
    assert not results.exists() or not list(results.iterdir())  # nothing written


def test_an_interpreter_that_is_no_python_is_refused(tmp_path):
    results = tmp_path / "r"
    refused(kitctl(*CPU, "--python", "/bin/true", "--results-dir", str(results)),
            "--python /bin/true is not a Python interpreter", results)


def test_an_interpreter_without_torch_is_refused_naming_it(tmp_path):
    venv = tmp_path / "venv"  # a real interpreter with nothing installed
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    results = tmp_path / "r"
    refused(kitctl(*CPU, "--python", str(venv / "bin" / "python"), "--results-dir", str(results)),
            "lacks the module(s) numpy, torch that pytorch-eager import(s)", results)


def test_a_kitctl_home_that_is_no_kit_is_refused(tmp_path):
    results = tmp_path / "r"
    refused(kitctl(*CPU, "--results-dir", str(results), env={"KITCTL_HOME": str(tmp_path / "nonexistent")}),
            "is not a kit checkout", results)


# A stand-in for what cannot be known up front: an interpreter that answers the probe as the real one
# does (it is the real one) but whose trial then fails with an error of its own.
FAILING = """#!/bin/sh
if [ "$1" = "-c" ]; then exec {python} "$@"; fi
echo "some warning first" >&2
echo "Traceback (most recent call last):" >&2
echo "RuntimeError: no usable device found by the stand-in" >&2
exit 1
"""


def test_a_cause_known_only_at_run_time_shows_in_the_terminal_and_the_report(tmp_path):
    py = tmp_path / "python"
    py.write_text(FAILING.format(python=sys.executable))
    py.chmod(0o755)
    results = tmp_path / "r"
    p = kitctl(*CPU, "--python", str(py), "--results-dir", str(results))
    assert p.returncode == 1, p.stderr
    cause = "RuntimeError: no usable device found by the stand-in"
    # each candidate's line (progress goes to stderr), and the table's cell (stdout)
    assert "crash, peak — MiB" in p.stderr and p.stderr.count(cause) >= 2, p.stderr
    assert cause in p.stdout, p.stdout
    (final,) = results.glob("*.json")
    cell = load(final)["results"][0]
    assert cell["reason"] == f"batch 2: crash then crash, not a memory failure — {cause}"
    r = kitctl("report", str(final))
    assert r.returncode == 0 and cause in r.stdout, r.stdout


@pytest.mark.parametrize("outcome, cause", [
    (TrialOutcome(2, Status.ERROR, result={"error": "cuDNN error: X\nmore"}, stderr_tail="ValueError: y"),
     "cuDNN error: X"),
    (TrialOutcome(2, Status.CRASH, error="no KIT-RESULT line on stdout (exit code 1)",
                  stderr_tail="Traceback (most recent call last):\n  File \"t.py\"\nModuleNotFoundError: No module named 'torch'\n"),
     "ModuleNotFoundError: No module named 'torch'"),
    (TrialOutcome(2, Status.CRASH, error="no KIT-RESULT line on stdout (signal 6)", stderr_tail=""),
     "no KIT-RESULT line on stdout (signal 6)"),
    (TrialOutcome(2, Status.OK), None),
])
def test_the_cause_line(outcome, cause):
    assert outcome.cause == cause


def test_a_signal_before_the_cli_is_imported_is_one_line():
    """The console entry's module is loaded, `main` not yet called (where the CLI's handlers come):
    a SIGINT there was a KeyboardInterrupt traceback."""
    code = ("import kitctl.entry, os, signal, time\n"
            "os.kill(os.getpid(), signal.SIGINT)\n"
            "time.sleep(5)\n"
            "print('not ended')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 130, (p.stdout, p.stderr)
    assert p.stderr == "kitctl: interrupted (SIGINT) while starting; nothing written\n" and not p.stdout
