"""Provenance without .git: the kit's code hash always, the commit from git, env or stamp;
declared dependencies (deptry); committed artifacts still match the schema."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from kitctl.core import artifact as art
from kitctl.core.provenance import HOST_CODE, STAMP_FILE, code_hash, kit_info, trial_code, write_stamp

ROOT = Path(__file__).resolve().parents[1]
HEX40 = "0123456789abcdef0123456789abcdef01234567"


def _copy_kit(dest: Path) -> Path:
    """The tree as the GPU machine gets it: no .git."""
    for rel in ("host/kitctl", "trials"):
        shutil.copytree(ROOT / rel, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "compose.yaml", dest / "compose.yaml")
    return dest


def _in_copy(copy: Path, code: str, args: list[str] = [], **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("KITCTL_", "GIT_"))}
    e.update(PYTHONPATH=str(copy / "host"), **env)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=copy, env=e, capture_output=True,
                          text=True, timeout=600)


def _kitctl_in(copy: Path, results: Path, **env: str) -> subprocess.CompletedProcess:
    """A tiny CPU search (batch 2 only) with the copy's kitctl."""
    return _in_copy(copy, "from kitctl.cli import main; main()", args=[
        "run", "maxbatch", "--runtime", "local", "--device", "cpu", "--engines", "pytorch-eager",
        "--start-batch", "2", "--max-batch", "2", "--timeout", "300", "--results-dir", str(results)], **env)


def _kit_info_in(copy: Path, **env: str) -> dict:
    r = _in_copy(copy, "import json, kitctl.core.provenance as p; print(json.dumps(p.kit_info()))", **env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_code_hash_is_recorded_and_stable():
    info = kit_info()
    code = info["code"]
    assert code["paths"] == ["host/kitctl"] and len(code["sha256"]) == 64
    assert code["files"] >= 30  # every source file of the host package, the schema too
    assert code == kit_info()["code"] == code_hash(HOST_CODE).to_json()
    assert info["git_source"] == "git" and len(info["git_commit"]) == 40


def test_code_hash_follows_the_content_only(tmp_path):
    a = _copy_kit(tmp_path / "a")
    base = code_hash(HOST_CODE, a).sha256
    assert base == code_hash(HOST_CODE).sha256  # where the tree lies does not matter
    (a / "host/kitctl/__pycache__").mkdir()
    (a / "host/kitctl/__pycache__/cli.cpython-311.pyc").write_bytes(b"\0junk")
    assert code_hash(HOST_CODE, a).sha256 == base  # generated files are not the code
    f = a / "host/kitctl/core/stats.py"
    f.write_text(f.read_text() + "\n# one more line\n")
    changed = code_hash(HOST_CODE, a).sha256
    assert changed != base
    (a / "host/kitctl/new_module.py").write_text("")
    assert code_hash(HOST_CODE, a).files == code_hash(HOST_CODE).files + 1
    # a trial's hash covers its folder and trials/common, not the host
    t = trial_code("pytorch-eager", a)
    assert t.paths == ("trials/pytorch", "trials/common") and t == trial_code("pytorch-compile", a)
    (a / "trials/common/kittrial.py").write_text("changed")
    assert trial_code("pytorch-eager", a) != t and trial_code("opennn-pool1", a) != trial_code("opennn-pool1")


def test_without_git_the_commit_comes_from_env_or_stamp(tmp_path):
    copy = _copy_kit(tmp_path / "kit")
    bare = _kit_info_in(copy)
    assert (bare["git_commit"], bare["git_dirty"], bare["git_source"]) == (None, None, None)
    assert bare["code"] == kit_info()["code"]  # the code hash is there with or without .git

    env = _kit_info_in(copy, KITCTL_GIT_COMMIT=HEX40, KITCTL_GIT_DIRTY="false")
    assert (env["git_commit"], env["git_dirty"], env["git_source"]) == (HEX40, False, "env")

    # the stamp written here (with .git) travels with the copy
    write_stamp(copy / STAMP_FILE)
    here = kit_info()
    stamped = _kit_info_in(copy)
    assert stamped["git_commit"] == here["git_commit"] and stamped["git_source"] == "stamp"
    assert stamped["git_dirty"] == here["git_dirty"]
    assert _kit_info_in(copy, KITCTL_GIT_COMMIT=HEX40)["git_source"] == "env"  # env wins over the file
    # a stale stamp: the code no longer is what was stamped
    f = copy / "host/kitctl/core/stats.py"
    f.write_text(f.read_text() + "\n")
    assert _kit_info_in(copy)["git_dirty"] is True
    # `git rev-parse HEAD > .kit-commit` is a stamp too: commit known, dirty unknown
    (copy / STAMP_FILE).write_text(HEX40 + "\n")
    plain = _kit_info_in(copy)
    assert (plain["git_commit"], plain["git_dirty"], plain["git_source"]) == (HEX40, None, "stamp")


@pytest.mark.parametrize("env, stamp, word", [
    ({"KITCTL_GIT_COMMIT": "not a commit"}, None, "KITCTL_GIT_COMMIT"),
    ({"KITCTL_GIT_COMMIT": HEX40, "KITCTL_GIT_DIRTY": "maybe"}, None, "KITCTL_GIT_DIRTY"),
    ({}, "", STAMP_FILE),
    ({}, "HEAD\n", STAMP_FILE),
])
def test_bad_commit_sources_are_one_line_and_nothing_written(tmp_path, env, stamp, word):
    copy = _copy_kit(tmp_path / "kit")
    if stamp is not None:
        (copy / STAMP_FILE).write_text(stamp)
    r = _kitctl_in(copy, tmp_path / "results", **env)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and word in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "results").exists()


