"""compose.yaml as Docker Compose v2 reads it (`docker compose config --format json`) and as kitctl's
hand parser reads it: the same services, images, contexts, Dockerfiles and build args, on the same files.

Compose v2 is not in Debian 12; .ci/compose-buildx.sh puts trixie's CLI plugin in
/opt/kitctl-docker-plugins/cli-plugins, found through DOCKER_CONFIG.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "host"))

from kitctl.images.compose import ComposeError, load_compose  # noqa: E402

from conftest import unavailable  # noqa: E402

PLUGINS = Path(os.environ.get("KITCTL_DOCKER_PLUGINS_DIR", "/opt/kitctl-docker-plugins"))


@pytest.fixture
def compose_v2(monkeypatch):
    """DOCKER_CONFIG pointing at the plugin dir when the plugin is there (or Compose v2 already on the host)."""
    from kitctl.images import compose as mod

    if (PLUGINS / "cli-plugins" / "docker-compose").is_file():
        monkeypatch.setenv("DOCKER_CONFIG", str(PLUGINS))
    monkeypatch.delenv("KITCTL_COMPOSE", raising=False)
    found = mod._compose_v2()
    if found is None:
        unavailable("Docker Compose v2 is not installed: run .ci/compose-buildx.sh")
    return found


def _both(path: Path, env: dict[str, str], monkeypatch):
    monkeypatch.setenv("KITCTL_COMPOSE", "kitctl")
    hand = load_compose(path, env=env)
    monkeypatch.setenv("KITCTL_COMPOSE", "docker")
    real = load_compose(path, env=env)
    monkeypatch.delenv("KITCTL_COMPOSE")
    return hand, real


@pytest.mark.parametrize("env", [{}, {"KITCTL_VCS_REF": "abc123", "KITCTL_CI_BASE": "my/base:2",
                                      "KITCTL_VERSION": "9.9.9", "KITCTL_BUILD_DATE": ""}])
def test_the_repo_file_reads_the_same_both_ways(compose_v2, monkeypatch, env):
    hand, real = _both(ROOT / "compose.yaml", env, monkeypatch)
    assert hand.resolved_by == "kitctl" and real.resolved_by.startswith("docker compose 2.")
    assert list(hand.services) == list(real.services)
    for name in hand.services:
        assert hand.services[name] == real.services[name], name
        for v in hand.services[name].variants:
            assert hand.build_spec(name, variant=v) == real.build_spec(name, variant=v)
    if env:
        assert real.service("pytorch").args["VCS_REF"] == "abc123"
        assert real.service("pytorch").args["BUILD_DATE"] == "unknown"  # ${X:-d}: empty counts as unset
        assert real.build_args("loader-torch", variant="cpu-ci")["BASE_IMAGE"] == "my/base:2"


SMALL = """\
services:
  pytorch:
    image: ${REPO-kitctl}/pytorch:${TAG:-dev}
    build:
      context: ./ctx
      dockerfile: sub/Dockerfile
      args:
        - PLAIN=1
        - DOLLAR=a$$b
        - BRACED=${A_VAR}
        - NAMED=$A_VAR
    x-kitctl:
      engines: [pytorch-eager]
      variants:
        cpu-ci: {image: "kitctl/pytorch:ci", args: {BASE_IMAGE: "b:1"}}
  jax:
    image: kitctl/jax:1
    build: ctx
"""


@pytest.mark.parametrize("env", [{}, {"REPO": "", "TAG": "", "A_VAR": "x y"}, {"REPO": "r.example/p", "TAG": "7"}])
def test_a_small_file_with_every_interpolation_form_reads_the_same(compose_v2, monkeypatch, tmp_path, env):
    (tmp_path / "ctx" / "sub").mkdir(parents=True)
    (tmp_path / "ctx" / "sub" / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "compose.yaml").write_text(SMALL)
    hand, real = _both(tmp_path / "compose.yaml", env, monkeypatch)
    assert hand.services == real.services
    svc = real.service("pytorch")
    assert svc.context == tmp_path / "ctx" and svc.dockerfile_path == tmp_path / "ctx/sub/Dockerfile"
    assert svc.args["DOLLAR"] == "a$b" and svc.variants["cpu-ci"].args == {"BASE_IMAGE": "b:1"}


def test_compose_reads_the_env_file_the_hand_parser_does_not(compose_v2, monkeypatch, tmp_path):
    """What "as Compose reads it" buys: Compose's own rules (here its .env file) hold for kitctl too."""
    (tmp_path / "compose.yaml").write_text(SMALL)
    (tmp_path / "ctx" / "sub").mkdir(parents=True)
    (tmp_path / ".env").write_text("TAG=from-dotenv\n")
    monkeypatch.delenv("TAG", raising=False)
    real = load_compose(tmp_path / "compose.yaml")
    assert real.image("pytorch") == "kitctl/pytorch:from-dotenv"
    monkeypatch.setenv("KITCTL_COMPOSE", "kitctl")
    assert load_compose(tmp_path / "compose.yaml").image("pytorch") == "kitctl/pytorch:dev"


def test_a_file_compose_refuses_is_one_line(compose_v2, monkeypatch, tmp_path):
    (tmp_path / "compose.yaml").write_text("services:\n  jax:\n    image: a/b\n    build: .\n    no_such_key: 1\n")
    monkeypatch.setenv("KITCTL_COMPOSE", "docker")
    with pytest.raises(ComposeError, match=r"docker compose 2\.\S+ refuses it: .*no_such_key") as e:
        load_compose(tmp_path / "compose.yaml")
    assert "\n" not in str(e.value)
    monkeypatch.setenv("KITCTL_COMPOSE", "kitctl")  # the hand parser reads only what it needs
    assert load_compose(tmp_path / "compose.yaml").image("jax") == "a/b"


def test_without_compose_v2_the_hand_parser_reads_it(monkeypatch, tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no docker, no docker-compose
    monkeypatch.delenv("KITCTL_COMPOSE", raising=False)
    c = load_compose(ROOT / "compose.yaml", env={})
    assert c.resolved_by == "kitctl" and c.image("pytorch", "cpu-ci") == "kitctl/pytorch:ci"
    monkeypatch.setenv("KITCTL_COMPOSE", "docker")
    with pytest.raises(ComposeError, match="KITCTL_COMPOSE=docker but Docker Compose v2"):
        load_compose(ROOT / "compose.yaml", env={})

