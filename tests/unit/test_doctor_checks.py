"""Doctor checks on real recorded machines, and on scenarios built from them.

Scenarios start from a real snapshot and change one fact (the way a user's machine differs),
so each check is shown to fire on the problem and to stay quiet without it.
"""

from __future__ import annotations

import datetime as dt

from dlrig import causes, doctor
from dlrig.doctor.registry import DoctorOptions
from dlrig.machine import readers
from dlrig.machine.model import (
    Containers,
    Driver,
    Frameworks,
    Gpu,
    Limits,
    Machine,
    Nccl,
    NetInterface,
    PackageInfo,
    SharedMemory,
    TorchInfo,
    replace,
)
from dlrig.report import Status
from tests.conftest import NVSMI


def result(machine: Machine, check_id: str, options: DoctorOptions | None = None):
    entry = doctor.get(check_id)
    assert entry is not None, check_id
    return entry.run(machine, options or DoctorOptions(today=dt.date(2026, 11, 30)))


def a100() -> Machine:
    return readers.load(NVSMI / "a100-sxm4-80gb-mig-4inst-q-x.xml")


def t4() -> Machine:
    return readers.load(NVSMI / "tesla-t4-2procs-q-x.xml")


def with_torch(machine: Machine, version: str, cuda: str | None, **extra) -> Machine:
    build = "cuda" if cuda else "cpu"
    torch = TorchInfo(
        version=version, build=build, cuda_version=cuda, arch_list=extra.pop("arch_list", None)
    )
    return replace(machine, frameworks=Frameworks(torch=torch, **extra))


def test_at_least_35_checks_with_explanations_and_known_causes():
    checks = doctor.all_checks()
    assert len(checks) >= 35
    assert len({c.id for c in checks}) == len(checks)
    for entry in checks:
        assert len(entry.explanation) > 40, entry.id
        assert entry.cause is None or entry.cause in causes.CAUSES, entry.id


def test_t4_link_width_downgrade_is_found():
    r = result(t4(), "gpu.pcie_width")
    assert r.status is Status.WARN
    assert "x8 of x16" in " ".join(r.evidence)


def test_idle_gen1_link_is_not_a_false_alarm():
    # rtx3090 fixture: idle (P8, gpu_idle) at PCIe gen 1 of 4
    r = result(readers.load(NVSMI / "rtx3090-q-x.xml"), "gpu.pcie_gen")
    assert r.status is Status.OK
    assert "idle" in " ".join(r.evidence)


def test_busy_gpu_below_max_generation_warns():
    machine = readers.load(NVSMI / "rtx3090-q-x.xml")
    gpu = replace(machine.gpus[0], utilization_gpu_percent=97.0)
    r = result(replace(machine, gpus=(gpu,)), "gpu.pcie_gen")
    assert r.status is Status.WARN


def test_rtx3090_power_cap_found():
    r = result(readers.load(NVSMI / "rtx3090-q-x.xml"), "gpu.power_limit")
    assert r.status is Status.WARN
    assert "200 W" in " ".join(r.evidence)


def test_mig_is_info():
    r = result(a100(), "gpu.mig")
    assert r.status is Status.INFO
    assert "4 MIG instance(s)" in " ".join(r.evidence)


