"""What `dlrig diagnose` answers: its findings (a cause with the log lines that show it and the
fixes) and the diagnosis of a set of inputs, as Python objects and as --json's document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlrig import report
from dlrig.report import envelope

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Evidence:
    source: str
    line: int
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "text": self.text}


@dataclass(frozen=True, kw_only=True)
class Finding(report.Finding):
    """A cause of the crash: the root (status fail) or a secondary one (warn), with the log
    `lines` that show it; `evidence` is those lines as text ("train.log:812: ...") and `fix`
    the first of `fixes`."""

    role: str  # root | secondary
    confidence: float
    explanation: str
    reason: str
    lines: tuple[Evidence, ...]
    fixes: tuple[str, ...]
    signatures: tuple[str, ...]
    ranks: tuple[int, ...]
    references: tuple[str, ...]
    # The numbers the fixes were computed from (bytes, batch sizes), for scripts: --json's
    # `figures` ("new_batch_size", "new_grad_accum", "needed_bytes", ...).
    figures: dict[str, float] = field(default_factory=dict)
    # What in the log contradicts the cause when it is only possible for that reason (the
    # figures show memory free beside "out of memory"): --json's `doubt`, null otherwise.
    doubt: str | None = None

    @classmethod
    def of(
        cls,
        cause: str,
        role: str,
        title: str,
        lines: tuple[Evidence, ...],
        fixes: tuple[str, ...],
        *,
        confidence: float,
        explanation: str,
        reason: str,
        signatures: tuple[str, ...] = (),
        ranks: tuple[int, ...] = (),
        references: tuple[str, ...] = (),
        figures: dict[str, float] | None = None,
        doubt: str | None = None,
    ) -> Finding:
        return cls(
            id=f"diagnose.{cause}",
            status=report.Status.FAIL if role == "root" else report.Status.WARN,
            title=title,
            source="diagnose",
            evidence=tuple(f"{e.source}:{e.line}: {e.text}" for e in lines),
            fix=fixes[0] if fixes else None,
            cause=cause,
            role=role,
            lines=lines,
            fixes=fixes,
            confidence=confidence,
            explanation=explanation,
            reason=reason,
            signatures=signatures,
            ranks=ranks,
            references=references,
            figures=figures or {},
            doubt=doubt,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "role": self.role,
            "confidence": self.confidence,
            "title": self.title,
            "explanation": self.explanation,
            "reason": self.reason,
            "evidence": [e.to_dict() for e in self.lines],
            "fixes": list(self.fixes),
            "signatures": list(self.signatures),
            "ranks": list(self.ranks),
            "references": list(self.references),
            "figures": {k: int(v) if v.is_integer() else v for k, v in self.figures.items()},
            "doubt": self.doubt,
        }


@dataclass(frozen=True)
class Diagnosis:
    causes: tuple[Finding, ...]
    sources: tuple[str, ...]
    lines: int
    bytes: int
    note: str | None = None
    # Errors the run went on past (a batch-size finder's OOM probe, one skipped fp16 step):
    # shown for the record, never a cause.
    survived: tuple[Finding, ...] = ()
    # With `dlrig diagnose -- CMD`: the command as it ran, its exit code (128 + N when signal N
    # killed it, as a shell reports it) and that signal's name.
    command: tuple[str, ...] | None = None
    exit_code: int | None = None
    signal: str | None = None
    # The earliest line stating an error across the inputs (with its rank where a prefix or the
    # message names it): quoted when no cause is known, so the answer is never a bare "nothing".
    first_error: Evidence | None = None
    first_error_rank: int | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def root(self) -> Finding | None:
        return self.causes[0] if self.causes else None

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            "dlrig.diagnose",
            self.schema_version,
            {
                "causes": [f.to_dict() for f in self.causes],
                "survived": [f.to_dict() for f in self.survived],
                "sources": list(self.sources),
                "lines": self.lines,
                "bytes": self.bytes,
                "note": self.note,
                "command": list(self.command) if self.command is not None else None,
                "exit_code": self.exit_code,
                "signal": self.signal,
                "first_error": None
                if self.first_error is None
                else {**self.first_error.to_dict(), "rank": self.first_error_rank},
            },
        )
