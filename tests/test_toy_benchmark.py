"""A new benchmark plugs in through its own folder and one registry line: the toy in tests/toy_benchmark/toy
(config, command, registration) gets `kitctl run toy`, its flags, its help, its one-line refusal and its exit
codes from the CLI, with nothing else of kitctl changed (the real console entry point, in a subprocess)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The one registry line: BUILTIN names the toy's package (here added in the process, not in the source).
START = ("import sys\nfrom kitctl import benchmarks\nbenchmarks.BUILTIN = (*benchmarks.BUILTIN, 'toy')\n"
         "from kitctl.entry import main\nmain()\n")


def kitctl(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE / "toy_benchmark"), str(HERE.parent / "host")])}
    return subprocess.run([sys.executable, "-c", START, *args], capture_output=True, text=True, timeout=120, env=env)


def test_the_toy_runs_through_the_cli_with_its_own_flags_and_exit_codes():
    p = kitctl("run", "--help")
    assert p.returncode == 0 and "toy" in p.stdout and "maxbatch" in p.stdout, p.stderr
    p = kitctl("run", "toy", "--count", "3")
    assert (p.returncode, p.stdout, p.stderr) == (0, "1 2 3\n", ""), p
    p = kitctl("run", "toy", "--count", "0")
    assert (p.returncode, p.stdout, p.stderr) == (2, "", "kitctl: --count must be > 0 (got 0)\n"), p
    p = kitctl("run", "toy", "--counts", "3")
    assert p.returncode == 2 and p.stderr.startswith("kitctl: No such option: --counts"), p.stderr


def test_without_its_registry_line_there_is_no_toy():
    p = subprocess.run([sys.executable, "-c", "from kitctl.entry import main; main()", "run", "toy"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE / "toy_benchmark"),
                                                                         str(HERE.parent / "host")])})
    assert p.returncode == 2 and "No such command 'toy'" in p.stderr, p.stderr
