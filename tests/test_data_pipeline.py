"""The data benchmarks' trials as units of work of the one runtime interface: what a container is told (host paths
under a mount become the mount's target), and a runtime that can start no more trials mid-run ends the run in one
line with its partial kept."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kitctl.benchmarks.data import session
from kitctl.core import artifact as art
from kitctl.errors import EXIT_USAGE, Exit
from kitctl.runtimes.base import RuntimeUnavailable
from kitctl.runtimes.spec import Mount, TrialSpec

COMMITTED = (Path(__file__).resolve().parents[1] / "results" / "reference"
             / "dataload-rrc224-corpus-20261203T133518Z.partial.json")


def test_a_container_sees_host_paths_under_its_mounts_targets():
    spec = TrialSpec(program=("python3", "trial.py"),
                     argv=("datasize", "--corpus", "/srv/corpus", "--out", "/tmp/run/x/ds", "--side", "256",
                           "--dataset", "/tmp/run/x", "--keep"),
                     mounts=(Mount("/srv/corpus", "/corpus"), Mount("/tmp/run/x", "/out", read_only=False),
                             Mount("/tmp/run", "/data")))
    assert spec.container_argv() == ["datasize", "--corpus", "/corpus", "--out", "/out/ds", "--side", "256",
                                     "--dataset", "/out", "--keep"]  # the nested mount wins
    assert spec.local_command() == ["python3", "trial.py", *spec.argv]  # locally: the host's paths as they are
    assert TrialSpec(program=(), argv=("--data-dir", "/srv/corpusX")).container_argv() == ["--data-dir",
                                                                                          "/srv/corpusX"]


def test_a_runtime_gone_mid_run_keeps_the_partial_in_one_line(tmp_path, capsys):
    recorded = json.loads(COMMITTED.read_text())  # a real run's configuration and first cell
    store = art.ArtifactStore.pending(tmp_path, "dataload", "rrc224", "corpus")
    doc = session.new_doc("dataload", recorded["configuration"])
    doc["results"].append(recorded["results"][0])

    def body():
        session.save(store, doc)  # one unit saved, then the daemon is gone
        raise RuntimeUnavailable("the Docker daemon does not answer (unix:///var/run/docker.sock)")

    with pytest.raises(Exit) as e:
        session.execute(store, doc, body)
    assert e.value.code == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("kitctl: the Docker daemon does not answer")
    assert "partial artifact kept" in err and "--resume" in err
    (partial,) = tmp_path.glob("*.partial.json")
    kept = json.loads(partial.read_text())
    assert kept["state"] == "interrupted" and kept["results"] == [recorded["results"][0]]
    assert kept["interrupted_by"].startswith("runtime: the Docker daemon does not answer")
