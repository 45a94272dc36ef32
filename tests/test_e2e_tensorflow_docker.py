"""`kitctl run maxbatch --runtime docker --engines tensorflow-xla` end to end: the real CLI, a real
daemon, fresh containers of the image built from images/tensorflow/Dockerfile (compose.yaml's
cpu-ci variant: tensorflow-cpu on the local Debian base). One small search: XLA compiles the
step for ~30 s per candidate on a 2-core machine."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from kitctl.core.artifact import load

pytestmark = pytest.mark.docker

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]
ENV = {"KITCTL_IMAGE_VARIANT": "cpu-ci"}
# Enough for TensorFlow, XLA's compile (~1.8 GiB peak RSS) and batch 4; the search stays
# inside it, so it ends censored at --max-batch (a verified pass at the bound, no failure).
MEMORY_LIMIT_MIB = os.environ.get("KITCTL_TEST_TF_MEMORY_LIMIT_MIB", "4000")


def test_docker_search_censored_at_max_batch(client, tf_image, tmp_path):
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--runtime", "docker", "--device", "cpu",
                        "--engines", "tensorflow-xla", "--memory-limit", MEMORY_LIMIT_MIB,
                        "--start-batch", "2", "--max-batch", "4", "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=1200, env={**os.environ, **ENV})
    assert p.returncode == 0, p.stderr + p.stdout
    (final,) = [f for f in tmp_path.glob("*.json") if not f.name.endswith(".partial.json")]
    doc = load(final)
    assert doc["state"] == "complete"
    assert doc["runtime"]["name"] == "docker" and doc["host"]["docker_version"]
    ent = doc["engines"]["tensorflow-xla"]
    prov = ent["provenance"]
    assert prov["image"] == tf_image and prov["id"].startswith("sha256:")
    labels = prov["labels"]  # the image's OCI and kit labels travel into the artifact
    assert labels["kit.engine"] == "tensorflow" and labels["kit.framework.version"] == "2.21.0"
    assert labels["kit.cuda.version"] == "none" and labels["org.opencontainers.image.revision"]
    assert ent["versions"]["tensorflow"] == "2.21.0" and ent["versions"]["python"].startswith("3.11")

    (cell,) = doc["results"]
    assert (cell["engine"], cell["precision"]) == ("tensorflow-xla", "fp32")
    assert cell["search_status"] == "censored_at_max_batch"
    assert (cell["max_batch"], cell["next_batch"]) == (4, None)
    assert [t["batch"] for t in cell["trials"]] == [2, 4]
    for t in cell["trials"]:
        assert t["status"] == "ok" and t["exit_code"] == 0 and t["runtime"] == "docker"
        r = t["result"]
        assert r["engine"] == "tensorflow-xla" and r["parameters"] == 23_528_522
        assert math.isfinite(r["loss_warmup"]) and math.isfinite(r["loss_final"])
        assert r["settings"]["xla"]["jit_compile"] is True
    assert len({t["container_id"] for t in cell["trials"]}) == 2, "every candidate is a fresh container"
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})
    assert "TensorFlow" in p.stdout and "censored" in p.stdout  # the table (labels may wrap)