def test_a_run_without_git_records_commit_and_code(tmp_path):
    """A real CPU run from a copy without .git: the artifact says which code produced it."""
    copy = _copy_kit(tmp_path / "kit")
    results = tmp_path / "results"
    r = _kitctl_in(copy, results, KITCTL_GIT_COMMIT=HEX40, KITCTL_GIT_DIRTY="true")
    assert r.returncode == 0, r.stdout + r.stderr
    (final,) = [p for p in results.glob("*.json") if not p.name.endswith(".partial.json")]
    doc = json.loads(final.read_text())
    art.validate(doc)
    assert doc["kit"]["git_commit"] == HEX40 and doc["kit"]["git_dirty"] is True
    assert doc["kit"]["git_source"] == "env"
    assert doc["kit"]["code"] == code_hash(HOST_CODE).to_json()
    assert doc["engines"]["pytorch-eager"]["provenance"]["code"] == trial_code("pytorch-eager").to_json()


@pytest.mark.docker
def test_docker_records_the_trial_code_the_image_holds(client, tmp_path):
    """The Docker runtime runs the image's copy of the trial: its hash is read from the image."""
    from conftest import BASE_IMAGE, remove_containers
    from kitctl.runtimes.docker import image_trial_code
    from kitctl.runtimes.docker import LABEL_OWNER_PID

    ctx = _copy_kit(tmp_path / "ctx")
    (ctx / "trials/pytorch/trial.py").write_text("# not the checkout's trial\n")
    (ctx / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY trials/common/ /opt/kit/trials/common/\n"
                                    "COPY trials/pytorch/ /opt/kit/trials/pytorch/\n")
    tag = f"kitctl-test-provenance:{uuid.uuid4().hex[:8]}"
    client.images.build(path=str(ctx), tag=tag, rm=True)
    try:
        before = {c.id for c in client.containers.list(all=True)}
        code = image_trial_code(client, tag, "pytorch-eager")
        assert code == trial_code("pytorch-eager", ctx) != trial_code("pytorch-eager")
        assert image_trial_code(client, tag, "tensorflow-xla") is None  # the image has no such trial
        mine = [c for c in client.containers.list(all=True, filters={"label": f"{LABEL_OWNER_PID}={os.getpid()}"})
                if c.id not in before]
        remove_containers(mine)
        assert not mine, "the hashing container was left behind"
    finally:
        client.images.remove(tag, force=True)


