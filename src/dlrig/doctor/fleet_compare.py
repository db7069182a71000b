"""What `dlrig doctor --fleet` compares: the nodes' doctor reports, the facts that must agree
across a training cluster, and which node is the odd one out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dlrig import doctor
from dlrig.report import envelope

SCHEMA = "dlrig.doctor.fleet"
SCHEMA_VERSION = 1

NodeState = Literal["ok", "drained", "down", "failed"]


@dataclass(frozen=True)
class NodeResult:
    node: str
    report: dict[str, Any] | None  # a `doctor --json` document
    state: NodeState = "ok"
    detail: str | None = None


@dataclass(frozen=True)
class Difference:
    attribute: str
    values: dict[str, str]  # node -> value ("unset" when absent)
    majority: str | None
    odd_nodes: tuple[str, ...]


@dataclass(frozen=True)
class CheckDifference:
    check: str
    title: str
    statuses: dict[str, str]  # node -> ok | warn | fail | ...
    failing_nodes: tuple[str, ...]
    evidence: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetReport:
    nodes: tuple[NodeResult, ...]
    differences: tuple[Difference, ...]
    checks: tuple[CheckDifference, ...]

    @property
    def odd_nodes(self) -> tuple[str, ...]:
        found: list[str] = []
        for node in self.nodes:
            if node.state != "ok":
                found.append(node.node)
        for difference in self.differences:
            found.extend(difference.odd_nodes)
        for check in self.checks:
            found.extend(check.failing_nodes)
        return tuple(dict.fromkeys(found))

    @property
    def no_majority(self) -> tuple[str, ...]:
        """Attributes on which the nodes disagree with no majority to name an odd one."""
        return tuple(d.attribute for d in self.differences if not d.odd_nodes)

    @property
    def problem(self) -> bool:
        return bool(self.odd_nodes) or bool(self.no_majority)

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "nodes": [
                    {
                        "node": n.node,
                        "state": n.state,
                        "detail": n.detail,
                        "failed_checks": failed_checks(n.report),
                    }
                    for n in self.nodes
                ],
                "odd_nodes": list(self.odd_nodes),
                "no_majority": list(self.no_majority),
                "differences": [
                    {
                        "attribute": d.attribute,
                        "values": d.values,
                        "majority": d.majority,
                        "odd_nodes": list(d.odd_nodes),
                    }
                    for d in self.differences
                ],
                "checks": [
                    {
                        "check": c.check,
                        "title": c.title,
                        "statuses": c.statuses,
                        "failing_nodes": list(c.failing_nodes),
                        "evidence": c.evidence,
                    }
                    for c in self.checks
                ],
            },
        )


def failed_checks(report: dict[str, Any] | None, status: str = "fail") -> list[str]:
    if not report:
        return []
    return [c["id"] for c in report.get("checks", []) if c.get("status") == status]


# --- facts compared across nodes -----------------------------------------------------------


def _get(document: dict[str, Any] | None, *path: str) -> Any:
    value: Any = document
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _gpu_summary(gpus: list[dict[str, Any]] | None, key: str) -> str | None:
    if gpus is None:
        return None
    counts = Counter(key_of(gpu, key) for gpu in gpus)
    return ", ".join(f"{n}x {value}" for value, n in sorted(counts.items())) or "none"


def key_of(gpu: dict[str, Any], key: str) -> str:
    if key == "pcie":
        # The lanes the link trained at, against what it supports: a GPU at x8 of x16 is the
        # difference a fleet comparison exists to catch. The generation is compared at its
        # maximum: an idle GPU drops to gen 1 to save power, which is no difference at all.
        link = gpu.get("pcie") or {}
        width, top = link.get("width_current"), link.get("width_max")
        text = f"gen{link.get('gen_max', '?')}"
        if width is not None and top is not None and width != top:
            return f"{text} x{width} of x{top}"
        return f"{text} x{width if width is not None else top if top is not None else '?'}"
    if key == "ecc":
        enabled = gpu.get("ecc_mode_enabled")
        errors = (gpu.get("ecc_errors") or {}).get("volatile_uncorrected")
        text = {True: "ECC on", False: "ECC off", None: "ECC unknown"}[enabled]
        return text + (f" ({errors} uncorrected)" if errors else "")
    return str(gpu.get(key))


def facts_of(report: dict[str, Any]) -> dict[str, str]:
    """The comparable facts of one node's doctor report (absent -> 'unset')."""
    machine = report.get("machine") or {}
    gpus = machine.get("gpus")
    torch = _get(machine, "frameworks", "torch") or {}
    facts = {
        "os": _get(machine, "os", "name"),
        "kernel": _get(machine, "os", "kernel_release"),
        "driver": _get(machine, "driver", "version"),
        "driver CUDA": _get(machine, "driver", "cuda_version"),
        "CUDA toolkit (nvcc)": _get(machine, "cuda_toolkit", "nvcc_version"),
        "torch": torch.get("version"),
        "torch CUDA": torch.get("cuda_version"),
        "GPU count": str(len(gpus)) if gpus is not None else None,
        "GPU model": _gpu_summary(gpus, "name"),
        "PCIe links": _gpu_summary(gpus, "pcie"),
        "ECC": _gpu_summary(gpus, "ecc"),
    }
    nccl = machine.get("nccl") or {}
    settings: dict[str, str] = {}
    for key, value in nccl.get("conf") or ():
        settings[key] = f"{value} (nccl.conf)"
    for key, value in (nccl.get("env") or ()) or (machine.get("env") or ()):
        if key.startswith("NCCL_"):
            settings[key] = f"{value} (environment)"
    for key, value in settings.items():
        facts[key] = value
    return {k: str(v) for k, v in facts.items() if v is not None}


