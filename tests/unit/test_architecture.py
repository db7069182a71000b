"""The layers of docs/architecture.md hold (lint-imports checks them in `make lint`), and import
cycles only shrink: the ones left are listed here, and a new one fails this test."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib

import grimp

from tests.conftest import ROOT

# Cycles left, each a group of modules that import each other (function-level imports count;
# TYPE_CHECKING ones do not). None are left: a new one fails this test.
KNOWN_CYCLES: set[frozenset[str]] = set()
# Function-level imports of dlrig's own modules: only where one keeps torch, numpy or another
# optional extra out of a module that must import without it, or keeps `dlrig.train` (imported
# in the user's training process) and accept's load workers (one per hardware thread) to what
# they use, or keeps diagnose's start-up off the resolver; each says so in a `# lazy:` comment
# on its line. The count may only go down (232 before issue 28's last pass, 254 before it).
FUNCTION_LEVEL_IMPORTS_AT_MOST = 17


def _cycles() -> set[frozenset[str]]:
    graph = grimp.build_graph("dlrig", exclude_type_checking_imports=True)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    counter = [0]

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph.find_modules_directly_imported_by(node):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.add(frozenset(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_beyond_the_known_ones():
    cycles = _cycles()
    assert cycles - KNOWN_CYCLES == set(), "a new import cycle"
    assert KNOWN_CYCLES - cycles == set(), "a known cycle is gone: take it off KNOWN_CYCLES"


class _Finder(ast.NodeVisitor):
    """Imports of dlrig modules inside a function (at any depth): (line number, statement)."""

    def __init__(self) -> None:
        self.depth = 0
        self.found: list[ast.Import | ast.ImportFrom] = []

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if self.depth and (node.module or "").startswith("dlrig"):
            self.found.append(node)

    def visit_Import(self, node: ast.Import) -> None:
        if self.depth and any(alias.name.startswith("dlrig") for alias in node.names):
            self.found.append(node)


def _function_level_imports() -> list[tuple[str, int, str]]:
    """(module path, line, the import's first line) of each function-level dlrig import."""
    found = []
    for path in sorted((ROOT / "src" / "dlrig").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        finder = _Finder()
        finder.visit(ast.parse(text))
        lines = text.splitlines()
        for node in finder.found:
            found.append((str(path.relative_to(ROOT)), node.lineno, lines[node.lineno - 1]))
    return found


def test_function_level_imports_only_go_down():
    found = _function_level_imports()
    print(f"\nfunction-level imports of dlrig modules: {len(found)}")
    assert len(found) <= FUNCTION_LEVEL_IMPORTS_AT_MOST


def test_each_function_level_import_says_why_it_is_lazy():
    unexplained = [
        f"{path}:{line}" for path, line, text in _function_level_imports() if "# lazy: " not in text
    ]
    assert unexplained == [], "import at the module top, or say `# lazy: WHY` on the line"


def test_the_architecture_page_shows_the_checked_layers():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    config = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    layers = tomllib.loads(config)["tool"]["importlinter"]["contracts"][0]["layers"]
    named = {m.strip().removeprefix("dlrig.") for layer in layers for m in re.split("[|:]", layer)}
    assert {"cli", "accept", "doctor", "health", "machine", "knowledge", "errors"} <= named
    diagram = page.split("```")[1]
    assert [m for m in sorted(named) if not re.search(rf"\b{m}\b", diagram)] == []


# The modules that start processes or call C directly, each for a reason; everything else asks
# them (docs/architecture.md, "Processes and C").
PROCESS_AND_C = {
    "machine/runner.py": "every probe's command, with a timeout (the only runner of tools)",
    "machine/nvml.py": "the one NVML gate",
    "machine/nvml_source.py": "comparing NVML's device handles (ctypes pointers)",
    "machine/amdsmi_library.py": "the one amdsmi gate: flushes C stdio so libamd_smi's printf stays off stdout",
    "wrap.py": "the user's command under diagnose, profile and train",
    "doctor/fleet_sources.py": "ssh and Slurm's sinfo for `doctor --fleet`",
    "accept/worker.py": "the memory load copies with memmove (ctypes), not Python loops",
    "accept/loads.py": "starts and stops those workers",
    "provision/env.py": "`uv pip compile` to lock the generated environment",
    "pack/worker.py": "pack's workers die with their parent (prctl PR_SET_PDEATHSIG)",
    "bench/reads.py": "page-aligned buffers for O_DIRECT reads",
    "bench/storage.py": "fio, when installed",
    "bench/pack_cache.py": "libc mmap/madvise to drop a pack from the page cache",
}


def test_only_the_listed_modules_start_processes_or_call_c():
    package = ROOT / "src" / "dlrig"
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.split(".")[0] in ("subprocess", "ctypes") for n in names):
                found.add(path.relative_to(package).as_posix())
    assert found == set(PROCESS_AND_C)


def _fresh(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_fit_analytic_runs_without_torch():
    # `fit --analytic` and `fit.evaluate` are numpy only: with torch, transformers and peft
    # absent (None in sys.modules makes their import fail), the estimate still comes.
    done = _fresh(
        "import sys; sys.modules.update(torch=None, transformers=None, peft=None)\n"
        "from dlrig.cli.main import main\n"
        "main(['fit', 'llama3-8b', '--gpu', 't4', '--analytic', '--json'])"
    )
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["schema"] == "dlrig.fit"


def test_a_load_worker_imports_only_its_kit():
    # One worker runs per hardware thread during a burn-in: it must not pay for the commands.
    done = _fresh(
        "import sys, dlrig.accept.worker\n"
        "print(sorted(m for m in sys.modules if m.startswith('dlrig.')))"
    )
    loaded = set(ast.literal_eval(done.stdout))
    assert not {m for m in loaded if m.startswith(("dlrig.bench", "dlrig.doctor", "dlrig.monitor"))}
    assert "dlrig.accept.burnin" not in loaded
