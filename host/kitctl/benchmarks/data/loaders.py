"""The loaders' catalogue for the data benchmarks: which dataset format each loader reads, which image
runs it through Docker, which decode on the GPU, and the encodings a dataset can have (trials/dataload/writers.py)."""
from __future__ import annotations


from dataclasses import dataclass


@dataclass(frozen=True)
class Loader:
    """One loader of the data benchmarks. The trial's list (trials/dataload/loaders.py) and compose.yaml's
    x-kitctl.loaders (which image serves it) are checked against this one by tests/test_loader_catalogue.py."""
    name: str
    format: str  # the dataset format it reads (trials/dataload/writers.py)
    gpu: bool  # decodes on the GPU: a local run needs one, a docker run attaches the run's GPU (GpuRequest)
    image: str  # the loader image (compose.yaml's loader-<image>) that serves it
    trains: bool  # train-e2e offers it (dataload offers every loader)


CATALOGUE: tuple[Loader, ...] = (
    Loader("pytorch-dataloader", "folder", gpu=False, image="torch", trains=True),
    Loader("webdataset", "webdataset", gpu=False, image="torch", trains=True),
    Loader("ffcv", "ffcv", gpu=False, image="ffcv", trains=True),
    Loader("pytorch-nvjpeg", "folder", gpu=True, image="torch", trains=True),
    Loader("dali-cpu", "folder", gpu=False, image="dali", trains=True),
    Loader("dali-gpu", "folder", gpu=True, image="dali", trains=False),
)
BY_NAME = {ld.name: ld for ld in CATALOGUE}

# What the modules read, derived from the catalogue (one list to change).
LOADER_NAMES = tuple(ld.name for ld in CATALOGUE)
GPU_LOADERS = tuple(ld.name for ld in CATALOGUE if ld.gpu)
LOADER_FORMAT = {ld.name: ld.format for ld in CATALOGUE}
TRAIN_LOADERS = tuple(ld.name for ld in CATALOGUE if ld.trains)
# The CPU loaders' images: the ones train-e2e trains in through Docker (its containers get no GPU).
LOADER_IMAGE = {ld.name: ld.image for ld in CATALOGUE if not ld.gpu}
# Which image writes which dataset format (`trial.py datasize`): the format's writer package lives there (ffcv in
# loader-ffcv; webdataset and PIL in loader-torch), so a host without them writes every format through Docker.
FORMAT_IMAGE = {"folder": "torch", "webdataset": "torch", "ffcv": "ffcv"}
# The images with torch (what the training trial imports): loader-dali has none.
TORCH_IMAGES = ("torch", "ffcv")
DATA_ENCODINGS = ("jpeg50", "jpeg90", "jpeg100", "mix90", "raw")
