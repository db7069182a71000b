"""`dlrig doctor --fleet` on the real two-node Slurm cluster: srun runs doctor on each node;
the node made to differ (an NCCL_SOCKET_IFNAME only its tasks get, or a drained node) is named
with the check that fails there. And the same comparison over saved snapshots."""

from __future__ import annotations

import json

import pytest

from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

# One Slurm cluster per session: every test that uses it runs on the same xdist worker.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]


def _fleet(slurm_cluster, run_dlrig, *args):  # noqa: F811
    return run_dlrig("doctor", "--fleet", *args, env=slurm_cluster.env(), timeout=180)


def test_fleet_names_the_node_with_a_different_socket_interface(slurm_cluster, run_dlrig):  # noqa: F811
    slurm_cluster.set_node_env("n2", {"NCCL_SOCKET_IFNAME": "ib9"})
    try:
        result = _fleet(slurm_cluster, run_dlrig, "--json")
    finally:
        slurm_cluster.set_node_env("n2", None)
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "dlrig.doctor.fleet"
    assert [n["node"] for n in report["nodes"]] == ["n1", "n2"] and all(
        n["state"] == "ok" for n in report["nodes"]
    )
    assert report["odd_nodes"] == ["n2"]
    difference = next(d for d in report["differences"] if d["attribute"] == "NCCL_SOCKET_IFNAME")
    assert difference["odd_nodes"] == ["n2"] and difference["values"]["n2"].startswith("ib9")
    check = next(c for c in report["checks"] if c["check"] == "nccl.socket_ifname")
    assert check["failing_nodes"] == ["n2"] and check["statuses"]["n1"] == "ok"


def test_fleet_agrees_when_nodes_are_alike_and_names_a_drained_node(slurm_cluster, run_dlrig):  # noqa: F811
    alike = _fleet(slurm_cluster, run_dlrig)
    assert alike.returncode == 0, alike.stdout + alike.stderr
    assert "all nodes agree" in alike.stdout
    slurm_cluster.set_node_state("n2", "drain", reason="bad gpu")
    try:
        drained = _fleet(slurm_cluster, run_dlrig, "--json")
    finally:
        slurm_cluster.set_node_state("n2", "resume")
    assert drained.returncode == 1
    report = json.loads(drained.stdout)
    states = {n["node"]: (n["state"], n["detail"]) for n in report["nodes"]}
    assert states["n2"][0] == "drained" and "bad gpu" in states["n2"][1]
    assert report["odd_nodes"] == ["n2"]


def test_fleet_from_saved_snapshots(run_dlrig, tmp_path):
    from dlrig.machine import readers
    from dlrig.machine.model import Nccl, replace
    from tests.conftest import NVSMI

    machine = readers.load(sorted(NVSMI.glob("**/*.xml"))[0])
    for index in range(3):
        env = (("NCCL_IB_DISABLE", "1"),) if index == 2 else ()
        node = replace(machine, nccl=Nccl(env=env))
        (tmp_path / f"gpu0{index}.json").write_text(node.to_json())
    result = run_dlrig("doctor", "--fleet", str(tmp_path), "--json")
    report = json.loads(result.stdout)
    assert report["odd_nodes"] == ["gpu02"], result.stdout
    difference = next(d for d in report["differences"] if d["attribute"] == "NCCL_IB_DISABLE")
    assert difference["majority"] == "unset" and difference["odd_nodes"] == ["gpu02"]
    assert result.returncode == 1


def test_fleet_compares_the_trained_pcie_link_not_the_maximum(run_dlrig, tmp_path):
    """The T4 capture's link trained at x8 of x16 (a real downgrade, tests/fixtures SOURCES.md):
    next to two nodes whose links trained at their full x16, it is the odd node, by its
    trained width. Comparing the maximum (x16 everywhere) would hide it."""
    from dlrig.machine import readers
    from dlrig.machine.model import replace
    from tests.conftest import NVSMI

    machine = readers.load(NVSMI / "tesla-t4-2procs-q-x.xml")
    assert machine.gpus[0].pcie.width_current == 8 and machine.gpus[0].pcie.width_max == 16
    full = replace(
        machine,
        gpus=tuple(replace(g, pcie=replace(g.pcie, width_current=16)) for g in machine.gpus),
    )
    for name, node in (("gpu01", full), ("gpu02", full), ("gpu03", machine)):
        (tmp_path / f"{name}.json").write_text(node.to_json())
    result = run_dlrig("doctor", "--fleet", str(tmp_path), "--json")
    report = json.loads(result.stdout)
    link = next(d for d in report["differences"] if d["attribute"] == "PCIe links")
    assert link["odd_nodes"] == ["gpu03"] and "x8 of x16" in link["values"]["gpu03"], link
    assert "x8" not in link["values"]["gpu01"]
    assert "gpu03" in report["odd_nodes"] and result.returncode == 1
    text = run_dlrig("doctor", "--fleet", str(tmp_path))
    assert "odd node(s) out: gpu03" in text.stdout and "warns on gpu03" in text.stdout, text.stdout
