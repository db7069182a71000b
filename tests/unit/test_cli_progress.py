"""Progress off a terminal: one line per stage and per tenth of the work, none for work that
ends within a second, none when quiet; each line with the time so far and an estimate left."""

from __future__ import annotations

import time

from dlrig.cli.common import progress_lines


def test_a_line_per_stage_and_tenth_after_the_first_second(monkeypatch, capsys):
    clock = iter([100.0, 100.5, 101.5, 101.6, 102.0, 103.0, 104.0, 105.0])
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    with progress_lines(quiet=False) as progress:
        progress("compute fp32 256", 0.0)  # at 0.5 s: too early to log
        progress("compute fp32 512", 0.12)  # 1.5 s: the first line
        progress("compute fp32 1024", 0.15)  # same stage, same tenth: no line
        progress("compute bf16 256", 0.5)  # a new tenth
        progress("memory host_copy", 0.55)  # a new stage
        progress("memory host_copy", 1.0)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "dlrig:  12% compute fp32 512 (2 s, about 11 s left)",
        "dlrig:  50% compute bf16 256 (2 s, about 2 s left)",
        "dlrig:  55% memory host_copy (3 s, about 2 s left)",
        "dlrig: 100% memory host_copy (4 s)",
    ]


def test_quiet_writes_nothing(capsys):
    with progress_lines(quiet=True) as progress:
        progress("anything", 0.5)
    assert capsys.readouterr().err == ""
