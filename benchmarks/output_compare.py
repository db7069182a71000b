"""Every `--help` page and a set of `--json` and text outputs on the recorded fixtures, from two
checkouts, compared after masking what changes between any two runs (timestamps, durations,
float noise beyond 7 significant digits, the run's own folder). A refactor that must keep the
CLI's outputs checks itself with it (issue 28):

    git worktree add /tmp/base <commit>
    python benchmarks/output_compare.py /tmp/base /work/main [--out /tmp/outputs]

Each command runs with the tree's `src` first on PYTHONPATH, from a scratch folder (accept
writes its run folder into the working directory). The last line is a key=value summary.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VOLATILE = {
    "timestamp_unix",
    "duration_seconds",
    "seconds",
    "started_at",
    "finished_at",
    "generated_at",
    "out_dir",
    "collected_at",
    "files",
    "path",
    "label",
}
HELP = """
import json, click
from click.testing import CliRunner
from dlrig.cli.main import cli
pages = {}
def walk(command, path):
    pages[" ".join(path) or "dlrig"] = CliRunner().invoke(
        cli, [*path, "--help"], terminal_width=100).output
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            walk(command.get_command(ctx, name), [*path, name])
walk(cli, [])
print(json.dumps(pages))
"""


def commands(tests: Path) -> list[list[str]]:
    nvsmi, kineto = tests / "fixtures" / "nvidia-smi", tests / "corpus" / "kineto"
    recorded = [
        *nvsmi.glob("*.xml"),
        *nvsmi.glob("*capture*.txt"),
        *nvsmi.glob("table-*.txt"),
        *(tests / "fixtures" / "amd").glob("*.json"),
        *(tests / "fixtures" / "gaudi").glob("*"),
    ]
    runs: list[list[str]] = []
    for f in sorted(recorded):
        runs += [
            ["doctor", "--from", str(f), "--json"],
            ["doctor", "--from", str(f)],
            ["monitor", "--once", "--json", "--replay", str(f)],
        ]
    logs = sorted(p for p in (tests / "corpus" / "logs").glob("*/*") if p.is_file())[:40]
    for log in logs:
        runs += [["diagnose", "--json", str(log)], ["diagnose", str(log)]]
    for trace in sorted(kineto.glob("*.json.gz")):
        runs += [["profile", "--json", str(trace)], ["profile", str(trace)]]
    for build in sorted((tests / "data" / "builds").glob("*.yaml")):
        runs += [["plan", "check", "--json", str(build)], ["plan", "check", str(build)]]
    h200 = str(nvsmi / "h200-capture-idle-load.txt")
    return [
        *runs,
        ["plan", "resnet50", "--json"],
        ["plan", "resnet50"],
        ["plan", "upgrade", "--machine", str(nvsmi / "tesla-t4-2procs-q-x.xml"), "--json"],
        ["accept", "--replay", h200, "--json"],
        ["accept", "--replay", h200],
        ["fit", "llama3-8b", "--lora", "16", "--gpu", "h100", "--json"],
        ["fit", "resnet50", "--gpu", "a100", "--json"],
        ["health", "--from", str(nvsmi / "dmesg-xid119-gsp-rpc-timeout.log"), "--json"],
    ]


def _masked(value: object) -> object:
    if isinstance(value, dict):
        return {k: "<X>" if k in VOLATILE else _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return float(f"{value:.7g}") if isinstance(value, float) else value


def normalised(text: str) -> str:
    try:
        return json.dumps(_masked(json.loads(text)), indent=1)
    except ValueError:
        text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\+00:00|Z)?", "<T>", text)
        text = re.sub(r"accept-[\w.-]+-\d+T\d+Z", "<D>", text)
        text = re.sub(r"\[\s*\d+\.\d s\]", "[t]", text)
        return re.sub(r"\b\d+\.\d+ ?(s|ms)\b", "<dur>", text)


def outputs(tree: Path, runs: list[list[str]]) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree / "src"),
        "COLUMNS": "100",
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    found: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        pages = subprocess.run(
            [sys.executable, "-c", HELP],
            env=env,
            cwd=scratch,
            text=True,
            capture_output=True,
            check=True,
        ).stdout
        found.update({f"help {k}": v for k, v in json.loads(pages).items()})
        for n, argv in enumerate(runs, 1):
            done = subprocess.run(
                [sys.executable, "-m", "dlrig", *argv],
                env=env,
                cwd=scratch,
                text=True,
                capture_output=True,
                timeout=600,
            )
            key = " ".join(a.replace(str(ROOT), "") for a in argv)
            found[f"{key} (stdout)"] = normalised(done.stdout)
            found[f"{key} (stderr)"] = normalised(done.stderr) + f"\nrc={done.returncode}"
            print(f"[{n}/{len(runs)}] {tree.name}: dlrig {argv[0]}", file=sys.stderr)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--out", type=Path, help="write the unified diff here")
    args = parser.parse_args()
    runs = commands(ROOT / "tests")
    before, after = outputs(args.before, runs), outputs(args.after, runs)
    changed = [k for k in before if before[k] != after.get(k)]
    diff = "".join(
        "".join(
            difflib.unified_diff(
                before[k].splitlines(True),
                after.get(k, "").splitlines(True),
                f"before: {k}",
                f"after: {k}",
                n=1,
            )
        )
        for k in changed
    )
    if args.out:
        args.out.write_text(diff)
    print(diff[:20000])
    pages = sum(1 for k in before if k.startswith("help "))
    print(f"outputs={len(before)} help_pages={pages} commands={len(runs)} changed={len(changed)}")


if __name__ == "__main__":
    main()
