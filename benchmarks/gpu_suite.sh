#!/usr/bin/env bash
# The thing to run the moment a GPU is available: every CUDA and NVML path of dlrig once, the raw
# nvidia-smi and NVML truth, and every figure, into one folder. Budget: under 8 minutes on one
# machine. CPU-safe parts run anywhere; each CUDA part prints one "skip:" line where there is no
# GPU. It never changes the card's settings (no power limit, clocks, persistence, MIG or reset).
#
#   benchmarks/gpu_suite.sh [OUT_DIR]        (default out/gpu-suite/DATE)
#
# Last line: a key=value summary.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-out/gpu-suite/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
py=.venv/bin/python
[ -x "$py" ] || py=python3
dlrig=("$py" -m dlrig.cli.main)
export DLRIG_GPU_OUT="$out"
: >"$out/steps.tsv"

have_smi=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then have_smi=1; fi
have_cuda=$("$py" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
suite_started=$(date +%s)

# step NAME SECONDS CMD...: run with a time limit, keep stdout/stderr, log the outcome.
step() {
  local name=$1 limit=$2 started rc
  shift 2
  started=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.out" 2>"$out/$name.err"
  rc=$?
  printf '%s\t%s\t%ss\n' "$name" "$rc" "$(($(date +%s) - started))" >>"$out/steps.tsv"
  echo "step $name: exit $rc ($(($(date +%s) - started)) s)"
  return 0
}
skip() {
  printf '%s\tskip\t%s\n' "$1" "$2" >>"$out/steps.tsv"
  echo "skip: $1 ($2)"
}

# 1. The raw truth, as recorded fixtures are made.
if [ "$have_smi" = 1 ]; then
  step nvidia-smi-q-x 60 nvidia-smi -q -x
  step nvidia-smi-q 60 nvidia-smi -q
  step nvidia-smi-table 60 nvidia-smi
  step nvidia-smi-query-csv 60 nvidia-smi --format=csv \
    --query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current,pstate
  step nvidia-smi-topo 60 nvidia-smi topo -m
else
  skip nvidia-smi "no nvidia-smi that answers here"
fi

# 2. Every NVML call dlrig makes, idle and under load (writes why when NVML is absent).
step nvml-dump 180 "$py" benchmarks/gpu_nvml_dump.py --out "$out/nvml.json" --load-seconds 20

# 3. doctor and monitor, live.
step doctor 90 "${dlrig[@]}" doctor --json --save "$out/snapshot.json"
step monitor-once 60 "${dlrig[@]}" monitor --once --json

# 4. The exporter scraped while the GPUs work (a replay where there is no GPU).
serve_source=()
[ "$have_smi" = 1 ] || serve_source=(--replay tests/fixtures/nvidia-smi/h200-capture-idle-load.txt)
step monitor-serve 120 "$py" - "$out" "${serve_source[@]}" <<'PY'
import os, signal, socket, subprocess, sys, time, urllib.request
out, extra = sys.argv[1], sys.argv[2:]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
serve = subprocess.Popen([sys.executable, "-m", "dlrig.cli.main", "monitor", "serve",
                          "--port", str(port), "--interval", "0.5", *extra])
load = None
try:
    import torch
    if torch.cuda.is_available():
        load = subprocess.Popen([sys.executable, "-c",
            "import torch,time\na=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)\n"
            "end=time.time()+15\nwhile time.time()<end: a=(a@a).clamp_(-1,1)\n"
            "torch.cuda.synchronize()"])
except ImportError:
    pass
pages = []
for _ in range(60):
    try:
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        pages.append(page)
        if len(pages) >= 3:
            break
    except OSError:
        pass
    time.sleep(2 if pages else 0.5)
serve.send_signal(signal.SIGTERM)
code = serve.wait(timeout=30)
if load:
    load.wait(timeout=60)
for i, page in enumerate(pages):
    with open(os.path.join(out, f"metrics-{i}.txt"), "wb") as f:
        f.write(page)
print(f"scrapes={len(pages)} serve_exit={code}")
sys.exit(0 if pages and code == 143 else 1)
PY

# 5. bench: compute, memory, comms (CUDA and NCCL where there is a GPU, the CPU and gloo here).
if [ "$have_cuda" = 1 ]; then
  step bench 300 "${dlrig[@]}" bench compute memory comms --json --out "$out/bench"
else
  skip bench-cuda "torch sees no CUDA device: measuring the CPU paths quickly instead"
  step bench-cpu 240 "${dlrig[@]}" bench compute memory comms --quick --json --out "$out/bench"
fi

# 6. The GPU smoke tests, fit's predictions against real steps included.
if [ "$have_cuda" = 1 ]; then
  step pytest-gpu 300 "$py" -m pytest -m gpu tests/gpu -q -p no:cacheprovider -n 0
else
  skip pytest-gpu "torch sees no CUDA device"
fi

ok=$(awk -F'\t' '$2 == "0"' "$out/steps.tsv" | wc -l)
failed=$(awk -F'\t' '$2 != "0" && $2 != "skip"' "$out/steps.tsv" | wc -l)
skipped=$(awk -F'\t' '$2 == "skip"' "$out/steps.tsv" | wc -l)
figures=$("$py" - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
found = {}
bench = out / "bench" / "bench.json"
if bench.exists():
    for r in json.loads(bench.read_text())["results"]:
        if r["value"] is not None and r["test"] in (
            "bf16_matmul", "fp8_matmul", "device_copy", "h2d_pinned", "all_reduce", "fp32_matmul"
        ):
            found[r["test"]] = f"{r['value']:.4g}"
nvml = out / "nvml.json"
if nvml.exists():
    doc = json.loads(nvml.read_text())
    if "sampler_cost_ms" in doc:
        found["sampler_p50_ms"] = f"{doc['sampler_cost_ms']['p50']:.3g}"
print(" ".join(f"{k}={v}" for k, v in found.items()))
PY
)
echo "gpu=$have_smi cuda=$have_cuda steps_ok=$ok steps_failed=$failed skipped=$skipped seconds=$(($(date +%s) - suite_started)) $figures out=$out"
