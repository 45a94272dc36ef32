"""`kitctl run maxbatch --cluster`: a REAL local multi-node Ray cluster (ray.cluster_utils.Cluster:
a head without CPUs and two CPU-only worker nodes, each its own raylet), real PyTorch trials on
CPU (`--device cpu`, local runtime) started by the agent on the node Ray picked.

Needs the `ray` extra (CI installs it: .ci/setup-python.sh); skipped without it, except the
tests that a missing Ray or a dead address are one line.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import need_module  # noqa: E402

HOST = str(Path(__file__).resolve().parents[1] / "host")
ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
BASE = ["run", "maxbatch", "--device", "cpu", "--runtime", "local", "--engines", "pytorch-eager"]


def kitctl_env(address: str | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=HOST + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="200")
    if address:
        env["RAY_ADDRESS"] = address
    return env


def one_line_refusal(p: subprocess.CompletedProcess, match: str) -> None:
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert match in p.stderr


def test_dead_address_is_one_line_exit_2(tmp_path):
    t0 = time.monotonic()
    p = subprocess.run([*ENTRY, *BASE, "--cluster", "ray://127.0.0.1:1", "--results-dir", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=120, env=kitctl_env(), cwd=tmp_path)
    one_line_refusal(p, "--cluster ray://127.0.0.1:1: no Ray cluster answers there")
    assert not (tmp_path / "r").exists()
    assert time.monotonic() - t0 < 60  # not Ray's own 30 s of client retries and their log lines


@pytest.mark.parametrize("value, match", [("http://x:1", "--cluster takes ray://HOST:PORT or auto"),
                                          ("ray://nohost", "--cluster takes ray://HOST:PORT or auto")])
def test_malformed_address_is_one_line(tmp_path, value, match):
    p = subprocess.run([*ENTRY, *BASE, "--cluster", value], capture_output=True, text=True, timeout=120,
                       env=kitctl_env(), cwd=tmp_path)
    one_line_refusal(p, match)


def test_without_ray_installed_it_says_so_in_one_line(tmp_path):
    code = "import sys; sys.modules['ray'] = None\nfrom kitctl.cli import main; main()"
    p = subprocess.run([sys.executable, "-c", code, *BASE, "--cluster", "auto", "--results-dir", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=120, env=kitctl_env(), cwd=tmp_path)
    one_line_refusal(p, 'pip install "kitctl[ray]"')
    # ... and the host without Ray runs everything else: the module imports it lazily.
    p = subprocess.run([sys.executable, "-c", "import sys; sys.modules['ray'] = None\nimport kitctl.runtimes.ray, "
                        "kitctl.benchmarks.maxbatch.command"], capture_output=True, text=True, env=kitctl_env())
    assert p.returncode == 0, p.stderr


# -- a real cluster ----------------------------------------------------------------------------

@pytest.fixture()
def cluster():
    need_module("ray", "the ray extra: pip install -e '.[ray]'")
    from ray.cluster_utils import Cluster

    os.environ["PYTHONPATH"] = HOST + os.pathsep + os.environ.get("PYTHONPATH", "")  # the nodes' workers
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [c.add_node(num_cpus=1), c.add_node(num_cpus=1)]
    c.wait_for_nodes()
    try:
        yield c, nodes
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def final_doc(results: Path) -> dict:
    [art] = [p for p in results.glob("maxbatch-*.json") if not p.name.endswith(".partial.json")]
    return json.loads(art.read_text())


def answers(doc):
    return {(c["engine"], c["precision"]): (c["search_status"], c["max_batch"], c["next_batch"])
            for c in doc["results"]}


def leftovers(run_id: str) -> list[int]:
    """Processes of this run still alive (the agents mark their trials with KITCTL_RUN_ID)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if f"KITCTL_RUN_ID={run_id}".encode() in (d / "environ").read_bytes().split(b"\0"):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def test_cells_run_on_the_nodes_ray_picks_with_the_one_host_answers(cluster, tmp_path):
    c, nodes = cluster
    args = ["--precision", "both", "--start-batch", "2", "--max-batch", "4"]
    p = subprocess.run([*ENTRY, *BASE, *args, "--cluster", "auto", "--results-dir", str(tmp_path / "ray")],
                       capture_output=True, text=True, timeout=600, env=kitctl_env(c.address), cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = final_doc(tmp_path / "ray")
    local = subprocess.run([*ENTRY, *BASE, *args, "--results-dir", str(tmp_path / "local")], capture_output=True,
                           text=True, timeout=600, env=kitctl_env(), cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-2000:]
    assert answers(doc) == answers(final_doc(tmp_path / "local"))
    assert doc["configuration"]["cluster"] == "auto"
    agent = doc["cluster"]["agent"]  # what a node ran: its interpreter and trial, not the driver's say-so
    assert agent["runtime"]["pytorch-eager"]["interpreter"] and agent["where"]["node_id"] in {n.node_id for n in nodes}
    workers = {n.node_id for n in nodes}
    assert {n["node_id"] for n in doc["cluster"]["nodes"]} >= workers
    used = {t["node"]["node_id"] for cell in doc["results"] for t in cell["trials"]}
    assert used <= workers and used  # every candidate names the node that ran it
    assert leftovers(doc["run_id"]) == []


def test_a_node_killed_mid_candidate_is_a_crash_retried_on_another_node(cluster, tmp_path):
    import ray
    from ray.util.state import list_actors

    c, nodes = cluster
    results = tmp_path / "r"
    proc = subprocess.Popen([*ENTRY, *BASE, "--precision", "fp32", "--start-batch", "2", "--max-batch", "8",
                             "--cluster", "auto", "--results-dir", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=kitctl_env(c.address),
                            cwd=tmp_path)
    try:
        for line in proc.stderr:  # wait until batch 4 is running on some node (progress: stderr)
            if "batch 4 (search) …" in line:
                break
        ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
        alive = [a for a in list_actors(filters=[("state", "=", "ALIVE")]) if a.class_name == "NodeAgent"]
        assert len(alive) == 1, alive
        victim = next(n for n in nodes if n.node_id == alive[0].node_id)
        c.remove_node(victim)  # its raylet and workers die: the agent and its trial with them
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
    doc = final_doc(results)
    (cell,) = doc["results"]
    trials = [(t["batch"], t["status"]) for t in cell["trials"]]
    i = trials.index((4, "crash"))
    assert trials[i + 1] == (4, "ok")  # the protocol's one retry, on the node still alive
    crash, retry = cell["trials"][i], cell["trials"][i + 1]
    assert "ray: the node running this candidate was lost" in crash["error"]
    assert crash["node"]["node_id"] == victim.node_id != retry["node"]["node_id"]
    assert (cell["search_status"], cell["max_batch"]) == ("censored_at_max_batch", 8)  # never a capacity
    deadline = time.monotonic() + 30
    while leftovers(doc["run_id"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert leftovers(doc["run_id"]) == []


def test_an_interrupted_cluster_run_resumes_from_its_partial(cluster, tmp_path):
    c, _ = cluster
    results = tmp_path / "r"
    env = kitctl_env(c.address)
    proc = subprocess.Popen([*ENTRY, *BASE, "--precision", "fp32", "--start-batch", "2", "--max-batch", "8",
                             "--cluster", "auto", "--results-dir", str(results)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    for line in proc.stderr:  # the progress lines are on stderr
        if "batch 4 (search) …" in line:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    [partial] = list(results.glob("*.partial.json"))
    doc = json.loads(partial.read_text())
    assert doc["state"] == "interrupted" and [t["batch"] for t in doc["results"][0]["trials"]] == [2]
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--resume", str(partial)], capture_output=True, text=True,
                       timeout=600, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    final = final_doc(results)
    assert [t["batch"] for t in final["results"][0]["trials"]] == [2, 4, 8]
    assert leftovers(final["run_id"]) == []
