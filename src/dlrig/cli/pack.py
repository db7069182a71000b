"""`dlrig pack`: pack a dataset of many small files into shards; verify; measure."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from dlrig import pack
from dlrig.bench import pack as bench_pack
from dlrig.cli.common import (
    choice_option,
    console,
    console_wide,
    json_option,
    print_json,
    print_report,
    progress_bar,
    progress_lines,
)
from dlrig.errors import InputError
from dlrig.pack.render import render_bench, render_pack, render_verify
from dlrig.pack.sources import IMAGE_EXTENSIONS
from dlrig.report import envelope

_SUBCOMMANDS = ("create", "verify", "bench")
_EXIT_PACK = (
    "Exit codes: 0 packed; 2 bad usage or input (an unreadable file without --skip-bad, a full "
    "disk, a destination that exists without --overwrite, a folder that is not a dataset); "
    "130/143/129 stopped by a signal (finished shards are kept: rerun to resume)."
)


class _PackGroup(click.Group):
    """`dlrig pack SRC DST` is `dlrig pack create SRC DST`; `verify` and `bench` are named."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args not in (["-h"], ["--help"]):
            first = _first_positional(args, self.commands["create"])
            if first is None or args[first] not in _SUBCOMMANDS:
                args = ["create", *args]
            elif first > 0:
                args = [args[first], *args[:first], *args[first + 1 :]]
        return super().parse_args(ctx, args)


def _first_positional(args: list[str], command: click.Command) -> int | None:
    valued = {
        name
        for param in command.params
        if isinstance(param, click.Option) and not param.is_flag
        for name in param.opts
    }
    skip = False
    for position, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "--":
            return position + 1 if position + 1 < len(args) else None
        elif arg.startswith("-") and arg != "-":
            skip = arg in valued
        else:
            return position
    return None


@click.group("pack", cls=_PackGroup, epilog=_EXIT_PACK + " `verify` exits 1 when it finds damage.")
def pack_command() -> None:
    """Pack a dataset of many small files into large shards (`dlrig pack SRC DST`), check one
    (`dlrig pack verify DST`), or measure it against its loose files (`dlrig pack bench DST`)."""


def parse_size(text: str, option: str) -> int:
    units = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30}
    cleaned = text.strip().lower().removesuffix("b")
    number, unit = cleaned, ""
    while number and number[-1].isalpha():
        number, unit = number[:-1], number[-1] + unit
    try:
        value = int(float(number) * units[unit]) if unit else int(number)
    except (ValueError, KeyError):
        raise InputError(f"{option} {text!r} is not a size", fix="e.g. 256M, 1G, 64MiB") from None
    if value < 1:
        raise InputError(f"{option} {text!r} is not a positive size", fix="e.g. 256M")
    return value


