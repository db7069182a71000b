"""The shared cause vocabulary.

`doctor` findings and `diagnose` verdicts name their cause with one of these ids, so a machine
problem found before a run and the crash it produces during a run read the same. Each cause has
a title, a one-paragraph explanation and a default fix; checks and signatures add the specifics
(versions, numbers from the log) on top of the default.
"""

from __future__ import annotations

from dlrig.causes import data, hardware, install, performance, program, resources, tensors
from dlrig.causes.model import Cause

__all__ = ["CAUSES", "Cause", "get"]

CAUSES: dict[str, Cause] = {
    cause.id: cause
    for group in (resources, install, program, tensors, data, hardware, performance)
    for cause in group.CAUSES
}


def get(cause_id: str) -> Cause:
    """The cause with this id; KeyError names the known ids."""
    try:
        return CAUSES[cause_id]
    except KeyError:
        raise KeyError(f"unknown cause {cause_id!r}; known: {', '.join(sorted(CAUSES))}") from None
