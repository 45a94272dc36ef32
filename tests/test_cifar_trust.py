"""CIFAR-10's python layout is a pickle: read with a restricted unpickler on the host (up-front check) and in the
trial, so a batch that would run code is refused before any of it runs, and a batch with wrong labels, sizes or
counts is refused in one line naming the file (docs/data-trust.md)."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "trials" / "common"))

import kittrial  # noqa: E402
from cifar_files import write_cifar10  # noqa: E402
from kitctl.core.datasets import DataError, resolve_cifar10  # noqa: E402

ENTRY = [sys.executable, "-c", "from kitctl.cli import main; main()"]


class _Payload:
    """A pickle that calls os.system when loaded: what a hostile "CIFAR-10 batch" would carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _batch(folder: Path, obj: object, protocol: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "data_batch_1", "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    return folder


def _good(n: int = 4) -> dict:
    return {b"data": np.zeros((n, 3072), np.uint8), b"labels": list(range(n))}


def _host_refuses(folder: Path) -> str:
    with pytest.raises(DataError) as exc:
        resolve_cifar10(str(folder))
    text = str(exc.value)
    assert "\n" not in text and "data_batch_1" in text, text
    return text


def _trial_refuses(folder: Path) -> str:
    with pytest.raises(kittrial.TrialError) as exc:
        kittrial.load_cifar10(folder, 4)
    text = str(exc.value)
    assert "\n" not in text and "data_batch_1" in text, text
    return text


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_pickle_that_runs_code_is_refused_and_never_runs(tmp_path, protocol):
    marker = tmp_path / "pwned"
    folder = _batch(tmp_path / "cifar-10-batches-py", {b"data": _Payload(marker), b"labels": [0]}, protocol)
    assert "os.system" in _host_refuses(folder) or "posix.system" in _host_refuses(folder)
    assert "system" in _trial_refuses(folder)
    assert not marker.exists()


def test_the_cli_refuses_it_up_front_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    _batch(tmp_path / "data" / "cifar-10-batches-py", {b"data": _Payload(marker), b"labels": [0]})
    p = subprocess.run([*ENTRY, "run", "maxbatch", "--device", "cpu", "--runtime", "local", "--dataset", "cifar10",
                        "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "results")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "refused" in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert not marker.exists() and not (tmp_path / "results").exists()


@pytest.mark.parametrize("bad, why", [
    ({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1, 42, 3]}, "label 42"),
    ({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, -1, 2, 3]}, "label -1"),
    ({b"data": np.zeros((4, 3000), np.uint8), b"labels": [0, 1, 2, 3]}, "not whole records"),
    ({b"data": "hello", b"labels": [0]}, "data is str"),
    ({b"data": np.zeros((20, 3072), np.uint8), b"labels": [0, 1, 2, 3, 4]}, "20 images but 5 labels"),
    ({b"data": np.zeros((4, 3072), np.float32), b"labels": [0, 1, 2, 3]}, "not uint8"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": ["a", "b"]}, "integers"),
    ([1, 2, 3], "not a CIFAR-10 batch"),
])
def test_malformed_batches_are_refused_up_front_in_one_line(tmp_path, bad, why):
    folder = _batch(tmp_path / "cifar-10-batches-py", bad)
    assert why.split()[0].lower() in _host_refuses(folder).lower(), _host_refuses(folder)
    _trial_refuses(folder)


def test_an_object_array_is_refused(tmp_path):
    folder = _batch(tmp_path / "cifar-10-batches-py",
                    {b"data": np.array([b"x", 1], dtype=object), b"labels": [0]}, protocol=4)
    assert "dtype" in _host_refuses(folder)
    assert "dtype" in _trial_refuses(folder)


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_real_batches_still_read(tmp_path, protocol):
    folder = _batch(tmp_path / "cifar-10-batches-py", {**_good(), b"labels": np.arange(4, dtype=np.int64)},
                    protocol)
    assert resolve_cifar10(str(folder)) == folder.resolve()
    images, labels = kittrial.load_cifar10(folder, 4)
    assert images.shape == (4, 32, 32, 3) and labels.tolist() == [0, 1, 2, 3]
    official = write_cifar10(tmp_path / "official", "py")  # the official layout's writer (labels a list)
    assert resolve_cifar10(str(official)) == official.resolve()
    assert kittrial.load_cifar10(official, 20)[1].tolist() == [i % 10 for i in range(20)]
