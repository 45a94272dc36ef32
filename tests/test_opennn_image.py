"""The opennn engine image's recipe, read statically, and its source scripts, run for real.

No daemon and no network: the Dockerfile is parsed here (the classic builder's rules: `\\`
continuation, ARG scoping), compose.yaml is read as kitctl reads it, and fetch-sources.sh /
tools/opennn-sources-here.sh run against small git repositories made in a temporary directory
(file:// URLs through a KIT_SOURCES_LOCK of the test's own, bare "mirrors" through KIT_MIRRORS).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

from kitctl.images.compose import load_compose  # noqa: E402
from kitctl.core.engines import ENGINES  # noqa: E402
from conftest import unavailable  # noqa: E402

IMAGE_DIR = ROOT / "images" / "opennn"
DOCKERFILE = IMAGE_DIR / "Dockerfile"
LOCK = IMAGE_DIR / "sources.lock"
FETCH = IMAGE_DIR / "fetch-sources.sh"
HERE = ROOT / "tools" / "opennn-sources-here.sh"
SOURCES = ("opennn", "cudnn-frontend", "eigen", "zlib", "libjpeg-turbo")  # build.sh's SRC_DIR layout
HEX40 = re.compile(r"^[0-9a-f]{40}$")
PINNED_REF = re.compile(r"^[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9._-]+@sha256:([0-9a-f]{64})$")
OCI = ("title", "description", "source", "revision", "version", "created")


# ---- reading the files --------------------------------------------------------------------------

def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined as the builder joins them."""
    out: list[tuple[str, str]] = []
    buf: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (buf is None and not stripped):
            continue  # comments (also inside a continued instruction) and blank lines
        body = line.rstrip()
        cont = body.endswith("\\")
        if cont:
            body = body[:-1]
        buf = body if buf is None else buf + body
        if not cont:
            keyword, _, rest = buf.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
            buf = None
    assert buf is None, "the Dockerfile ends inside a continued instruction"
    return out


def arg_default(args: str) -> tuple[str, str | None]:
    name, sep, value = args.partition("=")
    if not sep:
        return name.strip(), None
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return name.strip(), value


def expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), ""), value)


class Dockerfile:
    def __init__(self, path: Path) -> None:
        self.text = path.read_text(encoding="utf-8")
        self.instructions = instructions(self.text)
        self.global_args: dict[str, str | None] = {}
        self.stages: list[dict] = []
        for kw, rest in self.instructions:
            if kw == "FROM":
                m = re.match(r"^(\S+)(?:\s+as\s+(\S+))?$", rest, re.I)
                assert m, f"FROM {rest!r}: one image and an optional AS name"
                self.stages.append({"from": m.group(1), "name": m.group(2), "ins": []})
            elif not self.stages:
                assert kw == "ARG", f"only ARG may come before the first FROM, not {kw}"
                k, v = arg_default(rest)
                self.global_args[k] = v
            else:
                self.stages[-1]["ins"].append((kw, rest))

    def resolved_from(self, stage: dict) -> str:
        return expand(stage["from"], {k: v or "" for k, v in self.global_args.items()})

    def stage_args(self, stage: dict) -> dict[str, str | None]:
        """ARG defaults inside a stage as the builder resolves them (a bare ARG takes the global)."""
        env: dict[str, str] = {}
        out: dict[str, str | None] = {}
        for kw, rest in stage["ins"]:
            if kw != "ARG":
                continue
            k, v = arg_default(rest)
            if v is None:
                v = self.global_args.get(k)
            else:
                v = expand(v, env)
            out[k] = v
            if v is not None:
                env[k] = v
        return out

    def labels(self, stage: dict) -> dict[str, str]:
        out: dict[str, str] = {}
        for kw, rest in stage["ins"]:
            if kw == "LABEL":
                for k, v in re.findall(r'([\w.-]+)="([^"]*)"', rest):
                    out[k] = v
        return out


def read_lock(path: Path = LOCK) -> dict[str, dict[str, str]]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, url, commit, tag = line.split()
        out[name] = {"url": url, "commit": commit, "tag": tag}
    return out


@pytest.fixture(scope="module")
def df() -> Dockerfile:
    return Dockerfile(DOCKERFILE)


@pytest.fixture(scope="module")
def lock() -> dict[str, dict[str, str]]:
    return read_lock()


