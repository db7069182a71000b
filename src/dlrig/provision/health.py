"""`dlrig provision health`: dlrig's node health check where schedulers listen.

For Slurm: the slurm.conf lines (HealthCheckProgram, Prolog, Epilog) and the three scripts they
run. For Kubernetes: node-problem-detector's custom plugin config (dlrig health --format npd:
exit 0 OK, 1 NonOK, 2 Unknown; one line of at most 80 characters) and the ConfigMap and
DaemonSet that run it on every GPU node.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace

from dlrig.errors import InputError
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render

# node-problem-detector: kubernetes/node-problem-detector pkg/custompluginmonitor/types/config.go
NPD_MAX_OUTPUT = 80


@dataclass(frozen=True)
class HealthOptions:
    dlrig: str = "/usr/local/bin/dlrig"
    install_dir: str = "/etc/slurm"
    interval_s: int = 300
    budget_s: int = 45
    expect_gpus: int | None = None
    state: str = "/var/lib/dlrig/health.json"
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    image: str = "dlrig-npd:latest"
    namespace: str = "kube-system"
    name: str = "dlrig-health"
    condition: str = "GPUProblem"
    runtime_class: str | None = "nvidia"
    node_selector: str = "nvidia.com/gpu.present=true"


def plugin_config(options: HealthOptions) -> dict[str, object]:
    """node-problem-detector's custom plugin monitor config for dlrig's check."""
    timeout = f"{options.budget_s + 10}s"
    return {
        "plugin": "custom",
        "pluginConfig": {
            "invoke_interval": f"{options.interval_s}s",
            "timeout": timeout,
            "max_output_length": NPD_MAX_OUTPUT,
            "concurrency": 1,
        },
        "source": options.name,
        "metricsReporting": True,
        "conditions": [
            {
                "type": options.condition,
                "reason": "GPUHealthy",
                "message": "dlrig health found no fault that drains the node",
            }
        ],
        "rules": [
            {
                "type": "permanent",
                "condition": options.condition,
                "reason": "GPUHardwareFault",
                "path": options.dlrig,
                "args": [
                    "health",
                    "--format",
                    "npd",
                    "--budget",
                    str(options.budget_s),
                    "--state",
                    options.state,
                    *(["--expect-gpus", str(options.expect_gpus)] if options.expect_gpus else []),
                ],
                "timeout": timeout,
            }
        ],
    }


def _check(options: HealthOptions) -> tuple[str, str]:
    if not 10 <= options.interval_s <= 86400:
        raise InputError(
            f"--interval {options.interval_s}: out of range", fix="give 10 to 86400 seconds"
        )
    if not 5 <= options.budget_s <= 50:
        # Slurm kills HealthCheckProgram at 60 s: the budget stays well below.
        raise InputError(f"--budget {options.budget_s}: out of range", fix="give 5 to 50 seconds")
    for label, value in (("--namespace", options.namespace), ("--name", options.name)):
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value) or len(value) > 63:
            raise InputError(
                f"{label} {value}: not a Kubernetes name",
                fix="use lower-case letters, digits and '-'",
            )
    for label, value in (("--dlrig", options.dlrig), ("--install-dir", options.install_dir)):
        if not value.startswith("/"):
            raise InputError(f"{label} {value}: not an absolute path", fix="give a path from /")
    key, sep, value = options.node_selector.partition("=")
    if not sep or not key:
        raise InputError(
            f"--node-selector {options.node_selector}: not KEY=VALUE",
            fix="e.g. nvidia.com/gpu.present=true",
        )
    return key, value


def generate(facts: Facts, options: HealthOptions | None = None) -> Bundle:
    options = options or HealthOptions()
    if options.expect_gpus is None and facts.gpu_count:
        options = replace(options, expect_gpus=facts.gpu_count)
    key, value = _check(options)
    values = options.__dict__
    script = render("health/check.sh.j2", header=header(facts, "health"), **values)
    files = [
        GeneratedFile(
            "slurm-health.conf",
            render("health/slurm.conf.j2", header=header(facts, "health"), **values),
            "conf",
            "slurm.conf lines: HealthCheckProgram, Prolog and Epilog",
        ),
        GeneratedFile("dlrig-health", script, "shell", "HealthCheckProgram", executable=True),
        GeneratedFile(
            "dlrig-health-prolog",
            script.replace('mode="${1:-periodic}"', 'mode="${1:-prolog}"'),
            "shell",
            "Prolog: the check before each job",
            executable=True,
        ),
        GeneratedFile(
            "dlrig-health-epilog",
            script.replace('mode="${1:-periodic}"', 'mode="${1:-epilog}"'),
            "shell",
            "Epilog: processes and memory left on the GPUs after each job",
            executable=True,
        ),
    ]
    config = json.dumps(plugin_config(options), indent=2)
    files.append(
        GeneratedFile(
            "npd-dlrig-health.json",
            config + "\n",
            "json",
            "node-problem-detector custom plugin config",
        )
    )
    files.append(
        GeneratedFile(
            "npd-dlrig-health.yaml",
            render(
                "health/npd-daemonset.yaml.j2",
                header=header(facts, "health"),
                plugin_config=config,
                node_selector_key=key,
                node_selector_value=value,
                **values,
            ),
            "yaml",
            "ConfigMap and DaemonSet: node-problem-detector running the check on GPU nodes",
        )
    )
    decisions = (
        Decision(
            "what drains",
            "hardware Xids, uncorrectable ECC, pending retirement/remap, a missing GPU, a "
            "driver/library mismatch, a narrow PCIe link under load; after a job, leftovers",
            "application Xids (13, 31, 43) and warnings never drain: they are the job's, not "
            "the node's (NVIDIA's Xid catalogue, knowledge/data/xid.csv)",
        ),
        Decision(
            "budget",
            f"{options.budget_s} s",
            "Slurm kills HealthCheckProgram at 60 s; a hung NVML call makes the answer "
            "'unknown' (the node is drained) within the budget instead",
        ),
        Decision(
            "GPUs expected",
            str(options.expect_gpus) if options.expect_gpus is not None else "not checked",
            "from the facts (--gpus): a GPU that falls off the bus drains the node",
        ),
    )
    return Bundle(target="health", facts=facts, files=tuple(files), decisions=decisions)
