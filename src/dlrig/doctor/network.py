"""Network checks: firewall vs multi-node training, InfiniBand links."""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.machine.model import Machine
from dlrig.report import CheckResult


@check("network.firewall", "firewall does not block multi-node training", cause="nccl_timeout")
def firewall(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Multi-node training opens connections on the rendezvous port (MASTER_PORT, 29500) and on
    random high ports NCCL and gloo pick. A host firewall that drops them makes init hang until
    the timeout. NCCL's maintainers' test: `nc -l 12345` on one node, `nc node1 12345` on the
    other."""
    if m.firewall is None:
        return c.skip("firewall state unknown (run as root to read it)")
    reason = facts.multi_node_configured(m)
    if not m.firewall.active:
        return c.ok(
            "no active host firewall",
            *(f"{m.firewall.tool}: {m.firewall.detail}",) if m.firewall.tool else (),
        )
    if reason:
        return c.warn(
            f"{m.firewall.tool} is active and this machine is set up for multi-node training ({reason})",
            f"{m.firewall.tool}: {m.firewall.detail}",
            fix="Allow the cluster subnet: sudo ufw allow from <cluster-subnet>   (firewalld: "
            "firewall-cmd --zone=trusted --add-source=<cluster-subnet> --permanent)",
        )
    return c.info(
        f"{m.firewall.tool} is active (fine for single-node training)",
        f"{m.firewall.tool}: {m.firewall.detail}",
    )


@check("network.infiniband", "InfiniBand / RoCE ports are up")
def infiniband(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """An RDMA adapter whose port is down silently sends NCCL back to TCP sockets."""
    if m.network is None:
        return c.skip("network interfaces not in this snapshot")
    rdma = [i for i in m.network if i.rdma_device or i.kind == "infiniband"]
    if not rdma:
        return c.info("no InfiniBand or RoCE adapter (multi-node traffic will use TCP)")
    down = [i for i in rdma if i.operstate not in {"up", "unknown", None}]
    if down:
        return c.warn(
            f"{len(down)} RDMA port(s) are down",
            *(f"{i.name} ({i.rdma_device or 'ib'}): {i.operstate}" for i in down),
            "check: ibstat ; ibv_devinfo",
            fix="Check cables and the switch port; `sudo ip link set <if> up`; for IB check the subnet manager.",
            cause=None,
        )
    return c.ok(
        f"{len(rdma)} RDMA port(s) up",
        *(
            f"{i.name}: {i.rdma_device} {i.rdma_link_layer or ''} {i.speed_mbps or ''}".strip()
            for i in rdma
        ),
    )
