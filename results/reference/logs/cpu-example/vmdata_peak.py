"""Peak VmData (what RLIMIT_DATA counts) of one CPU trial, sampled every 2 ms; env variants."""
import json, os, subprocess, sys, time
batch = int(sys.argv[1]); label = sys.argv[2]; extra = dict(a.split("=", 1) for a in sys.argv[3:])
cmd = [sys.executable, "/work/wt-37/trials/pytorch/trial.py", "--benchmark", "maxbatch", "--batch", str(batch),
       "--precision", "fp32", "--mode", "eager", "--model", "resnet50", "--dataset", "synthetic", "--device", "cpu",
       "--seed", "0"]
env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", **extra}
p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
peak = 0; path = f"/proc/{p.pid}/status"
while p.poll() is None:
    try:
        for line in open(path):
            if line.startswith("VmData:"):
                peak = max(peak, int(line.split()[1])); break
    except OSError:
        pass
    time.sleep(0.002)
out = p.stdout.read()
res = [l for l in out.splitlines() if "KIT-RESULT" in l]
status = json.loads(res[-1].split("KIT-RESULT", 1)[1].strip(" :")).get("status") if res else None
print(json.dumps({"label": label, "batch": batch, "peak_vmdata_mib": round(peak / 1024, 1), "rc": p.returncode,
                  "status": status, "env": extra}), flush=True)