# ---- sources.lock ---------------------------------------------------------------------------------

def test_the_lock_pins_the_five_sources_by_full_commit(lock):
    assert tuple(lock) == SOURCES
    for name, s in lock.items():
        assert HEX40.match(s["commit"]), f"{name}: {s['commit']!r} is not a full 40-hex commit"
        assert re.match(r"^https://github\.com/[\w.-]+/[\w.-]+\.git$", s["url"]), s["url"]
        assert s["tag"]
    assert len({s["commit"] for s in lock.values()}) == len(lock)
    assert lock["opennn"]["url"] == "https://github.com/Artelnics/opennn.git"


# ---- Dockerfile -----------------------------------------------------------------------------------

def test_every_from_is_pinned_by_tag_and_digest(df):
    assert len(df.stages) >= 2, "a builder stage and a runtime stage"
    names = {s["name"] for s in df.stages if s["name"]}
    for stage in df.stages:
        ref = df.resolved_from(stage)
        if ref in names:
            continue
        m = PINNED_REF.match(ref)
        assert m, f"FROM {stage['from']} -> {ref!r} is not pinned by tag and digest"
        digest = m.group(1)
        assert len(set(digest)) > 4, f"{ref}: a placeholder digest"
        assert "placeholder" not in ref.lower() and "todo" not in ref.lower()
    builder, final = df.stages[0], df.stages[-1]
    b, r = df.resolved_from(builder), df.resolved_from(final)
    assert re.match(r"^nvidia/cuda:13\.0\.\d+-cudnn-devel-ubuntu24\.04@", b), b  # GCC 13, cuDNN 9 headers
    assert re.match(r"^nvidia/cuda:13\.0\.\d+-cudnn-runtime-ubuntu24\.04@", r), r
    assert b.split("-cudnn-")[0] == r.split("-cudnn-")[0], "devel and runtime bases of one CUDA release"
    pytorch = Dockerfile(ROOT / "images/pytorch/Dockerfile")
    assert r == pytorch.global_args["BASE_IMAGE"], "the runtime base is the pytorch image's (one pull)"


def test_opennn_ref_defaults_to_the_lock_in_every_stage(df, lock):
    pinned = df.global_args.get("OPENNN_PINNED")
    assert pinned and HEX40.match(pinned) and pinned == lock["opennn"]["commit"]
    users = [s for s in df.stages if "OPENNN_REF" in df.stage_args(s)]
    assert users and users[0] is df.stages[0] and users[-1] is df.stages[-1]
    for stage in users:
        ref = df.stage_args(stage).get("OPENNN_REF")
        assert ref == pinned and HEX40.match(ref), (stage["name"], ref)
    # the builder checks the pin against the lock and refuses a ref that is not a full commit
    run = " ".join(rest for kw, rest in df.stages[0]["ins"] if kw == "RUN")
    assert "sources.lock" in run and "OPENNN_PINNED" in run and "[0-9a-f]{40}" in run
    assert "KIT_OPENNN_COMMIT=$OPENNN_REF" in run and "fetch-sources.sh" in run


def test_cuda_archs_are_explicit_and_never_native(df):
    archs = df.global_args["CUDA_ARCHS"] or ""
    assert {"80", "86", "89", "90"} <= set(archs.split(";")), archs
    assert "native" not in archs.lower()
    for stage in df.stages:
        if "CUDA_ARCHS" in df.stage_args(stage):
            assert df.stage_args(stage)["CUDA_ARCHS"] == archs


def test_no_march_native_under_images_opennn():
    """No build flag of the image's asks for the build host's CPU (or GPU).

    A line may name -march=native only to remove it from OpenNN's CMake (sed/replace) or in a
    comment; anything else fails.
    """
    offenders = []
    for path in sorted(IMAGE_DIR.rglob("*")):
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for no, line in enumerate(text.splitlines(), 1):
            if "march=native" not in line.replace(" ", ""):
                continue
            s = line.strip()
            removing = any(k in s for k in ("sed ", "s/", "s|", "s#", "REPLACE", "replace", "grep", "!=", "-v "))
            if s.startswith("#") or removing:
                continue
            offenders.append(f"{path.relative_to(ROOT)}:{no}: {s}")
    assert not offenders, "\n".join(offenders)


