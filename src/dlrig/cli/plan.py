"""`dlrig plan`: which server to buy (or rent) for these workloads, and is this build sound?"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from dlrig.cli.common import (
    F,
    choice_option,
    console,
    console_wide,
    json_option,
    out_option,
    print_json,
    print_report,
)
from dlrig.errors import InputError
from dlrig.fit.cache import user_cache
from dlrig.machine import readers
from dlrig.outputs import ensure_directory, write_text_atomic
from dlrig.plan.assume import Inputs, parse_assume
from dlrig.plan.check import check_file
from dlrig.plan.evidence import load_bench
from dlrig.plan.fitting import WorkloadFit
from dlrig.plan.plot import pareto_png
from dlrig.plan.rank import plan
from dlrig.plan.render import render_plan
from dlrig.plan.render_check import render_check
from dlrig.plan.render_reports import render_cost, render_upgrade
from dlrig.plan.request import request
from dlrig.plan.savings import cost
from dlrig.plan.upgrade import upgrade
from dlrig.plan.usage import read
from dlrig.plan.workloads import parse

FOOTER = (
    "Exit codes: 0 at least one option meets every constraint; 1 none does; 2 bad usage or "
    "unreadable input."
)


class PlanGroup(click.Group):
    """`dlrig plan WORKLOAD...` runs the default subcommand; `dlrig plan check|cost|upgrade`
    the others. Options may come before the workloads (`dlrig plan --json resnet50`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["workloads", *args]
        return super().parse_args(ctx, args)


def _assume_option(help: str = "Replace an assumption; repeatable.") -> Callable[[F], F]:
    return click.option("--assume", "assume", multiple=True, metavar="NAME=VALUE", help=help)


def _energy_price_options(function: F) -> F:
    """--price-per-kwh and --pue: what a kWh at the wall costs, the room's cooling included."""
    function = click.option(
        "--pue", type=float, help="Power usage effectiveness of the room (default 1.5)."
    )(function)
    return click.option(
        "--price-per-kwh",
        type=float,
        help="Electricity price, USD/kWh (default: the US commercial average).",
    )(function)


@click.group("plan", cls=PlanGroup, no_args_is_help=True, epilog=FOOTER)
def plan_command() -> None:
    """From workloads and a budget to the server to buy (or rent), every rule checked.

    \b
    dlrig plan WORKLOAD... [options]          rank builds and cloud options (default)
    dlrig plan check build.yaml               check a proposed build against the rules
    dlrig plan cost --history history.db      real utilisation, energy and savings of a server
    dlrig plan upgrade --machine SNAPSHOT     what limits an existing server, what to change first

    A WORKLOAD is MODEL[:KEY=VALUE,...], e.g. resnet50:epochs=90,dataset=1281167,every=month,
    or a YAML file of workloads (see `dlrig plan workloads --help`).
    """


WORKLOAD_HELP = """Rank builds and cloud options for WORKLOAD... (the default subcommand).

\b
WORKLOAD is MODEL[:KEY=VALUE,...]:
  resnet50:epochs=90,dataset=1281167,precision=amp-bf16,every=month
  bert-large:batch=32,seq=128,tokens=3.3B,runs=4,deadline=24h
  mypkg.models:make_model:input=x:float32[B,3,224,224],y:int64[B],dataset=50k
MODEL is a fit preset (dlrig fit --list-presets), package.module:factory or a config.json.
Keys: name, batch (per GPU), global_batch, seq, image, precision (auto|fp32|tf32|amp-fp16|
amp-bf16|bf16), optimizer, strategy (auto|ddp|fsdp|...), checkpointing, input, epochs,
dataset (samples), tokens, runs (per year) or every (day|week|month|quarter|year|Nd|Nw),
deadline (48h, 3d, 90m). Numbers take k/M/B/T suffixes. Default: 12 runs a year.
A YAML file holds `workloads:` (a list of the same keys, `model:` first) and optionally
`constraints:` with this command's option names (budget, deadline, circuit, ...).

\b
Figures marked ASSUMPTION in the output have no primary source (the seeds' liquid-cooling
-15% PUE at +30% cost, spot -70% where no spot price is known, ...): replace them with
--assume NAME=VALUE (the names are listed in the report and in --json "inputs").
"""


@plan_command.command("workloads", help=WORKLOAD_HELP, epilog=FOOTER)
@click.argument("workloads", nargs=-1, required=True)
@click.option(
    "--budget",
    type=float,
    help="Money available, USD: capex of a build, spend over the years for the cloud.",
)
@click.option(
    "--deadline", help="Longest acceptable time per run (48h, 3d); per workload: deadline=."
)
@click.option("--circuit", help="Power circuit the build plugs into: 230V16A, 120V15A, 2x230V16A.")
@choice_option(
    "--form-factor",
    choices=("any", "workstation", "4u-server"),
    help="Builds of this form only (4u-server includes HGX).",
)
@choice_option("--condition", choices=("any", "new", "used"), help="New or used GPUs.")
@click.option("--cloud/--no-cloud", default=None, help="Include cloud options (default: yes).")
@click.option("--gpu", "gpus", multiple=True, help="Consider only this catalogue GPU; repeatable.")
@click.option("--max-gpus", type=int, help="Most GPUs in one build or instance (default 8).")
@choice_option(
    "--cooling",
    choices=("air", "liquid"),
    help="Cooling of the builds (liquid uses the ASSUMPTION factors).",
)
@_energy_price_options
@click.option(
    "--utilisation",
    type=float,
    help="Share of the year a build is busy (0-1; default: what the workloads need).",
)
@click.option("--years", type=float, help="Years of service for the TCO (default 3).")
@_assume_option()
@click.option(
    "--top", type=int, default=15, show_default=True, help="Options shown in the text report."
)
@out_option("Write plan.json and pareto.png into DIR.", dest="out_dir")
@json_option
def workloads_command(
    workloads: tuple[str, ...],
    budget: float | None,
    deadline: str | None,
    circuit: str | None,
    form_factor: str | None,
    condition: str | None,
    cloud: bool | None,
    gpus: tuple[str, ...],
    max_gpus: int | None,
    cooling: str | None,
    price_per_kwh: float | None,
    pue: float | None,
    utilisation: float | None,
    years: float | None,
    assume: tuple[str, ...],
    top: int,
    out_dir: str | None,
    as_json: bool,
) -> None:
    options = {
        "budget": budget,
        "deadline": deadline,
        "circuit": circuit,
        "form_factor": form_factor,
        "condition": condition,
        "cloud": cloud,
        "gpu": gpus,
        "max_gpus": max_gpus,
        "cooling": cooling,
        "price_per_kwh": price_per_kwh,
        "pue": pue,
        "utilisation": utilisation,
        "years": years,
    }
    parsed, constraints, inputs = request(workloads, options, assume)
    err = console(stderr=True)
    with user_cache():  # a plan asked again (another budget) does not trace again
        if as_json or not err.is_terminal:
            result = plan(parsed, constraints, inputs)
        else:
            with err.status(f"tracing {len(parsed)} workload(s) once, then every GPU and count…"):
                result = plan(parsed, constraints, inputs)
    written = []
    if out_dir:
        import json

        folder = ensure_directory(out_dir, "--out")
        write_text_atomic(
            folder / "plan.json", json.dumps(result.to_dict(), indent=2, default=str) + "\n"
        )
        written = [str(folder / "plan.json"), pareto_png(result, folder / "pareto.png")]
    if as_json:
        print_json(result.to_dict())
    else:
        out = console_wide()
        render_plan(result, out, top=top)
        for path in written:
            out.print(f"wrote {path}")
    if result.best is None:
        sys.exit(1)


@plan_command.command(
    "check",
    epilog="Exit codes: 0 no rule failed (warnings allowed); 1 a rule failed; 2 bad usage or unreadable input.",
)
@click.argument("build_file", metavar="BUILD.yaml")
@_assume_option("Replace an assumption (platform_watts_workstation, ...); repeatable.")
@json_option
def check_command(build_file: str, assume: tuple[str, ...], as_json: bool) -> None:
    """Check a proposed build against the rules (PSU, transients, circuit, lanes, slots, RAM,
    cores, NVLink, consumer-card limits, precision, storage), each with its source.

    \b
    gpus: {model: rtx-3090, count: 4, power_limit_watts: 300}
    cpu: {model: threadripper-pro-5975wx}
    ram_gb: 256
    psu_watts: 1600
    circuit: {volts: 120, amps: 15}
    Optional: psu: {watts, count, redundant, efficiency, atx3, pcie_connectors}, storage:
    [{kind: nvme|sata-ssd|hdd, read_mb_s}], chassis: {form_factor, expansion_slots,
    pcie_switches}, system_power_watts, nvlink, precision, about (not checked).
    """
    report = check_file(build_file, Inputs(parse_assume(assume)))
    print_report(report, as_json, render_check, wide=True)
    if report.failed:
        sys.exit(1)


@plan_command.command(
    "cost", epilog="Exit codes: 0 reported; 2 not a history database, or bad options."
)
@click.option(
    "--history",
    "history",
    required=True,
    metavar="DB",
    help="A `dlrig monitor record --db` history.",
)
@click.option(
    "--month", help="The month to report, YYYY-MM (default: the month of the last sample)."
)
@_energy_price_options
@click.option(
    "--capex", type=float, help="What the server cost, USD (default: its GPUs' street prices)."
)
@click.option(
    "--min-idle-minutes",
    type=float,
    help="Shortest whole-server idle stretch worth powering off (default 60).",
)
@_assume_option()
@json_option
def cost_command(
    history: str,
    month: str | None,
    price_per_kwh: float | None,
    pue: float | None,
    capex: float | None,
    min_idle_minutes: float | None,
    assume: tuple[str, ...],
    as_json: bool,
) -> None:
    """A server's real utilisation, energy and cost this month, and what the seeds' savings
    (night sleep over IPMI, GPU sharing, bursty jobs to spot) are worth on this history, per
    year. The history comes from `dlrig monitor record --db history.db`."""
    for flag, value in (("--capex", capex), ("--min-idle-minutes", min_idle_minutes)):
        if value is not None and value < 0:
            raise InputError(f"{flag} {value} is negative", fix=f"give {flag} >= 0")
    inputs = Inputs(
        parse_assume(assume),
        {"electricity_usd_per_kwh": ("--price-per-kwh", price_per_kwh), "pue": ("--pue", pue)},
    )
    report = cost(history, inputs, month=month, capex_usd=capex, min_idle_minutes=min_idle_minutes)
    print_report(report, as_json, render_cost, wide=True)


@plan_command.command("upgrade", epilog="Exit codes: 0 reported; 2 an input cannot be read.")
@click.option(
    "--machine",
    required=True,
    metavar="SNAPSHOT",
    help="The server: a `doctor --save` snapshot or any file `doctor --from` reads.",
)
@click.option(
    "--bench",
    "bench_dir",
    metavar="DIR",
    help="A `dlrig bench --out DIR` folder measured on the server.",
)
@click.option(
    "--history", metavar="DB", help="A `dlrig monitor record --db` history of the server."
)
@click.option(
    "--workload", help="A workload (plan syntax) to judge GPU memory and speed-ups with fit."
)
@click.option(
    "--dataset-gb", type=float, help="Size of the training data, GB (sizes the NVMe cache tier)."
)
@_assume_option()
@json_option
def upgrade_command(
    machine: str,
    bench_dir: str | None,
    history: str | None,
    workload: str | None,
    dataset_gb: float | None,
    assume: tuple[str, ...],
    as_json: bool,
) -> None:
    """What limits an existing server (input pipeline, GPU memory, compute, interconnect), from
    its own measurements, and what to change first, with the gain and the cost of each step:
    short term (settings, a re-seated card), mid term (an NVMe cache tier, bridges), long term
    (newer GPUs, a second server)."""
    inputs = Inputs(parse_assume(assume))
    snapshot = readers.load(machine)
    bench = load_bench(bench_dir) if bench_dir else None
    usage = None
    if history:
        usage = read(history)
    fitted = None
    if workload:
        fitted = WorkloadFit(parse(workload))
    if dataset_gb is not None and dataset_gb <= 0:
        raise InputError(f"--dataset-gb {dataset_gb}", fix="give a positive size in GB")
    report = upgrade(snapshot, inputs, bench, usage, fitted, dataset_gb, name=machine)
    print_report(report, as_json, render_upgrade, wide=True)
