"""The generated Dockerfile's user creation, run for real on the files of its base image.

There is no Docker engine that can build here, so the test does what the build's RUN step does:
`/bin/sh -c '<the RUN line>'` in a chroot holding the real Ubuntu 24.04 /etc/passwd and
/etc/group (user and group `ubuntu` with UID/GID 1000: tests/data/provision/SOURCES.md) and the
real shadow tools (useradd, userdel, groupadd, groupdel, getent) of this machine. The old
command (`groupadd --gid 1000` first) fails there exactly as the build did; the generated one
must succeed, and also on a base without a UID 1000 (Ubuntu 22.04, Rocky 9 layouts).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dlrig import provision

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root"),
]
DATA = Path(__file__).resolve().parents[1] / "data" / "provision" / "ubuntu-24.04-etc"
TOOLS = ("useradd", "userdel", "groupadd", "groupdel", "getent", "install", "cat", "ls")


def _copy_binary(path: str, root: Path) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, target)
    listing = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    for library in re.findall(r"(/\S+)", listing):
        dest = root / library.lstrip("/")
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.realpath(library), dest)


def make_root(root: Path, passwd: str, group: str, homes: tuple[tuple[str, int], ...]) -> Path:
    """A minimal root filesystem: the image's account files, this machine's shadow tools."""
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is missing"
        _copy_binary(os.path.realpath(found), root)
        wanted = root / found.lstrip("/")
        if not wanted.exists():
            wanted.parent.mkdir(parents=True, exist_ok=True)
            wanted.symlink_to("/" + os.path.realpath(found).lstrip("/"))
    sh = os.path.realpath("/bin/sh")
    _copy_binary(sh, root)
    (root / "bin").mkdir(exist_ok=True)
    if not (root / "bin" / "sh").exists():
        (root / "bin" / "sh").symlink_to(sh)
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(passwd)
    (etc / "group").write_text(group)
    names = [line.split(":")[0] for line in passwd.splitlines() if line]
    groups = [line.split(":")[0] for line in group.splitlines() if line]
    (etc / "shadow").write_text("".join(f"{n}:*:19000:0:99999:7:::\n" for n in names))
    (etc / "gshadow").write_text("".join(f"{g}:!::\n" for g in groups))
    os.chmod(etc / "shadow", 0o640)
    os.chmod(etc / "gshadow", 0o640)
    shutil.copy2("/etc/login.defs", etc / "login.defs")
    if Path("/etc/skel").is_dir():
        shutil.copytree("/etc/skel", etc / "skel", dirs_exist_ok=True)
    for name, uid in homes:  # the image's existing home directories
        home = root / "home" / name
        home.mkdir(parents=True)
        (home / ".bashrc").write_text("# from the image\n")
        os.chown(home, uid, uid)
    for folder in ("tmp", "var/mail", "var/spool/mail"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    return root


def run_step(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    """What `RUN command` does in a build: /bin/sh -c in the image's root."""
    return subprocess.run(
        ["chroot", str(root), "/bin/sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
    )


def user_run_line(dockerfile: str) -> str:
    """The RUN instruction that creates the user, joined as Docker joins continued lines."""
    instructions = re.sub(r"\\\n", "", dockerfile)
    return next(
        line[len("RUN ") :]
        for line in instructions.splitlines()
        if line.startswith("RUN ") and "useradd" in line
    )


def _dockerfile(**stated: str) -> str:
    facts = provision.gather(None, provision.Stated(**stated), probe=False)
    return provision.generate("docker", facts).file("Dockerfile").content


def _accounts(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    users = {
        line.split(":")[0]: line for line in (root / "etc/passwd").read_text().splitlines() if line
    }
    groups = {
        line.split(":")[0]: line for line in (root / "etc/group").read_text().splitlines() if line
    }
    return users, groups


def test_the_old_command_fails_on_ubuntu_24_04_and_the_generated_one_builds(tmp_path):
    dockerfile = _dockerfile(gpu="rtx-4090", torch="2.9")
    assert "ubuntu24.04" in dockerfile.split("\nFROM ", 1)[1].splitlines()[0]
    passwd, group = (DATA / "passwd").read_text(), (DATA / "group").read_text()

    # The files reproduce the reported failure: the command dlrig used to write stops here.
    old = make_root(tmp_path / "old", passwd, group, (("ubuntu", 1000),))
    before = run_step(
        old,
        "groupadd --gid 1000 train && useradd --uid 1000 --gid 1000 --create-home "
        "--shell /bin/bash train",
    )
    assert before.returncode == 4 and "GID '1000' already exists" in before.stderr, before

    root = make_root(tmp_path / "new", passwd, group, (("ubuntu", 1000),))
    result = run_step(root, user_run_line(dockerfile))
    assert result.returncode == 0, result.stdout + result.stderr
    users, groups = _accounts(root)
    assert "ubuntu" not in users and "ubuntu" not in groups
    assert users["train"].split(":")[2:4] == ["1000", "1000"]
    assert groups["train"].split(":")[2] == "1000"
    assert "ubuntu" not in (root / "etc/group").read_text()  # left no supplementary memberships
    workspace = (root / "workspace").stat()
    assert (workspace.st_uid, workspace.st_gid) == (1000, 1000)
    assert (root / "home/train").is_dir() and not (root / "home/ubuntu").exists()
    assert re.search(r"^USER 1000:1000$", dockerfile, re.M)


def test_the_same_line_builds_where_uid_1000_is_free(tmp_path):
    # Ubuntu 22.04 and Rocky 9 images have no UID/GID 1000 (base-passwd only).
    passwd = "".join(
        line + "\n"
        for line in (DATA / "passwd").read_text().splitlines()
        if not line.startswith("ubuntu:")
    )
    group = "".join(
        re.sub(r":ubuntu$", ":", line) + "\n"
        for line in (DATA / "group").read_text().splitlines()
        if not line.startswith("ubuntu:")
    )
    for stated in (
        {"gpu": "t4", "torch": "2.9", "os": "ubuntu-22.04"},
        {"gpu": "t4", "torch": "2.9", "os": "rocky-9"},
    ):
        root = make_root(tmp_path / stated["os"], passwd, group, ())
        result = run_step(root, user_run_line(_dockerfile(**stated)))
        assert result.returncode == 0, (stated, result.stderr)
        users, groups = _accounts(root)
        assert users["train"].split(":")[2:4] == ["1000", "1000"] and "train" in groups
