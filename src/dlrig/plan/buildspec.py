"""A build: the parts of one machine, from a `plan check` YAML file or from the planner.

The file format (every key but `gpus` optional; unknown keys are refused so a typo is not
silently ignored):

    name: Quad RTX 3090 workstation
    gpus: {model: rtx-3090, count: 4, power_limit_watts: 300, cooler: blower, slots: 2}
    cpu: {model: threadripper-pro-5975wx}        # or {cores: 32, pcie_lanes: 128, tdp_watts: 280}
    ram_gb: 256
    psu_watts: 1600                               # or psu: {watts, count, redundant, efficiency,
                                                  #          atx3, pcie_connectors, input}
    circuit: {volts: 120, amps: 15}               # count: circuits feeding the machine
    storage: [{kind: nvme, capacity_gb: 2000, read_mb_s: 7000}]
    chassis: {form_factor: workstation, expansion_slots: 8, pcie_switches: false}
    system_power_watts: 10200                     # a vendor's maximum, when published
    nvlink: true                                  # NVLink/bridges asked for
    precision: amp-bf16                           # the training precision to check support for
    about: {source: URL, ...}                     # provenance, not checked
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlrig.errors import InputError
from dlrig.extras import require
from dlrig.knowledge import plan as knowledge
from dlrig.knowledge.gpus import GpuSpec, catalogue
from dlrig.knowledge.gpus import lookup as gpu_lookup
from dlrig.plain import word

FORM_FACTORS = ("workstation", "4u-server", "hgx")
STORAGE_KINDS = {
    "nvme": "nvme-gen4",
    "nvme-gen5": "nvme-gen5",
    "sata-ssd": "sata-ssd",
    "hdd": "hdd",
}
TOP_KEYS = {
    "name",
    "gpus",
    "cpu",
    "ram_gb",
    "psu_watts",
    "psu",
    "circuit",
    "storage",
    "chassis",
    "system_power_watts",
    "nvlink",
    "precision",
    "liquid_cooling",
    "about",
}


PsuInput = Literal["115v_internal", "230v_eu_internal", "230v_internal_redundant"]


@dataclass(frozen=True)
class GpuPart:
    spec: GpuSpec
    count: int
    power_limit_watts: float | None = None
    cooler: str | None = None  # override of the reference board's cooler
    slots: int | None = None  # override of the reference board's width

    @property
    def board(self) -> knowledge.GpuBoard | None:
        return knowledge.gpu_boards().get(self.spec.id)

    @property
    def watts_each(self) -> float:
        return float(self.power_limit_watts or self.spec.tdp_watts or 0.0)

    @property
    def cooler_kind(self) -> str | None:
        board = self.board
        return self.cooler or (board.cooler if board else None)

    @property
    def slot_width(self) -> int | None:
        board = self.board
        return self.slots if self.slots is not None else (board.slots if board else None)


@dataclass(frozen=True)
class CpuPart:
    name: str
    cores: int | None
    pcie_lanes: int | None
    tdp_watts: float | None
    sockets: int = 1
    id: str | None = None


@dataclass(frozen=True)
class PsuPart:
    watts: float
    count: int = 1
    redundant: int = 0
    efficiency: str | None = None  # 80 PLUS level
    atx3: bool = False
    pcie_connectors: int | None = None
    input: PsuInput | None = None

    @property
    def capacity_watts(self) -> float:
        """What the PSUs deliver with the redundant ones failed."""
        return self.watts * max(0, self.count - self.redundant)


@dataclass(frozen=True)
class Circuit:
    volts: float
    amps: float
    count: int = 1

    @property
    def watts(self) -> float:
        return self.volts * self.amps * self.count

    def label(self) -> str:
        times = f"{self.count} x " if self.count > 1 else ""
        return f"{times}{self.volts:g} V {self.amps:g} A"


@dataclass(frozen=True)
class StoragePart:
    kind: str
    capacity_gb: float | None
    read_mb_s: float | None


@dataclass(frozen=True)
class Build:
    name: str
    gpus: GpuPart
    cpu: CpuPart | None = None
    ram_gb: float | None = None
    psu: PsuPart | None = None
    circuit: Circuit | None = None
    storage: tuple[StoragePart, ...] = ()
    form_factor: str = "workstation"
    expansion_slots: int | None = None
    pcie_switches: bool = False
    system_power_watts: float | None = None
    nvlink: bool = False
    precision: str | None = None
    liquid_cooling: bool = False
    about: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_watts(self) -> float:
        return self.gpus.watts_each * self.gpus.count

    @property
    def vram_gb(self) -> float:
        return (self.gpus.spec.memory_gb or 0.0) * self.gpus.count


def load(path: str | Path) -> Build:
    """Read a build file; InputError (exit 2) naming the file and key for anything wrong."""
    yaml = require("yaml", "plan", "reading build files", package="pyyaml")
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"{where}: no such build file", fix="give the path of a build YAML"
        ) from None
    except IsADirectoryError:
        raise InputError(f"{where}: is a directory", fix="give the path of a build YAML") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{where}: cannot read ({exc})", fix="give a readable UTF-8 YAML file"
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{where}: not valid YAML{at}", fix="fix the YAML syntax") from None
    return parse(data, str(where))


def parse(data: Any, where: str = "build") -> Build:
    if not isinstance(data, dict):
        raise InputError(
            f"{where}: a build is a mapping of keys",
            fix="start with `gpus: {model: ..., count: ...}`",
        )
    unknown = sorted(set(map(str, data)) - TOP_KEYS)
    if unknown:
        raise InputError(
            f"{where}: unknown key {unknown[0]!r}", fix="known keys: " + ", ".join(sorted(TOP_KEYS))
        )
    if "gpus" not in data:
        raise InputError(f"{where}: no `gpus`", fix="add `gpus: {model: rtx-4090, count: 2}`")
    chassis = _mapping(data.get("chassis", {}), where, "chassis")
    form = str(chassis.get("form_factor", "hgx" if _is_sxm(data["gpus"], where) else "workstation"))
    if form not in FORM_FACTORS:
        raise InputError(
            f"{where}: chassis.form_factor {form!r}", fix="one of " + ", ".join(FORM_FACTORS)
        )
    psu = None
    if "psu" in data and "psu_watts" in data:
        raise InputError(f"{where}: both `psu` and `psu_watts`", fix="keep one of them")
    if "psu_watts" in data:
        psu = PsuPart(watts=_number(data["psu_watts"], where, "psu_watts"))
    elif "psu" in data:
        psu = _psu(_mapping(data["psu"], where, "psu"), where)
    return Build(
        name=str(data.get("name", Path(where).stem)),
        gpus=_gpus(_mapping(data["gpus"], where, "gpus"), where),
        cpu=_cpu(_mapping(data["cpu"], where, "cpu"), where) if "cpu" in data else None,
        ram_gb=_number(data["ram_gb"], where, "ram_gb") if "ram_gb" in data else None,
        psu=psu,
        circuit=_circuit(_mapping(data["circuit"], where, "circuit"), where)
        if "circuit" in data
        else None,
        storage=_storage(data.get("storage", []), where),
        form_factor=form,
        expansion_slots=int(_number(chassis["expansion_slots"], where, "chassis.expansion_slots"))
        if "expansion_slots" in chassis
        else None,
        pcie_switches=bool(chassis.get("pcie_switches", False)),
        system_power_watts=_number(data["system_power_watts"], where, "system_power_watts")
        if "system_power_watts" in data
        else None,
        nvlink=bool(data.get("nvlink", False)),
        precision=str(data["precision"]) if "precision" in data else None,
        liquid_cooling=bool(data.get("liquid_cooling", False)),
        about=dict(data["about"]) if isinstance(data.get("about"), dict) else {},
    )


def _mapping(value: Any, where: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InputError(f"{where}: `{key}` must be a mapping", fix=f"write `{key}: {{...}}`")
    return {str(k): v for k, v in value.items()}


def _number(value: Any, where: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(
            f"{where}: `{key}` is {value!r}, not a number", fix=f"give `{key}` as a number"
        )
    if value <= 0:
        raise InputError(f"{where}: `{key}` is {value}", fix=f"give a positive `{key}`")
    return float(value)


def _is_sxm(gpus: Any, where: str) -> bool:
    if isinstance(gpus, dict) and "model" in gpus:
        spec = catalogue().resolve(str(gpus["model"]))
        return spec is not None and spec.form_factor in ("sxm", "oam")
    return False


def _gpus(data: dict[str, Any], where: str) -> GpuPart:
    model = data.get("model")
    if model is None:
        raise InputError(
            f"{where}: gpus has no `model`", fix="e.g. `gpus: {model: rtx-4090, count: 2}`"
        )
    spec = gpu_lookup(str(model), option=f"{where}: gpus.model").spec
    extra = sorted(set(data) - {"model", "count", "power_limit_watts", "cooler", "slots"})
    if extra:
        raise InputError(
            f"{where}: unknown key gpus.{extra[0]}",
            fix="gpus takes model, count, power_limit_watts, cooler, slots",
        )
    cooler = data.get("cooler")
    if cooler is not None and cooler not in ("open-air", "blower", "passive", "liquid", "sxm"):
        raise InputError(
            f"{where}: gpus.cooler {cooler!r}", fix="one of open-air, blower, passive, liquid"
        )
    return GpuPart(
        spec=spec,
        count=int(_number(data.get("count", 1), where, "gpus.count")),
        power_limit_watts=_number(data["power_limit_watts"], where, "gpus.power_limit_watts")
        if "power_limit_watts" in data
        else None,
        cooler=str(cooler) if cooler is not None else None,
        slots=int(_number(data["slots"], where, "gpus.slots")) if "slots" in data else None,
    )


def _cpu(data: dict[str, Any], where: str) -> CpuPart:
    sockets = int(_number(data.get("count", 1), where, "cpu.count"))
    if "model" in data:
        known = knowledge.cpus().get(str(data["model"]))
        if known is None:
            raise InputError(
                f"{where}: cpu.model {data['model']!r} is not in plan_cpus.csv",
                fix="use a listed id ("
                + ", ".join(sorted(knowledge.cpus())[:6])
                + ", ...) or give cores, pcie_lanes and tdp_watts",
            )
        return CpuPart(
            known.name, known.cores, known.pcie_lanes, known.tdp_watts, sockets, known.id
        )
    return CpuPart(
        name=str(data.get("name", "unnamed CPU")),
        cores=int(_number(data["cores"], where, "cpu.cores")) if "cores" in data else None,
        pcie_lanes=int(_number(data["pcie_lanes"], where, "cpu.pcie_lanes"))
        if "pcie_lanes" in data
        else None,
        tdp_watts=_number(data["tdp_watts"], where, "cpu.tdp_watts")
        if "tdp_watts" in data
        else None,
        sockets=sockets,
    )


def _psu(data: dict[str, Any], where: str) -> PsuPart:
    if "watts" not in data:
        raise InputError(f"{where}: psu has no `watts`", fix="e.g. `psu: {watts: 1600}`")
    level = data.get("efficiency")
    if level is not None and level not in knowledge.psu_levels():
        raise InputError(
            f"{where}: psu.efficiency {level!r}", fix="one of " + ", ".join(knowledge.psu_levels())
        )
    inputs: tuple[PsuInput, ...] = typing.get_args(PsuInput)
    if data.get("input") is not None and data["input"] not in inputs:
        raise InputError(f"{where}: psu.input {data['input']!r}", fix="one of " + ", ".join(inputs))
    count = int(_number(data.get("count", 1), where, "psu.count"))
    redundant = int(data.get("redundant", 0))
    if not 0 <= redundant < count:
        raise InputError(
            f"{where}: psu.redundant {redundant} with {count} PSUs",
            fix="redundant must be below count",
        )
    return PsuPart(
        watts=_number(data["watts"], where, "psu.watts"),
        count=count,
        redundant=redundant,
        efficiency=str(level) if level is not None else None,
        atx3=bool(data.get("atx3", False)),
        pcie_connectors=int(_number(data["pcie_connectors"], where, "psu.pcie_connectors"))
        if "pcie_connectors" in data
        else None,
        input=word(inputs, data["input"], where) if data.get("input") is not None else None,
    )


def _circuit(data: dict[str, Any], where: str) -> Circuit:
    for key in ("volts", "amps"):
        if key not in data:
            raise InputError(
                f"{where}: circuit has no `{key}`", fix="e.g. `circuit: {volts: 230, amps: 16}`"
            )
    return Circuit(
        volts=_number(data["volts"], where, "circuit.volts"),
        amps=_number(data["amps"], where, "circuit.amps"),
        count=int(_number(data.get("count", 1), where, "circuit.count")),
    )


def _storage(value: Any, where: str) -> tuple[StoragePart, ...]:
    items = value if isinstance(value, list) else [value]
    parts = []
    for item in items:
        entry = _mapping(item, where, "storage")
        kind = str(entry.get("kind", ""))
        if kind not in (*STORAGE_KINDS, "network"):
            raise InputError(
                f"{where}: storage.kind {kind!r}",
                fix="one of " + ", ".join((*STORAGE_KINDS, "network")),
            )
        read = entry.get("read_mb_s")
        if read is None and kind in STORAGE_KINDS:
            read = knowledge.component(STORAGE_KINDS[kind]).read_mb_s
        count = int(_number(entry.get("count", 1), where, "storage.count"))
        for _ in range(count):
            parts.append(
                StoragePart(
                    kind=kind,
                    capacity_gb=_number(entry["capacity_gb"], where, "storage.capacity_gb")
                    if "capacity_gb" in entry
                    else None,
                    read_mb_s=float(read) if read is not None else None,
                )
            )
    return tuple(parts)