def test_only_classic_builder_features(df):
    assert not re.search(r"^\s*#\s*syntax\s*=", df.text, re.M | re.I), "no BuildKit frontend directive"
    for kw, rest in df.instructions:
        if kw == "RUN":
            assert not rest.startswith("--"), f"RUN flags (--mount, ...) are BuildKit-only: {rest[:40]}"
            assert not re.search(r"(?<!<)<<(?!<)", rest), f"no heredocs (BuildKit-only): {rest[:60]}"
        if kw in ("COPY", "ADD"):
            for token in rest.split():
                if not token.startswith("--"):
                    break
                flag = token[2:].split("=")[0]
                assert flag in ("from", "chown"), f"{kw} --{flag} is not the classic builder's"


def test_every_run_is_valid_bash(df, tmp_path):
    shells = [rest for kw, rest in df.instructions if kw == "SHELL"]
    assert shells and all(json.loads(s)[0] == "/bin/bash" for s in shells)
    assert len(shells) == len(df.stages), "each stage runs its RUNs with bash -euo pipefail"
    for i, (kw, rest) in enumerate(df.instructions):
        if kw != "RUN":
            continue
        script = tmp_path / f"run{i}.sh"
        script.write_text(rest + "\n")
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, f"RUN #{i}: {r.stderr}\n{rest[:200]}"


def test_the_builder_fetches_then_builds_with_build_sh(df):
    copies = [rest for kw, rest in df.stages[0]["ins"] if kw == "COPY"]
    srcs = " ".join(copies)
    for needed in ("images/opennn/sources.lock", "images/opennn/fetch-sources.sh",
                   "images/opennn/build.sh", "trials/opennn/"):
        assert needed in srcs, f"the builder needs {needed}"
    runs = " ".join(rest for kw, rest in df.stages[0]["ins"] if kw == "RUN")
    assert re.search(r"build\.sh /opt/kit-src/src /opt/kit\b", runs)
    assert "apt-get install" in runs
    for pkg in ("cmake", "ninja-build", "git", "ca-certificates", "nasm"):
        assert re.search(rf"\b{re.escape(pkg)}\b", runs), pkg
    # build.sh finds the trial at $(dirname build.sh)/../../trials/opennn
    assert "/opt/kit-src/images/opennn/" in srcs and "/opt/kit-src/trials/opennn/" in srcs


