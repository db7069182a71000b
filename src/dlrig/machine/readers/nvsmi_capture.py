"""Multi-section nvidia-smi captures (the nvidia_gpu_exporter capture format) -> Machine.

A capture holds several command outputs separated by lines of 80 '#', each headed
"# <state> :: <what>" and "# $ <command>". States are "capabilities" (static facts) and one
or more machine states ("idle", "load"). `dlrig monitor record` writes the same format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlrig.machine.model import Driver, Gpu, GpuProcess, Machine, Origin, OsInfo, replace
from dlrig.machine.readers import nvsmi_csv, nvsmi_pmon, nvsmi_text, values
from dlrig.machine.readers.common import recorded_only_issues
from dlrig.machine.readers.topology import topology

SEPARATOR = "#" * 80
_HEADER = re.compile(r"^# (?P<state>[\w-]+) :: (?P<what>.+?)\s*$")


@dataclass(frozen=True)
class Section:
    state: str
    what: str
    command: str | None
    body: str


def looks_like(text: str) -> bool:
    return text.lstrip().startswith(SEPARATOR) and ":: " in text[:20000]


def split_sections(text: str) -> tuple[dict[str, str], list[Section]]:
    """The free-form header (key: value) and the sections, in file order."""
    header: dict[str, str] = {}
    sections: list[Section] = []
    lines = text.splitlines()
    i = 0
    current: tuple[str, str, str | None] | None = None
    body: list[str] = []

    def flush() -> None:
        if current is not None:
            sections.append(
                Section(current[0], current[1], current[2], "\n".join(body).strip("\n"))
            )

    while i < len(lines):
        line = lines[i]
        if line.strip() == SEPARATOR:
            # A separator either opens a section header block or closes one.
            j = i + 1
            block = []
            while j < len(lines) and lines[j].strip() != SEPARATOR and lines[j].startswith("#"):
                block.append(lines[j])
                j += 1
            match = _HEADER.match(block[0]) if block else None
            if match and j < len(lines) and lines[j].strip() == SEPARATOR:
                flush()
                command = next((b[4:].strip() for b in block[1:] if b.startswith("# $ ")), None)
                current = (match.group("state"), match.group("what"), command)
                body = []
                i = j + 1
                continue
            i += 1
            continue
        if current is None:
            key, sep, value = line.partition(":")
            if sep and not line.startswith("#") and key.strip():
                header[key.strip()] = value.strip()
        else:
            body.append(line)
        i += 1
    flush()
    return header, sections


def _find(sections: list[Section], state: str, prefix: str) -> Section | None:
    return next((s for s in sections if s.state == state and s.what.startswith(prefix)), None)


def states(sections: list[Section]) -> list[str]:
    """Machine states with a query-gpu section, in file order ("idle", "load")."""
    seen: list[str] = []
    for section in sections:
        # "capabilities" also has a "query-gpu field list" section, which is not a state.
        if section.state == "capabilities" or section.what.startswith("query-gpu field list"):
            continue
        if section.what.startswith("query-gpu") and section.state not in seen:
            seen.append(section.state)
    return seen


# Gpu fields the --query-gpu CSV lacks and the -q text of the same moment has.
_FROM_TEXT = (
    "mig_devices",
    "processes",
    "temperature_slowdown_c",
    "pcie_tx_bytes_per_second",
    "pcie_rx_bytes_per_second",
    "pcie_replay_errors",
)


def gpus_for_state(sections: list[Section], state: str) -> tuple[Gpu, ...]:
    """The GPUs as the capture saw them in one state, with MIG devices and processes."""
    query = _find(sections, state, "query-gpu")
    if query is None:
        return ()
    gpus = [nvsmi_csv.gpu_from_row(i, row) for i, row in enumerate(nvsmi_csv.rows(query.body))]
    detail = _find(sections, state, "query (-q)")
    if detail is not None:
        _, detailed, _ = nvsmi_text.parse(detail.body)
        by_bus = {g.pci_bus_id: g for g in detailed}
        for i, gpu in enumerate(gpus):
            extra = by_bus.get(gpu.pci_bus_id)
            if extra is not None:
                gpus[i] = replace(gpu, **{name: getattr(extra, name) for name in _FROM_TEXT})
    apps = _find(sections, state, "query-compute-apps")
    if apps is not None:
        by_gpu = nvsmi_csv.processes_by_gpu(apps.body)
        for i, gpu in enumerate(gpus):
            if gpus[i].processes is None or not gpus[i].processes:
                found = by_gpu.get(gpu.uuid or "") or by_gpu.get(gpu.pci_bus_id or "")
                gpus[i] = replace(gpu, processes=found or ())
    pmon = _find(sections, state, "pmon")
    if pmon is not None:
        use = nvsmi_pmon.read(pmon.body)
        for i, gpu in enumerate(gpus):
            if gpu.processes:
                gpus[i] = replace(
                    gpu,
                    processes=tuple(
                        _with_use(p, use.get((gpu.index, p.pid))) for p in gpu.processes
                    ),
                )
    return tuple(gpus)


def _with_use(process: GpuProcess, use: nvsmi_pmon.ProcessUse | None) -> GpuProcess:
    if use is None:
        return process
    return replace(
        process,
        sm_percent=use.sm_percent,
        encoder_percent=use.encoder_percent,
        decoder_percent=use.decoder_percent,
    )


def read(text: str, path: str | None, state: str | None = None) -> Machine:
    header, sections = split_sections(text)
    available = states(sections)
    if not available:
        raise ValueError("the capture has no query-gpu section to read GPUs from")
    chosen = state or available[-1]
    if chosen not in available:
        raise ValueError(f"the capture has no state {chosen!r} (it has {', '.join(available)})")
    version = next((s for s in sections if s.what.startswith("version")), None)
    version_fields = {}
    if version is not None:
        for line in version.body.splitlines():
            key, _, value = line.partition(":")
            version_fields[key.strip().lower()] = value.strip()
    gpus = gpus_for_state(sections, chosen)
    query_rows = nvsmi_csv.rows(_find(sections, chosen, "query-gpu").body)  # type: ignore[union-attr]
    driver = Driver(
        version=version_fields.get("driver version")
        or (values.text(query_rows[0].get("driver_version")) if query_rows else None),
        cuda_version=version_fields.get("cuda version"),
        nvidia_pci_devices=len(gpus),
        kernel_module_loaded=True,
    )
    topo_section = next((s for s in sections if s.what.startswith("topo -m")), None)
    nvlink_section = next((s for s in sections if s.what.startswith("nvlink -s")), None)
    os_text = header.get("os", "")
    os_name = re.search(r"\((.+)\)", os_text)
    present = ["driver", "gpus"]
    topo = topology(
        topo_section.body if topo_section else None, nvlink_section.body if nvlink_section else None
    )
    if topo is not None:
        present.append("topology")
    os_info = None
    if header.get("kernel") or os_name:
        os_info = OsInfo(
            name=os_name.group(1) if os_name else None,
            kernel_release=header.get("kernel"),
            architecture=header.get("arch"),
        )
        present.append("os")
    return Machine(
        origin=Origin(
            kind="nvidia-smi-capture",
            path=path,
            collected_at=header.get("collected_at"),
            detail=f"state {chosen!r} of {', '.join(available)}",
        ),
        os=os_info,
        driver=driver,
        gpus=gpus,
        topology=topo,
        probe_issues=recorded_only_issues("nvidia-smi capture", tuple(present)),
    )
