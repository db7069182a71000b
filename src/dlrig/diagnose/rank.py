"""From signature hits to ranked causes: the root cause first, then what it explains.

Several signatures often match one crash: one rank's OOM makes every other rank's NCCL
collective time out; a device-side assert is followed by cuDNN and illegal-address errors; the
kernel's OOM killer takes a DataLoader worker with it. The rule table in signatures.toml
(`[[rule]]`, each with its reason) says which cause explains which; the root is the strongest
finding no rule explains away, the earliest one on ties. When only watchdog frames remain,
nothing explains the timeout and it is the finding.

Errors the run survived are set aside before ranking: a finding whose every line comes before
evidence that the run went on to finish (Lightning's `max_epochs=N reached`, HF Trainer's
closing summary) or that the error was caught (a batch-size finder's "failed, trying batch
size N") did not end the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dlrig.diagnose.found import Hit, ScanResult
from dlrig.knowledge import extensions
from dlrig.knowledge import xid as xid_knowledge
from dlrig.knowledge.signatures import Rule, SignatureSet

# Below render's "possible" threshold: named, with both readings, never headlined as the cause.
UNKNOWN_MODULE_WEIGHT = 0.45

# Severity of an Xid sets how much weight its finding carries.
_XID_WEIGHT = {"critical": 0.94, "warn": 0.82, "info": 0.62}


@dataclass
class Candidate:
    cause: str
    weight: float
    level: str
    first_line: int
    first_source: str
    hits: list[Hit] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    # signature id -> evidence lines of this cause from it (an Xid hit splits by code)
    evidence: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)
    last_line: dict[str, int] = field(default_factory=dict)
    xid_severities: set[str] = field(default_factory=set)

    @property
    def signature_ids(self) -> set[str]:
        return {h.signature.id for h in self.hits}

    def absorb(self, hit: Hit, weight: float, level: str, groups: dict[str, str]) -> None:
        self.hits.append(hit)
        self.weight = max(self.weight, weight)
        # Any fatal signature makes the finding fatal: an interface choice (supporting) plus the
        # connection failure it caused (fatal) is one fatal finding.
        if level == "fatal" or (level == "warning" and self.level == "supporting"):
            self.level = level
        if hit.first_line is not None and hit.first_line < self.first_line:
            self.first_line = hit.first_line
            self.first_source = hit.first_source or self.first_source
        for key, value in groups.items():
            self.groups.setdefault(key, value)
        self.ranks.update(hit.ranks)
        for source, line in hit.last_line.items():
            self.last_line[source] = max(line, self.last_line.get(source, 0))


@dataclass
class Ranked:
    candidate: Candidate
    role: str  # root | secondary | survived
    confidence: float
    reason: str


Add = Callable[[str, Hit, float, str, dict[str, str]], Candidate]


def _candidates(result: ScanResult, signature_set: SignatureSet) -> dict[str, Candidate]:
    found: dict[str, Candidate] = {}

    def add(cause: str, hit: Hit, weight: float, level: str, groups: dict[str, str]) -> Candidate:
        candidate = found.get(cause)
        if candidate is None:
            candidate = found[cause] = Candidate(
                cause, 0.0, "supporting", hit.first_line or 0, hit.first_source or ""
            )
        candidate.absorb(hit, weight, level, groups)
        return candidate

    # Strongest signatures first: their values fill the fix templates before weaker ones'.
    for hit in sorted(result.hits.values(), key=lambda h: -h.signature.weight):
        signature = hit.signature
        if hit.count < signature.min_count:
            continue
        groups = hit.best_groups or hit.groups
        if signature.extractor == "xid":
            _add_xids(hit, signature_set, add)
        elif signature.extractor == "uneven_collectives":
            reason = _uneven_reason(hit)
            if reason:
                candidate = add(signature.cause, hit, signature.weight, signature.level, groups)
                candidate.groups["uneven_reason"] = reason
        elif signature.extractor == "module":
            # A module no package is known to install, nor a typo of one, is as often the
            # project's own code (a script run from another folder, an import that names a file
            # the repository does not have) as a package to install: a possible cause, not a
            # confident one.
            known, typo_of = extensions.known_module(groups.get("module", ""))
            weight = signature.weight if known or typo_of else UNKNOWN_MODULE_WEIGHT
            add(signature.cause, hit, weight, signature.level, groups)
        elif signature.extractor == "torch_installs":
            installs = _torch_installs(hit)
            if installs:
                candidate = add(signature.cause, hit, signature.weight, signature.level, groups)
                candidate.groups["torch_installs"] = installs
        else:
            add(signature.cause, hit, signature.weight, signature.level, groups)
    # A supporting signature never stands alone.
    return {cause: c for cause, c in found.items() if c.level != "supporting"}


def _add_xids(hit: Hit, signature_set: SignatureSet, add: Add) -> None:
    """Split Xid events by code: each code maps to a cause, a severity and a meaning of its own."""
    by_code: dict[int, list[dict[str, str]]] = {}
    for groups in hit.group_sets:
        text = groups.get("code")
        if text and text.isdigit():
            by_code.setdefault(int(text), []).append(groups)

    def severity_rank(code: int) -> int:
        info = xid_knowledge.lookup(code)
        return ("critical", "warn", "info").index(info.severity) if info else 1

    # Most severe code first: it names the finding's explanation and action. Each code's own
    # lines give its PCI address and evidence, so one code's name never labels another's line.
    for code, occurrences in sorted(
        by_code.items(), key=lambda item: (severity_rank(item[0]), item[0])
    ):
        info = xid_knowledge.lookup(code)
        severity = info.severity if info else "warn"
        cause = signature_set.xid_causes.get(code, "xid_error")
        first = occurrences[0]
        groups = {
            "code": str(code),
            "pci": first.get("pci", "?"),
            "xid_name": info.name if info else "not in the Xid table",
            "xid_culprit": "/".join(info.culprits) if info and info.culprits else "unknown",
            "xid_action": info.action if info else "look the code up in NVIDIA's Xid catalogue",
            "xid_severity": severity,
        }
        candidate = add(cause, hit, _XID_WEIGHT[severity], "fatal", groups)
        candidate.xid_severities.add(severity)
        evidence = [
            (g["_source"], int(g["_line"]), g["_text"])
            for g in occurrences[:3]
            if g.get("_line", "").isdigit()
        ]
        candidate.evidence.setdefault(hit.signature.id, []).extend(evidence)
        candidate.notes.append(
            f"Xid {code} ×{len(occurrences)}" + (f": {info.name} ({severity})" if info else "")
        )


def _uneven_reason(hit: Hit) -> str | None:
    """Why the timed-out collectives show ranks on different paths, or None."""
    by_seq: dict[str, set[tuple[str, str]]] = {}
    seqs_by_rank: dict[str, set[str]] = {}
    for groups in hit.group_sets:
        seq = groups.get("seq")
        if seq is None:
            continue
        by_seq.setdefault(seq, set()).add((groups.get("op", "?"), groups.get("numel", "?")))
        seqs_by_rank.setdefault(groups.get("_rank", "?"), set()).add(seq)
    # The same collective number with a different operation or size: the ranks are on
    # different paths through the loop.
    for seq, shapes in by_seq.items():
        if len(shapes) > 1:
            described = ", ".join(f"{op} of {numel} elements" for op, numel in sorted(shapes))
            return f"collective #{seq} is {described} on different ranks"
    # Each rank stuck in one collective, and not the same one. A rank reporting several
    # numbers has several works outstanding (or several process groups, each counting its
    # own), which says nothing about the others.
    if "?" not in seqs_by_rank and all(len(s) == 1 for s in seqs_by_rank.values()):
        seqs = {next(iter(s)) for s in seqs_by_rank.values()}
        if len(seqs) > 1:
            listed = ", #".join(sorted(seqs, key=int))
            return f"ranks timed out in different collectives (#{listed})"
    return None


def _torch_installs(hit: Hit) -> str | None:
    """The installs a package listing shows, when it shows torch at two versions, else None.

    pip lists a conda-installed torch too (old collect_env pastes show `[pip] torch==1.0.0` beside
    `[conda] pytorch 1.0.0`), and conda lists pip's torch with channel `pypi` or `<pip>`: one
    version under two names is one install. Two versions (local suffixes such as +cu118 aside), or
    pytorch beside pytorch-nightly, are two installs.
    """
    rows: dict[str, set[str]] = {}
    for groups in hit.group_sets:
        package, version = groups.get("pkg", ""), groups.get("version", "")
        if package and version:
            rows.setdefault(version.split("+")[0], set()).add(f"{package} {version}")
    if len(rows) < 2:
        return None
    return ", ".join(sorted(name for names in rows.values() for name in names))


# --- survived errors --------------------------------------------------------------------------
def survived_by(
    candidate: Candidate, result: ScanResult, survives: dict[str, tuple[str, ...]]
) -> str | None:
    """The finish evidence that follows every line of this finding, or None.

    Compared per input: a marker in one rank's file says nothing about another file.
    `survives` maps a finish id to the causes it shows survived (empty: all of them).
    """
    if not candidate.last_line:
        return None
    proofs = []
    for source, last in candidate.last_line.items():
        after = [
            (line, finish_id)
            for src, line, finish_id in result.finishes
            if src == source
            and line > last
            and (not survives.get(finish_id) or candidate.cause in survives[finish_id])
        ]
        if not after:
            return None
        proofs.append(f"{source}:{after[0][0]} ({after[0][1]})")
    return ", ".join(proofs)


# --- causality --------------------------------------------------------------------------------
def _rule_applies(rule: Rule, root: Candidate, consequence: Candidate) -> bool:
    if root.cause not in rule.root or consequence.cause not in rule.explains:
        return False
    if rule.root_signatures and not root.signature_ids & set(rule.root_signatures):
        return False
    if rule.only_signatures and not consequence.signature_ids <= set(rule.only_signatures):
        return False
    if rule.condition == "xid_application_only":
        return consequence.xid_severities == {"info"}
    return True


def explaining_rules(
    candidate: Candidate, valid: dict[str, Candidate], rules: tuple[Rule, ...]
) -> list[tuple[Candidate, Rule]]:
    """The findings (with the rule) that explain `candidate`; mutual explanations cancel out."""
    found = []
    for other in valid.values():
        if other is candidate:
            continue
        rule = next((r for r in rules if _rule_applies(r, other, candidate)), None)
        if rule is None:
            continue
        if any(_rule_applies(r, candidate, other) for r in rules):
            continue
        found.append((other, rule))
    return found


def rank(result: ScanResult, signature_set: SignatureSet) -> list[Ranked]:
    survives = {f.id: f.survives for f in signature_set.finishes}
    candidates = _candidates(result, signature_set)
    survived: list[Ranked] = []
    for cause, candidate in list(candidates.items()):
        proof = survived_by(candidate, result, survives)
        if proof:
            survived.append(Ranked(candidate, "survived", 0.0, f"the run went on past it: {proof}"))
            del candidates[cause]
    any_fatal = any(c.level == "fatal" for c in candidates.values())
    # a bare frame line shows a cut traceback for quoting its error, not a failure by itself;
    # a lead (a banner, a fallback notice a working run also prints) is no failure either
    failure_seen = any(c.level == "fatal" and c.weight >= 0.5 for c in candidates.values()) or any(
        count for marker, count in result.markers.items() if marker != "traceback_frame"
    )
    # A warning-level finding alone (a few overflows, a library warning) is not a crash. Past a
    # failure, a strong warning counts; a weak one (a possible cause) only when nothing fatal
    # was found: then it is the one lead there is, and its confidence stays low.
    valid = {
        cause: c
        for cause, c in candidates.items()
        if c.level == "fatal" or (failure_seen and (c.weight >= 0.6 or not any_fatal))
    }
    if not valid:
        return survived
    rules = signature_set.rules
    explained = {cause: explaining_rules(c, valid, rules) for cause, c in valid.items()}
    primaries = [c for c in valid.values() if not explained[c.cause]] or list(valid.values())
    primaries.sort(key=lambda c: (-c.weight, c.first_line))
    # findings about as strong as the strongest (a rival) in the same log: the earliest is the
    # root, as later errors of a run more often follow from an earlier one than the reverse (a
    # fatal finding before a warning-level one, whatever their lines)
    root = min(
        (
            c
            for c in primaries
            if c.weight >= primaries[0].weight - 0.05
            and c.first_source == primaries[0].first_source
        ),
        key=lambda c: (c.level != "fatal", c.first_line),
    )
    rivals = [c for c in primaries if c is not root and c.weight >= root.weight - 0.05]
    confidence = root.weight * (0.8 if rivals else 1.0) * (0.85 if root.level == "warning" else 1.0)
    consequences = [
        c for c in valid.values() if any(other is root for other, _ in explained[c.cause])
    ]
    reason_parts = [
        "strongest finding not explained by another, or the earliest of those about as strong "
        f"(first at line {root.first_line})"
    ]
    if consequences:
        reason_parts.append("it explains " + ", ".join(sorted(c.cause for c in consequences)))
    if rivals:
        reason_parts.append("also consistent with " + ", ".join(c.cause for c in rivals))
    ranked = [Ranked(root, "root", round(min(0.99, confidence), 2), "; ".join(reason_parts))]
    others = sorted(
        (c for c in valid.values() if c is not root), key=lambda c: (-c.weight, c.first_line)
    )
    for candidate in others:
        by = explained[candidate.cause]
        from_root = next((rule for other, rule in by if other is root), None)
        if from_root is not None:
            reason = f"follows from {root.cause}: {from_root.reason}"
        elif by:
            reason = f"explained by {', '.join(sorted(o.cause for o, _ in by))}: {by[0][1].reason}"
        else:
            reason = "independent finding, weaker than the root cause"
        ranked.append(Ranked(candidate, "secondary", round(candidate.weight * 0.5, 2), reason))
    return ranked + survived
