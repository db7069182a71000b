"""`dlrig provision TARGET`: the files that set a GPU machine up, from its facts."""

from __future__ import annotations

from typing import Any

import click

from dlrig.cli.common import choice_option, integer_option
from dlrig.cli.provision_options import (
    fact_options,
    generate_target,
    lock_option,
    packages_option,
)
from dlrig.errors import InputError
from dlrig.machine.slurm import smallest_node_cpus
from dlrig.provision.docker import DockerOptions
from dlrig.provision.env import EnvOptions
from dlrig.provision.health import HealthOptions
from dlrig.provision.host import HostOptions
from dlrig.provision.k8s import MonitorK8sOptions
from dlrig.provision.launch import LaunchOptions
from dlrig.provision.nccl import NcclOptions
from dlrig.provision.power import PowerOptions

EXIT_CODES = (
    "Exit codes: 0 files generated; 2 bad usage, an unreadable --machine, or facts no stack fits "
    "(the message says which and how to fix it)."
)


@click.group("provision", epilog=EXIT_CODES)
def provision_command() -> None:
    """Generate the files that set a GPU machine up: install script, Python environment,
    Dockerfile, nccl.conf, launch scripts and jobs, power settings, monitoring manifests.

    Facts come from --machine SNAPSHOT, a live probe, or are stated (--gpu, --os, --torch, ...).
    Every file says in its first lines what it was generated from and when."""


@provision_command.command("host", epilog=EXIT_CODES)
@fact_options
@click.option("--cudnn", is_flag=True, help="Also install cuDNN for the --cuda toolkit.")
@click.option("--nccl", is_flag=True, help="Also install NCCL (libnccl2/libnccl-dev).")
@click.option(
    "--no-container-toolkit", is_flag=True, help="Leave out the NVIDIA Container Toolkit."
)
@click.pass_context
def host_command(ctx: click.Context, /, no_container_toolkit: bool, **params: Any) -> None:
    """Install script for the driver (branch and kernel-module flavour from the tables),
    optional CUDA/cuDNN/NCCL, the Container Toolkit and nvidia-persistenced. The script takes
    --dry-run and --root DIR, skips every step whose result exists, and verifies at the end."""
    generate_target(ctx, "host", HostOptions, params, container_toolkit=not no_container_toolkit)


@provision_command.command("env", epilog=EXIT_CODES)
@fact_options
@packages_option("Another package for the environment (repeatable): 'numpy<2', tqdm.")
@click.option("--name", default="train", show_default=True, help="conda environment name.")
@lock_option
@click.option(
    "--cuda-variant",
    metavar="cuXYZ|rocmX.Y|cpu",
    help="Insist on this wheel variant (cu118, rocm6.2, cpu).",
)
@click.option(
    "--framework",
    type=click.Choice(["torch", "tensorflow", "jax"]),
    default="torch",
    show_default=True,
    help="The framework the environment is for: TensorFlow and JAX get their GPU extra "
    "(tensorflow[and-cuda], jax[cuda12|13]) of the newest release that fits the machine.",
)
@click.option(
    "--framework-version", metavar="X.Y.Z", help="Insist on this TensorFlow or JAX release."
)
@click.pass_context
def env_command(ctx: click.Context, /, **params: Any) -> None:
    """Python environment: torch + companions + index from the resolver (or TensorFlow/JAX with
    their CUDA wheels), other packages locked with hashes, and a conda environment.yml."""
    generate_target(ctx, "env", EnvOptions, params)


