"""`dlrig diagnose`: read a crashed training log; name the root cause, the proof and the fix.

from dlrig import diagnose
result = diagnose.diagnose_paths(["train.log"])
result.causes[0].cause, result.causes[0].fixes
"""

from __future__ import annotations

import gzip
import io
import string
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from dlrig import causes as cause_vocabulary
from dlrig.diagnose import advice
from dlrig.diagnose.advice.figures import DOUBT
from dlrig.diagnose.found import SETTINGS
from dlrig.diagnose.lines import RAISED, RAISED_TAIL_LINES
from dlrig.diagnose.model import Diagnosis, Evidence, Finding
from dlrig.diagnose.rank import Ranked, rank
from dlrig.diagnose.scanner import Scanner
from dlrig.errors import InputError
from dlrig.inputs import check_readable_file
from dlrig.knowledge import signatures as signature_knowledge
from dlrig.machine.model import Machine
from dlrig.report import Progress, no_progress

# Below this confidence a finding is a possible cause (a lead), not the verdict.
POSSIBLE_BELOW = 0.5


class _Template(string.Formatter):
    """str.format that reports missing fields instead of raising."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.missing = False

    def get_value(self, key: int | str, args: Any, kwargs: Any) -> Any:
        # an empty value is as missing as an absent one: "pip install  " helps nobody
        if isinstance(key, str) and self.values.get(key):
            return self.values[key]
        self.missing = True
        return ""


def _fill(template: str, values: dict[str, str]) -> str | None:
    formatter = _Template(values)
    text = formatter.format(template)
    return None if formatter.missing or not text.strip() else text


def _finding(
    ranked: Ranked,
    facts: dict[str, str],
    machine: Machine | None,
    history: dict[str, list[tuple[int, str, tuple[str, int]]]] | None = None,
) -> Finding:
    candidate = ranked.candidate
    if history:
        # A run's settings are printed before it fails; a value after the failure in the same
        # input is a reply's suggestion ("try --batch_size 8"), not what ran. The most specific
        # pattern's value before it wins (the latest on ties); none before it: not in the log.
        facts = dict(facts)
        for name in SETTINGS:
            before = [
                (index, order, value)
                for order, (index, value, (source, line)) in enumerate(history.get(name, []))
                if source != candidate.first_source or line <= candidate.first_line
            ]
            if before:
                facts[name] = min(before, key=lambda entry: (entry[0], -entry[1]))[2]
            else:
                facts.pop(name, None)
    cause = cause_vocabulary.get(candidate.cause)
    hits = sorted(candidate.hits, key=lambda h: -h.signature.weight)
    groups = dict(candidate.groups)
    # Every library the signatures named, not only the first (TensorFlow lists one per line).
    libraries = [
        found["library"]
        for hit in sorted(candidate.hits, key=lambda h: h.first_line or 0)
        for found in hit.group_sets
        if found.get("library")
    ]
    if libraries:
        groups["libraries"] = ", ".join(dict.fromkeys(libraries))
    values, figures = advice.variables(candidate.cause, groups, facts, machine)
    doubt = values.pop(DOUBT, None)
    explanation = None
    fixes: list[str] = []
    references: list[str] = []
    for hit in hits:
        signature = hit.signature
        if explanation is None and signature.explanation:
            explanation = _fill(signature.explanation, values)
        # The strongest signature's fixes are the answer; weaker ones only fill a gap.
        if not fixes:
            for template in signature.fixes:
                text = _fill(template, values)
                if text and text not in fixes:
                    fixes.append(text)
        references.extend(r for r in signature.references if r not in references)
    if not fixes:
        fixes.append(cause.default_fix)
    evidence: list[Evidence] = []
    for hit in sorted(hits, key=lambda h: h.first_line or 0):
        # An Xid hit holds every code's lines; the finding shows its own codes' lines only.
        lines = candidate.evidence.get(hit.signature.id, hit.evidence)
        for source, line, text in lines:
            if len(evidence) < 6 and all(e.text != text for e in evidence):
                evidence.append(Evidence(source, line, text))
    evidence.sort(key=lambda e: (e.source, e.line))
    if candidate.notes:
        explanation = (explanation or cause.explanation) + " (" + "; ".join(candidate.notes) + ")"
    confidence = ranked.confidence
    if doubt:
        # the log's own facts do not fit the claim: a possible cause, below the verdict line
        confidence = min(confidence, POSSIBLE_BELOW - 0.05)
        explanation = f"Possibly: {explanation or cause.explanation} But {doubt}."
    return Finding.of(
        candidate.cause,
        ranked.role,
        cause.title,
        tuple(evidence),
        tuple(fixes),
        confidence=round(confidence, 2),
        explanation=explanation or cause.explanation,
        reason=ranked.reason,
        signatures=tuple(sorted({h.signature.id for h in hits})),
        ranks=tuple(sorted(candidate.ranks)),
        references=tuple(references),
        figures=figures,
        doubt=str(doubt) if doubt else None,
    )


class Session:
    """Incremental diagnosis: feed bytes from files, stdin or a running command."""

    def __init__(self, machine: Machine | None = None) -> None:
        self.signature_set = signature_knowledge.load()
        self.scanner = Scanner(self.signature_set)
        self.machine = machine

    def start(self, source: str) -> None:
        self.scanner.start(source)

    def feed(self, data: bytes | memoryview, source: str | None = None) -> None:
        self.scanner.feed(data, source)

    def finish(self, note: str | None = None) -> Diagnosis:
        result = self.scanner.close()
        ranked = rank(result, self.signature_set)
        findings = tuple(
            _finding(r, result.facts, self.machine, result.fact_history)
            for r in ranked
            if r.role != "survived"
        )
        if findings:
            # a root its log put in doubt stays first: what ranked after it is not surer of itself
            ceiling = findings[0].confidence
            findings = findings[:1] + tuple(
                replace(f, confidence=min(f.confidence, ceiling)) for f in findings[1:]
            )
        survived = tuple(
            _finding(r, result.facts, self.machine, result.fact_history)
            for r in ranked
            if r.role == "survived"
        )
        if result.bytes == 0 and note is None:
            note = "the input is empty"
        first = None
        first_rank = None
        # Only a run that shows it failed (a traceback, an abort, an error exit, an uncaught
        # exception's last line) and nothing proving it finished: an ERROR line in a run that
        # went on is not "a failure".
        marked = any(
            result.markers.get(m) for m in ("traceback", "traceback_frame", "abort", "nonzero_exit")
        )
        # one input whose first error is an uncaught exception's last line, near its end: a
        # handled error followed by hours of training is no failure
        raised = len(result.sources) == 1 and any(
            RAISED.match(text) and line > result.lines - RAISED_TAIL_LINES
            for line, text, _ in result.first_errors.values()
        )
        failed = not result.finishes and (marked or raised)
        for source in result.sources if failed else ():  # inputs in order; the first with one
            if source in result.first_errors:
                line, text, first_rank = result.first_errors[source]
                first = Evidence(source, line, text)
                break
        return Diagnosis(
            causes=findings,
            sources=tuple(result.sources),
            lines=result.lines,
            bytes=result.bytes,
            note=note,
            survived=survived,
            first_error=first,
            first_error_rank=first_rank,
        )


class _Utf16AsUtf8(io.RawIOBase):
    """A UTF-16 file (Windows PowerShell's `>` writes one) read as UTF-8 bytes, in pieces."""

    def __init__(self, path: Path) -> None:
        self._text = path.open("r", encoding="utf-16", errors="replace", newline="")
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        target = memoryview(buffer)
        while len(self._pending) < len(target):
            piece = self._text.read(1 << 20)
            if not piece:
                break
            self._pending += piece.encode("utf-8")
        count = min(len(target), len(self._pending))
        target[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def close(self) -> None:
        self._text.close()
        super().close()


def _open(path: Path) -> BinaryIO:
    with path.open("rb") as probe:
        head = probe.read(8192)
    if head[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return io.BufferedReader(_Utf16AsUtf8(path))
    if b"\x00" in head:
        raise InputError(
            f"{path}: is a binary file, not a log", fix="give the text log (gzip is fine)"
        )
    return path.open("rb")


def diagnose_paths(paths: Iterable[Path | str], machine: Machine | None = None) -> Diagnosis:
    """Diagnose one or more log files (e.g. one per rank) as one run."""
    session = Session(machine)
    checked = [check_readable_file(p, "log") for p in paths]
    for path in checked:
        try:
            with _open(path) as stream:
                session.scanner.feed_from(stream, str(path))
        except (OSError, EOFError) as exc:
            raise InputError(f"{path}: cannot be read ({exc})", fix="check the file") from None
    return session.finish()


def diagnose_stream(
    stream: BinaryIO, source: str = "<stdin>", machine: Machine | None = None
) -> Diagnosis:
    """Diagnose a log read from a binary stream (`dlrig diagnose -`: stdin), named `source`
    in the evidence."""
    session = Session(machine)
    session.scanner.feed_from(stream, source)
    return session.finish()


def diagnose_text(text: str, machine: Machine | None = None) -> Diagnosis:
    """Diagnose a log given as text (a paste), named "<text>" in the evidence."""
    session = Session(machine)
    session.start("<text>")
    session.feed(text.encode("utf-8"))
    return session.finish()


@dataclass(frozen=True)
class DiagnoseOptions:
    """What `dlrig diagnose` reads: log files (one per rank are one run), or a text."""

    paths: tuple[Path | str, ...] = ()
    text: str | None = None  # a pasted log instead of files


def run(
    options: DiagnoseOptions, *, machine: Machine | None = None, progress: Progress = no_progress
) -> Diagnosis:
    """Diagnose the logs of `options`: the root cause, secondary ones, their evidence and fixes.

    `machine`: this machine's facts (`dlrig doctor --save`), which make the fixes concrete
    (the driver to install, the batch size that fits the GPU's memory)."""
    if (options.text is None) == (not options.paths):
        raise InputError(
            "diagnose: give log files or a text, one of them", fix="e.g. paths=('train.log',)"
        )
    progress("diagnose: reading the logs", 0.0)
    if options.text is not None:
        diagnosis = diagnose_text(options.text, machine)
    else:
        diagnosis = diagnose_paths(options.paths, machine)
    progress("diagnose: done", 1.0)
    return diagnosis


__all__ = [
    "DiagnoseOptions",
    "Diagnosis",
    "Evidence",
    "Finding",
    "Session",
    "diagnose_paths",
    "diagnose_stream",
    "diagnose_text",
    "run",
]
