"""Failure signatures (knowledge/data/signatures.toml) as typed, validated objects."""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from dlrig import causes
from dlrig.knowledge.tables import KnowledgeError

LEVELS = ("fatal", "warning")
EXTRACTORS = ("xid", "uneven_collectives")


@dataclass(frozen=True)
class Signature:
    id: str
    cause: str
    weight: float
    level: str
    anchors: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]
    min_count: int
    window: int
    secondary_to: tuple[str, ...]
    extractor: str | None
    explanation: str
    fixes: tuple[str, ...]
    references: tuple[str, ...]
    source: str

    def match(self, text: str) -> re.Match[str] | None:
        """The first pattern that matches `text` (most specific patterns come first)."""
        if any(e.search(text) for e in self.exclude):
            return None
        for pattern in self.patterns:
            found = pattern.search(text)
            if found:
                return found
        return None


@dataclass(frozen=True)
class Marker:
    id: str
    anchors: tuple[str, ...]


@dataclass(frozen=True)
class Fact:
    """A number fixes use (the batch size in a launch line); the first match wins."""

    id: str
    anchors: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]


@dataclass(frozen=True)
class SignatureSet:
    version: int
    signatures: tuple[Signature, ...]
    markers: tuple[Marker, ...]
    facts: tuple[Fact, ...]
    xid_causes: dict[int, str]

    def for_cause(self, cause: str) -> tuple[Signature, ...]:
        return tuple(s for s in self.signatures if s.cause == cause)


def _compile(text: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error as exc:
        raise KnowledgeError(f"signatures.toml: {where}: bad regex {text!r}: {exc}") from None


def _signature(raw: dict[str, object]) -> Signature:
    sid = str(raw["id"])
    cause = str(raw["cause"])
    if cause not in causes.CAUSES:
        raise KnowledgeError(f"signatures.toml: {sid}: unknown cause {cause!r}")
    level = str(raw.get("level", "fatal"))
    if level not in LEVELS:
        raise KnowledgeError(f"signatures.toml: {sid}: level must be one of {LEVELS}")
    extractor = raw.get("extractor")
    if extractor is not None and extractor not in EXTRACTORS:
        raise KnowledgeError(f"signatures.toml: {sid}: unknown extractor {extractor!r}")
    anchors = tuple(str(a) for a in raw.get("anchors", []))  # type: ignore[attr-defined]
    patterns = tuple(_compile(str(p), sid) for p in raw.get("patterns", []))  # type: ignore[attr-defined]
    if not anchors or not patterns:
        raise KnowledgeError(f"signatures.toml: {sid}: needs anchors and patterns")
    secondary = tuple(str(c) for c in raw.get("secondary_to", []))  # type: ignore[attr-defined]
    for other in secondary:
        if other not in causes.CAUSES:
            raise KnowledgeError(
                f"signatures.toml: {sid}: secondary_to names unknown cause {other!r}"
            )
    if not raw.get("source"):
        raise KnowledgeError(f"signatures.toml: {sid}: has no source")
    weight = float(raw["weight"])  # type: ignore[arg-type]
    if not 0 < weight <= 1:
        raise KnowledgeError(f"signatures.toml: {sid}: weight must be in (0, 1]")
    return Signature(
        id=sid,
        cause=cause,
        weight=weight,
        level=level,
        anchors=anchors,
        patterns=patterns,
        exclude=tuple(_compile(str(e), sid) for e in raw.get("exclude", [])),  # type: ignore[attr-defined]
        min_count=int(raw.get("min_count", 1)),  # type: ignore[call-overload]
        window=int(raw.get("window", 0)),  # type: ignore[call-overload]
        secondary_to=secondary,
        extractor=str(extractor) if extractor else None,
        explanation=str(raw.get("explanation", "")),
        fixes=tuple(str(f) for f in raw.get("fixes", [])),  # type: ignore[attr-defined]
        references=tuple(str(r) for r in raw.get("references", [])),  # type: ignore[attr-defined]
        source=str(raw["source"]),
    )


@functools.cache
def load() -> SignatureSet:
    text = resources.files("dlrig.knowledge").joinpath("data", "signatures.toml").read_text("utf-8")
    raw = tomllib.loads(text)
    signatures = tuple(_signature(entry) for entry in raw.get("signature", []))
    ids = [s.id for s in signatures]
    if len(set(ids)) != len(ids):
        raise KnowledgeError("signatures.toml: duplicate signature ids")
    markers = tuple(
        Marker(id=str(m["id"]), anchors=tuple(str(a) for a in m["anchors"]))
        for m in raw.get("marker", [])
    )
    xid_causes = {int(code): str(cause) for code, cause in raw.get("xid_causes", {}).items()}
    for cause in xid_causes.values():
        if cause not in causes.CAUSES:
            raise KnowledgeError(f"signatures.toml: xid_causes names unknown cause {cause!r}")
    return SignatureSet(
        version=int(raw.get("version", 1)),
        signatures=signatures,
        markers=markers,
        facts=tuple(
            Fact(
                id=str(f["id"]),
                anchors=tuple(str(a) for a in f["anchors"]),
                patterns=tuple(_compile(str(p), str(f["id"])) for p in f["patterns"]),
            )
            for f in raw.get("fact", [])
        ),
        xid_causes=xid_causes,
    )
