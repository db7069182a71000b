"""`dlrig provision nccl`: /etc/nccl.conf from the machine's network facts.

NCCL_SOCKET_IFNAME names the interfaces of the cluster network (up, with an IPv4 address,
not loopback, docker or virtual), NCCL_IB_HCA the RDMA adapters when there are any. Settings
from the snapshot's nccl.conf or `--set` are kept when they are system settings and refused
when NCCL's documentation files them under debugging (provision_nccl_variables.csv).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.knowledge.provision import nccl_variables
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render


@dataclass(frozen=True)
class NcclOptions:
    socket_ifname: str | None = None
    ib_hca: str | None = None
    settings: tuple[tuple[str, str], ...] = ()  # --set KEY=VALUE
    keep_existing: bool = True  # carry over the snapshot's nccl.conf (minus refused keys)


def _cluster_interfaces(facts: Facts) -> list[str]:
    network = facts.machine.network if facts.machine else None
    if not network:
        return []
    chosen = []
    for interface in network:
        if interface.kind not in {"ethernet", "infiniband"} or interface.operstate not in {
            "up",
            None,
        }:
            continue
        if interface.name.startswith(("docker", "veth", "virbr", "br-", "cni", "flannel", "cali")):
            continue
        if interface.ipv4 or interface.kind == "infiniband":
            chosen.append(interface.name)
    return chosen


def _hcas(facts: Facts) -> list[str]:
    network = facts.machine.network if facts.machine else None
    return sorted(
        {i.rdma_device for i in network or () if i.rdma_device and i.operstate in {"up", None}}
    )


def refused(key: str, value: str) -> str | None:
    """Why a setting may not be kept in nccl.conf (None when it may)."""
    known = nccl_variables().get(key)
    if known is not None and known.refuses(value):
        return f"{key}={value}: {known.reason}"
    return None


def _matches(spec: str, interfaces: list[str]) -> list[str]:
    """The interfaces an NCCL_SOCKET_IFNAME value selects: comma-separated prefixes, '=' for
    exact names, '^' to exclude (NCCL's parser: the prefix characters apply to the whole list)."""
    text = spec.strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    names = [n for n in text.split(",") if n]

    def hit(interface: str) -> bool:
        return any(interface == n if exact else interface.startswith(n) for n in names)

    return [i for i in interfaces if hit(i) != exclude]


def generate(facts: Facts, options: NcclOptions | None = None) -> Bundle:
    options = options or NcclOptions()
    variables = nccl_variables()
    settings: dict[str, tuple[str, str]] = {}
    decisions: list[Decision] = []
    warnings: list[str] = []

    def offer(key: str, value: str, why: str, stated: bool) -> None:
        if not key.startswith("NCCL_"):
            raise InputError(
                f"--set {key}={value}: not an NCCL variable", fix="give NCCL_* variables only"
            )
        reason = refused(key, value)
        if reason is not None:
            known = variables[key]
            if stated:
                raise InputError(
                    f"--set {reason}; NCCL's docs file it under {known.category} settings that must not "
                    "be kept in a system file",
                    fix=f"drop it; set it per job while debugging (e.g. `{key}={value} torchrun ...`)",
                )
            warnings.append(f"refused {reason} ({why}); source: {known.source}")
            decisions.append(Decision(key, "refused", reason, known.source))
            if known.kept_instead and not known.refuses(known.kept_instead):
                settings[key] = (
                    known.kept_instead,
                    f"in place of the refused {value} ({why}): {known.reason}",
                )
            return
        if key not in variables:
            warnings.append(
                f"{key}={value} ({why}) is not a variable in dlrig's table of NCCL's documented "
                "ones: kept, but check the spelling against the NCCL version you run"
            )
        settings[key] = (value, why)

    existing: dict[str, str] = {}
    if facts.machine is not None and facts.machine.nccl is not None and options.keep_existing:
        files = ", ".join(facts.machine.nccl.conf_files) or "nccl.conf"
        for key, value in facts.machine.nccl.conf:
            existing[key] = value
            if key == "NCCL_SOCKET_IFNAME" and not options.socket_ifname:
                continue  # decided below, against the machine's interfaces
            offer(key, value, f"kept from {files}", stated=False)
    network = facts.machine.network if facts.machine else None
    interfaces = _cluster_interfaces(facts)
    every = [i.name for i in network or ()]
    if options.socket_ifname:
        offer(
            "NCCL_SOCKET_IFNAME", options.socket_ifname, "stated with --socket-ifname", stated=True
        )
    elif "NCCL_SOCKET_IFNAME" in existing:
        value = existing["NCCL_SOCKET_IFNAME"]
        selected = _matches(value, every) if every else []
        if not every or selected:
            offer(
                "NCCL_SOCKET_IFNAME",
                value,
                "kept from the machine's nccl.conf (a system choice)"
                + (f": selects {', '.join(selected)}" if selected else ""),
                stated=False,
            )
        elif interfaces:
            chosen = "=" + ",".join(interfaces)
            warnings.append(
                f"NCCL_SOCKET_IFNAME={value} in the machine's nccl.conf matches none of its "
                f"interfaces ({', '.join(every)}): replaced by {chosen}"
            )
            offer(
                "NCCL_SOCKET_IFNAME",
                chosen,
                f"the nccl.conf's {value} names no interface here; the up interfaces with an "
                f"address are {', '.join(interfaces)} ('=' makes NCCL match exact names)",
                stated=False,
            )
        else:
            offer("NCCL_SOCKET_IFNAME", value, "kept from the machine's nccl.conf", stated=False)
    elif interfaces:
        offer(
            "NCCL_SOCKET_IFNAME",
            "=" + ",".join(interfaces),
            f"the cluster network: up interface(s) with an address ({', '.join(interfaces)}); "
            "'=' makes NCCL match these exact names, not prefixes",
            stated=False,
        )
    hcas = _hcas(facts)
    if options.ib_hca:
        offer("NCCL_IB_HCA", options.ib_hca, "stated with --ib-hca", stated=True)
    elif hcas:
        offer(
            "NCCL_IB_HCA",
            "=" + ",".join(hcas),
            f"RDMA adapters on this machine: {', '.join(hcas)}",
            stated=False,
        )
    for key, value in options.settings:
        offer(key, value, "stated with --set", stated=True)
    no_network = facts.machine is None or not network
    if no_network:
        warnings.append(
            "no network facts (give --machine with a `dlrig doctor --save` snapshot of the node): "
            "no interface or RDMA adapter could be chosen"
        )
    rows = [(k, v, why) for k, (v, why) in settings.items()]
    for key, (value, why) in settings.items():
        decisions.append(
            Decision(key, value, why, variables[key].source if key in variables else None)
        )
    text = render(
        "nccl/nccl.conf.j2", header=header(facts, "nccl"), settings=rows, no_network=no_network
    )
    return Bundle(
        target="nccl",
        facts=facts,
        files=(
            GeneratedFile(
                "nccl.conf", text, "conf", "system-wide NCCL settings for /etc/nccl.conf"
            ),
        ),
        decisions=tuple(decisions),
        warnings=tuple(warnings),
    )
