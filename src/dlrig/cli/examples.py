"""An `Example:` block for every command's --help (issue 29): one or more real invocations,
each with what it is for. A test walks the command tree, checks that every command shows one
and that each example's options exist on the command it names, so an option renamed later
cannot leave a stale example behind."""

from __future__ import annotations

import inspect
import weakref

import click

# command path (without "dlrig") -> (invocation, what it is for)
EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "": (
        ("dlrig doctor", "is this machine right?"),
        ("dlrig diagnose train.log", "why did my run crash?"),
        ("dlrig fit llama3-8b --lora 16 --gpu h100", "will it fit, how fast?"),
    ),
    "doctor": (
        ("dlrig doctor", "this machine, readable"),
        ("dlrig doctor --brief", "only what fails or warns"),
        ("dlrig doctor --save snap.json", "keep the snapshot for a report or a bug"),
        ("dlrig doctor --from nvidia-bug-report.log", "judge a machine from its files"),
        ("dlrig doctor --explain driver.torch_cuda", "what a check looks at"),
    ),
    "diagnose": (
        ("dlrig diagnose train.log", "name the cause of a crash"),
        ("dlrig diagnose rank0.log rank1.log --json", "several ranks, for a script"),
        ("dlrig diagnose -- torchrun --nproc-per-node 8 train.py", "run, and diagnose a failure"),
    ),
    "fit": (
        ("dlrig fit resnet50 --gpu a100-80gb", "memory, largest batch, step time"),
        (
            "dlrig fit llama3-8b --qlora 16 --seq-len 2048 --gpu rtx-4090",
            "a QLoRA fine-tune on one card",
        ),
        ("dlrig fit llama3-70b --gpus 8 --strategy fsdp --gpu h100", "sharded across 8 GPUs"),
        ("dlrig fit --list-presets", "the models known by name"),
    ),
    "plan": (
        ("dlrig plan resnet50:epochs=90,every=month --budget 20000", "what to buy or rent"),
        ("dlrig plan check build.yaml", "check a proposed build"),
    ),
    "plan workloads": (
        ("dlrig plan workloads resnet50:epochs=90,every=month --budget 20000", "rank options"),
        ("dlrig plan workloads bert-large:tokens=3.3B,deadline=24h --cloud", "cloud only"),
    ),
    "plan check": (("dlrig plan check build.yaml", "PSU, circuit, lanes, slots, RAM, ..."),),
    "plan cost": (("dlrig plan cost --history history.db --month 2026-11", "a month's cost"),),
    "plan upgrade": (
        ("dlrig plan upgrade --machine snap.json --bench bench/", "what limits this server"),
    ),
    "monitor": (
        ("dlrig monitor", "live view"),
        ("dlrig monitor --once --json", "one sample, for a script"),
        ("dlrig monitor --replay capture.txt", "replay a recorded nvidia-smi capture"),
    ),
    "monitor serve": (("dlrig monitor serve --port 9400", "Prometheus exporter"),),
    "monitor record": (
        ("dlrig monitor record --db history.db", "keep a history (Ctrl-C stops)"),
        ("dlrig monitor record --out capture.txt --duration 60", "a replayable capture"),
    ),
    "monitor report": (("dlrig monitor report history.db --last-hours 24", "the last day"),),
    "monitor assets": (("dlrig monitor assets --out monitoring/", "alert rules, dashboard"),),
    "bench": (
        ("dlrig bench", "every part against what it should do"),
        ("dlrig bench storage --path /data", "the disk that holds the dataset"),
        ("dlrig bench --quick --json", "short runs, for a script"),
    ),
    "accept": (
        ("dlrig accept", "doctor, bench and a burn-in, with verdicts"),
        ("dlrig accept --level long --path /data", "the full run, disk under /data"),
    ),
    "report": (
        ("dlrig report accept-host/accept.json", "one HTML page"),
        ("dlrig report new.json --compare old.json", "what changed first"),
    ),
    "provision": (
        ("dlrig provision host --gpu h100 --os ubuntu-24.04", "driver install script"),
        ("dlrig provision env --torch 2.6", "a Python environment that matches"),
    ),
    "provision host": (
        ("dlrig provision host --out setup/", "for this machine"),
        ("dlrig provision host --gpu h100 --os ubuntu-24.04 --out setup/", "for another one"),
    ),
    "provision env": (("dlrig provision env --torch 2.6 --out env/", "requirements and conda"),),
    "provision docker": (("dlrig provision docker --out docker/", "Dockerfile, run script"),),
    "provision nccl": (("dlrig provision nccl --socket-ifname =eth0", "/etc/nccl.conf"),),
    "provision launch": (
        ("dlrig provision launch train.py --nodes 2 --gpus-per-node 8", "torchrun commands"),
        ("dlrig provision launch train.py --scheduler slurm --nodes 4", "an sbatch script"),
    ),
    "provision power": (("dlrig provision power --power-limit 300", "power-limit units"),),
    "provision monitor-k8s": (
        ("dlrig provision monitor-k8s --out k8s/", "exporter DaemonSet and ServiceMonitor"),
    ),
    "train": (
        ("dlrig train train.py", "run a script that uses dlrig.train"),
        ("dlrig train --gpus 8 train.py", "one process per GPU"),
    ),
    "pack": (
        ("dlrig pack create imagenet/train packed/", "shards for a fast input pipeline"),
        ("dlrig pack verify packed/", "check every sample"),
    ),
    "profile": (
        ("dlrig profile -- python train.py", "where each step's time goes, and the fix"),
        ("dlrig profile rank0.json.gz rank1.json.gz", "read Kineto traces, one per rank"),
        ("dlrig profile compare before/ after/", "what changed between two runs"),
    ),
    "pack create": (("dlrig pack create imagenet/train packed/ --jobs 8", "pack a folder"),),
    "pack verify": (("dlrig pack verify packed/", "re-read and check every shard"),),
    "pack bench": (("dlrig pack bench packed/ --workers 8", "samples/s, packed and loose"),),
}


# Commands already given their examples (a command is imported once, but attach may be
# called again for the same tree).
_ATTACHED: weakref.WeakSet[click.Command] = weakref.WeakSet()


def block(path: str) -> str:
    """The `Example:` text for a command path, kept as written by click (`\\b`)."""
    rows = EXAMPLES.get(path, ())
    if not rows:
        return ""
    width = max(len(command) for command, _ in rows)
    lines = [f"  {command.ljust(width)}  # {purpose}" for command, purpose in rows]
    return "\b\nExample:\n" + "\n".join(lines)


def attach(command: click.Command, path: str = "") -> None:
    """Add the examples to `command` and its subcommands once; help that already shows an
    example of its own (written in the docstring) keeps it."""
    if command not in _ATTACHED:
        text = block(path)
        # click dedents a docstring as a whole: dedent it first, or the unindented block would
        # leave the docstring's own indentation in the output.
        help_text = inspect.cleandoc(command.help or "")
        if text and "Example:" not in help_text:
            command.help = f"{help_text}\n\n{text}" if help_text else text
        _ATTACHED.add(command)
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            attach(sub, f"{path} {name}".strip())
