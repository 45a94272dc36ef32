#!/usr/bin/env bash
# Issue 18 ("each loader in its own pinned image") on the H200 through Docker: the loader-torch image's host-userland
# build (the machine's own torch 2.11.0+cu130 + torchvision, webdataset from images/loader-torch/wheels/) and
# `kitctl run dataload --runtime docker --image-tag cu130-host-userland` with pytorch-nvjpeg (nvJPEG in a container
# that gets the GPU by the probed request) beside pytorch-dataloader and webdataset, RAM and cold; then the refusals
# a user meets there (dali-gpu: its CUDA image is not present; pytorch-nvjpeg with the cpu-ci tag).
# Carry [".gpu-docker", ".whl", ".cache/loader-call"]: .gpu-docker/docker.tar.xz (tools/docker-engine-payload.sh),
# .whl (tools/device-wheels.sh), .cache/loader-call/{wheels,skimage-data} (requirements-host-userland.txt's wheels
# from images/loader-torch/fetch-host-userland-wheels.sh; a few scikit-image photographs for the corpus).
# Make them here first (an index reachable; the carry stays ~47 MB):  bash tools/device-calls/loaders-docker.sh --prepare
# then there:  bash tools/device-calls/loaders-docker.sh 2>&1 | tee $OUT/loaders-docker.log
# Not run yet: the device tool runs the main checkout, and the helper that wrote this worked in a worktree.
set -u
if [[ ${1:-} == --prepare ]]; then
  set -e
  cd "$(dirname "$0")/../.."
  [[ -f .gpu-docker/docker.tar.xz ]] || bash tools/docker-engine-payload.sh .gpu-docker/docker.tar.xz
  compgen -G ".whl/*.whl" >/dev/null || bash tools/device-wheels.sh
  images/loader-torch/fetch-host-userland-wheels.sh
  mkdir -p .cache/loader-call/wheels .cache/loader-call/skimage-data
  w=images/loader-torch/wheels
  cp $w/webdataset-1.0.2-*.whl $w/braceexpand-0.1.7-*.whl $w/pyyaml-6.0.4-cp312-*.whl .cache/loader-call/wheels/
  d=$(python3 -c 'import os, skimage; print(os.path.dirname(skimage.__file__))')/data
  cp "$d"/{astronaut.png,chelsea.png,coffee.png,rocket.jpg,hubble_deep_field.jpg,horse.png} .cache/loader-call/skimage-data/
  du -sh .gpu-docker .whl .cache/loader-call
  exit 0
fi
LIMIT=${CALL_LIMIT_S:-570}
cd "$(dirname "$0")/../.."; . tools/device-calls/lib.sh
IMAGES=${DATA_IMAGES:-2000}
mkdir -p images/loader-torch/wheels && cp .cache/loader-call/wheels/*.whl images/loader-torch/wheels/
say "setup (engine, CDI, dockerd, base kitctl/host-userland:loader-torch, image loader-torch host-userland)"
bash tools/device-docker-setup.sh loader-torch || { say "setup failed"; exit 2; }
export PATH=/opt/kit-docker/bin:$PATH
K images list loader-torch 2>&1 | tail -n 8
PYTHONPATH=/tmp/site python3 - <<'EOF'
import docker
img = docker.from_env().images.get("kitctl/loader-torch:cu130-host-userland")
print("image", img.short_id, f"{img.attrs['Size'] / 2**30:.2f} GiB", {k: v for k, v in img.labels.items()
      if k in ("kit.loaders", "kit.base", "kit.framework.version", "kit.cuda.version")})
EOF
export KITCTL_CORPUS_SOURCES=$PWD/.cache/loader-call/skimage-data
say "data make $IMAGES images (left $(left) s)"
K data make --out data/corpus --images "$IMAGES" --workers "$(nproc)" 2>&1 | tail -n 2
say "dataload through Docker, host-userland build (left $(left) s)"
timeout -s INT $(( $(left) - 60 )) tools/device-kitctl.sh run dataload --corpus data/corpus --runtime docker \
  --image-tag cu130-host-userland --loaders pytorch-dataloader,webdataset,pytorch-nvjpeg --source ram,cold \
  --workers 8 --runs 2 --epochs 2 --batch 256 2>&1 | grep -v '…$'
echo "rc=${PIPESTATUS[0]}"
save "$(ls -t results/dataload-*.json 2>/dev/null | head -1)"
kit_containers
say "refusals (one line, exit 2, before anything runs)"
K run dataload --corpus data/corpus --runtime docker --image-tag cu130 --loaders dali-gpu; echo "rc=$?"
K run dataload --corpus data/corpus --runtime docker --loaders pytorch-nvjpeg; echo "rc=$?"
say "done (left $(left) s)"
