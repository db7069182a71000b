"""One reading of the monitor: a `dlrig.report.Finding` in the monitor's words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlrig.report import Finding, Status, gpu_subject

# The monitor's words for how urgent a reading is, and the one status each is.
_SEVERITY_STATUS = {"critical": Status.FAIL, "warn": Status.WARN, "info": Status.INFO}
_STATUS_SEVERITY = {status: word for word, status in _SEVERITY_STATUS.items()}


@dataclass(frozen=True, kw_only=True)
class Reading(Finding):
    """One line of what the last minute means; `title` is the line, `gpu` the GPU it is about.

    Its `id` is "monitor." and its cause ("monitor.gpu_throttling"), or "monitor.note" for a
    line with no cause.
    """

    gpu: int | None = None

    @classmethod
    def of(
        cls, severity: str, text: str, cause: str | None = None, gpu: int | None = None
    ) -> Reading:
        """A reading in the monitor's words: severity critical, warn or info."""
        return cls(
            id=f"monitor.{cause or 'note'}",
            status=_SEVERITY_STATUS[severity],
            title=text,
            source="monitor",
            cause=cause,
            gpu=gpu,
            subject=gpu_subject(gpu),
        )

    @property
    def severity(self) -> str:
        """critical, warn or info: the word `--json` and the live view use."""
        return _STATUS_SEVERITY.get(self.status, "info")

    @property
    def text(self) -> str:
        return self.title

    def to_dict(self) -> dict[str, object]:
        return {"severity": self.severity, "text": self.text, "cause": self.cause, "gpu": self.gpu}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Reading:
        severity = document.get("severity")
        if severity not in _SEVERITY_STATUS:
            raise ValueError(f"reading: severity {severity!r} is not critical, warn or info")
        gpu, cause = document.get("gpu"), document.get("cause")
        return cls.of(
            str(severity),
            str(document.get("text") or ""),
            cause if isinstance(cause, str) else None,
            gpu if isinstance(gpu, int) else None,
        )
