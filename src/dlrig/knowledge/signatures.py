"""Failure signatures (knowledge/data/signatures.toml) as typed, validated objects.

Besides the signatures themselves the file holds what ranking needs to follow causality:
markers (a failure happened), finish evidence (the run went on to end well, so the errors
before it were survived), facts (numbers the fixes use) and the rule table saying which cause
explains which.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from dlrig import causes
from dlrig.knowledge import api_changes
from dlrig.knowledge.tables import KnowledgeError

# "fatal": the run died with this. "warning": counts only when the log also shows a failure.
# "supporting": never a finding on its own; it adds evidence to a finding of the same cause
# that other signatures made (an interface choice that only matters when connections fail).
LEVELS = ("fatal", "warning", "supporting")
EXTRACTORS = ("xid", "uneven_collectives", "torch_installs", "module")
# Conditions a rule may put on its consequence (computed by the ranker, see diagnose/rank.py).
RULE_CONDITIONS = ("xid_application_only",)
# "repo:path@version" (a file in a public repository at a tag or commit) or "docs:URL" (a
# published page, for closed-source emitters such as the CUDA runtime's error strings).
_SOURCE = re.compile(r"^(?:[\w.-]+/[\w.-]+:[^\s@]+@\S+|docs:https?://\S+)")


class Regex:
    """A signature's regex, compiled when a line first reaches it. A log holds the anchors of a
    few signatures only, and compiling all ~500 regexes at start-up took a quarter of a second
    of every `dlrig diagnose` (tests/unit/test_diagnose_rules.py compiles each one)."""

    __slots__ = ("_compiled", "_where", "pattern")

    def __init__(self, pattern: str, where: str) -> None:
        self.pattern = pattern
        self._where = where
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = _compile(self.pattern, self._where)
        return self._compiled

    def search(self, text: str) -> re.Match[str] | None:
        return self.compiled().search(text)

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


@dataclass(frozen=True)
class Signature:
    id: str
    cause: str
    weight: float
    level: str
    anchors: tuple[str, ...]
    patterns: tuple[Regex, ...]
    fields: tuple[Regex, ...]
    exclude: tuple[Regex, ...]
    min_count: int
    window: int
    extractor: str | None
    explanation: str
    fixes: tuple[str, ...]
    references: tuple[str, ...]
    sources: tuple[str, ...]

    @property
    def source(self) -> str:
        return " ; ".join(self.sources)

    @functools.cached_property
    def _screen(self) -> re.Pattern[str] | None:
        return _any_of(tuple(p.pattern for p in self.patterns))

    def match(self, text: str) -> re.Match[str] | None:
        """The first pattern that matches `text` (most specific patterns come first)."""
        screen = self._screen
        if screen is not None and screen.search(text) is None:
            return None  # one pass over a line that none of them matches (most lines)
        if any(e.search(text) for e in self.exclude):
            return None
        for pattern in self.patterns:
            found = pattern.search(text)
            if found:
                return found
        return None

    def read_fields(self, text: str) -> dict[str, str]:
        """Named values from the `fields` patterns, each searched on its own.

        Messages change the order and presence of their parts between versions (the CUDA
        allocator lists other processes before or after this one, and drops figures it cannot
        read), and pasted logs wrap them over lines; one regex per field survives all of that.
        """
        flat = " ".join(text.split())
        values: dict[str, str] = {}
        for pattern in self.fields:
            found = pattern.search(flat)
            if found:
                for key, value in found.groupdict().items():
                    if value and key not in values:
                        values[key] = value
        return values


@dataclass(frozen=True)
class Marker:
    id: str
    anchors: tuple[str, ...]


@dataclass(frozen=True)
class Finish:
    """Evidence that the run went on to end well (or that a named error was caught)."""

    id: str
    anchors: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]
    # Causes this evidence shows survived; empty means every cause (the run finished).
    survives: tuple[str, ...]
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Fact:
    """A number fixes use (the training batch size); earlier patterns outrank later ones."""

    id: str
    anchors: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]


@dataclass(frozen=True)
class Rule:
    """`root` explains `explains`: when both are found, the second is a consequence."""

    id: str
    root: tuple[str, ...]
    root_signatures: tuple[str, ...]  # empty: any evidence of the root cause qualifies
    explains: tuple[str, ...]
    only_signatures: tuple[str, ...]  # empty: always; else only when all evidence is these
    condition: str | None
    reason: str


@dataclass(frozen=True)
class SignatureSet:
    version: int
    signatures: tuple[Signature, ...]
    markers: tuple[Marker, ...]
    finishes: tuple[Finish, ...]
    facts: tuple[Fact, ...]
    rules: tuple[Rule, ...]
    xid_causes: dict[int, str]

    def for_cause(self, cause: str) -> tuple[Signature, ...]:
        return tuple(s for s in self.signatures if s.cause == cause)

    def all_patterns(self) -> tuple[re.Pattern[str], ...]:
        """Every regex the file holds, compiled (for the RE2-compatibility check and the
        benchmark)."""
        found: list[re.Pattern[str]] = []
        for signature in self.signatures:
            regexes = (*signature.patterns, *signature.fields, *signature.exclude)
            found += [r.compiled() for r in regexes]
        for finish in self.finishes:
            found += finish.patterns
        for fact in self.facts:
            found += fact.patterns
        return tuple(found)


_NAMED_GROUP = re.compile(r"(?<!\\)\(\?P<\w+>")  # not an escaped "\(?P<" (a literal)


@functools.cache
def _any_of(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """One regex that matches where any of a signature's patterns does (their groups unnamed),
    to turn a line away in one pass instead of one per pattern; None where that is not safe to
    build (a back-reference, a conditional or an inline flag) or not worth it (one pattern)."""
    if len(patterns) < 2 or any(
        re.search(r"\(\?P=|\(\?\(|\(\?[aiLmsux]|\\\d", p) for p in patterns
    ):
        return None
    body = "|".join("(?:" + _NAMED_GROUP.sub("(?:", p) + ")" for p in patterns)
    try:
        return re.compile(body, re.IGNORECASE)
    except re.error:
        return None


def _compile(text: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(text, re.IGNORECASE)
    except re.error as exc:
        raise KnowledgeError(f"signatures.toml: {where}: bad regex {text!r}: {exc}") from None


def _strings(raw: dict[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def _cause_ids(values: tuple[str, ...], where: str) -> tuple[str, ...]:
    for value in values:
        if value not in causes.CAUSES:
            raise KnowledgeError(f"signatures.toml: {where}: unknown cause {value!r}")
    return values


def _sources(raw: dict[str, Any], where: str) -> tuple[str, ...]:
    sources = _strings(raw, "source")
    if not sources:
        raise KnowledgeError(f"signatures.toml: {where}: has no source")
    for source in sources:
        if not _SOURCE.match(source):
            raise KnowledgeError(
                f"signatures.toml: {where}: source {source!r} is not 'owner/repo:path@version' "
                "or 'docs:URL'"
            )
    return sources


def _signature(raw: dict[str, Any]) -> Signature:
    sid = str(raw["id"])
    cause = str(raw["cause"])
    _cause_ids((cause,), sid)
    level = str(raw.get("level", "fatal"))
    if level not in LEVELS:
        raise KnowledgeError(f"signatures.toml: {sid}: level must be one of {LEVELS}")
    extractor = raw.get("extractor")
    if extractor is not None and extractor not in EXTRACTORS:
        raise KnowledgeError(f"signatures.toml: {sid}: unknown extractor {extractor!r}")
    anchors = _strings(raw, "anchors")
    patterns = tuple(Regex(p, sid) for p in _strings(raw, "patterns"))
    if raw.get("patterns_from") == "api_changes":
        # the names live in one table (api_changes.csv); the patterns are made from it
        patterns += tuple(Regex(p, sid) for p in api_changes.message_patterns())
    elif "patterns_from" in raw:
        raise KnowledgeError(
            f"signatures.toml: {sid}: unknown patterns_from {raw['patterns_from']!r}"
        )
    if not anchors or not patterns:
        raise KnowledgeError(f"signatures.toml: {sid}: needs anchors and patterns")
    if "secondary_to" in raw:
        raise KnowledgeError(f"signatures.toml: {sid}: causality goes in [[rule]], not here")
    weight = float(raw["weight"])
    if not 0 < weight <= 1:
        raise KnowledgeError(f"signatures.toml: {sid}: weight must be in (0, 1]")
    return Signature(
        id=sid,
        cause=cause,
        weight=weight,
        level=level,
        anchors=anchors,
        patterns=patterns,
        fields=tuple(Regex(p, sid) for p in _strings(raw, "fields")),
        exclude=tuple(Regex(e, sid) for e in _strings(raw, "exclude")),
        min_count=int(raw.get("min_count", 1)),
        window=int(raw.get("window", 0)),
        extractor=str(extractor) if extractor else None,
        explanation=str(raw.get("explanation", "")),
        fixes=_strings(raw, "fixes"),
        references=_strings(raw, "references"),
        sources=_sources(raw, sid),
    )


def _rule(raw: dict[str, Any], signature_ids: set[str]) -> Rule:
    rid = str(raw["id"])
    condition = raw.get("condition")
    if condition is not None and condition not in RULE_CONDITIONS:
        raise KnowledgeError(f"signatures.toml: rule {rid}: unknown condition {condition!r}")
    root_signatures = _strings(raw, "root_signatures")
    only = _strings(raw, "only_signatures")
    for sid in (*root_signatures, *only):
        if sid not in signature_ids:
            raise KnowledgeError(f"signatures.toml: rule {rid}: unknown signature {sid!r}")
    if not raw.get("reason"):
        raise KnowledgeError(f"signatures.toml: rule {rid}: needs a reason")
    return Rule(
        id=rid,
        root=_cause_ids(_strings(raw, "root"), rid),
        root_signatures=root_signatures,
        explains=_cause_ids(_strings(raw, "explains"), rid),
        only_signatures=only,
        condition=str(condition) if condition else None,
        reason=str(raw["reason"]),
    )


def parse(text: str) -> SignatureSet:
    raw = tomllib.loads(text)
    signatures = tuple(_signature(entry) for entry in raw.get("signature", []))
    ids = [s.id for s in signatures]
    if len(set(ids)) != len(ids):
        raise KnowledgeError("signatures.toml: duplicate signature ids")
    markers = tuple(
        Marker(id=str(m["id"]), anchors=_strings(m, "anchors")) for m in raw.get("marker", [])
    )
    finishes = tuple(
        Finish(
            id=str(f["id"]),
            anchors=_strings(f, "anchors"),
            patterns=tuple(_compile(p, str(f["id"])) for p in _strings(f, "patterns")),
            survives=_cause_ids(_strings(f, "survives"), str(f["id"])),
            sources=_sources(f, str(f["id"])),
        )
        for f in raw.get("finish", [])
    )
    xid_causes = {int(code): str(cause) for code, cause in raw.get("xid_causes", {}).items()}
    _cause_ids(tuple(xid_causes.values()), "xid_causes")
    return SignatureSet(
        version=int(raw.get("version", 1)),
        signatures=signatures,
        markers=markers,
        finishes=finishes,
        facts=tuple(
            Fact(
                id=str(f["id"]),
                anchors=_strings(f, "anchors"),
                patterns=tuple(_compile(p, str(f["id"])) for p in _strings(f, "patterns")),
            )
            for f in raw.get("fact", [])
        ),
        rules=tuple(_rule(r, set(ids)) for r in raw.get("rule", [])),
        xid_causes=xid_causes,
    )


@functools.cache
def load() -> SignatureSet:
    text = resources.files("dlrig.knowledge").joinpath("data", "signatures.toml").read_text("utf-8")
    return parse(text)
