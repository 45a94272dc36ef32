"""compose.yaml as kitctl reads it (host/kitctl/images/compose.py), and as Compose itself checks it."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from kitctl.images.compose import ComposeError, interpolate, load_compose, provenance_build_args  # noqa: E402
from kitctl.core.engines import ENGINES, IMPLEMENTED  # noqa: E402

from conftest import unavailable  # noqa: E402


def test_the_repo_compose_names_every_implemented_engines_image():
    c = load_compose(ROOT / "compose.yaml", env={})
    for name in IMPLEMENTED:
        svc = c.service_for_engine(name)
        assert svc.name == ENGINES[name].service
        assert name in svc.engines
        assert svc.dockerfile_path == ROOT / f"images/{svc.name}/Dockerfile" and svc.dockerfile_path.is_file()
    assert {c.service_for_engine(n).name for n in IMPLEMENTED} == {"pytorch", "tensorflow", "jax", "opennn"}
    jx = c.service("jax")
    assert jx.image.startswith("kitctl/jax:") and jx.image.endswith("-cuda13") and jx.engines == ("jax-xla",)
    assert (ROOT / "images/jax" / jx.args["JAX_LOCK"]).is_file()
    jx_ci = c.build_args("jax", variant="cpu-ci")
    assert jx_ci["BASE_IMAGE"] == "kitctl-ci-base:bookworm" and jx_ci["PIP_NO_INDEX"] == "1"
    assert (ROOT / "images/jax" / jx_ci["JAX_LOCK"]).is_file() and jx_ci["CUDA_VERSION"] == "none"
    assert c.image("jax", "cpu-ci") == "kitctl/jax:ci"
    tf = c.service("tensorflow")
    assert tf.image.startswith("kitctl/tensorflow:") and tf.engines == ("tensorflow-xla",)
    assert (ROOT / "images/tensorflow" / tf.args["TF_LOCK"]).is_file()
    tf_ci = c.build_args("tensorflow", variant="cpu-ci")
    assert tf_ci["BASE_IMAGE"] == "kitctl-ci-base:bookworm" and tf_ci["PIP_NO_INDEX"] == "1"
    assert (ROOT / "images/tensorflow" / tf_ci["TF_LOCK"]).is_file()
    assert c.image("tensorflow", "cpu-ci") == "kitctl/tensorflow:ci"
    svc = c.service("pytorch")
    assert svc.image.startswith("kitctl/pytorch:")
    assert svc.context == ROOT and svc.context.is_absolute()
    assert svc.dockerfile_path == ROOT / "images/pytorch/Dockerfile" and svc.dockerfile_path.is_file()
    assert svc.args["TORCH_LOCK"] == "requirements-cuda.lock"
    assert (ROOT / "images/pytorch" / svc.args["TORCH_LOCK"]).is_file()
    assert svc.args["VCS_REF"] == "unknown"  # ${KITCTL_VCS_REF:-unknown}, unset


def test_cpu_ci_variant_and_overrides():
    c = load_compose(ROOT / "compose.yaml", env={"KITCTL_VCS_REF": "abc123"})
    args = c.build_args("pytorch", variant="cpu-ci")
    assert args["BASE_IMAGE"] == "kitctl-ci-base:bookworm"
    assert args["TORCH_LOCK"] == "requirements-cpu.lock"
    assert (ROOT / "images/pytorch" / args["TORCH_LOCK"]).is_file()
    assert args["VCS_REF"] == "abc123"
    assert c.image("pytorch", "cpu-ci") == "kitctl/pytorch:ci"
    over = c.build_args("pytorch", {"BASE_IMAGE": "my/base:1", "KIT_VERSION": None}, variant="cpu-ci")
    assert over["BASE_IMAGE"] == "my/base:1" and "KIT_VERSION" not in over
    spec = c.build_spec("pytorch", variant="cpu-ci", image="x/y:z")
    assert spec.image == "x/y:z" and spec.dockerfile == "images/pytorch/Dockerfile"
    with pytest.raises(ComposeError, match="no build variant 'gpu-nightly'"):
        c.build_args("pytorch", variant="gpu-nightly")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "compose.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, message", [
    ("services: [unclosed\n", "not valid YAML at line"),
    ("- just\n- a list\n", "top level must be a mapping"),
    ("services: {}\n", "'services' must be a non-empty mapping"),
    ("services:\n  pytorch:\n    build: .\n", "services.pytorch.image is missing"),
    ("services:\n  pytorch:\n    image: a/b\n", "services.pytorch.build must be a mapping"),
    ("services:\n  pytorch:\n    image: a/b\n    build: {context: nowhere}\n", "is not a directory"),
    ("services:\n  pytorch:\n    image: a/b\n    build: {context: ., args: {A: [1]}}\n", "args.A must be a scalar"),
    ("services:\n  pytorch:\n    image: ${NOPE:?set NOPE}\n    build: .\n", "NOPE is required: set NOPE"),
])
def test_a_malformed_file_is_one_clear_line(tmp_path, text, message):
    with pytest.raises(ComposeError) as err:
        load_compose(_write(tmp_path, text), env={})
    assert message in str(err.value)
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)


def test_missing_file_and_missing_service(tmp_path):
    with pytest.raises(ComposeError, match="no such file"):
        load_compose(tmp_path / "absent.yaml")
    c = load_compose(_write(tmp_path, "services:\n  tf:\n    image: a/b\n    build: .\n"), env={})
    with pytest.raises(ComposeError, match=r"no service 'pytorch' \(services: tf\)"):
        c.service_for_engine("pytorch-eager")


def test_interpolation_follows_compose():
    env = {"SET": "v", "EMPTY": ""}
    assert interpolate("${SET}-$SET-$$SET", env) == "v-v-$SET"
    assert interpolate("${UNSET:-d}|${EMPTY:-d}|${EMPTY-d}|${UNSET-d}", env) == "d|d||d"
    assert interpolate("${UNSET}", env) == ""
    with pytest.raises(ValueError):
        interpolate("${EMPTY:?needed}", env)


def test_docker_compose_accepts_the_file():
    exe = shutil.which("docker-compose")
    if exe is None:
        unavailable("docker-compose is not installed (apt-get install docker-compose; .ci/docker-up.sh does)")
    r = subprocess.run([exe, "-f", str(ROOT / "compose.yaml"), "config", "-q"], capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_provenance_build_args_fill_the_oci_labels(tmp_path):
    from kitctl import __version__

    args = provenance_build_args(tmp_path)  # not a git checkout: revision unknown
    assert args["KIT_VERSION"] == __version__ and args["VCS_REF"] == "unknown"
    assert args["BUILD_DATE"].endswith("Z") and "T" in args["BUILD_DATE"]
    merged = load_compose(ROOT / "compose.yaml", env={}).build_args("pytorch", args)
    assert merged["BUILD_DATE"] == args["BUILD_DATE"]


def test_a_variant_some_services_lack_leaves_them_on_their_default_image():
    from kitctl.runtimes.base import RuntimeUnavailable
    from kitctl.runtimes.docker import compose_images

    imgs = compose_images(["pytorch-eager", "opennn-pool1"], variant="cpu-ci", compose_path=ROOT / "compose.yaml")
    c = load_compose(ROOT / "compose.yaml", env={})
    assert imgs == {"pytorch-eager": c.image("pytorch", "cpu-ci"), "opennn-pool1": c.image("opennn")}
    with pytest.raises(RuntimeUnavailable, match="no build variant 'nightly'"):
        compose_images(["pytorch-eager"], variant="nightly", compose_path=ROOT / "compose.yaml")


def test_a_non_utf8_file_is_one_line(tmp_path):
    """issue 14: `images list/build` gave a UnicodeDecodeError traceback."""
    import os
    import sys

    f = tmp_path / "compose.yaml"
    f.write_bytes(b"services:\n  pytorch:\n    image: caf\xe9/x\n    build: .\n")
    with pytest.raises(ComposeError, match=r"not UTF-8 text \(byte 0xe9 at offset 35\)"):
        load_compose(f, env={})
    (tmp_path / "trials").mkdir()
    env = dict(os.environ, KITCTL_HOME=str(tmp_path))
    for args in (["images", "list"], ["images", "build", "pytorch"]):
        p = subprocess.run([sys.executable, "-c", "from kitctl.cli import main; main()", *args], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.strip().splitlines() == [f"kitctl: {f}: not UTF-8 text (byte 0xe9 at offset 35)"]
