"""Network interfaces (with InfiniBand / RoCE ports) and the host firewall."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dlrig.machine.model import Firewall, NetInterface
from dlrig.machine.runner import ProbeContext

_ARPHRD = {"1": "ethernet", "32": "infiniband", "772": "loopback"}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _rdma_ports(ctx: ProbeContext) -> dict[str, tuple[str, str | None]]:
    """net interface name -> (RDMA device, link layer of its first port)."""
    found: dict[str, tuple[str, str | None]] = {}
    for device in sorted(ctx.path("/sys/class/infiniband").glob("*")):
        layer = None
        for port in sorted((device / "ports").glob("*")):
            layer = _read(port / "link_layer")
            if layer:
                break
        for net in sorted((device / "device" / "net").glob("*")):
            found[net.name] = (device.name, layer)
    return found


def interfaces(ctx: ProbeContext) -> tuple[NetInterface, ...]:
    rdma = _rdma_ports(ctx)
    addresses: dict[str, list[str]] = {}
    if ctx.root == Path("/"):
        import socket

        import psutil

        for name, addrs in psutil.net_if_addrs().items():
            addresses[name] = [a.address for a in addrs if a.family == socket.AF_INET]
    found = []
    for entry in sorted(ctx.path("/sys/class/net").glob("*")):
        name = entry.name
        kind = _ARPHRD.get(_read(entry / "type") or "", "other")
        if kind == "ethernet":
            if (entry / "bridge").is_dir():
                kind = "bridge"
            elif not (entry / "device").exists():
                kind = "virtual"  # veth, docker bridges' peers, tun/tap, bonds' virtual faces
        speed_text = _read(entry / "speed")
        speed = int(speed_text) if speed_text and speed_text.lstrip("-").isdigit() else None
        rdma_device, layer = rdma.get(name, (None, None))
        found.append(
            NetInterface(
                name=name,
                kind=kind,
                operstate=_read(entry / "operstate"),
                speed_mbps=speed if speed and speed > 0 else None,
                ipv4=tuple(addresses.get(name, ())),
                rdma_device=rdma_device,
                rdma_link_layer=layer,
            )
        )
    return tuple(found)


@dataclass(frozen=True)
class _RuleListing:
    """A firewall read from its rule listing: it filters when a rule drops or rejects input."""

    tool: str
    command: tuple[str, ...]
    filtering: re.Pattern[str]
    filtering_detail: str
    accepting_detail: str


_RULE_LISTINGS = (
    _RuleListing(
        "nftables",
        ("nft", "list", "ruleset"),
        re.compile(r"hook input .*policy drop|\b(drop|reject)\b"),
        "input filtering rules present",
        "no drop/reject rules",
    ),
    _RuleListing(
        "iptables",
        ("iptables", "-S", "INPUT"),
        re.compile(r"^-P INPUT (DROP|REJECT)|-j (DROP|REJECT)", re.M),
        "INPUT drops or rejects packets",
        "INPUT accepts all",
    ),
)


def firewall(ctx: ProbeContext) -> tuple[Firewall, str | None]:
    """The firewall state, and why it is unknown when it is."""
    reasons = []
    ufw = ctx.runner.run(["ufw", "status"], ctx.timeout_s)
    if ufw.ok:
        active = "status: active" in ufw.stdout.lower()
        return Firewall(active=active, tool="ufw", detail=ufw.stdout.strip().splitlines()[0]), None
    if ufw.error != "not found":
        reasons.append(f"ufw: {ufw.error or (ufw.stderr.strip() or 'failed')}")
    firewalld = ctx.runner.run(["firewall-cmd", "--state"], ctx.timeout_s)
    if firewalld.error is None and firewalld.stdout.strip():
        running = firewalld.stdout.strip() == "running"
        return Firewall(active=running, tool="firewalld", detail=firewalld.stdout.strip()), None
    for listing in _RULE_LISTINGS:
        listed = ctx.runner.run(list(listing.command), ctx.timeout_s)
        if listed.ok:
            filtering = listing.filtering.search(listed.stdout)
            detail = listing.filtering_detail if filtering else listing.accepting_detail
            return Firewall(active=bool(filtering), tool=listing.tool, detail=detail), None
        if listed.error != "not found":
            reasons.append(
                f"{listing.command[0]}: {listed.error or listed.stderr.strip() or 'failed'}"
            )
    if reasons:
        return Firewall(), "; ".join(reasons)
    return Firewall(active=False, tool=None, detail="no firewall tool installed"), None
