"""Holistic Trace Analysis, the reference `dlrig profile` is measured against, in a virtual
environment of its own (it pins jupyterlab, pandas and plotly; 106 packages, ~500 MB), made
once under build/hta-venv from the package registry."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HTA_VERSION = "0.5.0"
VENV = ROOT / "build" / "hta-venv"
PYTHON = VENV / "bin" / "python"

# Run in HTA's interpreter: load one trace folder, take the temporal breakdown and the kernel
# table, print them as JSON with the time and peak memory it took.
RUNNER = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
temporal = analysis.get_temporal_breakdown(visualize=False)
kinds, kernels = analysis.get_gpu_kernel_breakdown(
    visualize=False, include_memory_kernels=True, num_kernels=100000, duration_ratio=1.0
)
t2 = time.perf_counter()
print(json.dumps({
    "import_s": t1 - t0,
    "analyse_s": t2 - t1,
    "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "temporal": json.loads(temporal.to_json(orient="records")),
    "kernels": json.loads(kernels.to_json(orient="records")),
}))
"""


def ensure() -> Path:
    """HTA's interpreter, installing it first if needed."""
    if not PYTHON.exists():
        print(f"installing HolisticTraceAnalysis=={HTA_VERSION} into {VENV} ...", flush=True)
        venv.create(VENV, with_pip=True)
        subprocess.run(
            [str(PYTHON), "-m", "pip", "install", "-q", f"HolisticTraceAnalysis=={HTA_VERSION}"],
            check=True,
        )
    return PYTHON


def run(folder: Path, rounding: bool = True) -> dict[str, object]:
    """HTA's figures for the traces in `folder` (one per rank)."""
    import json
    import os

    env = dict(os.environ)
    if not rounding:
        env["HTA_DISABLE_NS_ROUNDING"] = "1"
    done = subprocess.run(
        [str(ensure()), "-c", RUNNER, str(folder)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    print(ensure())
    sys.exit(0)
