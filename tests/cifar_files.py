"""A tiny CIFAR-10 written in the official layouts, for tests."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np


def _records(n):
    """n recognisable records: CHW bytes filled per channel, labels i % 10."""
    data = np.zeros((n, 3, 32, 32), dtype=np.uint8)
    for i in range(n):
        data[i, 0], data[i, 1], data[i, 2] = i, 100 + i, 200 - i
    return data.reshape(n, 3072), np.arange(n, dtype=np.int64) % 10


def write_cifar10(parent: Path, layout: str, sizes=(12, 8)) -> Path:
    """A tiny CIFAR-10 in the official layout ('bin' or 'py'); returns the folder."""
    folder = parent / ("cifar-10-batches-bin" if layout == "bin" else "cifar-10-batches-py")
    folder.mkdir(parents=True)
    all_data, all_labels = _records(sum(sizes))
    start = 0
    for k, n in enumerate(sizes, 1):
        data, labels = all_data[start:start + n], all_labels[start:start + n]
        if layout == "bin":
            rec = np.concatenate([labels.astype(np.uint8)[:, None], data], axis=1)
            (folder / f"data_batch_{k}.bin").write_bytes(rec.tobytes())
        else:
            with open(folder / f"data_batch_{k}", "wb") as f:
                pickle.dump({b"batch_label": b"test", b"data": data,
                             b"labels": labels.tolist()}, f)
        start += n
    return folder
