"""`kitctl run maxbatch|throughput --runtime docker --engines jax-xla` end to end: the real CLI, a
real daemon, fresh containers of the image built from images/jax/Dockerfile (compose.yaml's cpu-ci
variant: jax CPU on the local Debian base). Tiny runs: XLA compiles the step for ~30-40 s of CPU
per candidate on a 2-core machine."""
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
# Enough for jax, XLA's compile (~1.2 GiB peak RSS) and batch 4; the search stays inside it,
# so it ends censored at --max-batch (a verified pass at the bound, no failure).
MEMORY_LIMIT_MIB = os.environ.get("KITCTL_TEST_JAX_MEMORY_LIMIT_MIB", "4000")


def _only_artifact(results) -> dict:
    (final,) = [f for f in results.glob("*.json") if not f.name.endswith(".partial.json")]
    return load(final)


def _check_image(doc: dict, jax_image: str) -> None:
    assert doc["runtime"]["name"] == "docker" and doc["host"]["docker_version"]
    ent = doc["engines"]["jax-xla"]
    prov = ent["provenance"]
    assert prov["image"] == jax_image and prov["id"].startswith("sha256:")
    labels = prov["labels"]  # the image's OCI and kit labels travel into the artifact
    assert labels["kit.engine"] == "jax" and labels["kit.framework.version"] == "0.10.2"
    assert labels["kit.cuda.version"] == "none" and labels["org.opencontainers.image.revision"]
    v = ent["versions"]
    assert v["jax"] == v["jaxlib"] == "0.10.2" and v["flax"] == "0.12.8" and v["optax"] == "0.2.8"
    assert v["python"].startswith("3.11")


def test_docker_search_censored_at_max_batch(client, jax_image, tmp_path):
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--runtime", "docker", "--device", "cpu",
                        "--engines", "jax-xla", "--memory-limit", MEMORY_LIMIT_MIB,
                        "--start-batch", "2", "--max-batch", "4", "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800, env={**os.environ, **ENV})
    assert p.returncode == 0, p.stderr + p.stdout
    doc = _only_artifact(tmp_path)
    assert doc["state"] == "complete"
    _check_image(doc, jax_image)

    (cell,) = doc["results"]
    assert (cell["engine"], cell["precision"]) == ("jax-xla", "fp32")
    assert cell["search_status"] == "censored_at_max_batch"
    assert (cell["max_batch"], cell["next_batch"]) == (4, None)
    assert [t["batch"] for t in cell["trials"]] == [2, 4]
    for t in cell["trials"]:
        assert t["status"] == "ok" and t["exit_code"] == 0 and t["runtime"] == "docker"
        r = t["result"]
        assert r["engine"] == "jax-xla" and r["parameters"] == 23_528_522
        assert math.isfinite(r["loss_warmup"]) and math.isfinite(r["loss_final"])
        assert r["settings"]["xla"]["jit"].startswith("whole step")
    assert len({t["container_id"] for t in cell["trials"]}) == 2, "every candidate is a fresh container"
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})
    assert "JAX" in p.stdout and "censored" in p.stdout  # the table (labels may wrap)


def test_docker_throughput_run(client, jax_image, tmp_path):
    p = subprocess.run([*ENTRY, "run", "throughput", "--runtime", "docker", "--device", "cpu",
                        "--engines", "jax-xla", "--runs", "1", "--batch", "2", "--warmup-steps", "1",
                        "--steps", "2", "--results-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800, env={**os.environ, **ENV})
    assert p.returncode == 0, p.stderr + p.stdout
    doc = _only_artifact(tmp_path)
    assert doc["benchmark"] == "throughput" and doc["state"] == "complete"
    _check_image(doc, jax_image)
    (cell,) = doc["results"]
    assert (cell["engine"], cell["status"]) == ("jax-xla", "ok")
    (run,) = cell["runs"]
    assert run["images"] == 4 and run["images_per_second"] > 0 and run["container_id"]
    assert cell["summary"]["n"] == 1 and cell["warmup_seconds"] > 0
    assert not client.containers.list(all=True, filters={"label": f"kit.run-id={doc['run_id']}"})
