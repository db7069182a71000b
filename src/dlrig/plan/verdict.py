"""One rule's verdict, and how a rule reports a pass, a breach or a skip."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dlrig.knowledge import plan as knowledge


@dataclass(frozen=True)
class RuleResult:
    id: str
    status: str  # ok | warn | fail | skip
    title: str
    evidence: tuple[str, ...] = ()
    fix: str | None = None
    source: str = ""

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "evidence": list(self.evidence)}


def verdict(
    rule_id: str, broken: bool, title: str, evidence: list[str], fix: str | None = None
) -> RuleResult:
    """A pass or a breach of the rule; a breach's fix is `fix`, else the rule row's own."""
    row = knowledge.rule(rule_id)
    status = row.severity if broken else "ok"
    told = (fix or row.fix) if broken else None
    return RuleResult(rule_id, status, title, tuple(evidence), told, row.source)


def skipped(rule_id: str, why: str) -> RuleResult:
    return RuleResult(rule_id, "skip", why, (), None, knowledge.rule(rule_id).source)
