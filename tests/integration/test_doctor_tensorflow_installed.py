"""TensorFlow as installed and as published: doctor reads a real `tensorflow-cpu` wheel from
PyPI (installed without dependencies into a folder on PYTHONPATH), and the pins dlrig keeps in
`framework_gpu_pins.csv` are the Requires-Dist that pip reads from the index for the same wheels
(`pip install --dry-run --report`, which fetches the wheel's METADATA). The package index must be
reachable, as for the lock tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata

import pytest

from dlrig.knowledge import framework_pins

pytestmark = pytest.mark.integration


def _pip(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout
    )


def test_doctor_reads_an_installed_cpu_tensorflow(run_dlrig_process, tmp_path):
    target = tmp_path / "site"
    install = _pip("install", "--quiet", "--no-deps", "--target", str(target), "tensorflow-cpu")
    assert install.returncode == 0, install.stderr
    versions = {d.metadata["Name"]: d.version for d in metadata.distributions(path=[str(target)])}
    assert "tensorflow-cpu" in {name.lower().replace("_", "-") for name in versions}
    version = next(
        v for n, v in versions.items() if n.lower().replace("_", "-") == "tensorflow-cpu"
    )
    # the wheel's own build_info says what it was built with; the probe reads the same file
    build_info = (target / "tensorflow" / "python" / "platform" / "build_info.py").read_text()
    assert re.search(r"['\"]is_cuda_build['\"]\s*[:,]\s*False", build_info), build_info[:400]

    result = run_dlrig_process("doctor", "--json", env={"PYTHONPATH": str(target)}, timeout=300)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    tf = document["machine"]["frameworks"]["tensorflow"]
    assert (tf["name"], tf["version"], tf["build"]) == ("tensorflow-cpu", version, "cpu")
    checks = {c["id"]: c for c in document["checks"]}
    # No NVIDIA GPU here: the CPU package is right; no CUDA build, so no driver or wheels to judge
    assert checks["frameworks.tensorflow_gpu"]["status"] == "ok"
    assert checks["frameworks.tensorflow_gpu_package"]["status"] == "ok"
    assert checks["driver.tensorflow_cuda"]["status"] == "skip"
    assert checks["frameworks.gpu_wheels_match"]["status"] == "skip"


def _published_requires(distribution: str, version: str, python: str, tmp_path) -> list[str]:
    """Requires-Dist of the Linux x86-64 wheel for `python` (or the pure-Python one), as pip
    reads it from the index."""
    report = tmp_path / f"{distribution}-{version}.json"
    result = _pip(
        "install",
        "--dry-run",
        "--quiet",
        "--no-deps",
        "--ignore-installed",
        "--ignore-requires-python",  # the wheel is for `python`, not the one running pip
        "--only-binary=:all:",
        "--target",
        str(tmp_path / "unused"),
        "--python-version",
        python,
        "--platform",
        "manylinux_2_27_x86_64",
        "--platform",
        "manylinux2014_x86_64",
        "--report",
        str(report),
        f"{distribution}=={version}",
    )
    assert result.returncode == 0, result.stderr
    (item,) = json.loads(report.read_text())["install"]
    assert item["metadata"]["version"] == version
    return list(item["metadata"].get("requires_dist") or [])


def _newest(framework: str, exact: bool | None = None) -> str:
    versions = framework_pins.known_versions(framework)
    if exact is None:
        return versions[-1]
    for version in reversed(versions):
        pins = framework_pins.pins_for(framework, version)
        if all(pin.specifier.startswith("==") for pin in pins) == exact:
            return version
    raise AssertionError(f"no {framework} release with exact={exact}")


@pytest.mark.parametrize(
    ("framework", "exact"),
    [
        ("tensorflow", None),  # the newest release in the table: ranges (2.20+)
        ("tensorflow", True),  # the newest with exact pins (up to 2.19)
        ("jax-cuda12-plugin", None),
        ("jax-cuda13-plugin", None),
    ],
)
def test_the_pins_table_is_what_the_published_wheel_requires(framework, exact, tmp_path):
    version = _newest(framework, exact)
    rows = framework_pins.pins_for(framework, version)
    assert rows, (framework, version)
    # up to JAX 0.4.29 the pins were the jax wheel's extra ("jax[cuda12]"), later the plugin's
    wheel = "jax" if rows[0].extra.startswith("jax[") else framework
    published: dict[tuple[str, str], str] = {}
    python = rows[0].pythons.split(";")[-1] or "3.11"  # a CPython the table says has a wheel
    for line in _published_requires(wheel, version, python, tmp_path):
        requirement, _, marker = line.partition(";")
        extra = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", marker)
        name = re.match(r"\s*([A-Za-z0-9_.-]+)", requirement)
        if extra is None or name is None:
            continue
        specifier = requirement[name.end() :].strip().strip("()").replace(" ", "")
        published[(extra.group(1), framework_pins.normalise(name.group(1)))] = specifier
    extras = {row.extra.removeprefix("jax[").removesuffix("]") for row in rows}
    kept_names = {framework_pins.normalise(row.requirement) for row in rows}
    # every NVIDIA wheel the published extra asks for is in the table, and the reverse below
    for extra, name in published:
        if extra in extras and name.startswith("nvidia-"):
            assert name in kept_names, (framework, version, extra, name)
    for row in rows:
        extra = row.extra.removeprefix("jax[").removesuffix("]")
        key = (extra, framework_pins.normalise(row.requirement))
        assert key in published, (framework, version, key)
        # same clauses, in any order (the table keeps a platform marker after ";" as written)
        kept = row.specifier.split(";")[0].replace(" ", "")
        assert sorted(published[key].split(",")) == sorted(kept.split(",")), (
            framework,
            version,
            key,
            published[key],
            row.specifier,
        )
