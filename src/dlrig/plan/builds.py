"""Candidate builds: every priced GPU at every sensible count, with the parts it needs.

Parts follow the same rules `plan check` applies: a CPU with the lanes and cores for the GPU
count (Puget, Dettmers), RAM at ram_to_vram_ratio x GPU memory (Puget), a PSU sized by
Dettmers' margins, an NVMe staging tier and an HDD capacity tier (Puget's tiers), NVLink
bridges where the cards take them. Each part keeps the price row it came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from dlrig.knowledge import plan as knowledge
from dlrig.knowledge.gpus import GpuSpec, catalogue
from dlrig.plan.assume import Inputs
from dlrig.plan.buildspec import Build, Circuit, CpuPart, GpuPart, PsuPart, StoragePart
from dlrig.plan.power import DETTMERS_MARGIN
from dlrig.plan.rules import round_up_ram

WORKSTATION_COUNTS = (1, 2, 3, 4)
SERVER_COUNTS = (4, 8)
HGX_COUNTS = (4, 8)
HGX_GPUS = ("a100", "h100", "h200", "b200")  # baseboards with a platform price in the data

FormFactor = Literal["workstation", "4u-server", "any"]
Condition = Literal["new", "used", "any"]


@dataclass(frozen=True)
class Part:
    kind: str
    name: str
    quantity: float
    unit_price_usd: float
    source: str
    assumption: bool = False

    @property
    def total_usd(self) -> float:
        return self.quantity * self.unit_price_usd

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "name": self.name,
            "quantity": self.quantity,
            "unit_price_usd": round(self.unit_price_usd, 2),
            "total_usd": round(self.total_usd, 2),
            "assumption": self.assumption,
            "source": self.source,
        }


@dataclass(frozen=True)
class Candidate:
    build: Build
    condition: str
    parts: tuple[Part, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def capex_usd(self) -> float:
        return sum(part.total_usd for part in self.parts)

    @property
    def label(self) -> str:
        b = self.build
        used = " (used)" if self.condition == "used" else ""
        return f"{b.gpus.count} x {b.gpus.spec.id}{used} {b.form_factor}"


@dataclass(frozen=True)
class Wanted:
    form_factor: FormFactor = "any"
    condition: Condition = "any"
    gpus: tuple[str, ...] = ()  # catalogue ids to consider (empty: all priced)
    max_gpus: int = 8
    liquid: bool = False
    circuit: Circuit | None = None


def _component(item: str) -> Part:
    row = knowledge.component(item)
    return Part(row.category, item, 1, row.price_usd, row.source)


def _cpu_for(form: str, count: int, consumer: bool) -> tuple[knowledge.Cpu, int] | None:
    """The cheapest priced CPU (and socket count) with the lanes and cores for `count` GPUs."""
    per_gpu = 8 if consumer else 16
    lanes = per_gpu * count + 4  # + one NVMe drive
    cores = max(4 * count, 16 if count > 1 else 8)
    platforms = {
        "workstation": ("desktop", "hedt", "workstation"),
        "4u-server": ("server",),
        "hgx": ("server",),
    }[form]
    best: tuple[float, knowledge.Cpu, int] | None = None
    for cpu in knowledge.cpus().values():
        if cpu.platform not in platforms or cpu.price_usd is None:
            continue
        for sockets in range(1, cpu.max_sockets + 1):
            if form == "hgx" and sockets != 2:
                continue
            if cpu.pcie_lanes * sockets >= lanes and cpu.cores * sockets >= cores:
                price = cpu.price_usd * sockets
                if best is None or price < best[0]:
                    best = (price, cpu, sockets)
                break
    return (best[1], best[2]) if best else None


def _psu_for(need_watts: float) -> list[Part] | None:
    """The cheapest ATX PSU (or pair of PSUs) that covers `need_watts`."""
    units = sorted(
        (
            knowledge.component(i)
            for i, c in knowledge.components().items()
            if c.category == "psu" and c.capacity <= 1600
        ),
        key=lambda c: (c.capacity, c.price_usd),
    )
    for count in (1, 2):
        fitting = [u for u in units if u.capacity * count >= need_watts]
        if fitting:
            unit = min(fitting, key=lambda u: u.price_usd)
            return [Part("psu", unit.item, count, unit.price_usd, unit.source)]
    return None


def enumerate_builds(wanted: Wanted, inputs: Inputs) -> tuple[list[Candidate], list[str]]:
    """Candidates and one line per GPU/count that could not be built, with the reason."""
    candidates: list[Candidate] = []
    skipped: list[str] = []
    for price in knowledge.gpu_prices():
        if wanted.condition != "any" and price.condition != wanted.condition:
            continue
        if wanted.gpus and price.gpu not in wanted.gpus:
            continue
        spec = catalogue().get(price.gpu)
        if spec is None:
            continue
        sxm = spec.form_factor in ("sxm", "oam")
        forms = ["hgx"] if sxm else ["workstation", "4u-server"]
        for form in forms:
            if (
                wanted.form_factor != "any"
                and form != wanted.form_factor
                and not (form == "hgx" and wanted.form_factor == "4u-server")
            ):
                continue
            counts = (
                HGX_COUNTS
                if form == "hgx"
                else SERVER_COUNTS
                if form == "4u-server"
                else WORKSTATION_COUNTS
            )
            for count in counts:
                if count > wanted.max_gpus:
                    continue
                made = _candidate(spec, price, form, count, wanted, inputs)
                if isinstance(made, str):
                    skipped.append(f"{count} x {spec.id} ({price.condition}) {form}: {made}")
                else:
                    candidates.append(made)
    return candidates, skipped


def _candidate(
    spec: GpuSpec, price: knowledge.GpuPrice, form: str, count: int, wanted: Wanted, inputs: Inputs
) -> Candidate | str:
    board = knowledge.gpu_boards().get(spec.id)
    if board is None:
        return "no board data (slots, cooler) for this GPU"
    if form == "hgx" and not spec.id.startswith(HGX_GPUS):
        return "no platform price for this SXM generation"
    if form == "workstation" and board.slots * count > int(knowledge.rule("pcie.slots").threshold):
        return f"{count} x {board.slots}-slot cards do not fit a workstation's 8 slot openings"
    if form == "4u-server" and board.slots > 2:
        return f"{board.slots}-slot cards do not fit a 4U server's double-width slots"
    gpu_part = Part("gpu", f"{spec.name} ({price.condition})", count, price.price_usd, price.source)
    parts = [gpu_part]
    notes: list[str] = []
    chosen = _cpu_for(form, count, board.consumer)
    if chosen is None:
        return "no priced CPU has the lanes and cores for this many GPUs"
    cpu, sockets = chosen
    cpu_part = CpuPart(cpu.name, cpu.cores, cpu.pcie_lanes, cpu.tdp_watts, sockets, cpu.id)
    vram = (spec.memory_gb or 0) * count
    ram_gb = float(round_up_ram(inputs.number("ram_to_vram_ratio") * vram))
    need = (count * (spec.tdp_watts or 0) + cpu.tdp_watts * sockets) * DETTMERS_MARGIN
    if form == "hgx":
        platform = knowledge.component("hgx-8gpu-platform")
        share = count / 8
        parts.append(
            Part(
                "platform",
                f"HGX {count}-GPU platform (CPUs, RAM, NICs, PSUs)",
                share,
                platform.price_usd,
                platform.source
                + (
                    " (half of the 8-GPU figure for a 4-GPU board: ASSUMPTION)"
                    if count == 4
                    else ""
                ),
                count == 4,
            )
        )
        psu = PsuPart(
            watts=3000,
            count=math.ceil(need / 3000) + 1,
            redundant=1,
            input="230v_internal_redundant",
        )
        notes.append(f"CPUs: {sockets} x {cpu.name} class, included in the platform price")
    else:
        parts.append(Part("cpu", cpu.name, sockets, cpu.price_usd or 0.0, cpu.source))
        ram = knowledge.component("ram-ddr5")
        parts.append(Part("ram", f"{ram_gb:.0f} GB DDR5", ram_gb, ram.price_usd, ram.source))
        if form == "workstation":
            psus = _psu_for(need)
            if psus is None:
                return f"needs {need:.0f} W of PSU, more than two 1600 W workstation PSUs"
            parts += psus
            if psus[0].quantity > 1:
                notes.append(
                    "two PSUs: each GPU's cables from one PSU, boards bridged (Puget tested a dual-1600 W rig)"
                )
            unit = knowledge.component(psus[0].name)
            psu = PsuPart(watts=unit.capacity, count=int(psus[0].quantity))
            parts.append(_component("board-am5" if cpu.platform == "desktop" else "board-hedt"))
            parts.append(_component("case-full-tower"))
            parts.append(_component("cpu-cooler"))
        else:
            a = inputs.get("server_4u_platform_usd")
            parts.append(
                Part(
                    "platform",
                    "4U GPU server chassis, board, redundant PSUs",
                    1,
                    inputs.number("server_4u_platform_usd"),
                    a.source,
                    a.assumption,
                )
            )
            psu = PsuPart(
                watts=2000,
                count=math.ceil(need / 2000) + 1,
                redundant=1,
                input="230v_internal_redundant",
            )
    for item, size_name, kind in (
        ("nvme-gen4", "nvme_scratch_gb", "nvme"),
        ("hdd", "hdd_capacity_gb", "hdd"),
    ):
        row = knowledge.component(item)
        size = inputs.number(size_name)
        parts.append(
            Part(
                "storage",
                f"{size:.0f} GB {item} ({'staging' if kind == 'nvme' else 'capacity'} tier)",
                size,
                row.price_usd,
                row.source,
                inputs.get(size_name).assumption,
            )
        )
    if board.nvlink_bridge_gpus == 2 and count >= 2 and form != "hgx":
        bridge = inputs.get("nvlink_bridge_usd")
        parts.append(
            Part(
                "bridge",
                "2-way NVLink bridge",
                count // 2,
                inputs.number("nvlink_bridge_usd"),
                bridge.source,
                bridge.assumption,
            )
        )
    if wanted.liquid:
        if form == "workstation":
            blocks = knowledge.component("liquid-gpu")
            parts.append(
                Part("cooling", "GPU water blocks", count, blocks.price_usd, blocks.source)
            )
            parts.append(_component("liquid-upfront"))
        else:
            factor = inputs.get("liquid_capex_factor")
            extra = sum(p.total_usd for p in parts) * (inputs.number("liquid_capex_factor") - 1)
            parts.append(
                Part(
                    "cooling",
                    "liquid cooling (capex factor)",
                    1,
                    extra,
                    factor.source,
                    factor.assumption,
                )
            )
    build = Build(
        name=f"{count} x {spec.id}",
        gpus=GpuPart(spec, count, cooler="liquid" if wanted.liquid else None),
        cpu=cpu_part,
        ram_gb=ram_gb if form != "hgx" else max(ram_gb, 1024.0),
        psu=psu,
        circuit=wanted.circuit,
        storage=(
            StoragePart(
                "nvme", inputs.number("nvme_scratch_gb"), knowledge.component("nvme-gen4").read_mb_s
            ),
            StoragePart(
                "hdd", inputs.number("hdd_capacity_gb"), knowledge.component("hdd").read_mb_s
            ),
        ),
        form_factor=form,
        pcie_switches=form == "hgx",
        nvlink=board.nvlink_bridge_gpus >= count and count > 1,
        liquid_cooling=wanted.liquid,
    )
    return Candidate(build, price.condition, tuple(parts), tuple(notes))
