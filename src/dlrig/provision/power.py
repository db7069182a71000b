"""`dlrig provision power`: persistence, a power limit, night-time sleep over IPMI, and Slurm
power saving for idle nodes.

- nvidia-persistenced unit (persistence mode without the deprecated `nvidia-smi -pm 1`);
- a oneshot unit applying `nvidia-smi -pl W` at boot, with the measured cost of that limit
  when a measurement is in provision_power_limits.csv;
- ipmi-power.sh plus systemd timers for a management host (sleep at night, wake in the morning);
- SuspendProgram/ResumeProgram scripts and the slurm.conf lines for Slurm power saving.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.knowledge.provision import power_limit_costs, power_ranges
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render

_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d")
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class PowerOptions:
    power_limit_watts: int | None = None
    gpu_indices: tuple[int, ...] = ()  # empty: every GPU
    sleep_at: str | None = "22:00"
    wake_at: str | None = "07:00"
    nodes: tuple[str, ...] = ()  # the nodes the timers put to sleep (default: this host)
    bmc_suffix: str = "-bmc"
    ipmi_user: str = "admin"
    password_file: str = "/etc/dlrig/ipmi.password"
    install_dir: str = "/usr/local/sbin"
    suspend_time_s: int = 1800
    exclude_nodes: str | None = None
    slurm_user: str = "slurm"  # SlurmUser of slurm.conf: runs SuspendProgram/ResumeProgram


def _limit_bounds(facts: Facts) -> tuple[float | None, str, float | None, str]:
    """(highest, where from, lowest, where from) power limit for the GPUs in the facts."""
    gpus = facts.machine.gpus if facts.machine else None
    defaults = [g.power_default_limit_watts for g in gpus or () if g.power_default_limit_watts]
    top: float | None = None
    where = ""
    if defaults:
        top, where = min(defaults), "the GPUs' default power limit in the snapshot"
    elif facts.gpu is not None and facts.gpu.tdp_watts:
        top, where = facts.gpu.tdp_watts, f"the catalogue TDP of {facts.gpu.id}"
    known = power_ranges().get(facts.gpu.id) if facts.gpu is not None else None
    if known is not None:
        return top, where, known.min_watts, f"nvidia-smi's minimum for {known.gpu} ({known.source})"
    return top, where, None, ""


def _cost(facts: Facts, watts: int, top: float | None) -> tuple[str, str | None]:
    gpu_id = facts.gpu.id if facts.gpu else None
    for row in power_limit_costs():
        if row.gpu == gpu_id and row.limited_watts == watts:
            return (
                f"Measured: {row.limited_watts:g} W instead of {row.default_watts:g} W kept "
                f"{row.performance_kept_percent:g}% of performance ({row.workload}).",
                row.source,
            )
    known = [r for r in power_limit_costs() if r.gpu == gpu_id]
    if known:
        near = ", ".join(
            f"{r.limited_watts:g} W kept {r.performance_kept_percent:g}% ({r.workload})"
            for r in known
        )
        return (
            f"No measurement at {watts} W for this GPU; measured elsewhere: {near}.",
            known[0].source,
        )
    share = f" ({watts / top:.0%} of {top:g} W)" if top else ""
    return (
        f"No published measurement of the cost of {watts} W{share} for this GPU in dlrig's tables: "
        "compare `dlrig bench compute` before and after.",
        None,
    )


def generate(facts: Facts, options: PowerOptions | None = None) -> Bundle:
    options = options or PowerOptions()
    head = header(facts, "power")
    files: list[GeneratedFile] = []
    decisions: list[Decision] = []
    warnings: list[str] = []
    files.append(
        GeneratedFile(
            "nvidia-persistenced.service",
            render(
                "power/nvidia-persistenced.service.j2",
                header=head,
                persistenced_user="nvidia-persistenced",
            ),
            "systemd",
            "persistence daemon unit (only where the driver package lacks one)",
        )
    )
    if options.power_limit_watts is not None:
        watts = options.power_limit_watts
        top, where, bottom, _ = _limit_bounds(facts)
        if watts <= 0 or (top is not None and watts > top):
            raise InputError(
                f"--power-limit {watts}: outside 1..{top:g} W ({where})"
                if top
                else f"--power-limit {watts}: must be positive",
                fix="choose a limit at or below the default; read the range with `nvidia-smi -q -d POWER`",
            )
        if bottom is not None and watts < bottom:
            raise InputError(
                f"--power-limit {watts}: below the {bottom:g} W minimum of {facts.gpu.id if facts.gpu else 'the GPU'} "
                "(nvidia-smi -pl refuses it, so the boot unit would fail)",
                fix=f"choose {bottom:g} W or more; read the range with `nvidia-smi -q -d POWER`",
            )
        if bottom is None:
            warnings.append(
                f"the minimum power limit of this GPU is not in dlrig's table: check that {watts} W "
                "is at or above 'Min Power Limit' in `nvidia-smi -q -d POWER`"
            )
        cost, source = _cost(facts, watts, top)
        decisions.append(Decision("power limit", f"{watts} W", cost, source))
        files.append(
            GeneratedFile(
                "dlrig-gpu-power-limit.service",
                render(
                    "power/gpu-power-limit.service.j2",
                    header=head,
                    watts=watts,
                    gpu_indices=options.gpu_indices,
                    cost=cost,
                ),
                "systemd",
                f"applies a {watts} W GPU power limit at boot",
            )
        )
    nodes = options.nodes or (
        (facts.machine.origin.hostname,) if facts.machine and facts.machine.origin.hostname else ()
    )
    for node in nodes:
        if not _NODE.fullmatch(node):
            raise InputError(f"--node {node}: not a host name", fix="give host names such as gpu01")
    script_path = f"{options.install_dir}/dlrig-ipmi-power.sh"
    files.append(
        GeneratedFile(
            "dlrig-ipmi-power.sh",
            render(
                "power/ipmi-power.sh.j2",
                header=head,
                bmc_suffix=options.bmc_suffix,
                password_file=options.password_file,
                ipmi_user=options.ipmi_user,
                slurm_user=options.slurm_user,
            ),
            "shell",
            f"power nodes on/off through their BMCs (install as {script_path})",
            executable=True,
        )
    )
    schedule = [
        (options.sleep_at, "sleep", "sleep", "Shut idle GPU nodes down through IPMI"),
        (options.wake_at, "wake", "wake", "Power GPU nodes on through IPMI"),
    ]
    if (options.sleep_at or options.wake_at) and not nodes:
        warnings.append(
            "no nodes for the IPMI schedule (give --node NAME; only a probed or snapshot host "
            "is taken by default): timers not written"
        )
    for time, action, name, what in schedule:
        if time is None or not nodes:
            continue
        if not _TIME.fullmatch(time):
            raise InputError(f"--{name}-at {time}: not a time of day", fix="give HH:MM, e.g. 22:00")
        files.append(
            GeneratedFile(
                f"dlrig-ipmi-{name}.service",
                render(
                    "power/ipmi.service.j2",
                    header=head,
                    what=what,
                    script_path=script_path,
                    action=action,
                    nodes=nodes,
                ),
                "systemd",
                f"{what.lower()} (run by the timer)",
            )
        )
        files.append(
            GeneratedFile(
                f"dlrig-ipmi-{name}.timer",
                render("power/ipmi.timer.j2", header=head, what=what, time=time),
                "systemd",
                f"{name} at {time} every day",
            )
        )
    decisions.append(
        Decision(
            "IPMI",
            f"ipmitool -I lanplus, BMC = NODE{options.bmc_suffix}, password file {options.password_file}",
            "neither IPMI nor the BMC schedules anything: a management host's timers do; the "
            "password never on the command line (ipmitool -f); each action reads the power state first",
            "shared/docs/notes/provision_hardware.md §4.1 (ipmitool man page; OleHolmNielsen/Slurm_tools power_save)",
        )
    )
    decisions.append(
        Decision(
            "credentials",
            f"{options.password_file}: owner root, group of SlurmUser {options.slurm_user}, mode 0640",
            "slurmctld runs SuspendProgram/ResumeProgram as SlurmUser, not root: a root-only "
            "file would make every Slurm power action fail; create it with `install -m 0640 -o "
            f'root -g "$(id -gn {options.slurm_user})" /dev/null {options.password_file}` and '
            "write the password into it (the scripts refuse to run when it is unreadable)",
            "https://slurm.schedmd.com/power_save.html ('SuspendProgram ... executed as SlurmUser'; "
            "via shared/docs/notes/provision_hardware.md §4.1)",
        )
    )
    decisions.append(
        Decision(
            "night sleep",
            f"at {options.sleep_at}: drain each Slurm node, power it off only when no job runs there",
            "a node Slurm knows is drained first (no job starts between the check and the power-"
            "off), then `squeue -w NODE` decides: with jobs running it stays drained and on; at "
            f"{options.wake_at} it is powered on and resumed if dlrig drained it. Nodes Slurm does "
            "not know are powered off directly",
        )
    )
    for role, name, action, word in (
        ("SuspendProgram", "slurm-suspend.sh", "soft", "suspending"),
        ("ResumeProgram", "slurm-resume.sh", "on", "resuming"),
    ):
        files.append(
            GeneratedFile(
                f"dlrig-{name}",
                render(
                    "power/slurm-node-power.sh.j2",
                    header=head,
                    role=role,
                    name=f"dlrig-{name}",
                    action=action,
                    action_word=word,
                    ipmi_script=script_path,
                    password_file=options.password_file,
                ),
                "shell",
                f"Slurm {role} (install as {options.install_dir}/dlrig-{name})",
                executable=True,
            )
        )
    files.append(
        GeneratedFile(
            "slurm-power-save.conf",
            render(
                "power/slurm-power-save.conf.j2",
                header=head,
                suspend_program=f"{options.install_dir}/dlrig-slurm-suspend.sh",
                resume_program=f"{options.install_dir}/dlrig-slurm-resume.sh",
                suspend_time=options.suspend_time_s,
                suspend_timeout=120,
                resume_timeout=600,
                suspend_rate=10,
                resume_rate=10,
                exclude_nodes=options.exclude_nodes,
            ),
            "conf",
            "slurm.conf lines for power saving",
        )
    )
    decisions.append(
        Decision(
            "Slurm power saving",
            f"SuspendTime={options.suspend_time_s} s, ResumeTimeout=600 s",
            "a GPU node's BIOS, driver load and slurmd start take minutes: a short ResumeTimeout "
            "marks resuming nodes DOWN",
            "https://slurm.schedmd.com/power_save.html (via shared/docs/notes/provision_hardware.md §4.1)",
        )
    )
    return Bundle.of("power", facts, files, decisions, warnings)