@contextmanager
def _progress(what: str, quiet: bool) -> Iterator[Callable[[int, int], None]]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    err = console(stderr=True)
    if quiet or not err.is_terminal:
        # A log gets a line per tenth of the samples (none when quiet: --json).
        with progress_lines(quiet) as line:

            def log(done: int, total: int) -> None:
                line(f"{what} {done}/{total} samples", done / total if total else 0.0)

            yield log
        return
    with Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("samples"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


@pack_command.command("create", epilog=_EXIT_PACK)
@click.argument("src")
@click.argument("dst")
@choice_option(
    "--format",
    "fmt",
    choices=("dlrig", "lmdb", "hdf5", "webdataset"),
    default="dlrig",
    help="dlrig's shards (read with dlrig.pack.Dataset), or another library's format.",
)
@click.option(
    "--shard-size",
    help="Target shard size, e.g. 256M or 1G (default: from the filesystem DST is on: "
    "1 GiB on network filesystems, 256 MiB elsewhere).",
)
@click.option("--jobs", type=int, help="Packing processes (default: the usable cores).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the packing order.")
@click.option("--no-shuffle", is_flag=True, help="Keep the source's order in the shards.")
@click.option("--skip-bad", is_flag=True, help="Leave out unreadable files (listed in the report).")
@click.option("--overwrite", is_flag=True, help="Replace a dlrig pack already at DST.")
@click.option(
    "--extensions",
    default=None,
    help="ImageFolder: which files are samples, e.g. .wav,.flac, or `any` "
    "(default: the image types torchvision's ImageFolder accepts).",
)
@json_option
def create_command(
    src: str,
    dst: str,
    fmt: str,
    shard_size: str | None,
    jobs: int | None,
    seed: int,
    no_shuffle: bool,
    skip_bad: bool,
    overwrite: bool,
    extensions: str | None,
    as_json: bool,
) -> None:
    """Pack SRC into DST. SRC: an ImageFolder tree (SRC/CLASS/FILE), a .csv or .jsonl list of
    paths and labels, or package.module:factory returning a Dataset of (bytes, label).
    Interrupted? Run the same command again: finished shards are kept."""
    if jobs is not None and jobs < 1:
        raise InputError(f"--jobs {jobs}: needs at least 1", fix="e.g. --jobs 8")
    wanted: tuple[str, ...] | None = IMAGE_EXTENSIONS
    if extensions is not None:
        wanted = None if extensions.strip().lower() == "any" else _extensions(extensions)
    options = pack.PackOptions(
        fmt=fmt,
        shard_bytes=parse_size(shard_size, "--shard-size") if shard_size else None,
        jobs=jobs,
        seed=None if no_shuffle else seed,
        skip_bad=skip_bad,
        overwrite=overwrite,
        extensions=wanted,
    )
    with _progress("packing", as_json) as progress:
        report = pack.pack(src, dst, options, progress)
    print_report(report, as_json, render_pack)


def _extensions(text: str) -> tuple[str, ...]:
    items = tuple(
        e if e.startswith(".") else f".{e}"
        for e in (p.strip().lower() for p in text.split(","))
        if e
    )
    if not items:
        raise InputError(f"--extensions {text!r}: names no extension", fix="e.g. .jpg,.png")
    return items


@pack_command.command(
    "verify",
    epilog="Exit codes: 0 intact; 1 damage found (each damaged "
    "sample is named); 2 DST is not a finished dlrig pack.",
)
@click.argument("dst")
@click.option("--jobs", type=int, help="Threads checking shards (default: the usable cores).")
@json_option
def verify_command(dst: str, jobs: int | None, as_json: bool) -> None:
    """Re-read every shard of DST and check each sample's checksum."""
    with _progress("verifying", as_json) as progress:
        report = pack.verify(dst, jobs, progress)
    print_report(report, as_json, render_verify)
    if not report.ok:
        sys.exit(1)


@pack_command.command(
    "bench",
    epilog="Exit codes: 0 measured; 1 the packed cold raw reads are below 5x the loose files; "
    "2 DST is not a dlrig pack.",
)
@click.argument("dst")
@click.option("--samples", type=int, help="Samples per raw case (default: all).")
@click.option("--decode-samples", type=int, default=2000, show_default=True,
              help="Samples per decode case.")  # fmt: skip
@click.option("--workers", type=int, default=1, show_default=True,
              help="Also measure with this many processes.")  # fmt: skip
@click.option("--no-decode", is_flag=True, help="Raw bytes only.")
@click.option("--no-loose", is_flag=True, help="The pack alone, not its source files.")
@click.option(
    "--drop-caches",
    is_flag=True,
    help="Also measure fully cold (root: `sync; echo 3 > /proc/sys/vm/drop_caches`, which "
    "empties the whole machine's page, dentry and inode caches, so each loose file's "
    "open/stat reads the disk); the 5x target is then judged on it.",
)
@json_option
def bench_command(
    dst: str,
    samples: int | None,
    decode_samples: int,
    workers: int,
    no_decode: bool,
    no_loose: bool,
    drop_caches: bool,
    as_json: bool,
) -> None:
    """Samples/s reading DST and its loose source files: raw and decoded, cold (pages dropped,
    verified with mincore; with --drop-caches also fully cold) and warm, sequential and
    shuffled."""
    for name, value in (
        ("--samples", samples),
        ("--decode-samples", decode_samples),
        ("--workers", workers),
    ):
        if value is not None and value < 1:
            raise InputError(f"{name} {value}: needs at least 1", fix=f"e.g. {name} 1000")
    with progress_bar("pack bench", as_json) as progress:
        results = list(
            bench_pack.run(
                dst,
                samples=samples,
                decode_samples=decode_samples,
                workers=(1,) if workers == 1 else (1, workers),
                stages=("raw",) if no_decode else ("raw", "decode"),
                loose=not no_loose,
                drop_caches=drop_caches,
                progress=progress,
            )
        )
    if as_json:
        body: dict[str, Any] = {
            "command": "bench",
            "dst": dst,
            "results": [r.to_dict() for r in results],
        }
        print_json(envelope("dlrig.pack", 1, body))
    else:
        render_bench(results, console_wide())
    if any(r.verdict == "low" for r in results):
        sys.exit(1)
