"""One rule's verdict, and how a rule reports a pass, a breach or a skip."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlrig.knowledge import plan as knowledge
from dlrig.plain import from_plain
from dlrig.report import Finding, Status


@dataclass(frozen=True, kw_only=True)
class RuleResult(Finding):
    """A build rule's verdict (ok, warn, fail or skip); `source` is the rule row's source."""

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "status": self.status.value,
            "title": self.title,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> RuleResult:
        result: RuleResult = from_plain(RuleResult, dict(document), "rule")
        return result


def result(
    rule_id: str, status: Status, title: str, evidence: tuple[str, ...], fix: str | None
) -> RuleResult:
    """A rule's result carrying the rule row's source."""
    source = knowledge.rule(rule_id).source
    return RuleResult(
        id=rule_id, status=status, title=title, evidence=evidence, fix=fix, source=source
    )


def verdict(
    rule_id: str, broken: bool, title: str, evidence: list[str], fix: str | None = None
) -> RuleResult:
    """A pass or a breach of the rule; a breach's fix is `fix`, else the rule row's own."""
    row = knowledge.rule(rule_id)
    status = Status(row.severity) if broken else Status.OK
    told = (fix or row.fix) if broken else None
    return result(rule_id, status, title, tuple(evidence), told)


def skipped(rule_id: str, why: str) -> RuleResult:
    return result(rule_id, Status.SKIP, why, (), None)