def test_dependencies_match_the_imports():
    """deptry: every third-party module host/kitctl imports is declared in pyproject.toml."""
    deptry = shutil.which("deptry") or pytest.fail("deptry is not installed: pip install -e '.[test]'")
    r = subprocess.run([deptry, "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Scanning" in r.stderr + r.stdout


def test_committed_artifacts_match_the_schema():
    found = 0
    for f in sorted((ROOT / "results" / "reference").glob("*.json")):
        doc = json.loads(f.read_text())
        if doc.get("kind") == "kitctl-artifact":
            art.validate(doc)
            found += 1
    assert found >= 1


def _copy_with_old_git(tmp_path: Path) -> tuple[Path, list[str]]:
    """A copy of the kit with a .git of its own, one commit: the GPU machine's copy of an older checkout."""
    copy = _copy_kit(tmp_path / "kit")
    git = ["git", "-C", str(copy), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "old"], check=True)
    return copy, git


def _stamp_hash(copy: Path) -> str:
    r = _in_copy(copy, "import kitctl.core.provenance as p, pathlib; print(p._stamp_code(pathlib.Path('.').resolve()).sha256)")
    return r.stdout.strip()


def test_a_clean_matching_stamp_beats_an_old_dirty_git_in_the_copy(tmp_path):
    # The GPU machine's copy carried a .git of an older commit while the tree was newer: git says
    # "old commit, dirty"; the stamp written here says which commit the code really is.
    copy, _ = _copy_with_old_git(tmp_path)
    f = copy / "host/kitctl/core/stats.py"
    f.write_text(f.read_text() + "\n")  # the tree moves on: git is dirty now
    assert _kit_info_in(copy)["git_source"] == "git" and _kit_info_in(copy)["git_dirty"] is True
    code = _stamp_hash(copy)
    (copy / STAMP_FILE).write_text(f"{HEX40}\ndirty=false\ncode_sha256={code}\n")
    info = _kit_info_in(copy)
    assert (info["git_commit"], info["git_dirty"], info["git_source"]) == (HEX40, False, "stamp")
    (copy / STAMP_FILE).write_text(f"{HEX40}\ndirty=false\ncode_sha256={'0' * 64}\n")  # not this code
    assert _kit_info_in(copy)["git_source"] == "git"


def test_a_stamp_of_a_commit_the_old_git_lacks_beats_a_clean_looking_git(tmp_path):
    # 2026-12-01: the newer commits had only added a file, untracked to the copy's old .git, so git
    # said "old commit, clean". A clean matching stamp of a commit that .git does not hold wins;
    # one of a commit it holds (a stale stamp here, where .git is current) does not.
    copy, git = _copy_with_old_git(tmp_path)
    (copy / "tools-new.sh").write_text("echo\n")  # the newer commit's only change: untracked here
    old = _kit_info_in(copy)
    assert (old["git_source"], old["git_dirty"]) == ("git", False)
    code = _stamp_hash(copy)
    (copy / STAMP_FILE).write_text(f"{HEX40}\ndirty=false\ncode_sha256={code}\n")
    info = _kit_info_in(copy)
    assert (info["git_commit"], info["git_dirty"], info["git_source"]) == (HEX40, False, "stamp")
    head = subprocess.run([*git, "rev-parse", "HEAD~0"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "newer"], check=True)
    (copy / STAMP_FILE).write_text(f"{head}\ndirty=false\ncode_sha256={code}\n")  # stale: .git holds it
    assert _kit_info_in(copy)["git_commit"] != head and _kit_info_in(copy)["git_source"] == "git"
