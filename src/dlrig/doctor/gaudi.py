"""Intel Gaudi checks: one software release across the driver, the firmware and tools, and the
PyTorch that release supports. `hl-smi` shows the versions; Intel's support matrix
(docs.habana.ai, Support_Matrix) lists the PyTorch of each release."""

from __future__ import annotations

import re

from dlrig.doctor import facts
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.knowledge import gaudi as gaudi_knowledge
from dlrig.knowledge.versions import Version, release
from dlrig.machine.model import Machine
from dlrig.report import CheckResult


def _release(text: str | None) -> str | None:
    match = re.match(r"(?:hl-)?(\d+\.\d+\.\d+)", text or "")
    return match.group(1) if match else None


@check("gpu.gaudi_release", "Gaudi driver, firmware and tools are one release")
def gaudi_release(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Intel ships the Gaudi driver, its firmware and hl-smi as one software release; the
    support matrix lists one firmware per release. hl-smi's "HL-SMI Version: hl-1.20.0-fw-58.1.1.1"
    names the tools' release and the firmware, "Driver Version: 1.19.1-6f47ddd" the driver's."""
    g = m.gaudi
    if g is None or not g.driver_version or not g.tool:
        return c.skip("Gaudi versions not in this snapshot")
    driver, tools = _release(g.driver_version), _release(g.tool)
    if driver is None or tools is None:
        return c.skip(f"unreadable versions: driver {g.driver_version}, hl-smi {g.tool}")
    if Version.parse(driver) == Version.parse(tools):
        return c.ok(f"driver and hl-smi/firmware are release {driver}")
    # An info, not a warning: machines run mixed releases (a published Ray tutorial's 8x Gaudi 2
    # runs driver 1.19.1 under 1.20.0 firmware), and no source says which pairs fail.
    return c.info(
        f"the Gaudi driver is release {driver}; hl-smi and the firmware are {tools}",
        f"Driver Version: {g.driver_version}",
        f"HL-SMI Version: {g.tool}",
        fix="Intel's support matrix pairs each release with its own firmware: "
        "https://docs.habana.ai/en/latest/Support_Matrix/Support_Matrix.html",
    )


@check("frameworks.gaudi_pytorch", "PyTorch is the version the Gaudi release supports")
def gaudi_pytorch(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Each Intel Gaudi release supports one PyTorch version (its support matrix); the Gaudi
    bridge (habana_frameworks) is built against it and fails to load on another."""
    g = m.gaudi
    if g is None or not g.driver_version:
        return c.skip("no Gaudi driver in this snapshot")
    row = gaudi_knowledge.release_for(g.driver_version)
    if row is None:
        return c.info(
            f"Gaudi release {g.driver_version} is not in dlrig's support-matrix table",
            fix="See https://docs.habana.ai/en/latest/Support_Matrix/Support_Matrix.html",
        )
    info = facts.torch(m)
    if info is None:
        return c.skip(facts.absent(m, "torch"))
    have, wanted = Version.parse(release(info.version)), Version.parse(row.pytorch_version)
    if have is None or wanted is None:
        return c.skip(f"unreadable versions: torch {info.version}, matrix {row.pytorch_version}")
    if (have.major, have.minor) == (wanted.major, wanted.minor):
        return c.ok(f"torch {info.version} for Gaudi release {row.software_version}")
    return c.warn(
        f"torch {info.version} on Gaudi release {g.driver_version}, which supports PyTorch "
        f"{row.pytorch_version}",
        f"support matrix: {row.source}",
        fix=f"Use the Intel Gaudi PyTorch container or wheels of release {row.software_version} "
        f"(PyTorch {row.pytorch_version}), or the driver release that supports torch "
        f"{release(info.version)}.",
        cause=None,
    )