def test_the_runtime_stage_holds_the_prefix_runs_non_root_and_is_labelled(df, lock):
    final = df.stages[-1]
    copies = [rest for kw, rest in final["ins"] if kw == "COPY"]
    assert copies and all(c.startswith("--from=builder /opt/kit/ ") for c in copies), copies
    users = [rest for kw, rest in final["ins"] if kw == "USER"]
    assert users and users[-1] not in ("root", "0") and not users[-1].startswith("0:")
    runs = " ".join(rest for kw, rest in final["ins"] if kw == "RUN")
    assert re.search(rf"useradd\b.*--uid 10001\b.*\b{re.escape(users[-1])}\b", runs)
    entry = [rest for kw, rest in final["ins"] if kw == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["/opt/kit/bin/kit-opennn-trial"]
    labels = df.labels(final)
    for k in OCI:
        assert labels.get(f"org.opencontainers.image.{k}"), k
    assert labels["kit.engine"] == "opennn"
    assert labels["kit.trial-protocol"] == "1"  # what runtimes/docker/client.py image_provenance reads
    for k in ("kit.opennn.commit", "kit.framework.version"):
        assert labels[k] == "${OPENNN_REF}", k
    assert labels["kit.cuda.version"] == "${CUDA_VERSION}"  # the base's ENV, checked in the RUN
    assert labels["kit.cudnn.version"] == "${NV_CUDNN_VERSION}"
    assert labels["kit.cuda.archs"] == "${CUDA_ARCHS}"
    args = df.stage_args(final)
    assert args["OPENNN_REF"] == lock["opennn"]["commit"]
    for k in ("KIT_VERSION", "VCS_REF", "BUILD_DATE", "IMAGE_SOURCE", "CUDA_ARCHS", "RUNTIME_IMAGE"):
        assert k in args, f"the final stage declares ARG {k} for its label"
    # the runtime checks: same CUDA/cuDNN as the builder, every library resolves
    assert "BUILDER_CUDA_VERSION" in runs and "BUILDER_CUDNN_VERSION" in runs and "ldd" in runs


# ---- compose.yaml ---------------------------------------------------------------------------------

def test_compose_names_the_image_and_its_engines(lock):
    c = load_compose(ROOT / "compose.yaml", env={})
    svc = c.service("opennn")
    assert svc.engines == ("opennn-pool1", "opennn-default", "opennn-graph", "opennn-resident")
    for e in svc.engines:
        assert ENGINES[e].service == "opennn" and c.service_for_engine(e).name == "opennn"
    assert svc.dockerfile_path == DOCKERFILE and svc.context == ROOT
    assert svc.args["OPENNN_REF"] == lock["opennn"]["commit"]
    assert lock["opennn"]["commit"][:7] in svc.image and svc.image.startswith("kitctl/opennn:")
    assert set(svc.args["CUDA_ARCHS"].split(";")) >= {"80", "86", "89", "90"}
    assert "native" not in svc.args["CUDA_ARCHS"]
    assert svc.args["CUDA_VERSION"] == "13.0" and "cuda13.0" in svc.image
    assert svc.args["VCS_REF"] == "unknown" and "KIT_VERSION" in svc.args and "BUILD_DATE" in svc.args
    assert "cpu-ci" not in svc.variants, "no cpu-ci variant: CI cannot build a CUDA/GCC 13 image"
    raw = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["opennn"]
    assert raw["network_mode"] == "none" and raw["cap_drop"] == ["ALL"]
    (dev,) = raw["deploy"]["resources"]["reservations"]["devices"]
    assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"]


# ---- the scripts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("script", [FETCH, HERE], ids=["fetch-sources", "opennn-sources-here"])
def test_scripts_parse(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


GIT_ENV = {"GIT_AUTHOR_NAME": "kit", "GIT_AUTHOR_EMAIL": "kit@example.invalid",
           "GIT_COMMITTER_NAME": "kit", "GIT_COMMITTER_EMAIL": "kit@example.invalid",
           "GIT_CONFIG_NOSYSTEM": "1"}


def git(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, **GIT_ENV, "HOME": str(cwd or Path.cwd()), **(env or {})})
    assert r.returncode == 0, f"git {' '.join(args)}: {r.stderr}"
    return r.stdout.strip()


def make_repo(root: Path, name: str, files_per_commit: list[dict[str, str]]) -> tuple[Path, list[str]]:
    """A work repo with one commit per dict (tagged v1, v2, ...) and its bare clone; commit ids."""
    if shutil.which("git") is None:
        unavailable("git is not installed")
    work = root / f"work-{name}"
    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=work)
    commits = []
    for i, files in enumerate(files_per_commit, 1):
        for rel, content in files.items():
            p = work / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(content)
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", f"commit {i}", cwd=work)
        git("tag", f"v{i}", cwd=work)
        commits.append(git("rev-parse", "HEAD", cwd=work))
    bare = root / f"{name}.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=root)
    return bare, commits


def write_lock(path: Path, lines: list[tuple[str, str, str, str]]) -> Path:
    path.write_text("# test lock\n" + "".join(f"{n}  {u}  {c}  {t}\n" for n, u, c, t in lines))
    return path


def run_script(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {**os.environ, **GIT_ENV, "KIT_FETCH_TRIES": "1", **env}
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=full, timeout=120)


@pytest.fixture()
def repos(tmp_path):
    opennn, oc = make_repo(tmp_path, "opennn", [{"CMakeLists.txt": "one\n"}, {"CMakeLists.txt": "two\n"},
                                               {"CMakeLists.txt": "three\n"}])
    zlib, zc = make_repo(tmp_path, "zlib", [{"zlib.h": "1.3.1\n"}, {"zlib.h": "1.3.2\n"}])
    return {"opennn": (opennn, oc), "zlib": (zlib, zc), "root": tmp_path}


