"""From signature hits to ranked causes: the root cause first, then what it explains.

Several signatures often match one crash: one rank's OOM makes every other rank's NCCL
collective time out; a device-side assert is followed by cuDNN and illegal-address errors. Each
signature says which causes explain it (`secondary_to`); the root is the strongest finding
that nothing else explains, the earliest one on ties.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlrig.diagnose.scanner import Hit, ScanResult
from dlrig.knowledge import xid as xid_knowledge
from dlrig.knowledge.signatures import SignatureSet

# Severity of an Xid sets how much weight its finding carries.
_XID_WEIGHT = {"critical": 0.94, "warn": 0.82, "info": 0.62}
# Xids the application causes are explained by the application's own error.
_APPLICATION_ERRORS = (
    "illegal_memory_access",
    "device_side_assert_label_range",
    "cuda_oom",
    "cudnn_status_error",
)


@dataclass
class Candidate:
    cause: str
    weight: float
    level: str
    first_line: int
    first_source: str
    hits: list[Hit] = field(default_factory=list)
    secondary_to: set[str] = field(default_factory=set)
    groups: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)

    def absorb(self, hit: Hit, weight: float, level: str, secondary_to: tuple[str, ...]) -> None:
        self.hits.append(hit)
        self.weight = max(self.weight, weight)
        # Any fatal signature makes the finding fatal: an interface choice (warning) plus the
        # connection failure it caused (fatal) is one fatal finding.
        if level == "fatal":
            self.level = "fatal"
        if hit.first_line is not None and hit.first_line < self.first_line:
            self.first_line = hit.first_line
            self.first_source = hit.first_source or self.first_source
        self.secondary_to.update(secondary_to)
        for key, value in hit.groups.items():
            self.groups.setdefault(key, value)
        self.ranks.update(hit.ranks)


@dataclass
class Ranked:
    candidate: Candidate
    role: str  # root | secondary
    confidence: float
    reason: str


def _candidates(result: ScanResult, signature_set: SignatureSet) -> dict[str, Candidate]:
    found: dict[str, Candidate] = {}

    def add(
        cause: str, hit: Hit, weight: float, level: str, secondary: tuple[str, ...]
    ) -> Candidate:
        candidate = found.get(cause)
        if candidate is None:
            candidate = found[cause] = Candidate(
                cause, 0.0, "warning", hit.first_line or 0, hit.first_source or ""
            )
        candidate.absorb(hit, weight, level, secondary)
        return candidate

    for hit in result.hits.values():
        signature = hit.signature
        if hit.count < signature.min_count:
            continue
        if signature.extractor == "xid":
            _add_xids(hit, signature_set, add)
        elif signature.extractor == "uneven_collectives":
            reason = _uneven_reason(hit)
            if reason:
                candidate = add(
                    signature.cause, hit, signature.weight, signature.level, signature.secondary_to
                )
                candidate.groups["uneven_reason"] = reason
        else:
            add(signature.cause, hit, signature.weight, signature.level, signature.secondary_to)
    return found


def _add_xids(hit: Hit, signature_set: SignatureSet, add: object) -> None:
    """Split Xid events by code: each code maps to a cause and a severity from the table."""
    by_code: dict[int, int] = {}
    for groups in hit.group_sets:
        text = groups.get("code")
        if text and text.isdigit():
            by_code[int(text)] = by_code.get(int(text), 0) + 1

    def severity_rank(code: int) -> int:
        info = xid_knowledge.lookup(code)
        return ("critical", "warn", "info").index(info.severity) if info else 1

    # Most severe code first: it names the finding's explanation and action.
    for code, count in sorted(by_code.items(), key=lambda item: (severity_rank(item[0]), item[0])):
        info = xid_knowledge.lookup(code)
        severity = info.severity if info else "warn"
        cause = signature_set.xid_causes.get(code, "xid_error")
        weight = _XID_WEIGHT[severity]
        secondary: tuple[str, ...] = _APPLICATION_ERRORS if severity == "info" else ()
        candidate = add(cause, hit, weight, "fatal", secondary)  # type: ignore[operator]
        candidate.groups.setdefault("code", str(code))
        candidate.groups.setdefault("xid_name", info.name if info else "not in the Xid table")
        candidate.groups.setdefault(
            "xid_culprit", "/".join(info.culprits) if info and info.culprits else "unknown"
        )
        candidate.groups.setdefault(
            "xid_action", info.action if info else "look the code up in NVIDIA's Xid catalogue"
        )
        candidate.groups.setdefault("xid_severity", severity)
        candidate.notes.append(
            f"Xid {code} ×{count}" + (f": {info.name} ({severity})" if info else "")
        )


def _uneven_reason(hit: Hit) -> str | None:
    """Why the timed-out collectives show ranks on different paths, or None."""
    by_seq: dict[str, set[tuple[str, str]]] = {}
    seqs: set[str] = set()
    for groups in hit.group_sets:
        seq = groups.get("seq")
        if seq is None:
            continue
        seqs.add(seq)
        by_seq.setdefault(seq, set()).add((groups.get("op", "?"), groups.get("numel", "?")))
    for seq, shapes in by_seq.items():
        if len(shapes) > 1:
            described = ", ".join(f"{op} of {numel} elements" for op, numel in sorted(shapes))
            return f"collective #{seq} is {described} on different ranks"
    if len(seqs) > 1:
        return f"ranks timed out in different collectives (#{', #'.join(sorted(seqs, key=int))})"
    return None


def rank(result: ScanResult, signature_set: SignatureSet) -> list[Ranked]:
    candidates = _candidates(result, signature_set)
    failure_seen = any(c.level == "fatal" for c in candidates.values()) or any(
        result.markers.values()
    )
    # A warning-level finding alone (an interface choice, a few overflows) is not a crash.
    valid = {
        cause: c
        for cause, c in candidates.items()
        if c.level == "fatal" or (failure_seen and c.weight >= 0.6)
    }
    if not valid:
        return []

    def explained_by(candidate: Candidate) -> list[str]:
        return [
            other
            for other in candidate.secondary_to
            if other in valid
            and other != candidate.cause
            and candidate.cause not in valid[other].secondary_to
        ]

    primaries = [c for c in valid.values() if not explained_by(c)] or list(valid.values())
    primaries.sort(key=lambda c: (-c.weight, c.first_line))
    root = primaries[0]
    rivals = [c for c in primaries[1:] if c.weight >= root.weight - 0.05]
    confidence = root.weight * (0.8 if rivals else 1.0) * (0.85 if root.level == "warning" else 1.0)
    explained = [c for c in valid.values() if c is not root and root.cause in explained_by(c)]
    reason_parts = [f"strongest finding not explained by another (first at line {root.first_line})"]
    if explained:
        reason_parts.append("it explains " + ", ".join(sorted(c.cause for c in explained)))
    if rivals:
        reason_parts.append("also consistent with " + ", ".join(c.cause for c in rivals))
    ranked = [Ranked(root, "root", round(min(0.99, confidence), 2), "; ".join(reason_parts))]
    others = sorted(
        (c for c in valid.values() if c is not root), key=lambda c: (-c.weight, c.first_line)
    )
    for candidate in others:
        by = explained_by(candidate)
        if root.cause in by:
            reason = f"follows from {root.cause}"
        elif by:
            reason = f"explained by {', '.join(sorted(by))}"
        else:
            reason = "independent finding, weaker than the root cause"
        ranked.append(Ranked(candidate, "secondary", round(candidate.weight * 0.5, 2), reason))
    return ranked
