"""`dlrig bench`: does each part of the server perform as it should?"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from typing import TYPE_CHECKING, Any

import click

from dlrig import bench
from dlrig.bench import comms, plots, storage
from dlrig.bench.render import render
from dlrig.cli.common import (
    choice_option,
    console,
    integer_option,
    json_option,
    number_option,
    out_option,
    print_report,
    progress_bar,
)
from dlrig.errors import InputError
from dlrig.machine import probe
from dlrig.outputs import ensure_directory, write_text_atomic

if TYPE_CHECKING:
    from dlrig.bench import DeviceChoice


@click.command("bench")
@click.argument("parts", nargs=-1)
@click.option(
    "--path",
    help="storage: the dataset's directory (a test file is written and "
    "removed there) or an existing file to read.",
)
@click.option("--size", default="1G", show_default=True, help="storage: test file size.")
@number_option(
    "--random-seconds",
    min=0,
    min_open=True,
    default=5.0,
    help="storage: duration of the random-read test.",
)
@click.option("--no-fio", is_flag=True, help="storage: do not run fio beside dlrig's reader.")
@click.option(
    "--dataset",
    help="dataloader: your Dataset as package.module:factory "
    "(default: synthetic ImageNet-like JPEGs).",
)
@click.option("--batch-size", type=int, default=64, show_default=True, help="dataloader batch.")
@click.option("--processes", type=int, help="comms: local ranks (default: the GPUs, or 2 on CPU).")
@choice_option("--device", choices=("auto", "cuda", "cpu"), default="auto")
@integer_option(
    "--gpu-index",
    min=0,
    default=0,
    help="Which GPU of this machine, by index (compute, memory).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="All parts within about a minute on any machine: compute and dataloader measure "
    "inside 15 s each (sizes a slow dtype cannot afford are left out, with a note); a 256 MiB "
    "storage file.",
)
@out_option("Write bench.json and PNG plots into DIR.", dest="out_dir")
@json_option
def bench_command(
    parts: tuple[str, ...],
    path: str | None,
    size: str,
    random_seconds: float,
    no_fio: bool,
    dataset: str | None,
    batch_size: int,
    processes: int | None,
    device: DeviceChoice,  # a click.Choice of its words
    gpu_index: int,
    quick: bool,
    out_dir: str | None,
    as_json: bool,
) -> None:
    """Measure PARTS (compute, memory, comms, storage, dataloader; default: all) against what
    they should do, with the fix when one falls short.

    \b
    Exit codes: 0 every part measured performs as it should; 1 a part failed its expectation
    or could not run; 2 bad usage or input; 130/143 stopped (the storage test file is removed).
    """
    if not (math.isfinite(random_seconds) and random_seconds > 0):
        raise InputError(
            f"--random-seconds {random_seconds} is not a positive duration",
            fix="e.g. --random-seconds 5",
        )
    if processes is not None and processes < 2:
        raise InputError(f"--processes {processes}: collectives need 2 or more", fix="e.g. 2")
    source = click.get_current_context().get_parameter_source("gpu_index")
    # A GPU named on a machine where torch sees none must not quietly measure the CPU.
    if (
        source is click.core.ParameterSource.COMMANDLINE
        and bench.pick_device(device, gpu_index).kind != "cuda"
    ):
        raise InputError(
            f"--gpu-index {gpu_index}: torch sees no GPU on this machine",
            fix="drop --gpu-index to measure the CPU, or run `dlrig doctor` to see why",
        )
    options = bench.BenchOptions(
        parts=tuple(parts),
        device=device,
        gpu_index=gpu_index,
        path=path,
        size_bytes=storage.parse_size(size),
        random_seconds=random_seconds,
        with_fio=not no_fio,
        dataset=dataset,
        batch_size=batch_size,
        processes=processes,
        quick=quick,
    )
    # Before the run, not after it: a bad --out must not throw the results away.
    directory = ensure_directory(out_dir, "--out") if out_dir else None
    if directory is not None:
        plots.pyplot()
    if comms.launched_by_torchrun():
        # Under torchrun every rank runs this; rank 0 alone reports.
        report = bench.run(dataclasses.replace(options, parts=("comms",)))
        import os

        if os.environ.get("RANK", "0") == "0":
            _print(report, as_json)
        return
    machine = probe.collect()
    with progress_bar("starting") as progress:
        report = bench.run(options, machine=machine, progress=progress)
    _print(report, as_json)
    if directory is not None:
        write_text_atomic(directory / "bench.json", json.dumps(report.to_dict(), indent=2) + "\n")
        written = plots.write(report.results, directory)
        if not as_json:
            console(stderr=True).print(
                f"wrote {directory / 'bench.json'}" + "".join(f", {w}" for w in written)
            )
    if any(result.verdict == "fail" for result in report.results):
        sys.exit(1)


def _print(report: Any, as_json: bool) -> None:
    print_report(report, as_json, render, wide=True)
