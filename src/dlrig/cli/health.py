"""`dlrig health`: should this node get jobs? (Slurm HealthCheckProgram, NPD plugin, Nagios)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dlrig import health
from dlrig.cli.common import choice_option, console, json_option, number_option, print_json
from dlrig.health import HealthReport, outputs
from dlrig.health import slurm as slurm_contract
from dlrig.machine import readers
from dlrig.outputs import write_text_atomic

EXIT = (
    "Exit codes: 0 healthy (warnings included), 1 a fault that drains the node, 2 bad usage or "
    "input, 3 unknown (the check could not complete). With --npd: 0 OK, 1 NonOK, 2 Unknown; "
    "with --nagios: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; with --slurm: 0 once the node's "
    "state is set (prolog: 1 on a fault, so Slurm requeues the job)."
)


@click.command("health", epilog=EXIT)
@click.argument(
    "mode", required=False, default="periodic", type=click.Choice(["periodic", "prolog", "epilog"])
)
@click.option(
    "--from",
    "sources",
    multiple=True,
    metavar="FILE",
    help="Judge recorded files instead of this machine (nvidia-smi -q -x, a snapshot, a kernel "
    "log; repeatable).",
)
@number_option("--budget", min=1, max=300, default=20.0, help="Seconds the whole check may take.")
@click.option("--expect-gpus", type=click.IntRange(min=0), help="GPUs this node must show.")
@click.option(
    "--state",
    "state_path",
    type=click.Path(path_type=Path),
    help="Where the check remembers the kernel-log events it has read (default with --slurm: "
    "/var/lib/dlrig/health.json).",
)
@click.option(
    "--clear", is_flag=True, help="Forget the faults earlier checks opened (after a fix)."
)
@click.option(
    "--slurm", is_flag=True, help="Act as Slurm's HealthCheckProgram: drain or resume this node."
)
@click.option(
    "--node", metavar="NAME", help="The Slurm node (default: SLURMD_NODENAME, else the host name)."
)
@choice_option(
    "--format",
    "output",
    choices=("text", "npd", "nagios"),
    default="text",
    help="npd: node-problem-detector's plugin contract; nagios: a Nagios/Icinga check.",
)
@click.option(
    "--textfile",
    type=click.Path(path_type=Path),
    help="Also write node_exporter's textfile (a .prom file).",
)
@json_option
def health_command(
    mode: str,
    sources: tuple[str, ...],
    budget: float,
    expect_gpus: int | None,
    state_path: Path | None,
    clear: bool,
    slurm: bool,
    node: str | None,
    output: str,
    textfile: Path | None,
    as_json: bool,
) -> None:
    """Judge whether this node may get jobs: hardware Xids, uncorrectable ECC, pending page
    retirement or row remapping, a GPU missing from the bus, a driver/library mismatch, a PCIe
    link below its width; after a job (epilog) also processes and memory left on the GPUs.
    Application Xids and warnings never drain. The check reads NVML and the kernel log only,
    within --budget seconds even when NVML hangs; invasive tests (burn-in, NCCL, bandwidth) are
    `dlrig accept`'s.

    \b
    Example:
      dlrig health                                  # this node, readable
      dlrig health --slurm                          # slurm.conf: HealthCheckProgram
      dlrig health epilog --slurm                   # slurm.conf: Epilog
      dlrig health --format npd                     # node-problem-detector custom plugin
      dlrig health --from nvidia-smi.xml --from dmesg.txt --json
    """
    if slurm and state_path is None and not sources:
        state_path = Path("/var/lib/dlrig/health.json")
    options = health.HealthOptions(
        mode=health.MODE_BY_NAME[mode],
        budget_s=budget,
        expect_gpus=expect_gpus,
        state_path=state_path,
        clear=clear,
    )
    machine = None
    if sources:
        machine = readers.load_many(list(sources))
    report = health.run(options, machine=machine)
    if textfile is not None:
        write_text_atomic(textfile, outputs.prometheus(report), mode=0o644)
    if slurm:
        _act_on_slurm(report, node, as_json, output)
        return
    if as_json:
        print_json(report.to_dict())
    elif output == "npd":
        text, code = outputs.npd(report)
        click.echo(text)
        sys.exit(code)
    elif output == "nagios":
        text, code = outputs.nagios(report)
        click.echo(text)
        sys.exit(code)
    else:
        _render(report)
    sys.exit({"ok": 0, "warn": 0, "fault": 1, "unknown": 3}[report.status])


def _act_on_slurm(report: object, node: str | None, as_json: bool, output: str) -> None:
    assert isinstance(report, HealthReport)
    scheduler = slurm_contract.Slurm()
    name = slurm_contract.node_name(node)
    state = scheduler.node(name)
    action = slurm_contract.decide(report, state)
    scheduler.apply(name, action)
    if as_json:
        print_json(
            {**report.to_dict(), "slurm": {"node": name, "action": action.kind, "why": action.why}}
        )
    else:
        click.echo(f"dlrig health: node {name}: {action.kind} ({action.why})")
    if report.mode == "prolog" and report.status == "fault":
        sys.exit(1)  # a failed Prolog makes Slurm requeue the job on another node


def _render(report: object) -> None:
    from rich.markup import escape

    assert isinstance(report, HealthReport)
    out = console()
    style = {
        "ok": "bold green",
        "warn": "bold yellow",
        "fault": "bold red",
        "unknown": "bold yellow",
    }
    word = {"ok": "HEALTHY", "warn": "HEALTHY (warnings)", "fault": "DRAIN", "unknown": "UNKNOWN"}
    out.print(
        f"[{style[report.status]}]{word[report.status]}[/] dlrig health {report.mode} "
        f"({escape(report.source)}, {report.seconds:.2f} s)"
    )
    for fault in report.faults:
        tag = "[red]drain[/]" if fault.drain else "[yellow]warn[/]"
        out.print(f"  {tag} {escape(fault.check)}: {escape(fault.title)}")
        for line in fault.evidence[:2]:
            out.print(f"      {escape(line)}", style="dim")
    if report.note:
        out.print(f"  {escape(report.note)}", style="yellow")
    if report.draining:
        out.print(f"  Slurm reason: {escape(report.drain_reason or '')}", style="dim")
    out.print("  checked: " + "; ".join(report.checked), style="dim")
