"""PNG plots of a bench report: matmul throughput by size, collective bus bandwidth by message
size, storage against fio, and the DataLoader trials."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from dlrig import extras
from dlrig.bench.results import BenchResult
from dlrig.outputs import ensure_directory, write_bytes_atomic


def pyplot() -> Any:
    return extras.pyplot("monitor", "bench plots")


def _save(plt: Any, figure: Any, path: Path) -> str:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    write_bytes_atomic(path, buffer.getvalue())
    return str(path)


def write(results: list[BenchResult], directory: Path) -> list[str]:
    """The plots that the results have data for; the files written."""
    ensure_directory(directory, "--out")
    plt = pyplot()
    written = []
    compute = [r for r in results if r.part == "compute" and r.detail.get("tflops_by_size")]
    if compute:
        figure, axes = plt.subplots(figsize=(8, 4.5))
        peaks = 0
        for result in compute:
            sizes = result.detail["tflops_by_size"]
            (line,) = axes.plot(
                [int(n) for n in sizes], list(sizes.values()), marker="o", label=result.test
            )
            if result.expected:
                # The peak in the series' own colour, so each dtype meets its own line.
                axes.axhline(result.expected, linestyle=":", linewidth=1.2, color=line.get_color())
                peaks += 1
        axes.set_xscale("log", base=2)
        axes.set_xlabel("N (N×N matmul)")
        axes.set_ylabel(compute[0].unit)
        axes.set_title(
            "Matrix multiply throughput (dotted: catalogue peak)"
            if peaks
            else "Matrix multiply throughput (no catalogue peak for this device)"
        )
        axes.grid(alpha=0.3)
        axes.legend()
        written.append(_save(plt, figure, directory / "compute.png"))
    comms = [r for r in results if r.part == "comms" and r.detail.get("sizes")]
    if comms:
        figure, axes = plt.subplots(figsize=(8, 4.5))
        for result in comms:
            rows = result.detail["sizes"]
            axes.plot(
                [r["bytes"] for r in rows],
                [r["busbw_gbs"] for r in rows],
                marker="o",
                label=result.test,
            )
        axes.set_xscale("log", base=2)
        axes.set_xlabel("message size (bytes)")
        axes.set_ylabel("bus bandwidth (GB/s)")
        axes.set_title(
            f"Collectives, {comms[0].detail.get('backend')}, {comms[0].detail.get('ranks')} ranks"
        )
        axes.grid(alpha=0.3)
        axes.legend()
        written.append(_save(plt, figure, directory / "comms.png"))
    stored = [r for r in results if r.part == "storage" and r.value is not None]
    if stored:
        figure, axes = plt.subplots(figsize=(6, 4))
        labels = [r.test for r in stored]
        positions = range(len(stored))
        axes.bar(
            [p - 0.2 for p in positions], [r.value or 0 for r in stored], width=0.4, label="dlrig"
        )
        fio = [r.detail.get("fio_mb_s") for r in stored]
        if any(v is not None for v in fio):
            axes.bar([p + 0.2 for p in positions], [v or 0 for v in fio], width=0.4, label="fio")
        axes.axhline(stored[0].expected or 0, linestyle=":", color="grey", label="needed")
        axes.set_xticks(list(positions), labels)
        axes.set_ylabel("MB/s")
        axes.set_title("Storage reads")
        axes.legend()
        written.append(_save(plt, figure, directory / "storage.png"))
    loader = next((r for r in results if r.part == "dataloader" and r.detail.get("trials")), None)
    if loader is not None:
        trials = loader.detail["trials"]
        figure, axes = plt.subplots(figsize=(8, 0.35 * len(trials) + 1.5))
        labels = [", ".join(f"{k}={v}" for k, v in t["settings"].items()) for t in trials]
        axes.barh(range(len(trials)), [t["samples_per_s"] for t in trials])
        axes.set_yticks(range(len(trials)), labels, fontsize="small")
        axes.invert_yaxis()
        axes.set_xlabel("samples/s")
        axes.set_title("DataLoader settings tried (in search order)")
        written.append(_save(plt, figure, directory / "dataloader.png"))
    return written
