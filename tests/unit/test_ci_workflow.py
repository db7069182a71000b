"""The GitHub Actions workflow validates against SchemaStore's workflow schema, and its jobs
run the Makefile targets the README names (a renamed target would otherwise break CI only
once it ran on GitHub)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "tests/data/schemas/github-workflow.json").read_text())


def _load(text: str) -> dict[str, Any]:
    document = yaml.safe_load(text)
    # YAML 1.1 reads the bare key `on` as the boolean True; GitHub reads it as "on"
    if True in document:
        document["on"] = document.pop(True)
    assert isinstance(document, dict)
    return document


def test_workflow_is_valid() -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(
        _load((ROOT / ".github/workflows/ci.yml").read_text())
    )


def test_the_validator_rejects_a_job_without_a_runner() -> None:
    broken = _load((ROOT / ".github/workflows/ci.yml").read_text())
    for job in broken["jobs"].values():
        del job["runs-on"]
    assert list(jsonschema.Draft7Validator(SCHEMA).iter_errors(broken))


def test_jobs_run_the_targets_that_exist() -> None:
    workflow = _load((ROOT / ".github/workflows/ci.yml").read_text())
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    commands = [
        step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step
    ]
    assert any(".ci/run" in command for command in commands)
    for command in commands:
        for target in re.findall(r"\bmake ([a-z][a-z-]*)", command):
            assert target in targets, f"{command}: no `{target}` target in the Makefile"
    assert "make test\n" in (ROOT / ".ci/run").read_text()