def test_fetch_sources_fetches_and_verifies_each_pinned_commit(repos, tmp_path):
    (opennn, oc), (zlib, zc) = repos["opennn"], repos["zlib"]
    lock = write_lock(tmp_path / "lock", [("opennn", f"file://{opennn}", oc[1], "main"),  # not the tip
                                          ("zlib", f"file://{zlib}", zc[1], "v2")])
    dest = tmp_path / "src"
    r = run_script(FETCH, str(dest), env={"KIT_SOURCES_LOCK": str(lock)})
    assert r.returncode == 0, r.stderr
    assert (dest / "opennn/CMakeLists.txt").read_text() == "two\n"
    assert (dest / "zlib/zlib.h").read_text() == "1.3.2\n"
    for name, commit in (("opennn", oc[1]), ("zlib", zc[1])):
        assert (dest / name / ".kit-commit").read_text().strip() == commit
        assert git("rev-parse", "HEAD", cwd=dest / name) == commit
    used = (dest / "kit-sources.lock").read_text()
    assert oc[1] in used and zc[1] in used
    assert git("rev-parse", "--is-shallow-repository", cwd=dest / "opennn") == "true"  # one commit only

    # KIT_OPENNN_COMMIT (the image's OPENNN_REF) replaces the lock's opennn commit, and says so
    dest2 = tmp_path / "src2"
    r = run_script(FETCH, str(dest2), env={"KIT_SOURCES_LOCK": str(lock), "KIT_OPENNN_COMMIT": oc[0]})
    assert r.returncode == 0, r.stderr
    assert "replaces the lock's" in r.stderr
    assert (dest2 / "opennn/.kit-commit").read_text().strip() == oc[0]
    assert (dest2 / "opennn/CMakeLists.txt").read_text() == "one\n"


def test_fetch_sources_falls_back_when_a_server_will_not_serve_a_commit_by_id(repos, tmp_path):
    """Protocol v0 (no fetch by id of an unadvertised commit): the tag, then every branch and tag."""
    (opennn, oc), (zlib, zc) = repos["opennn"], repos["zlib"]
    lock = write_lock(tmp_path / "lock", [("opennn", f"file://{opennn}", oc[0], "main"),  # tip is oc[2]
                                          ("zlib", f"file://{zlib}", zc[0], "v1")])
    v0 = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "protocol.version", "GIT_CONFIG_VALUE_0": "0"}
    dest = tmp_path / "src"
    r = run_script(FETCH, str(dest), env={"KIT_SOURCES_LOCK": str(lock), **v0})
    assert r.returncode == 0, r.stderr
    assert (dest / "opennn/.kit-commit").read_text().strip() == oc[0]
    assert (dest / "zlib/.kit-commit").read_text().strip() == zc[0]
    assert (dest / "zlib/zlib.h").read_text() == "1.3.1\n"


@pytest.mark.parametrize("case", ["absent-commit", "short-commit", "bad-override", "dest-not-empty"])
def test_fetch_sources_fails_on_a_mismatch_and_leaves_nothing_behind(repos, tmp_path, case):
    (opennn, oc), (zlib, zc) = repos["opennn"], repos["zlib"]
    commit = {"absent-commit": "0123456789abcdef0123456789abcdef01234567", "short-commit": oc[1][:12]}.get(case, oc[1])
    lock = write_lock(tmp_path / "lock", [("zlib", f"file://{zlib}", zc[1], "v2"),
                                          ("opennn", f"file://{opennn}", commit, "v2")])
    dest = tmp_path / "src"
    env = {"KIT_SOURCES_LOCK": str(lock)}
    if case == "bad-override":
        env["KIT_OPENNN_COMMIT"] = "dev"
    if case == "dest-not-empty":
        (dest / "opennn").mkdir(parents=True)
        (dest / "opennn" / "mine.txt").write_text("keep me\n")
    r = run_script(FETCH, str(dest), env=env)
    assert r.returncode != 0, r.stdout
    msg = {"absent-commit": "is not in", "short-commit": "not a full 40-hex commit",
           "bad-override": "KIT_OPENNN_COMMIT must be a full 40-hex commit",
           "dest-not-empty": "is not empty"}[case]
    assert msg in r.stderr, r.stderr
    assert not (dest / "kit-sources.lock").exists()
    if case == "dest-not-empty":
        assert (dest / "opennn" / "mine.txt").read_text() == "keep me\n"  # never removed
    else:
        assert not (dest / "opennn").exists()


