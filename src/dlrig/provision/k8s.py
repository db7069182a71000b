"""`dlrig provision monitor-k8s`: `dlrig monitor serve` on every GPU node of a cluster.

A DaemonSet scheduled on GPU nodes (the GPU feature-discovery label), NVML reached through the
NVIDIA runtime with NVIDIA_VISIBLE_DEVICES=all and no `nvidia.com/gpu` request (as
dcgm-exporter does, so monitoring takes no GPU from a job), a headless Service and a
Prometheus Operator ServiceMonitor.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from dlrig.errors import InputError
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render


@dataclass(frozen=True)
class MonitorK8sOptions:
    image: str = "dlrig:latest"
    namespace: str = "monitoring"
    name: str = "dlrig-monitor"
    port: int = 9480
    interval: str = "15s"
    dcgm_names: bool = False
    runtime_class: str | None = "nvidia"
    node_selector: str = "nvidia.com/gpu.present=true"


def generate(facts: Facts, options: MonitorK8sOptions | None = None) -> Bundle:
    options = options or MonitorK8sOptions()
    for label, value in (("--namespace", options.namespace), ("--name", options.name)):
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", value) or len(value) > 63:
            raise InputError(
                f"{label} {value}: not a Kubernetes name",
                fix="use lower-case letters, digits and '-'",
            )
    if not 1 <= options.port <= 65535:
        raise InputError(f"--port {options.port}: not a port", fix="give 1-65535")
    if not re.fullmatch(r"\d+(ms|s|m|h)", options.interval):
        raise InputError(
            f"--interval {options.interval}: not a duration", fix="give e.g. 15s or 1m"
        )
    key, sep, value = options.node_selector.partition("=")
    if not sep or not key:
        raise InputError(
            f"--node-selector {options.node_selector}: not KEY=VALUE",
            fix="e.g. nvidia.com/gpu.present=true",
        )
    # The template's variables are the options' own fields, and the selector split in two.
    text = render(
        "k8s/monitor.yaml.j2",
        header=header(facts, "monitor-k8s"),
        node_selector_key=key,
        node_selector_value=value,
        **asdict(options),
    )
    decisions = (
        Decision(
            "GPU access",
            "NVIDIA_VISIBLE_DEVICES=all, runtimeClassName "
            + (options.runtime_class or "(cluster default)"),
            "monitoring reads every GPU without requesting one: a nvidia.com/gpu request would take GPUs from jobs",
        ),
        Decision(
            "host PID and network",
            "hostPID: true, hostNetwork: true",
            "NVML names GPU processes by host PID: only in the node's PID namespace does "
            "/proc/<pid>/cgroup name their container and Kubernetes pod (the pod's /proc is then "
            "the node's process table, so no host /proc mount is needed); hostNetwork gives the "
            "node's network readings. Security cost: the pod sees every process on the node and "
            "listens on the node's addresses outside NetworkPolicies; it keeps no capabilities, "
            "no privilege escalation and a read-only root filesystem (as dcgm-exporter's and "
            "node-exporter's DaemonSets use host namespaces)",
        ),
        Decision(
            "node selection",
            options.node_selector,
            "the label NVIDIA's GPU feature discovery sets on GPU nodes",
        ),
    )
    return Bundle(
        target="monitor-k8s",
        facts=facts,
        files=(
            GeneratedFile(
                "dlrig-monitor.yaml", text, "yaml", "DaemonSet, Service and ServiceMonitor"
            ),
        ),
        decisions=decisions,
    )
