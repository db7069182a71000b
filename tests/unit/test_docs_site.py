"""The documentation site builds with --strict, its CLI reference names every command and
option there is, every command has a page in the navigation, and the README stays short."""

from __future__ import annotations

import collections
import html
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from dlrig.cli.main import COMMANDS, cli
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(cli)
    found: dict[str, click.Command] = {}

    def walk(group: click.Group, path: str) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            found[f"{path} {name}"] = command
            if isinstance(command, click.Group):
                walk(command, f"{path} {name}")

    walk(cli, "dlrig")
    return found


def test_reference_names_every_command_and_option(site: Path) -> None:
    reference = html.unescape((site / "reference" / "cli" / "index.html").read_text())
    missing = []
    for path, command in _commands().items():
        if path not in reference:
            missing.append(path)
        for param in command.params:
            # hidden options (kept for old scripts) are left out of --help and so of the site
            if isinstance(param, click.Option) and not param.hidden:
                missing += [f"{path} {opt}" for opt in param.opts if opt not in reference]
    assert not missing, f"not in the CLI reference: {missing}"


def test_every_command_has_a_page_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages: set[str] = set()

    def collect(items: list[object]) -> None:
        for item in items:
            if isinstance(item, dict):
                for value in item.values():
                    collect(value if isinstance(value, list) else [value])
            else:
                pages.add(str(item))

    collect(config["nav"])
    for name in COMMANDS:
        assert f"commands/{name}.md" in pages, f"dlrig {name} has no page in mkdocs.yml's nav"
        assert (ROOT / "docs" / "commands" / f"{name}.md").is_file()
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk <= pages, f"pages outside the navigation: {sorted(on_disk - pages)}"


def test_readme_is_at_most_12_kb() -> None:
    assert len((ROOT / "README.md").read_bytes()) <= 12 * 1024


def test_every_knowledge_table_has_its_section_with_sources(site: Path) -> None:
    from dlrig.knowledge import tables

    page = html.unescape((site / "reference" / "knowledge-tables" / "index.html").read_text())
    for name, info in tables.manifest().items():
        assert f"{name}</code>" in page, f"table {name} is missing from the knowledge-tables page"
        if info.file.endswith(".csv"):
            sources = collections.Counter(row["source"] for row in tables.rows(name))
            most_used = sources.most_common(1)[0][0]
            assert " ".join(most_used.split())[:60] in page, f"{name}: its sources are not listed"
