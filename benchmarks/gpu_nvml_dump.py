"""Record every NVML call dlrig makes on this machine, with its value or its error, idle and
under load: the raw truth the recorded fake of the binding (tests/unit/test_nvml_source.py)
should replay.

    python benchmarks/gpu_nvml_dump.py --out out/gpu-suite/nvml.json [--load-seconds 20]

Every `nvml*` function of the `pynvml` module (nvidia-ml-py) is wrapped before dlrig opens its
session, so doctor's probe and the monitor's sampler go through the recorder unchanged. The
load phase runs a bf16 matmul loop on every GPU while the sampler reads. Without NVML it
writes why and exits 0, so the GPU suite can run on any machine.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import threading
import time
from pathlib import Path
from typing import Any

CALLS: list[dict[str, Any]] = []
PHASE = {"name": "setup"}


def plain(value: Any, depth: int = 0) -> Any:
    """NVML answers (ctypes structures, arrays, bytes) as JSON values."""
    if depth > 6:
        return repr(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, ctypes.Structure | ctypes.Union):
        return {
            name: plain(getattr(value, name), depth + 1)
            for name, *_ in value._fields_  # type: ignore[attr-defined]
        }
    if isinstance(value, ctypes.Array):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, ctypes._Pointer | ctypes.c_void_p):  # a device or unit handle
        return f"<handle {ctypes.cast(value, ctypes.c_void_p).value:#x}>"
    return repr(value)


def install(pynvml: Any) -> None:
    for name in dir(pynvml):
        function = getattr(pynvml, name)
        if not (name.startswith("nvml") and callable(function)) or name.startswith("nvmlFn"):
            continue

        def recorded(*args: Any, _name: str = name, _function: Any = function) -> Any:
            entry: dict[str, Any] = {"phase": PHASE["name"], "function": _name}
            entry["args"] = [plain(a) for a in args]
            try:
                value = _function(*args)
            except pynvml.NVMLError as exc:
                entry["error"] = {"value": getattr(exc, "value", None), "text": str(exc)}
                CALLS.append(entry)
                raise
            entry["value"] = plain(value)
            CALLS.append(entry)
            return value

        setattr(pynvml, name, functools.wraps(function)(recorded))


def load(seconds: float, stop: threading.Event) -> str:
    try:
        import torch
    except ImportError:
        return "no torch: no load"
    if not torch.cuda.is_available():
        return "no CUDA: no load"

    def spin(index: int) -> None:
        with torch.cuda.device(index):
            a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
            end = time.monotonic() + seconds
            while time.monotonic() < end and not stop.is_set():
                a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()

    for index in range(torch.cuda.device_count()):
        threading.Thread(target=spin, args=(index,), daemon=True).start()
    return f"bf16 8192^3 matmul loop on {torch.cuda.device_count()} GPU(s) for {seconds:g} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/gpu-suite/nvml.json"))
    parser.add_argument("--load-seconds", type=float, default=20.0)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    import pynvml  # noqa: TID251 - recording the binding itself

    install(pynvml)
    from dlrig import monitor
    from dlrig.machine import probe

    document: dict[str, Any] = {"recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        pynvml.nvmlInit()
        document["driver"] = plain(pynvml.nvmlSystemGetDriverVersion())
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        document["unavailable"] = str(exc)
        args.out.write_text(json.dumps(document, indent=2) + "\n")
        print(f"nvml=unavailable reason={str(exc)!r}")
        return
    PHASE["name"] = "idle-doctor"
    probe.collect()
    PHASE["name"] = "idle-monitor"
    samples = monitor.once(monitor.open_source())
    stop = threading.Event()
    document["load"] = load(args.load_seconds, stop)
    time.sleep(min(5.0, args.load_seconds / 2))  # let clocks and power rise
    PHASE["name"] = "load-monitor"
    source = monitor.open_source()
    sampler = monitor.Sampler(source, interval_seconds=0.5)
    costs = []
    try:
        for _ in range(10):
            started = time.perf_counter()
            samples.append(sampler.sample_once())
            costs.append(time.perf_counter() - started)
            time.sleep(0.5)
    finally:
        sampler.stop()
    PHASE["name"] = "load-doctor"
    probe.collect()
    stop.set()
    costs.sort()
    document["sampler_cost_ms"] = {"p50": costs[len(costs) // 2] * 1e3, "max": costs[-1] * 1e3}
    document["samples"] = [s.to_dict() for s in samples]
    document["calls"] = CALLS
    failed = sorted({c["function"] for c in CALLS if "error" in c})
    args.out.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(
        f"nvml_calls={len(CALLS)} functions={len({c['function'] for c in CALLS})} "
        f"failed_functions={len(failed)} sampler_p50_ms={document['sampler_cost_ms']['p50']:.2f}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()
