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
    node_cpus: int | None = None  # the partition's smallest node (sinfo), to cap the request
    time_limit: str = "01:00:00"
    partition: str | None = None
    image: str = "pytorch/pytorch:latest"
    namespace: str | None = None
    shm_size: str = "16Gi"
    memory: str | None = None  # a pod memory limit (= request); None: derived request, no limit


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


def generate(facts: Facts, options: LaunchOptions | None = None) -> Bundle:
    if options is None:
        raise InputError("launch: no training script given", fix="e.g. --script train.py")
    if options.scheduler not in SCHEDULERS:
        raise InputError(
            f"--scheduler {options.scheduler}: unknown", fix="use one of: " + ", ".join(SCHEDULERS)
        )
    if options.nodes < 1:
        raise InputError(
            f"--nodes {options.nodes}: must be at least 1", fix="give --nodes 1 or more"
        )
    if options.gpus_per_node is not None and options.gpus_per_node < 1:
        raise InputError(
            f"--gpus-per-node {options.gpus_per_node}: a launch runs one process per GPU, so it "
            "needs at least 1",
            fix="give --gpus-per-node 1 or more (leave it out to use the facts' GPU count)",
        )
    gpus = options.gpus_per_node if options.gpus_per_node is not None else (facts.gpu_count or 1)
    nproc = max(gpus, 1)  # a machine whose facts show no GPU still runs one (gloo) process
    warnings: list[str] = []
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
        slurm_file, cpus_decision = _slurm(facts, options, gpus, nproc)
        files = [slurm_file]
        decisions.append(cpus_decision)
        known = options.cpus_per_task is not None or options.node_cpus is not None
        if not known and not (facts.machine and facts.machine.cpu and facts.machine.cpu.threads):
            warnings.append(
                f"--cpus-per-task={cpus_decision.choice} is a guess (no sinfo here, no node facts):"
                " a job asking for more CPUs than a node has never starts; check `sinfo -o "
                "'%n %c'` and give --cpus-per-task"
            )
        decisions.append(
            Decision(
                "rendezvous",
                "c10d at the head node's address, port " + str(options.rdzv_port),
                "head node = first of `scontrol show hostnames $SLURM_JOB_NODELIST`; its address is "
                "the NodeAddr Slurm itself reaches it at (`scontrol show node HEAD`; the node name "
                "when unset), not `hostname --ip-address`, which gives 127.0.1.1 where /etc/hosts "
                "maps the host name there (Debian/Ubuntu); --nnodes=$SLURM_NNODES",
                "pytorch/examples:distributed/ddp-tutorial-series/slurm/sbatch_run.sh (via "
                "shared/docs/notes/provision_hardware.md §1.7)",
            )
        )
    else:
        files, memory_decision = _kubeflow(facts, options, gpus, nproc)
        decisions.append(memory_decision)
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
    return Bundle.of("launch", facts, files, decisions, warnings)


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


def _slurm(
    facts: Facts, options: LaunchOptions, gpus: int, nproc: int
) -> tuple[GeneratedFile, Decision]:
    cpus = options.cpus_per_task
    threads = facts.machine.cpu.threads if facts.machine and facts.machine.cpu else None
    if cpus is not None:
        why = "stated with --cpus-per-task"
    elif threads:
        cpus = max(1, min(threads, 8 * nproc))
        why = (
            f"the node's {threads} logical CPUs (snapshot), at most 8 per process: torchrun's "
            "ranks and their DataLoader workers share them"
        )
    else:
        cpus = 4 * nproc
        why = (
            f"4 per process ({nproc} per node): the node's CPU count is not in the facts (give "
            "--machine SNAPSHOT or --cpus-per-task); DataLoader workers need cores beside each rank"
        )
    if options.cpus_per_task is None and options.node_cpus is not None and cpus > options.node_cpus:
        # A request no node can meet is never scheduled, and Slurm says only "Resources".
        cpus = options.node_cpus
        why += f"; capped at {cpus}: the partition's smallest node has {cpus} CPUs (sinfo)"
    why += (
        "; srun gets them too (--cpus-per-task=$SLURM_CPUS_PER_TASK and SRUN_CPUS_PER_TASK): "
        "since Slurm 22.05 srun no longer inherits sbatch's --cpus-per-task, and a step without "
        "it runs every rank on one CPU where tasks are bound"
    )
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
    decision = Decision(
        "CPUs per node task",
        str(cpus),
        why,
        "Slurm 22.05 release notes ('srun will no longer read in SLURM_CPUS_PER_TASK ... set the "
        "new SRUN_CPUS_PER_TASK environment variable'), via the QA report; reframe-hpc/reframe#2655",
    )
    return (
        GeneratedFile(
            "train.sbatch", text, "shell", "Slurm batch job (sbatch train.sbatch)", executable=True
        ),
        decision,
    )


_QUANTITY = re.compile(r"\d+(\.\d+)?(Ki|Mi|Gi|Ti|K|M|G|T)?")


def _memory(facts: Facts, options: LaunchOptions, gpus: int) -> tuple[dict[str, str], Decision]:
    """The pod's memory: a stated limit, or a request from the node's RAM and no limit."""
    if options.memory is not None:
        if not _QUANTITY.fullmatch(options.memory):
            raise InputError(
                f"--memory {options.memory}: not a Kubernetes quantity", fix="give e.g. 400Gi"
            )
        return {"requests": options.memory, "limits": options.memory}, Decision(
            "pod memory",
            f"request = limit = {options.memory}",
            "stated with --memory; the /dev/shm emptyDir (medium: Memory) counts against the "
            f"limit, so {options.shm_size} of it is shared memory",
        )
    machine = facts.machine
    total = machine.memory.total_bytes if machine and machine.memory else None
    node_gpus = len(machine.gpus) if machine and machine.gpus else None
    if total:
        share = min(1.0, gpus / node_gpus) if node_gpus else 1.0
        gib = max(1, int(total * share * 0.75 / 1024**3))
        return {"requests": f"{gib}Gi"}, Decision(
            "pod memory",
            f"request {gib}Gi, no limit",
            f"three quarters of the node's {total / 1024**3:.0f} GiB RAM"
            + (f" x {gpus}/{node_gpus} GPUs" if node_gpus and share < 1 else "")
            + " (snapshot), so the pod lands on a node that has it while the kubelet's reserve "
            "stays free; no limit, because a limit OOM-kills the pod when ranks, DataLoader "
            "workers, checkpoint saving and the /dev/shm emptyDir (which counts against it) add "
            "up; give --memory SIZE for a hard limit",
        )
    return {}, Decision(
        "pod memory",
        "no request, no limit",
        "the node's RAM is not in the facts (give --machine SNAPSHOT for a request sized from "
        "it, or --memory SIZE for a limit); without a limit the pod may use the node's memory, "
        "including the /dev/shm emptyDir",
    )


def _kubeflow(
    facts: Facts, options: LaunchOptions, gpus: int, nproc: int
) -> tuple[list[GeneratedFile], Decision]:
    script = " ".join(shlex.quote(w) for w in (options.script, *options.script_args))
    # The operator injects PET_* and MASTER_* into the pod; torchrun reads them here.
    command = (
        'exec torchrun --nnodes="${PET_NNODES}" --nproc-per-node="${PET_NPROC_PER_NODE}" '
        '--node-rank="${PET_NODE_RANK}" --master-addr="${MASTER_ADDR}" '
        f'--master-port="${{MASTER_PORT}}" {script}'
    )
    memory, memory_decision = _memory(facts, options, gpus)
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
        "memory": memory,
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
    ], memory_decision
