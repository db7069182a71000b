"""The generated host script run for real with --dry-run: on this machine (nothing changes)
and against a prepared root where some results already exist (exactly those steps skip).
The Debian packages it needs resolve with `apt-get install --simulate` here."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

WATCHED = [
    "/etc/apt",
    "/usr/share/keyrings",
    "/etc/docker",
    "/etc/profile.d",
    "/etc/modprobe.d",
    "/var/lib/dpkg/status",
    "/etc/systemd/system",
    "/etc/yum.repos.d",
]
# The downloads a real run would make: a dry run must not even create them.
DOWNLOADS = ["dlrig-cuda-keyring.deb", "dlrig-nvidia-container-toolkit.key"]


def _state() -> dict[str, str]:
    """Every watched file and its content hash (folders listed recursively)."""
    found: dict[str, str] = {}
    for top in WATCHED:
        path = Path(top)
        if path.is_file():
            files = [path]
        elif path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink())
        else:
            files = []
        for file in files:
            try:
                found[str(file)] = hashlib.sha256(file.read_bytes()).hexdigest()
            except OSError:
                found[str(file)] = "unreadable"
    temp = Path(os.environ.get("TMPDIR", "/tmp"))
    for name in DOWNLOADS:
        found[str(temp / name)] = "present" if (temp / name).exists() else "absent"
    return found


@pytest.fixture(scope="module")
def debian_script(tmp_path_factory):
    folder = tmp_path_factory.mktemp("host")
    from tests.conftest import ROOT

    result = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "dlrig"),
            "provision",
            "host",
            "--gpu",
            "h100-sxm5-80gb",
            "--os",
            "debian-12",
            "--cuda",
            "12.8",
            "--cudnn",
            "--nccl",
            "--out",
            str(folder),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return folder / "install-nvidia.sh"


def _run(
    script: Path, *args: str, path_prefix: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path_prefix:
        env["PATH"] = path_prefix + os.pathsep + env["PATH"]
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, timeout=60, env=env
    )


def _steps(output: str, kind: str) -> set[str]:
    return set(re.findall(rf"^\[{kind}\] ([\w-]+):", output, re.M))


def test_dry_run_on_this_machine_prints_every_step_and_changes_nothing(debian_script):
    before = _state()
    result = _run(debian_script, "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    after = _state()
    assert before == after
    planned = _steps(result.stdout, "would run") | _steps(result.stdout, "would write")
    for step in (
        "cuda-keyring",
        "cuda-repository",
        "driver-branch-pin",
        "driver",
        "cuda-toolkit",
        "cudnn",
        "nccl",
        "container-toolkit",
        "verify",
    ):
        assert step in planned | _steps(result.stdout, "skip"), (step, result.stdout)
    assert "nvidia-driver-pinning-580" in result.stdout and "nvidia-open" in result.stdout


def test_prepared_root_skips_exactly_the_steps_whose_results_exist(debian_script, tmp_path):
    root = tmp_path / "root"
    (root / "usr/share/keyrings").mkdir(parents=True)
    (root / "usr/share/keyrings/cuda-archive-keyring.gpg").write_bytes(b"key")
    (root / "etc/apt/sources.list.d").mkdir(parents=True)
    arch = "sbsa" if os.uname().machine == "aarch64" else "x86_64"
    (root / f"etc/apt/sources.list.d/cuda-debian12-{arch}.list").write_text("deb x /\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    # What `nvidia-smi --query-gpu=driver_version --format=csv,noheader` prints on an R580 box.
    fake.write_text("#!/bin/sh\necho 580.95.05\n")
    fake.chmod(0o755)

    empty = _run(debian_script, "--dry-run", "--root", str(tmp_path / "empty"))
    assert empty.returncode == 0, empty.stderr
    assert "driver" not in _steps(empty.stdout, "skip") or shutil.which("nvidia-smi")

    prepared = _run(debian_script, "--dry-run", "--root", str(root), path_prefix=str(bin_dir))
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    newly_skipped = _steps(prepared.stdout, "skip") - _steps(empty.stdout, "skip")
    assert newly_skipped == {"cuda-keyring", "cuda-repository", "driver"}, prepared.stdout
    assert "driver 580.95.05 (branch R580) is running" in prepared.stdout


def test_root_without_dry_run_is_refused(debian_script, tmp_path):
    result = _run(debian_script, "--root", str(tmp_path))
    assert result.returncode == 2 and "--dry-run" in result.stderr


def test_the_distribution_packages_resolve_with_apt_simulate(debian_script):
    text = debian_script.read_text()
    packages = re.search(r"^DISTRO_PACKAGES=\(([^)]*)\)", text, re.M).group(1).split()
    headers = re.search(r'^HEADERS_PACKAGE="([^"]+)"', text, re.M).group(1)
    assert headers == "linux-headers-$(uname -r)"
    # The running kernel here is the VM host's, not Debian's: resolve the Debian kernel's own
    # headers package, which is what linux-headers-$(uname -r) names on a Debian 12 install.
    result = subprocess.run(
        [
            "apt-get",
            "install",
            "--simulate",
            "-y",
            *packages,
            "linux-headers-amd64" if os.uname().machine == "x86_64" else "linux-headers-arm64",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
