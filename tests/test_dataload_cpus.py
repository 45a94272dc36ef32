"""dataload --cpus: each loader run held to some CPUs (kitctl/core/cpus.py) — the flag checked up front, the CPUs
reaching the trial's own process (its affinity, as the trial reports it) through the local runtime and a real
container's cpuset through the Docker runtime, recorded per run and in the configuration, shown in the table, kept
apart by compare and by the dataload/train-e2e agreement."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BASE_IMAGE, unavailable
from test_dataload_host_window import corpus  # noqa: F401  (the tiny corpus fixture)
from kitctl.core.artifact import load
from kitctl.core.cpus import allowed_cpus, parse_cpu_list, parse_cpus
from kitctl.errors import Fail

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
WINDOW = ("--window-images", 20, "--window-seconds", 0.05, "--steady-tolerance", 0.5)


def kitctl(*args, timeout=900):
    return subprocess.run([*ENTRY, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "220"})


def test_cpu_lists_and_workers():
    assert parse_cpu_list("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list(" 5 ") == (5,)
    for bad in ("", "a", "3-1", "-1", "0,,1", "1-"):
        with pytest.raises(Fail, match="--cpus takes `workers` or a CPU list such as 0-3,8"):
            parse_cpu_list(bad)
    with pytest.raises(Fail, match=r"--cpus lists a CPU twice \(0-2,1\)"):
        parse_cpu_list("0-2,1")
    allowed = allowed_cpus()
    pin = parse_cpus("workers", (1,))
    assert pin is not None and pin.for_workers(1) == allowed[:1]
    assert parse_cpus(None, (1,)) is None
    listed = parse_cpus(str(allowed[0]), (4, 8))
    assert listed is not None and listed.for_workers(8) == (allowed[0],)  # a list holds every cell to it
    too_many = len(allowed) + 1
    with pytest.raises(Fail) as e:
        parse_cpus("workers", (1, too_many))
    assert str(e.value).startswith(f"--cpus workers: --workers {too_many} needs {too_many} CPUs and this host lets "
                                   f"kitctl use {len(allowed)}")
    beyond = max(allowed) + 1000
    with pytest.raises(Fail, match=rf"--cpus {beyond}: CPU {beyond} is not one this host lets kitctl use"):
        parse_cpus(str(beyond), (1,))


def test_a_bad_cpus_flag_is_one_line_with_nothing_written(corpus, tmp_path):
    p = kitctl("run", "dataload", "--corpus", corpus, "--loaders", "pytorch-dataloader", "--workers", 1,
               "--cpus", "0-", "--results-dir", tmp_path / "r")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines() == ["kitctl: --cpus takes `workers` or a CPU list such as 0-3,8 (got '0-')"]
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_each_run_is_held_to_as_many_cpus_as_its_workers(corpus, tmp_path):
    """`--cpus workers` with a sweep of 1 and 2 workers: the trial of each cell saw that many CPUs (its own
    sched_getaffinity), each run records which, the configuration records the flag, the table shows it, and a
    resume rebuilds the same configuration."""
    from kitctl.benchmarks.dataload.config import DataloadConfig
    from kitctl.benchmarks.dataload.table import table_rows

    allowed = allowed_cpus()
    if len(allowed) < 2:
        pytest.skip(f"this host lets kitctl use {len(allowed)} CPU; the sweep needs 2")
    res = tmp_path / "results"
    p = kitctl("run", "dataload", "--corpus", corpus, "--data-dir", tmp_path / "ds", "--loaders",
               "pytorch-dataloader", "--workers", "1,2", "--cpus", "workers", "--side", 64, "--runs", 1, "--batch", 4,
               *WINDOW, "--results-dir", res)
    assert p.returncode == 0, p.stderr + p.stdout
    [final] = [f for f in res.glob("dataload-*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["configuration"]["cpus"] == "workers"
    by_workers = {c["workers"]: c["runs"][0] for c in doc["results"]}
    for w in (1, 2):
        assert by_workers[w]["cpus"] == list(allowed[:w])
        assert by_workers[w]["affinity_cores"] == w  # what the trial's process could run on, as it saw it
    _, body = table_rows(doc)
    two = f"{allowed[0]}-{allowed[1]}" if allowed[1] == allowed[0] + 1 else f"{allowed[0]},{allowed[1]}"
    assert [r[3] for r in body] == [f"1 @ CPUs {allowed[0]}", f"2 @ CPUs {two}"]
    cfg = DataloadConfig.from_json(doc["configuration"])
    assert cfg.cpus is not None and cfg.cpus.given == "workers" and cfg.cpus_for(2) == allowed[:2]


def test_a_pinned_and_an_unpinned_run_are_not_compared_or_paired():
    from kitctl.benchmarks.data.agreement import dataload_cells
    from kitctl.benchmarks.dataload.compare import _setup
    from kitctl.benchmarks.dataload.config import recorded
    from kitctl.reports.compare import setup_diffs

    ref = Path(__file__).resolve().parents[1] / "results" / "reference"
    pinned = load(ref / "dataload-rrc224-corpus-20261204T175319Z.json")  # taskset -c 0-7, no --cpus then
    doc = {**pinned, "configuration": {**pinned["configuration"], "cpus": "0-7"}}
    assert dataload_cells(pinned) and not dataload_cells(doc)
    diffs = setup_diffs(_setup(pinned, recorded(pinned)), _setup(doc, recorded(doc)))
    assert diffs == ["--cpus (not held vs 0-7)"]


@pytest.mark.docker
def test_a_container_gets_the_cpus_as_its_cpuset():
    """The Docker runtime's container for a spec with `cpus` runs under that cpuset: `nproc` inside (which counts
    the CPUs the process may use) says 1."""
    import docker

    from kitctl.runtimes.docker import DockerRuntime, remove_run_containers
    from kitctl.runtimes.spec import TrialSpec

    try:
        client = docker.from_env()
        client.ping()
        client.images.get(BASE_IMAGE)
    except Exception as exc:  # no daemon, or no base image
        unavailable(f"Docker with {BASE_IMAGE} is needed ({exc})")
    run_id = f"test-cpus-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    rt = DockerRuntime("", run_id=run_id, client=client)
    try:
        cpu = allowed_cpus()[-1]
        raw = rt.execute(TrialSpec(program=(), argv=("nproc",), image=BASE_IMAGE, cpus=(cpu,)), timeout_s=120)
        assert raw.exit_code == 0, raw.stderr
        assert raw.stdout.strip() == "1"
        raw = rt.execute(TrialSpec(program=(), argv=("nproc",), image=BASE_IMAGE), timeout_s=120)
        assert int(raw.stdout.strip()) == client.info()["NCPU"]  # without cpus: every CPU of the daemon's host
    finally:
        rt.close()
        remove_run_containers(client, run_id)
