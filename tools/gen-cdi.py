"""Write a CDI spec (JSON) for the NVIDIA GPUs of this host to stdout, without nvidia-ctk (which no reachable registry ships).

The project's shared gpu-docker/gen-cdi.py, unchanged; tools/device-docker-setup.sh runs it on the
GPU machine (after CUDA ran once, so /dev/nvidia-uvm* exist) into /etc/cdi/nvidia.json.

Devices: one per GPU named by index ("0") and by UUID ("GPU-..."), plus "all".
Common edits: the control/UVM device nodes and bind mounts of the driver's user-space
libraries (each at its versioned name and its SONAME) and nvidia-smi.
"""
import glob, json, os, re, subprocess, sys

q = subprocess.check_output(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,driver_version",
                             "--format=csv,noheader"], text=True).strip().splitlines()
minor_by_bus = {}
for info in glob.glob("/proc/driver/nvidia/gpus/*/information"):
    bus = os.path.basename(os.path.dirname(info)).lower()
    m = re.search(r"Device Minor:\s*(\d+)", open(info).read())
    if m:
        minor_by_bus[bus[-12:]] = int(m.group(1))
gpus, drv = [], None
for line in q:
    idx, uuid, bus, drv = [s.strip() for s in line.split(",")]
    minor = minor_by_bus.get(bus.lower()[-12:], int(idx))
    gpus.append((idx, uuid, f"/dev/nvidia{minor}"))

def node(p):
    return {"path": p}

devices = []
for idx, uuid, dev in gpus:
    for name in (idx, uuid):
        devices.append({"name": name, "containerEdits": {"deviceNodes": [node(dev)]}})
devices.append({"name": "all", "containerEdits": {"deviceNodes": [node(d) for _, _, d in gpus]}})

common_nodes = [node(p) for p in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
                if os.path.exists(p)]
ro = ["ro", "nosuid", "nodev", "bind"]
mounts = []
# the driver's libraries: where libcuda.so.1 resolves
cache = subprocess.check_output(["ldconfig", "-p"], text=True)
m = re.search(r"\slibcuda\.so\.1 \(libc6,x86-64\) => (\S+)", cache)
libdir = os.path.dirname(os.path.realpath(m.group(1))) if m else "/usr/local/nvidia/lib64"
COMPUTE = ("libcuda", "libcudadebugger", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-nvvm",
           "libnvidia-gpucomp", "libnvidia-opencl", "libnvidia-cfg", "libnvidia-allocator")
seen = set()
for entry in sorted(glob.glob(os.path.join(libdir, "lib*.so*"))):
    base = os.path.basename(entry)
    real = os.path.realpath(entry)
    if base.split(".so")[0] not in COMPUTE or not os.path.isfile(real):
        continue
    tgt = f"/usr/lib/x86_64-linux-gnu/{base}"  # each name the driver folder has: versioned file and SONAME links
    if tgt not in seen:
        seen.add(tgt)
        mounts.append({"hostPath": real, "containerPath": tgt, "options": ro})
smi = subprocess.run(["sh", "-c", "command -v nvidia-smi"], capture_output=True, text=True).stdout.strip()
if smi:
    mounts.append({"hostPath": os.path.realpath(smi), "containerPath": "/usr/bin/nvidia-smi", "options": ro})
spec = {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": devices,
        "containerEdits": {"deviceNodes": common_nodes, "mounts": mounts}}
json.dump(spec, sys.stdout, indent=1)