def compare(nodes: Sequence[NodeResult]) -> FleetReport:
    reporting = [n for n in nodes if n.report is not None]
    per_node = {n.node: facts_of(n.report) for n in reporting if n.report is not None}
    attributes = sorted({key for facts in per_node.values() for key in facts})
    differences = []
    for attribute in attributes:
        values = {node: facts.get(attribute, "unset") for node, facts in per_node.items()}
        if len(set(values.values())) <= 1:
            continue
        counts = Counter(values.values()).most_common()
        majority = counts[0][0] if len(counts) == 1 or counts[0][1] > counts[1][1] else None
        odd = tuple(
            node for node, value in values.items() if majority is not None and value != majority
        )
        if majority is None and len(values) == 2:
            # Two nodes, two values: the one whose value is "unset" is not the odd one; the one
            # that set something different is. Two different settings: no majority, no odd one.
            unset = [n for n, v in values.items() if v == "unset"]
            odd = tuple(n for n in values if n not in unset) if len(unset) == 1 else ()
        differences.append(Difference(attribute, values, majority, odd))
    checks = []
    ids: dict[str, str] = {}
    for node in reporting:
        for check in (node.report or {}).get("checks", []):
            entry = doctor.get(check["id"])
            ids.setdefault(check["id"], entry.title if entry else check["id"])
    for check_id, title in ids.items():
        statuses: dict[str, str] = {}
        evidence: dict[str, str] = {}
        for node in reporting:
            for check in (node.report or {}).get("checks", []):
                if check["id"] == check_id:
                    statuses[node.node] = check["status"]
                    if check["status"] in {"fail", "warn"}:
                        evidence[node.node] = check.get("title", "")
        if len(set(statuses.values())) <= 1:
            continue
        failing = tuple(n for n, s in statuses.items() if s in {"fail", "warn"})
        if failing and len(failing) < len(statuses):
            checks.append(CheckDifference(check_id, title, statuses, failing, evidence))
    return FleetReport(nodes=tuple(nodes), differences=tuple(differences), checks=tuple(checks))
