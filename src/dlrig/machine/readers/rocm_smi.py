"""`rocm-smi --json` (AMD GPUs) -> Machine.

rocm-smi prints one object per GPU ("card0", "card1", ...) and a "system" object, each a flat
map of human-readable keys to strings. The keys drift between ROCm releases (4.3 "GPU ID" became
"Device ID"; 6.1 split "GPU memory use (%)" into "GPU Memory Allocated (VRAM%)" and "GPU Memory
Read/Write Activity (%)" and added "GFX Version"; 6.x MI300 reports "Current Socket Graphics
Package Power (W)" instead of "Average ..."), so every reading is looked up under each of its
spellings, case-insensitively, and only the keys present are read: `rocm-smi --showuse --json`
and telegraf's 37-flag call both work.

Recorded outputs of ROCm 4.3 to 6.1 (influxdata/telegraf's test data, MIT) are the fixtures.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from dlrig.machine.model import Gpu, Machine, Origin, PcieLink, Rocm, Topology
from dlrig.machine.readers import values
from dlrig.machine.readers.common import catalogue_id_for, parse_json, recorded_only_issues

COMMAND = "rocm-smi --json"
_CARD = re.compile(r"^card(\d+)$")
# The shape, not a word: a JSON object whose first member is a "cardN" object. A truncated
# file still has that opening, so it is read (and refused as malformed) instead of guessed at.
_OPENING = re.compile(r'^\s*\{\s*"card\d+"\s*:\s*\{')
_LINK = re.compile(r"\(Topology\) Link type between DRM devices (\d+) and (\d+)")
_PCIE_LEVEL = re.compile(r"\(\s*([\d.]+)\s*GT/s\s*x(\d+)\s*\)")
_MHZ = re.compile(r"([\d.]+)\s*Mhz", re.IGNORECASE)
_BRACKETED = re.compile(r"\[([^\]]+)\]")


def looks_like(text: str) -> bool:
    return bool(_OPENING.match(text[:4096]))


class _Card:
    """One card's map, read under any of a reading's spellings, ignoring case."""

    def __init__(self, raw: Mapping[str, object]) -> None:
        self._by_key = {key.strip().lower(): str(value) for key, value in raw.items()}

    def get(self, *names: str) -> str | None:
        for name in names:
            value = values.text(self._by_key.get(name.lower()))
            if value is not None:
                return value
        return None

    def number(self, *names: str) -> float | None:
        return values.number(self.get(*names))


def _name(card: _Card) -> str:
    """The product name: the bracketed marketing name of "Arcturus GL-XL [Instinct MI100]",
    the series itself when it is a name, else the PCI device id (ROCm 4.3 prints only ids)."""
    for raw in (card.get("Card series", "Device Name"), card.get("Card model")):
        if raw and not raw.lower().startswith("0x"):
            bracketed = _BRACKETED.search(raw)
            name = bracketed.group(1) if bracketed else raw
            return name if name.upper().startswith(("AMD", "RADEON INSTINCT")) else "AMD " + name
    device = card.get("Device ID", "GPU ID")
    return f"AMD GPU {device}" if device else "AMD GPU"


def _pcie(card: _Card) -> PcieLink:
    match = _PCIE_LEVEL.search(card.get("pcie clock level") or "")
    if not match:
        return PcieLink()
    return PcieLink(
        gen_current=values.PCIE_GEN_BY_GTS.get(float(match.group(1))),
        width_current=int(match.group(2)),
    )


def _mhz(raw: str | None) -> int | None:
    match = _MHZ.search(raw or "")
    return round(float(match.group(1))) if match else None


def _gpu(index: int, raw: Mapping[str, object]) -> Gpu:
    card = _Card(raw)
    name = _name(card)
    edge = card.number("Temperature (Sensor edge) (C)")
    junction = card.number("Temperature (Sensor junction) (C)")
    return Gpu(
        index=index,
        name=name,
        vendor="amd",
        gfx_target=card.get("GFX Version"),
        uuid=card.get("Unique ID"),
        pci_bus_id=card.get("PCI Bus"),
        catalogue_id=catalogue_id_for(name),
        serial=card.get("Serial Number"),
        vbios_version=card.get("VBIOS version"),
        memory_total_bytes=values.integer(card.get("VRAM Total Memory (B)")),
        memory_used_bytes=values.integer(card.get("VRAM Total Used Memory (B)")),
        pcie=_pcie(card),
        # MI300-class boards have no edge sensor: the junction (hotspot) is then the reading.
        temperature_c=edge if edge is not None else junction,
        memory_temperature_c=card.number("Temperature (Sensor memory) (C)"),
        temperature_edge_c=edge,
        temperature_junction_c=junction,
        power_draw_watts=card.number(
            "Current Socket Graphics Package Power (W)", "Average Graphics Package Power (W)"
        ),
        power_limit_watts=card.number("Max Graphics Package Power (W)"),
        utilization_gpu_percent=card.number("GPU use (%)"),
        # Before ROCm 6.1 "GPU memory use (%)" was the memory controller's busy percent.
        utilization_memory_percent=card.number(
            "GPU Memory Read/Write Activity (%)", "GPU memory use (%)"
        ),
        sm_clock_mhz=_mhz(card.get("sclk clock speed:")),
        memory_clock_mhz=_mhz(card.get("mclk clock speed:")),
        fan_speed_percent=card.number("Fan speed (%)"),
        pcie_replay_errors=values.integer(card.get("PCIe Replay Count")),
    )


def _topology(system: Mapping[str, object], cards: tuple[int, ...]) -> Topology | None:
    """rocm-smi --showtopotype: the link between each pair of GPUs, XGMI or PCIE."""
    links: dict[tuple[int, int], str] = {}
    for key, value in system.items():
        match = _LINK.match(key)
        if match and isinstance(value, str):
            a, b = int(match.group(1)), int(match.group(2))
            links[(a, b)] = links[(b, a)] = value.strip().upper()
    if not links:
        return None
    labels = tuple(f"GPU{i}" for i in cards)
    matrix = tuple(tuple("X" if i == j else links.get((i, j), "") for j in cards) for i in cards)
    return Topology(labels=labels, matrix=matrix)


def read(text: str, path: str | None) -> Machine:
    document = parse_json(text)
    if not isinstance(document, dict):
        raise ValueError("the JSON is not an object")
    cards = sorted(
        (int(match.group(1)), raw)
        for key, raw in document.items()
        if (match := _CARD.match(key)) and isinstance(raw, dict)
    )
    if not cards:
        raise ValueError('no "cardN" object in it')
    # The card number is rocm-smi's GPU index (and the topology's): `rocm-smi -d 2 3` lists
    # card2 and card3, not GPUs 0 and 1.
    gpus = tuple(_gpu(number, raw) for number, raw in cards)
    system = document.get("system")
    system = system if isinstance(system, dict) else {}
    driver = values.text(str(system.get("Driver version") or ""))
    topology = _topology(system, tuple(g.index for g in gpus))
    present = ("gpus",) + (("topology",) if topology else ())
    return Machine(
        origin=Origin(kind="rocm-smi-json", path=path, detail=COMMAND),
        gpus=gpus,
        topology=topology,
        rocm=Rocm(amdgpu_driver_version=driver, tool="rocm-smi"),
        probe_issues=recorded_only_issues(COMMAND, present),
    )
