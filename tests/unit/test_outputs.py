"""Files dlrig writes: whole or not at all, readable as the umask says, no temp left behind."""

from __future__ import annotations

import os
import stat

import pytest

from dlrig import outputs
from dlrig.errors import InputError


@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)

    previous = os.umask(0o022)
    yield set_mask
    os.umask(previous)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_get_0666_masked_by_the_umask(tmp_path, umask, mask, mode):
    umask(mask)
    target = outputs.write_text_atomic(tmp_path / "rules.yml", "groups: []\n")
    assert stat.S_IMODE(target.stat().st_mode) == mode
    script = outputs.write_text_atomic(tmp_path / "install.sh", "#!/bin/sh\n", mode=0o777)
    assert stat.S_IMODE(script.stat().st_mode) == 0o777 & ~mask


def test_an_interrupt_mid_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "dashboard.json"
    target.write_text("old\n")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        outputs.write_text_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dashboard.json"]


def test_a_missing_folder_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        outputs.write_text_atomic(tmp_path / "nope" / "x.json", "{}")