def test_xid119_fails_as_critical():
    r = result(readers.load(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log"), "gpu.xid_events")
    assert r.status is Status.FAIL
    assert r.cause == "xid_error"
    assert "Xid 119 ×5" in " ".join(r.evidence)


def test_driver_too_old_for_torch_cuda():
    machine = with_torch(t4(), "2.5.1+cu124", "12.4")  # T4 fixture: driver 515.105.01, CUDA 11.7
    r = result(machine, "driver.torch_cuda")
    assert r.status is Status.FAIL
    assert r.cause == "driver_too_old"
    assert "550.54.14" in r.title  # CUDA 12.4 GA minimum driver
    assert "cu118" in r.fix  # the newest 2.5 variant a CUDA 11.7 driver can run


def test_minor_version_compatibility_is_info_not_fail():
    machine = with_torch(a100(), "2.5.1+cu124", "12.4")  # driver 535.54.03: 12.x via MVC
    r = result(machine, "driver.torch_cuda")
    assert r.status is Status.INFO


def test_driver_new_enough():
    machine = with_torch(a100(), "2.1.0+cu121", "12.1")
    assert result(machine, "driver.torch_cuda").status is Status.OK


def test_cpu_only_torch_on_gpu_machine():
    r = result(with_torch(t4(), "2.5.1+cpu", None), "frameworks.cpu_only_torch")
    assert r.status is Status.FAIL
    assert r.cause == "cpu_only_torch"
    assert "download.pytorch.org/whl/cu118" in r.fix  # T4 fixture's driver supports CUDA 11.7


def test_cpu_only_torch_on_cpu_machine_is_fine():
    machine = Machine(origin=t4().origin, driver=Driver(nvidia_pci_devices=0), gpus=())
    assert (
        result(with_torch(machine, "2.5.1+cpu", None), "frameworks.cpu_only_torch").status
        is Status.OK
    )
    assert result(machine, "driver.loaded").status is Status.INFO


def test_arch_missing_from_build():
    machine = readers.load(NVSMI / "rtx4080super-capture-idle-load.txt")  # sm_89
    # a CUDA 10.2 era list: nothing of major 8, no PTX
    machine = with_torch(
        machine, "1.10.2+cu102", "10.2", arch_list=("sm_37", "sm_50", "sm_60", "sm_70")
    )
    r = result(machine, "gpu.arch_in_torch")
    assert r.status is Status.FAIL
    assert r.cause == "no_kernel_image"
    assert "sm_89" in r.title


def test_same_major_lower_minor_cubin_runs():
    machine = readers.load(NVSMI / "rtx3090-q-x.xml")  # sm_86
    machine = with_torch(
        machine,
        "1.13.1+cu117",
        "11.7",
        arch_list=("sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80"),
    )
    assert result(machine, "gpu.arch_in_torch").status is Status.OK


def test_blackwell_on_old_release_is_too_old():
    gpu = Gpu(index=0, name="NVIDIA GeForce RTX 5090", compute_capability="12.0")
    machine = with_torch(replace(t4(), gpus=(gpu,)), "2.5.1+cu124", "12.4")
    too_old = result(machine, "gpu.torch_too_old")
    assert too_old.status is Status.FAIL
    assert "2.7" in too_old.title
    assert "cu128" in too_old.fix


def test_pascal_dropped_from_cu128_wheel_suggests_cu126():
    gpu = Gpu(index=0, name="NVIDIA GeForce GTX 1080 Ti")
    machine = with_torch(replace(t4(), gpus=(gpu,)), "2.11.0+cu128", "12.8")
    r = result(machine, "gpu.arch_in_torch")
    assert r.status is Status.FAIL
    assert "cu126" in r.fix


def test_companion_mismatch():
    machine = with_torch(
        t4(), "2.5.1+cu121", "12.1", torchvision=PackageInfo("torchvision", "0.19.1+cu121")
    )
    r = result(machine, "frameworks.companions")
    assert r.status is Status.FAIL
    assert r.cause == "version_mismatch_torch_torchvision"
    assert "torchvision==0.20.*" in r.fix


def test_companion_cuda_variant_mismatch():
    machine = with_torch(
        t4(), "2.5.1+cu121", "12.1", torchvision=PackageInfo("torchvision", "0.20.1+cu118")
    )
    assert result(machine, "frameworks.companions").status is Status.FAIL


def test_companions_that_match():
    machine = with_torch(
        t4(),
        "2.5.1+cu121",
        "12.1",
        torchvision=PackageInfo("torchvision", "0.20.1+cu121"),
        torchaudio=PackageInfo("torchaudio", "2.5.1+cu121"),
    )
    assert result(machine, "frameworks.companions").status is Status.OK


def test_shm_docker_default_fails():
    machine = replace(
        t4(),
        shm=SharedMemory(total_bytes=64 * 1024**2, free_bytes=60 * 1024**2),
        containers=Containers(in_container=True, container_kind="docker"),
    )
    r = result(machine, "host.shm")
    assert r.status is Status.FAIL
    assert r.cause == "shm_too_small"
    assert "--shm-size" in r.fix


def test_open_files_1024_warns():
    r = result(
        replace(t4(), limits=Limits(open_files_soft=1024, open_files_hard=4096)), "host.open_files"
    )
    assert r.status is Status.WARN
    assert r.cause == "too_many_open_files"


def test_nccl_socket_ifname_missing_interface():
    network = (
        NetInterface("lo", "loopback", "unknown"),
        NetInterface("eno1", "ethernet", "up"),
        NetInterface("docker0", "bridge", "up"),
    )
    machine = replace(t4(), network=network, nccl=Nccl(env=(("NCCL_SOCKET_IFNAME", "eth0"),)))
    r = result(machine, "nccl.socket_ifname")
    assert r.status is Status.FAIL
    assert r.cause == "nccl_wrong_socket_interface"
    assert "NCCL_SOCKET_IFNAME=eno1" in r.fix
    fine = replace(machine, nccl=Nccl(env=(("NCCL_SOCKET_IFNAME", "^docker,lo"),)))
    assert result(fine, "nccl.socket_ifname").status is Status.OK


def test_ib_disabled_with_rdma_present():
    network = (
        NetInterface("ib0", "infiniband", "up", rdma_device="mlx5_0", rdma_link_layer="InfiniBand"),
    )
    machine = replace(t4(), network=network, nccl=Nccl(env=(("NCCL_IB_DISABLE", "1"),)))
    assert result(machine, "nccl.ib_disabled").status is Status.WARN


def test_debug_left_in_nccl_conf():
    machine = replace(
        t4(), nccl=Nccl(conf_files=("/etc/nccl.conf",), conf=(("NCCL_DEBUG", "INFO"),))
    )
    assert result(machine, "nccl.debug_settings").status is Status.WARN


def test_driver_library_mismatch_from_nvml_error():
    machine = replace(
        t4(), driver=Driver(nvml_error="Driver/library version mismatch", nvidia_pci_devices=1)
    )
    r = result(machine, "driver.library_mismatch")
    assert r.status is Status.FAIL
    assert r.cause == "driver_library_mismatch"


def test_kernel_module_differs_from_userspace():
    machine = replace(t4(), driver=replace(t4().driver, kernel_module_version="515.86.01"))
    assert result(machine, "driver.library_mismatch").status is Status.FAIL


def test_gpu_present_without_driver():
    machine = Machine(
        origin=t4().origin,
        driver=Driver(
            nvidia_pci_devices=2, nvidia_pci_devices_with_driver=0, kernel_module_loaded=False
        ),
    )
    r = result(machine, "driver.loaded")
    assert r.status is Status.FAIL
    assert r.cause == "no_nvidia_driver"


def test_branch_eol_uses_the_date():
    machine = a100()  # driver 535.54.03: R535 LTSB, end of life 2026-06
    assert (
        result(machine, "driver.branch_eol", DoctorOptions(today=dt.date(2026, 11, 30))).status
        is Status.WARN
    )
    assert (
        result(machine, "driver.branch_eol", DoctorOptions(today=dt.date(2025, 1, 1))).status
        is Status.OK
    )


def test_docker_without_toolkit():
    machine = replace(
        t4(),
        containers=Containers(
            in_container=False,
            docker_installed=True,
            docker_is_snap=False,
            nvidia_container_toolkit=False,
        ),
    )
    r = result(machine, "containers.toolkit")
    assert r.status is Status.FAIL
    assert r.cause == "container_toolkit_missing"


def test_every_check_runs_on_an_empty_snapshot():
    report = doctor.run(machine=Machine(origin=t4().origin))
    assert all(r.status is Status.SKIP for r in report.checks), [
        (r.id, r.status) for r in report.checks if r.status is not Status.SKIP
    ]


def test_nvlink_down_on_sxm_gpus():
    from dlrig.machine.model import Topology

    machine = readers.load(NVSMI / "h200-capture-idle-load.txt")  # 18 links of 26.562 GB/s
    assert machine.topology.nvlink_active_links == (18,)
    gpu = machine.gpus[0]
    two = replace(machine, gpus=(gpu, replace(gpu, index=1)))
    assert (
        result(replace(two, topology=Topology(nvlink_active_links=(18, 18))), "gpu.nvlink").status
        is Status.OK
    )
    r = result(replace(two, topology=Topology(nvlink_active_links=(18, 0))), "gpu.nvlink")
    assert r.status is Status.WARN
    assert "GPU 1" in " ".join(r.evidence)


def test_a_gpu_whose_video_engine_works_is_not_idle():
    # issue 23: an NVENC/NVDEC job leaves the SMs near 0 %; the recorded encode (coraxx/
    # netdata_nv_plugin#7) shows SM 1 % and Encoder 12 %.
    from dlrig.doctor import facts

    (gpu,) = readers.load(NVSMI / "q-d-utilization-396.24-nvenc-busy.txt").gpus or ()
    assert gpu.utilization_gpu_percent == 1.0 and gpu.utilization_encoder_percent == 12.0
    assert facts.busy(gpu, DoctorOptions().busy_utilization_percent) is True


def test_skip_reasons_say_what_a_recorded_snapshot_does_not_hold():
    # an nvidia-smi capture has no Python environment: torch is not "not installed"
    machine = readers.load(NVSMI / "rtx3090-q-x.xml")
    assert machine.frameworks is None
    report = doctor.run(DoctorOptions(), machine=machine)
    reasons = {r.title for r in report.checks if r.status is Status.SKIP}
    assert not any(reason.startswith("torch is not installed") for reason in reasons)
    assert any("torch not in this snapshot" in reason for reason in reasons)