@provision_command.command("docker", epilog=EXIT_CODES)
@fact_options
@packages_option("Another package for the image (repeatable).")
@lock_option
@choice_option(
    "--flavor",
    choices=("base", "runtime", "devel"),
    default="base",
    help="nvidia/cuda image flavour.",
)
@click.option(
    "--cudnn",
    is_flag=True,
    help="Use a cuDNN image (cudnn8 up to CUDA 12.3, cudnn from 12.4.1; none from CUDA 13).",
)
@click.option(
    "--image",
    "image_name",
    default="dlrig-train:latest",
    show_default=True,
    help="Name of the built image.",
)
@click.option(
    "--user", default="train", show_default=True, help="The non-root user the container runs as."
)
@click.pass_context
def docker_command(ctx: click.Context, /, **params: Any) -> None:
    """Dockerfile on an nvidia/cuda tag that exists, docker-run.sh and compose.yaml."""
    generate_target(ctx, "docker", DockerOptions, params)


@provision_command.command("nccl", epilog=EXIT_CODES)
@fact_options
@click.option(
    "--socket-ifname", metavar="SPEC", help="NCCL_SOCKET_IFNAME (e.g. =eth0, ib, ^docker)."
)
@click.option("--ib-hca", metavar="SPEC", help="NCCL_IB_HCA (e.g. =mlx5_0,mlx5_1).")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Another NCCL setting (debugging ones are refused).",
)
@click.option(
    "--no-keep", is_flag=True, help="Do not carry over the snapshot's nccl.conf settings."
)
@click.pass_context
def nccl_command(
    ctx: click.Context, /, settings: tuple[str, ...], no_keep: bool, **params: Any
) -> None:
    """/etc/nccl.conf from the machine's network: socket interface, IB HCAs; debugging
    variables NCCL's documentation says not to keep are refused."""
    pairs = []
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep or not key:
            raise InputError(f"--set {setting}: not KEY=VALUE", fix="e.g. --set NCCL_IB_TIMEOUT=22")
        pairs.append((key.strip(), value.strip()))
    generate_target(
        ctx, "nccl", NcclOptions, params, settings=tuple(pairs), keep_existing=not no_keep
    )


@provision_command.command(
    "launch",
    epilog=EXIT_CODES,
    # As `dlrig train`: options dlrig does not know go to the script (`train.py --lr 3e-4`).
    context_settings={"allow_interspersed_args": True, "ignore_unknown_options": True},
)
@click.argument("script")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@fact_options
@integer_option("--nodes", min=1, default=1, help="Machines.")
@click.option(
    "--gpus-per-node",
    type=int,
    help="GPUs per machine, one process each (default: the facts' GPU count, or 1).",
)
@choice_option("--scheduler", choices=("torchrun", "slurm", "kubeflow"), default="torchrun")
@click.option("--job-name", help="Job name (default: from the script's name).")
@click.option(
    "--torchrun",
    default="torchrun",
    show_default=True,
    help="torchrun command on the nodes.",
)
@integer_option("--rdzv-port", min=1, max=65535, default=29500)
@integer_option("--cpus-per-task", min=1, help="Slurm CPUs per node task.")
@click.option(
    "--time", "time_limit", default="01:00:00", show_default=True, help="Slurm time limit."
)
@click.option("--partition", help="Slurm partition.")
@click.option(
    "--image", default="dlrig-train:latest", show_default=True, help="Container image (kubeflow)."
)
@click.option("--namespace", help="Kubernetes namespace (kubeflow).")
@click.option(
    "--shm-size", default="16Gi", show_default=True, help="/dev/shm size for the pods (kubeflow)."
)
@click.option(
    "--memory",
    metavar="SIZE",
    help="Pod memory limit and request, e.g. 400Gi (kubeflow; default: a request from the "
    "snapshot's RAM, no limit).",
)
@click.pass_context
def launch_command(ctx: click.Context, /, **params: Any) -> None:
    """How to start SCRIPT: a torchrun command, a Slurm sbatch script, or Kubeflow PyTorchJob
    and TrainJob manifests. Arguments after SCRIPT that are not dlrig options go to the script
    (`train.py --lr 3e-4`); put the script's options after `--` when dlrig has one of the same
    name."""
    node_cpus = None
    if params.get("scheduler") == "slurm" and params.get("cpus_per_task") is None:
        # Generated where it is submitted, as a rule: ask the controller what its nodes have.
        node_cpus = smallest_node_cpus(params.get("partition"))
    generate_target(
        ctx, "launch", LaunchOptions, params, probe_by_default=False, node_cpus=node_cpus
    )


