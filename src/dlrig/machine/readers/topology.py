"""`nvidia-smi topo -m` and `nvidia-smi nvlink -s` text -> Topology."""

from __future__ import annotations

import re

from dlrig.machine.model import Topology

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DEVICE_LABEL = re.compile(r"^(GPU\d+|NIC\d+|mlx\w+|CPU\d*)$")


def parse_topo_matrix(text: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Device labels and the connection matrix; empty when the text has no matrix."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header_index = next(
        (
            i
            for i, line in enumerate(lines)
            if "GPU0" in line and not line.strip().startswith("GPU0")
        ),
        None,
    )
    if header_index is None:
        return (), ()
    labels = tuple(
        cell.strip()
        for cell in lines[header_index].split("\t")
        if _DEVICE_LABEL.match(cell.strip())
    )
    matrix: list[tuple[str, ...]] = []
    for line in lines[header_index + 1 :]:
        cells = [cell.strip() for cell in line.split("\t")]
        if not cells or cells[0] not in labels:
            if matrix:
                break
            continue
        matrix.append(tuple(cells[1 : 1 + len(labels)]))
    return labels, tuple(matrix)


def parse_nvlink_status(text: str) -> tuple[int, ...] | None:
    """Active NVLink links per GPU from `nvidia-smi nvlink -s`; None when it lists no GPU."""
    counts: list[int] = []
    for line in text.splitlines():
        if re.match(r"^GPU \d+:", line):
            counts.append(0)
        elif counts and re.search(r"Link \d+:\s*[\d.]+\s*GB/s", line):
            counts[-1] += 1
    return tuple(counts) if counts else None


def topology(topo_text: str | None, nvlink_text: str | None) -> Topology | None:
    labels: tuple[str, ...] = ()
    matrix: tuple[tuple[str, ...], ...] = ()
    if topo_text:
        labels, matrix = parse_topo_matrix(topo_text)
    links = parse_nvlink_status(nvlink_text) if nvlink_text else None
    if not labels and links is None:
        return None
    return Topology(labels=labels, matrix=matrix, nvlink_active_links=links)
