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
    # The running driver's module is loaded too: no reboot is announced (QA finding 27).
    assert newly_skipped == {"cuda-keyring", "cuda-repository", "driver", "kernel-module"}, (
        prepared.stdout
    )
    assert "driver 580.95.05 (branch R580) is running" in prepared.stdout
    assert "[would reboot]" not in prepared.stdout and "[would reboot]" in empty.stdout


def test_root_without_dry_run_is_refused(debian_script, tmp_path):
    result = _run(debian_script, "--root", str(tmp_path))
    assert result.returncode == 2 and "--dry-run" in result.stderr


def test_the_distribution_packages_resolve_with_apt_simulate(debian_script):
    text = debian_script.read_text()
    packages = re.search(r"^DISTRO_PACKAGES=\(([^)]*)\)", text, re.M).group(1).split()
    headers = re.search(r"^HEADERS_PACKAGES=\((.*)\)$", text, re.M).group(1)
    assert headers == '"linux-headers-$(uname -r)"'
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


DATA = Path(__file__).resolve().parents[1] / "data" / "provision"


def _apt_root(tmp_path: Path, layout: str) -> Path:
    """A root with one real Debian 12 apt source layout (tests/data/provision/SOURCES.md)."""
    root = tmp_path / layout
    (root / "etc/apt/sources.list.d").mkdir(parents=True)
    if layout == "debian.sources":
        shutil.copy(DATA / "debian-12-apt/debian.sources", root / "etc/apt/sources.list.d")
    else:
        shutil.copy(DATA / f"debian-12-apt/{layout}", root / "etc/apt/sources.list")
    return root


def _contrib_command(output: str) -> str:
    found = re.search(r"^\[would run\] debian-contrib: (sed .*)$", output, re.M)
    assert found, output
    return found.group(1)


@pytest.mark.parametrize("layout", ["netinst.sources.list", "dvd.sources.list", "debian.sources"])
def test_debian_contrib_step_edits_either_source_layout(debian_script, tmp_path, layout):
    """The installer's one-line sources.list (netinst: commented cdrom line; DVD: an active
    cdrom line naming contrib) and the images' deb822 debian.sources: the step edits the file
    that exists, with the same sed program the script runs; afterwards the script's own check
    finds contrib and skips the step."""
    root = _apt_root(tmp_path, layout)
    before = _run(debian_script, "--dry-run", "--root", str(root))
    assert before.returncode == 0, before.stdout + before.stderr
    command = _contrib_command(before.stdout)
    target = root / (
        "etc/apt/sources.list.d/debian.sources"
        if layout == "debian.sources"
        else "etc/apt/sources.list"
    )
    assert command.endswith(str(target)), command
    original = target.read_text()
    # Run that edit for real on the copy: the script's sed program, taken from the script.
    program = re.search(
        r"run sed -i -E '([^']+)' \"\$"
        + ("DEB822_SOURCES" if layout == "debian.sources" else "SOURCES_LIST")
        + '"',
        debian_script.read_text(),
    ).group(1)
    subprocess.run(["sed", "-i", "-E", program, str(target)], check=True, timeout=30)
    edited = target.read_text()
    for old, new in zip(original.splitlines(), edited.splitlines(), strict=True):
        archive = re.match(r"^(deb|deb-src)\s+(https?|ftp|file):", old) or old.startswith(
            "Components:"
        )
        if archive and " main" in old:
            assert re.search(r"\smain contrib(\s|$)", new), new
        else:
            assert new == old  # comments and cdrom lines untouched
    after = _run(debian_script, "--dry-run", "--root", str(root))
    assert "[skip] debian-contrib: the contrib component is enabled" in after.stdout, after.stdout


@pytest.fixture(scope="module")
def rocky_script(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rocky")
    from dlrig import provision

    facts = provision.gather(
        None, provision.Stated(gpu="t4", os="rocky-9", cuda="12.2"), probe=False
    )
    provision.write(provision.generate("host", facts), folder)
    return folder / "install-nvidia.sh"


def test_rocky_crb_step_reads_the_repo_files_and_rhel_takes_subscription_manager(
    rocky_script, tmp_path
):
    root = tmp_path / "rocky"
    (root / "etc/yum.repos.d").mkdir(parents=True)
    repo = (DATA / "rocky-9-yum.repos.d/rocky.repo").read_text()
    (root / "etc/yum.repos.d/rocky.repo").write_text(repo)
    (root / "etc/os-release").write_text('ID="rocky"\nVERSION_ID="9.4"\n')
    disabled = _run(rocky_script, "--dry-run", "--root", str(root))
    assert disabled.returncode == 0, disabled.stdout + disabled.stderr
    assert "[would run] crb-repository: dnf config-manager --set-enabled crb" in disabled.stdout
    assert "[would run] epel: dnf install -y epel-release" in disabled.stdout
    order = [_line for _line in disabled.stdout.splitlines() if _line.startswith("[would run]")]
    steps = [re.match(r"\[would run\] ([\w-]+):", line).group(1) for line in order]
    assert steps.index("crb-repository") < steps.index("epel") < steps.index("driver")
    # What `dnf config-manager --set-enabled crb` leaves behind: enabled=1 in [crb].
    enabled = re.sub(r"(\[crb\][^\[]*?)enabled=0", r"\1enabled=1", repo)
    (root / "etc/yum.repos.d/rocky.repo").write_text(enabled)
    now = _run(rocky_script, "--dry-run", "--root", str(root))
    assert "[skip] crb-repository: repository crb is enabled" in now.stdout, now.stdout
    (root / "etc/os-release").write_text('ID="rhel"\nVERSION_ID="9.4"\n')
    rhel = _run(rocky_script, "--dry-run", "--root", str(root))
    assert "subscription-manager repos --enable codeready-builder-for-rhel-9-" in rhel.stdout
    assert "epel-release-latest-9.noarch.rpm" in rhel.stdout


def test_secure_boot_on_is_said_before_the_driver_and_off_passes(debian_script, tmp_path):
    # Before, the script installed DKMS modules that Secure Boot then refused to load.
    variables = tmp_path / "on" / "sys/firmware/efi/efivars"
    variables.mkdir(parents=True)
    # efivarfs: 4 bytes of attributes (NV+BS+RT = 0x06), then the 1-byte value, 1 = enabled.
    name = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
    (variables / name).write_bytes(bytes([6, 0, 0, 0, 1]))
    on = _run(debian_script, "--dry-run", "--root", str(tmp_path / "on"))
    assert on.returncode == 0, on.stdout + on.stderr
    assert "[warn] secure-boot: Secure Boot is on" in on.stderr
    assert "mokutil --import /var/lib/dkms/mok.pub" in on.stderr
    assert "[note] kernel-module: with Secure Boot on" in on.stdout
    off_vars = tmp_path / "off" / "sys/firmware/efi/efivars"
    off_vars.mkdir(parents=True)
    (off_vars / name).write_bytes(bytes([6, 0, 0, 0, 0]))
    off = _run(debian_script, "--dry-run", "--root", str(tmp_path / "off"))
    assert "Secure Boot is on" not in off.stderr and "Secure Boot is off" in off.stdout