@provision_command.command("power", epilog=EXIT_CODES)
@fact_options
@click.option(
    "--power-limit",
    "power_limit_watts",
    type=int,
    metavar="WATTS",
    help="GPU power limit to apply at boot.",
)
@integer_option(
    "--gpu-index",
    "gpu_indices",
    min=0,
    multiple=True,
    metavar="N",
    help="Limit only this GPU (repeatable; default all).",
)
@click.option(
    "--sleep-at", default="22:00", show_default=True, help="Shut nodes down at this time (IPMI)."
)
@click.option(
    "--wake-at", default="07:00", show_default=True, help="Power nodes on at this time (IPMI)."
)
@click.option(
    "--node",
    "nodes",
    multiple=True,
    metavar="NAME",
    help="A node for the IPMI schedule (repeatable; default: the probed or snapshot host, none with stated facts).",
)
@click.option(
    "--bmc-suffix", default="-bmc", show_default=True, help="BMC host name = node name + this."
)
@click.option("--ipmi-user", default="admin", show_default=True)
@click.option(
    "--slurm-user",
    default="slurm",
    show_default=True,
    help="SlurmUser of slurm.conf: it runs the power-saving scripts and must read the IPMI password.",
)
@integer_option(
    "--suspend-time", "suspend_time_s", min=60, default=1800, help="Slurm SuspendTime (s)."
)
@click.pass_context
def power_command(ctx: click.Context, /, **params: Any) -> None:
    """Persistence daemon and power-limit units, IPMI night sleep/wake timers, and Slurm
    power saving (SuspendProgram/ResumeProgram)."""
    generate_target(ctx, "power", PowerOptions, params)


@provision_command.command("monitor-k8s", epilog=EXIT_CODES)
@fact_options
@click.option(
    "--image",
    default="dlrig:latest",
    show_default=True,
    help="Image with dlrig[monitor] installed.",
)
@click.option("--namespace", default="monitoring", show_default=True)
@integer_option("--port", min=1, max=65535, default=9480)
@click.option("--interval", default="15s", show_default=True, help="Scrape interval.")
@click.option("--dcgm-names", is_flag=True, help="Serve dcgm-exporter's metric names.")
@click.pass_context
def monitor_k8s_command(ctx: click.Context, /, **params: Any) -> None:
    """DaemonSet, Service and ServiceMonitor running `dlrig monitor serve` on GPU nodes."""
    generate_target(ctx, "monitor-k8s", MonitorK8sOptions, params, probe_by_default=False)


@provision_command.command("health", epilog=EXIT_CODES)
@fact_options
@click.option(
    "--dlrig",
    default="/usr/local/bin/dlrig",
    show_default=True,
    help="Where dlrig is installed on the nodes (or in the NPD image).",
)
@click.option(
    "--install-dir",
    default="/etc/slurm",
    show_default=True,
    help="Where the three Slurm scripts go on each node.",
)
@integer_option(
    "--interval", "interval_s", min=10, max=86400, default=300, help="Seconds between checks."
)
@integer_option(
    "--budget", "budget_s", min=5, max=50, default=45, help="Seconds one check may take."
)
@click.option("--image", default="dlrig-npd:latest", show_default=True, help="NPD + dlrig image.")
@click.option("--namespace", default="kube-system", show_default=True)
@click.pass_context
def health_command(ctx: click.Context, /, **params: Any) -> None:
    """Slurm's HealthCheckProgram, Prolog and Epilog running `dlrig health --slurm`, and
    node-problem-detector's plugin config and DaemonSet running `dlrig health --format npd`.

    \b
    Example:
      dlrig provision health --gpu h100 --gpus 8 --out health/
    """
    generate_target(ctx, "health", HealthOptions, params, probe_by_default=False)
