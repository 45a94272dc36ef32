"""The loaders' catalogue for the data benchmarks: which dataset format each loader reads, which image
runs it through Docker, which decode on the GPU, and the encodings a dataset can have (trials/dataload/writers.py)."""
from __future__ import annotations


# Which image runs which loader through Docker: compose.yaml's loader-<image> services (loader_builds). These are the
# CPU loaders' images, the ones train-e2e trains in through Docker (its containers get no GPU).
LOADER_IMAGE = {"pytorch-dataloader": "torch", "webdataset": "torch", "ffcv": "ffcv", "dali-cpu": "dali"}
# Loaders that decode on the GPU: through Docker their container gets the run's GPU (GpuRequest).
GPU_LOADERS = ("pytorch-nvjpeg", "dali-gpu")
# Which image writes which dataset format (`trial.py datasize`): the format's writer package lives there (ffcv in
# loader-ffcv; webdataset and PIL in loader-torch), so a host without them writes every format through Docker.
FORMAT_IMAGE = {"folder": "torch", "webdataset": "torch", "ffcv": "ffcv"}
# The images with torch (what the training trial imports): loader-dali has none.
TORCH_IMAGES = ("torch", "ffcv")


# -- the datasets a loader run reads (dataload's and train-e2e's) ------------------------------------------------
# Which dataset format each loader reads, the encodings a dataset can have (trials/dataload/writers.py).
LOADER_FORMAT = {"pytorch-dataloader": "folder", "webdataset": "webdataset", "ffcv": "ffcv", "pytorch-nvjpeg": "folder",
                 "dali-cpu": "folder", "dali-gpu": "folder"}
DATA_ENCODINGS = ("jpeg50", "jpeg90", "jpeg100", "mix90", "raw")
