"""What every `dlrig provision` subcommand shares: the fact options, gathering the facts, and
writing or printing the bundle."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from dlrig import provision
from dlrig.cli.common import (
    console,
    integer_option,
    json_option,
    options_from,
    out_option,
    print_json,
)
from dlrig.errors import InputError
from dlrig.provision.report import render_text

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from dlrig.provision import TargetOptions

F = TypeVar("F", bound=Callable[..., Any])


def fact_options(function: F) -> F:
    """The facts every target can take: a snapshot, a live probe, or stated facts."""
    for decorator in reversed(
        (
            click.option(
                "--machine",
                "machine_path",
                type=click.Path(path_type=Path),
                metavar="SNAPSHOT",
                help="Use this machine's facts: a `doctor --save` snapshot or any file `doctor --from` reads.",
            ),
            click.option(
                "--probe",
                is_flag=True,
                help="Probe this machine for its facts (the default for host, env, docker, nccl, power when nothing is stated).",
            ),
            click.option(
                "--gpu",
                metavar="MODEL",
                help="GPU model from the catalogue (id or alias: rtx-4090, a100, H100-SXM5-80GB).",
            ),
            integer_option("--gpus", "gpu_count", min=0, metavar="N", help="GPUs per machine."),
            click.option(
                "--os",
                "os_name",
                metavar="RELEASE",
                help="ubuntu-22.04, ubuntu-24.04, debian-12 or rocky-9 (RHEL 9).",
            ),
            click.option(
                "--torch",
                "torch_version",
                metavar="VERSION",
                help="The torch release wanted (2.9, 1.12).",
            ),
            click.option(
                "--cuda",
                "cuda_version",
                metavar="X.Y",
                help="CUDA toolkit to install on the host (12.8).",
            ),
            click.option(
                "--python", "python_version", metavar="X.Y", help="Python for the environment."
            ),
            click.option(
                "--driver",
                "driver_version",
                metavar="VERSION",
                help="The driver the machine has (580.95.05).",
            ),
            out_option(
                "Write the files here (default: print the file, when there is one).",
                dest="out_dir",
                type=click.Path(path_type=Path),
            ),
            click.option(
                "--overwrite", is_flag=True, help="Replace files that already exist in --out."
            ),
            json_option,
        )
    ):
        function = decorator(function)
    return function


def packages_option(help: str) -> Callable[[F], F]:
    """--with REQ, repeatable: another package for what env or docker sets up."""
    return click.option("--with", "packages", multiple=True, metavar="REQ", help=help)


# --lock means the same in env and docker: the --with packages pinned with hashes, now.
lock_option = click.option(
    "--lock",
    is_flag=True,
    help="Lock --with packages now with `uv pip compile --generate-hashes` (needs the package index).",
)


def gather_facts(ctx: click.Context, params: dict[str, Any], probe_by_default: bool) -> Any:
    stated = provision.Stated(
        gpu=params["gpu"],
        gpu_count=params["gpu_count"],
        os=params["os_name"],
        torch=params["torch_version"],
        cuda=params["cuda_version"],
        python=params["python_version"],
        driver=params["driver_version"],
    )
    nothing_stated = not any(vars(stated).values()) and params["machine_path"] is None
    probe = params["probe"] or (probe_by_default and nothing_stated)
    argv = tuple((ctx.obj or {}).get("argv", ())) if ctx.obj else ()
    return provision.gather(params["machine_path"], stated, probe=probe, argv=argv)


def generate_target(
    ctx: click.Context,
    target: str,
    options_type: type[DataclassInstance],
    params: dict[str, Any],
    *,
    probe_by_default: bool = True,
    **given: Any,
) -> None:
    """Generate `target` and write or print it: `options_type` from the subcommand's own
    params and `given` (see `options_from`), the facts from the fact options."""
    # options_type is the subcommand's target's options class, one of TargetOptions
    options = cast("TargetOptions", options_from(options_type, params, **given))
    facts = gather_facts(ctx, params, probe_by_default)
    emit(provision.generate(target, facts, options=options), params)


def emit(bundle: Any, params: dict[str, Any]) -> None:
    out_dir: Path | None = params["out_dir"]
    if out_dir is not None:
        bundle = provision.write(bundle, out_dir, overwrite=params["overwrite"])
    elif len(bundle.files) != 1 and not params["as_json"]:
        names = ", ".join(f.path for f in bundle.files)
        raise InputError(
            f"provision {bundle.target} writes {len(bundle.files)} files ({names})",
            fix="give --out DIR",
        )
    if params["as_json"]:
        document = bundle.to_dict()
        if out_dir is None:
            for entry, generated in zip(document["files"], bundle.files, strict=True):
                entry["content"] = generated.content
        print_json(document)
        return
    if out_dir is None:
        sys.stdout.write(bundle.files[0].content)
        err = console(stderr=True)
        for warning in bundle.warnings:
            err.print(f"warning: {warning}", style="yellow")
        return
    render_text(bundle, console())
