"""The size of dlrig's surface, the figures issue 28 asks for before and after a change: public
top-level names (defs, classes and assignments without a leading underscore, outside private
modules), the names pinned in `dlrig.__all__` and the command packages' `__all__`, the
`type: ignore` comments and the function-level imports of dlrig's own modules.

    python benchmarks/api_surface.py [--src PATH/src/dlrig]

`--src` measures another checkout (e.g. a `git worktree` of an older commit); the pinned
names are then read from its `__all__` lists by parsing, not importing. The last line is a
key=value summary.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def _all(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return []


class _FunctionImports(ast.NodeVisitor):
    def __init__(self) -> None:
        self.depth = self.count = 0

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.count += bool(self.depth and (node.module or "").startswith("dlrig"))

    def visit_Import(self, node: ast.Import) -> None:
        self.count += bool(self.depth and any(a.name.startswith("dlrig") for a in node.names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src" / "dlrig")
    package = parser.parse_args().src
    public = ignores = 0
    imports = _FunctionImports()
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        imports.visit(tree)
        ignores += text.count("type: ignore")
        parts = path.relative_to(package).parts
        if not any(p.startswith("_") and p != "__init__.py" for p in parts):
            public += len(_names(tree))
    top = _all(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
    commands = [p.parent for p in sorted(package.glob("*/__init__.py"))]
    pinned = len(top) + sum(
        len(_all(ast.parse((c / "__init__.py").read_text(encoding="utf-8"))))
        for c in commands
        if c.name in top or (not top and c.name not in ("machine", "knowledge", "causes", "cli"))
    )
    print(f"{package}: {public} public top-level names, {pinned} pinned in __all__ lists")
    print(
        f"public_names={public} pinned={pinned} type_ignores={ignores} "
        f"function_level_imports={imports.count}"
    )


if __name__ == "__main__":
    main()