def test_sources_here_extracts_trims_and_records_from_local_mirrors(tmp_path):
    mirrors = tmp_path / "mirrors"
    made = {}
    layout = {
        "opennn": ("Artelnics/opennn", [{"CMakeLists.txt": "top\n", "opennn/a.cpp": "x\n",
                                         "examples/mnist/main.cpp": "m\n", "examples/mnist/data/big.bin": "d\n",
                                         "examples/mnist/data/sub/more.bin": "d\n", "tests/t.cpp": "t\n"}]),
        "eigen": ("live-clones/eigen", [{"Eigen/Core": "core\n", "unsupported/Eigen/CXX11/Tensor": "t\n",
                                         "test/t.cpp": "t\n", "doc/d.txt": "d\n", "bench/b.cpp": "b\n",
                                         "cmake/x.cmake": "c\n"}]),
        "zlib": ("madler/zlib", [{"zlib.h": "1.3.1\n"}]),
    }
    for name, (slug, commits) in layout.items():
        bare, ids = make_repo(tmp_path / "w", name, commits)
        target = mirrors / slug.replace("/", "+") / "repo"
        target.parent.mkdir(parents=True)
        shutil.move(str(bare), str(target))
        made[name] = ids
    absent = "0123456789abcdef0123456789abcdef01234567"
    lock = write_lock(tmp_path / "lock", [
        ("opennn", "https://github.com/Artelnics/opennn.git", made["opennn"][0], "dev"),
        ("eigen", "https://github.com/live-clones/eigen.git", made["eigen"][0], "5.0.1"),
        ("zlib", "https://github.com/madler/zlib.git", absent, "v1.3.2"),
    ])
    dest = tmp_path / "here"
    env = {"KIT_SOURCES_LOCK": str(lock), "KIT_MIRRORS": str(mirrors)}
    r = run_script(HERE, str(dest), env=env)
    assert r.returncode != 0 and "not in" in r.stderr and "KIT_SUBSTITUTE_zlib" in r.stderr, r.stderr
    assert not (dest / "opennn").exists(), "nothing replaced when one source is missing"

    r = run_script(HERE, str(dest), env={**env, "KIT_SUBSTITUTE_zlib": "v1"})
    assert r.returncode == 0, r.stderr
    assert "WARNING" in r.stderr and absent in r.stderr
    assert (dest / "zlib/.kit-commit").read_text().strip() == made["zlib"][0]
    sub = (dest / "zlib/.kit-substituted").read_text()
    assert made["zlib"][0] in sub and absent in sub
    o = dest / "opennn"
    assert (o / ".kit-commit").read_text().strip() == made["opennn"][0]
    assert (o / "examples/mnist/main.cpp").is_file()
    assert (o / "examples/mnist/data").is_dir() and not any((o / "examples/mnist/data").iterdir())
    assert (o / "tests/t.cpp").is_file() and (o / "opennn/a.cpp").is_file()
    assert "examples/mnist/data" in (o / ".kit-trimmed").read_text()
    e = dest / "eigen"
    assert (e / "Eigen/Core").is_file() and (e / "unsupported/Eigen/CXX11/Tensor").is_file()
    assert (e / "cmake/x.cmake").is_file()
    assert not (e / "test").exists() and not (e / "doc").exists() and not (e / "bench").exists()
    assert not any(p.name == ".git" for p in dest.rglob(".git"))
    used = (dest / "kit-sources.lock").read_text()
    assert "SUBSTITUTE-for-v1.3.2@" in used and made["opennn"][0] in used
    assert "opennn-sources-here:" in r.stdout and str(dest) in r.stdout  # the size line
    assert_tree_matches_lock(dest, read_lock(lock))  # zlib by its recorded substitute


def assert_tree_matches_lock(here: Path, lock: dict[str, dict[str, str]]) -> None:
    """What a GPU machine builds from (.opennn-src, made by tools/opennn-sources-here.sh): every source at its
    lock's commit or a recorded substitute, and small enough to carry."""
    for name, s in lock.items():
        tree = here / name
        assert tree.is_dir(), name
        got = (tree / ".kit-commit").read_text().strip()
        if got != s["commit"]:
            sub = tree / ".kit-substituted"
            assert sub.is_file() and s["commit"] in sub.read_text(), \
                f"{name}: {got} is neither the lock's {s['commit']} nor a recorded substitute"
    size = sum(p.stat().st_size for p in here.rglob("*") if p.is_file())
    assert size <= 40 * 2**20, f"{here} holds {size / 2**20:.1f} MiB (> 40 MiB)"
