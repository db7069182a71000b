"""NCCL checks: interface selection, disabled transports, debug settings left behind."""

from __future__ import annotations

from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.machine.model import Machine
from dlrig.report import CheckResult

# NCCL's "debugging" variables: its docs say they should not be used in production.
_DEBUG_DISABLES = ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL")
_DEBUG_NOISE = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


def _settings(m: Machine) -> list[tuple[str, str, str]]:
    """(name, value, where) for NCCL settings from the environment and nccl.conf files."""
    found = []
    if m.nccl is not None:
        files = ", ".join(m.nccl.conf_files) or "nccl.conf"
        for key, value in m.nccl.conf:
            found.append((key, value, files))
        for key, value in m.nccl.env:
            found.append((key, value, "environment"))
    elif m.env is not None:
        for key, value in m.env:
            if key.startswith("NCCL_"):
                found.append((key, value, "environment"))
    return found


def _setting(m: Machine, name: str) -> tuple[str, str] | None:
    """The effective value of an NCCL variable: the environment overrides nccl.conf."""
    chosen = None
    for key, value, where in _settings(m):
        if key == name and (chosen is None or where == "environment"):
            chosen = (value, where)
    return chosen


def _interface_matches(spec: str, names: list[str]) -> tuple[bool, list[str]]:
    """NCCL_SOCKET_IFNAME semantics: prefixes, '=' exact, '^' exclude. (any match?, matches)."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    patterns = [p for p in body.split(",") if p]
    matched = [n for n in names if any((n == p) if exact else n.startswith(p) for p in patterns)]
    if exclude:
        remaining = [n for n in names if n not in matched and n != "lo"]
        return bool(remaining), remaining
    return bool(matched), matched


@check(
    "nccl.socket_ifname",
    "NCCL_SOCKET_IFNAME names an existing interface",
    cause="nccl_wrong_socket_interface",
)
def socket_ifname(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """NCCL (and gloo through GLOO_SOCKET_IFNAME) opens its sockets on the interfaces these
    variables name: a prefix ('eth' matches eth0), '=eth0' for an exact name, '^docker,lo' to
    exclude. A name that matches no interface of this machine makes bootstrap fail
    ('Bootstrap : no socket interface found')."""
    if m.network is None:
        return c.skip("network interfaces not in this snapshot")
    names = [i.name for i in m.network]
    problems = []
    checked = []
    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if variable.startswith("NCCL"):
            setting = _setting(m, variable)
        else:
            gloo = m.env_value(variable)
            setting = (gloo, "environment") if gloo else None
        if setting is None:
            continue
        value, where = setting
        ok, matches = _interface_matches(value, names)
        checked.append(f"{variable}={value} ({where}) → {', '.join(matches) or 'nothing'}")
        if not ok:
            problems.append(f"{variable}={value} ({where}) matches none of: {', '.join(names)}")
    if problems:
        real = [
            i.name
            for i in m.network
            if i.kind in {"ethernet", "infiniband"} and i.operstate == "up"
        ]
        return c.fail(
            problems[0],
            *problems[1:],
            fix=f"export NCCL_SOCKET_IFNAME={real[0] if real else '<interface of the cluster network>'}"
            + (f"  (up interfaces here: {', '.join(real)})" if real else ""),
        )
    if checked:
        return c.ok("socket interface settings match existing interfaces", *checked)
    return c.ok("NCCL picks the socket interface automatically (NCCL_SOCKET_IFNAME not set)")


@check("nccl.ib_disabled", "InfiniBand is not disabled while present")
def ib_disabled(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """NCCL_IB_DISABLE=1 forces NCCL onto TCP sockets. On a machine with InfiniBand or RoCE
    adapters that throws away most of the inter-node bandwidth."""
    if m.nccl is None and m.env is None:
        return c.skip("NCCL settings not in this snapshot")
    setting = _setting(m, "NCCL_IB_DISABLE")
    rdma = [i for i in m.network or () if i.rdma_device]
    if setting is None or setting[0] not in {"1", "true", "True"}:
        if rdma:
            return c.ok(f"{len(rdma)} RDMA port(s); NCCL may use them")
        return c.ok("NCCL_IB_DISABLE is not set")
    if m.network is None:
        return c.skip("network interfaces not in this snapshot")
    if rdma:
        return c.warn(
            f"NCCL_IB_DISABLE=1 ({setting[1]}) although RDMA adapters are present",
            *(
                f"{i.name}: {i.rdma_device} ({i.rdma_link_layer or 'link layer unknown'})"
                for i in rdma
            ),
            "check: ibv_devinfo ; ibstat",
            fix="Remove NCCL_IB_DISABLE from the environment and nccl.conf; verify with NCCL_DEBUG=INFO "
            "that NCCL reports 'NET/IB'.",
        )
    return c.info(f"NCCL_IB_DISABLE=1 ({setting[1]}); no RDMA adapter here, so it changes nothing")


@check("nccl.p2p_disabled", "GPU peer-to-peer and shared-memory transports are enabled")
def p2p_disabled(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """NCCL_P2P_DISABLE=1 or NCCL_SHM_DISABLE=1 make GPUs in one box talk through host memory
    or sockets. People set them to work around a hang (often ACS/IOMMU) and forget them."""
    found = [
        (name, value, where)
        for name, value, where in _settings(m)
        if name in {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE"} and value not in {"0", ""}
    ]
    if m.nccl is None and m.env is None:
        return c.skip("NCCL settings not in this snapshot")
    if found:
        return c.warn(
            "NCCL transports disabled: " + ", ".join(f"{n}={v}" for n, v, _ in found),
            *(f"{n}={v} set in {w}" for n, v, w in found),
            fix="Remove these variables; if a hang made you set them, fix its cause instead (ACS on "
            "PCIe switches: `sudo lspci -vvv | grep ACSCtl`; IOMMU: boot with iommu=pt).",
        )
    return c.ok("P2P and SHM transports enabled")


@check("nccl.debug_settings", "no debug settings left in nccl.conf")
def debug_settings(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """NCCL's documentation says its debugging variables should not be retained in production
    configuration. NCCL_DEBUG=INFO in /etc/nccl.conf floods every job's log; the *_DISABLE
    switches cost bandwidth."""
    if m.nccl is None:
        return c.skip("NCCL configuration not in this snapshot")
    left = [
        (k, v)
        for k, v in m.nccl.conf
        if k in _DEBUG_DISABLES + _DEBUG_NOISE and v not in {"", "0", "WARN", "VERSION"}
    ]
    if left:
        return c.warn(
            "debug settings in " + ", ".join(m.nccl.conf_files),
            *(f"{k}={v}" for k, v in left),
            fix="Remove them from "
            + ", ".join(m.nccl.conf_files)
            + " (set NCCL_DEBUG=INFO per job when debugging).",
        )
    if m.nccl.conf_files:
        return c.ok("nccl.conf holds no debug settings", *m.nccl.conf_files)
    return c.ok("no nccl.conf")
