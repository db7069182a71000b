"""`dlrig provision launch SCRIPT`: the command or job that starts distributed training.

- torchrun: one machine, `--standalone`, one process per GPU;
- slurm: an sbatch script, one task per node, rendezvous from $SLURM_* and the head node's
  address asked of the head node itself (never `localhost`, never a fixed --nnodes);
- kubeflow: a training-operator v1 PyTorchJob and a Trainer v2 TrainJob, GPU limits, /dev/shm
  as a memory-backed emptyDir, and an explicit process count (the WORLD_SIZE pitfall).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render

SCHEDULERS = ("torchrun", "slurm", "kubeflow")


@dataclass(frozen=True)
class LaunchOptions:
    script: str
    script_args: tuple[str, ...] = ()
    nodes: int = 1
    gpus_per_node: int | None = None  # None: the GPUs in the facts (or 1)
    scheduler: str = "torchrun"
    job_name: str | None = None
    torchrun: str = "torchrun"
    rdzv_port: int = 29500
    cpus_per_task: int | None = None
    time_limit: str = "01:00:00"
    partition: str | None = None
    image: str = "pytorch/pytorch:latest"
    namespace: str | None = None
    shm_size: str = "16Gi"
    memory_limit: str = "64Gi"


def _job_name(options: LaunchOptions) -> str:
    if options.job_name:
        name = options.job_name
    else:
        stem = options.script.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        name = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-") or "train"
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or len(name) > 63:
        raise InputError(
            f"--job-name {name}: not a valid job name",
            fix="use lower-case letters, digits and '-', at most 63 characters",
        )
    return name


def generate(facts: Facts, options: LaunchOptions | None = None, **kwargs: object) -> Bundle:
    options = options or LaunchOptions(**kwargs)  # type: ignore[arg-type]
    if options.scheduler not in SCHEDULERS:
        raise InputError(
            f"--scheduler {options.scheduler}: unknown", fix="use one of: " + ", ".join(SCHEDULERS)
        )
    if options.nodes < 1:
        raise InputError(
            f"--nodes {options.nodes}: must be at least 1", fix="give --nodes 1 or more"
        )
    gpus = options.gpus_per_node if options.gpus_per_node is not None else (facts.gpu_count or 1)
    if gpus < 0:
        raise InputError(
            f"--gpus-per-node {gpus}: must be 0 or more", fix="give --gpus-per-node 0 for CPU"
        )
    nproc = max(gpus, 1)  # a CPU-only node still runs one (gloo) process
    decisions = [
        Decision(
            "processes per node",
            str(nproc),
            f"one per GPU ({gpus} GPU(s) per node)" if gpus else "no GPUs: one CPU (gloo) process",
        )
    ]
    if options.scheduler == "torchrun":
        if options.nodes != 1:
            raise InputError(
                f"--scheduler torchrun --nodes {options.nodes}: the torchrun target is one machine",
                fix="use --scheduler slurm or kubeflow for several nodes",
            )
        files = [_torchrun(facts, options, nproc)]
    elif options.scheduler == "slurm":
        files = [_slurm(facts, options, gpus, nproc)]
        decisions.append(
            Decision(
                "rendezvous",
                "c10d at the head node's address, port " + str(options.rdzv_port),
                "head node = first of `scontrol show hostnames $SLURM_JOB_NODELIST`, its address "
                "from `srun -w HEAD hostname --ip-address`; --nnodes=$SLURM_NNODES",
                "pytorch/examples:distributed/ddp-tutorial-series/slurm/sbatch_run.sh (via "
                "shared/docs/notes/provision_hardware.md §1.7)",
            )
        )
    else:
        files = _kubeflow(facts, options, gpus, nproc)
        decisions.append(
            Decision(
                "process count",
                f'nprocPerNode: "{nproc}"',
                "explicit, so the operator's WORLD_SIZE is replicas x processes (with 'auto' it "
                "is not meaningful: kubeflow/pytorch-operator#331); Worker omitted for one node "
                "(replicas: 0 still makes a pod: training-operator#1709)",
                "kubeflow/training-operator release-1.9 pkg/controller.v1/pytorch/envvar.go (via "
                "shared/docs/notes/provision_hardware.md §1.6)",
            )
        )
    return Bundle(target="launch", facts=facts, files=tuple(files), decisions=tuple(decisions))


def _torchrun(facts: Facts, options: LaunchOptions, nproc: int) -> GeneratedFile:
    text = render(
        "launch/torchrun.sh.j2",
        header=header(facts, "launch"),
        torchrun=shlex.quote(options.torchrun),
        nproc=nproc,
        gpus_per_node=nproc,
        script=options.script,
        script_args=options.script_args,
    )
    return GeneratedFile("launch.sh", text, "shell", "torchrun on this machine", executable=True)


def _slurm(facts: Facts, options: LaunchOptions, gpus: int, nproc: int) -> GeneratedFile:
    cpus = options.cpus_per_task
    if cpus is None:
        cores = facts.machine.cpu.threads if facts.machine and facts.machine.cpu else None
        cpus = max(1, min(cores or 4 * nproc, 8 * nproc))
    if not re.fullmatch(r"(\d+-)?\d+(:\d{2}){0,2}", options.time_limit):
        raise InputError(
            f"--time {options.time_limit}: not a Slurm time limit",
            fix="give e.g. 01:00:00 or 2-00:00:00",
        )
    text = render(
        "launch/slurm.sbatch.j2",
        header=header(facts, "launch"),
        job_name=_job_name(options),
        nodes=options.nodes,
        gpus_per_node=gpus,
        cpus_per_task=cpus,
        time_limit=options.time_limit,
        partition=options.partition,
        rdzv_port=options.rdzv_port,
        torchrun=shlex.quote(options.torchrun),
        nproc=nproc,
        script=options.script,
        script_args=options.script_args,
    )
    return GeneratedFile(
        "train.sbatch", text, "shell", "Slurm batch job (sbatch train.sbatch)", executable=True
    )


def _kubeflow(facts: Facts, options: LaunchOptions, gpus: int, nproc: int) -> list[GeneratedFile]:
    script = " ".join(shlex.quote(w) for w in (options.script, *options.script_args))
    # The operator injects PET_* and MASTER_* into the pod; torchrun reads them here.
    command = (
        'exec torchrun --nnodes="${PET_NNODES}" --nproc-per-node="${PET_NPROC_PER_NODE}" '
        '--node-rank="${PET_NODE_RANK}" --master-addr="${MASTER_ADDR}" '
        f'--master-port="${{MASTER_PORT}}" {script}'
    )
    roles = [("Master", 1)]
    if options.nodes > 1:
        roles.append(("Worker", options.nodes - 1))
    common = {
        "header": header(facts, "launch"),
        "job_name": _job_name(options),
        "namespace": options.namespace,
        "image": options.image,
        "gpus_per_node": gpus,
        "nproc": nproc,
        "nodes": options.nodes,
        "shm_size": options.shm_size,
        "memory_limit": options.memory_limit,
    }
    pytorchjob = render("launch/pytorchjob.yaml.j2", roles=roles, command=command, **common)
    trainjob = render(
        "launch/trainjob.yaml.j2",
        trainjob_command=["torchrun", options.script, *options.script_args],
        **common,
    )
    return [
        GeneratedFile(
            "pytorchjob.yaml", pytorchjob, "yaml", "Kubeflow training-operator v1 PyTorchJob"
        ),
        GeneratedFile("trainjob.yaml", trainjob, "yaml", "Kubeflow Trainer v2 TrainJob"),
    ]
