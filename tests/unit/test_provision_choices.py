"""The choices `dlrig provision` makes, against the tables they come from: the cases a QA pass
found wrong (base image vs wheel and driver, --os, toolkits that cannot target the GPU, EPEL,
pinned NCCL, no GPU, short --gpu names, Pythons, bad facts, pod memory, nccl.conf, monitor)."""

from __future__ import annotations

import re

import pytest
import yaml

from dlrig import provision
from dlrig.errors import InputError
from dlrig.knowledge import gpus
from dlrig.knowledge import provision as tables
from dlrig.provision.docker import DockerOptions
from dlrig.provision.host import HostOptions
from dlrig.provision.launch import LaunchOptions
from dlrig.provision.nccl import NcclOptions
from tests.conftest import NVSMI


def facts(**stated: object) -> provision.Facts:
    return provision.gather(None, provision.Stated(**stated), probe=False)  # type: ignore[arg-type]


def dockerfile(**stated: object) -> str:
    return provision.generate("docker", facts(**stated)).file("Dockerfile").content


def base_of(text: str) -> str:
    return re.search(r"^FROM (\S+)$", text, re.M).group(1)


def host_script(options: HostOptions | None = None, **stated: object) -> provision.Bundle:
    return provision.generate("host", facts(**stated), options=options or HostOptions())


# --- docker: the base image -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stated", "base"),
    [
        # cu128 wheel, driver unknown: the wheel's own CUDA, not 13.0 (an R580 floor).
        ({"gpu": "rtx-4090", "torch": "2.9"}, "nvidia/cuda:12.8.1-base-ubuntu24.04"),
        # Driver 535 runs CUDA 12.2: the cu128 wheel runs there by minor-version compatibility;
        # the 12.2.2 tag is ubuntu22.04 only, whose Python 3.10 torch 2.9 supports.
        (
            {"gpu": "t4", "torch": "2.9", "driver": "535.104.05"},
            "nvidia/cuda:12.2.2-base-ubuntu22.04",
        ),
        # A driver that runs CUDA 13.0: the newest listed tag up to it.
        (
            {"gpu": "a100", "torch": "2.9", "driver": "580.95.05"},
            "nvidia/cuda:13.0.2-base-ubuntu24.04",
        ),
        # --os is honoured: Rocky 9 images; Debian has none, so Ubuntu 24.04 (said).
        (
            {"gpu": "rtx-4090", "torch": "2.9", "os": "rocky-9"},
            "nvidia/cuda:12.8.1-base-rockylinux9",
        ),
        (
            {"gpu": "rtx-4090", "torch": "2.9", "os": "debian-12"},
            "nvidia/cuda:12.8.1-base-ubuntu24.04",
        ),
    ],
)
def test_base_tag_lies_between_the_wheels_cuda_and_the_drivers(stated, base):
    text = dockerfile(**stated)
    assert base_of(text) == base
    tag = base.split(":", 1)[1]
    listed = {i.tag(f): i for i in tables.cuda_images() for f in i.flavors}
    assert listed[tag].status != "deleted"


def test_every_deleted_tag_window_falls_back_to_the_plain_os_image_with_the_wheels_floor():
    # torch 1.12 cu116: every 11.x tag is deleted; the plain Ubuntu 22.04 (Python 3.10 fits
    # torch 1.12) with the variables nvidia/cuda images set, floor = the wheel's CUDA.
    text = dockerfile(gpu="t4", torch="1.12.0+cu116")
    assert base_of(text) == "ubuntu:22.04"
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=11.6"' in text
    assert (
        "NVIDIA_VISIBLE_DEVICES=all" in text
        and "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text
    )


def test_a_snapshot_with_an_old_driver_gets_an_image_its_driver_accepts():
    # The T4 capture runs driver 515 (CUDA 11.7). Before: refused. Now: a cu118 wheel by
    # minor-version compatibility, and a floor the driver meets (not the wheel's 11.8).
    snapshot = provision.gather(NVSMI / "tesla-t4-2procs-q-x.xml", provision.Stated(), probe=False)
    bundle = provision.generate("docker", snapshot)
    text = bundle.file("Dockerfile").content
    floor = re.search(r'NVIDIA_REQUIRE_CUDA="cuda>=([\d.]+)"', text)
    assert floor is not None and floor.group(1) == "11.7", text[:800]


def test_os_that_cannot_host_the_torch_release_is_refused_with_what_it_has():
    with pytest.raises(InputError) as info:
        provision.generate("docker", facts(gpu="t4", torch="2.9", os="rocky-9", python="3.10"))
    assert "rockylinux9" in str(info.value) and "3.11" in str(info.value)


def test_cudnn_picks_a_flavour_that_has_cudnn_tags():
    bundle = provision.generate(
        "docker", facts(gpu="rtx-4090", torch="2.9"), options=DockerOptions(cudnn=True)
    )
    assert (
        base_of(bundle.file("Dockerfile").content) == "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"
    )
    assert any(d.what == "image flavour" and d.choice == "runtime" for d in bundle.decisions)


def test_devel_image_keeps_the_wheels_cuda_major():
    # nvcc 13 cannot build extensions for a cu128 torch: the newest 12.x devel tag instead.
    bundle = provision.generate(
        "docker",
        facts(gpu="a100", torch="2.9", driver="580.95.05"),
        options=DockerOptions(flavor="devel"),
    )
    assert base_of(bundle.file("Dockerfile").content) == "nvidia/cuda:12.9.1-devel-ubuntu24.04"


def test_torch_is_installed_before_the_other_packages():
    text = dockerfile(gpu="rtx-4090", torch="2.9")
    assert text.index("-r /tmp/env/requirements-torch.txt") < text.index(
        "-r /tmp/env/requirements.in"
    )
    assert "-c /tmp/env/installed.txt" in text and "pip check" in text


# --- host ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "cuda", "newest"),
    [("v100-sxm2-32gb", "13.0", "12.9"), ("p100-pcie-16gb", "13.0", "12.9")],
)
def test_a_toolkit_that_dropped_the_architecture_is_refused_with_the_newest_that_can(
    gpu, cuda, newest
):
    with pytest.raises(InputError) as info:
        host_script(gpu=gpu, os="ubuntu-24.04", cuda=cuda)
    assert "removed sm_" in str(info.value) and f"--cuda {newest}" in (info.value.fix or "")


def test_a_toolkit_older_than_the_architecture_is_refused():
    with pytest.raises(InputError) as info:
        host_script(gpu="rtx-5090", os="ubuntu-24.04", cuda="12.6")
    assert "sm_120 first appears in CUDA 12.8" in str(info.value)
    # A toolkit that does target it is taken, and says so.
    ok = host_script(gpu="rtx-5090", os="ubuntu-24.04", cuda="12.8")
    assert any(d.what == "toolkit and GPU" for d in ok.decisions)


def test_rocky_enables_crb_and_epel_before_the_driver():
    script = host_script(gpu="t4", os="rocky-9", cuda="12.2").file("install-nvidia.sh").content
    crb, epel, driver = (script.index(f'step "{s}"') for s in ("crb-repository", "epel", "driver"))
    assert crb < epel < driver
    assert "dnf config-manager --set-enabled" in script and "install_pkgs epel-release" in script
    assert "subscription-manager repos --enable" in script  # RHEL proper
    assert "kernel-headers-$(uname -r)" in script


@pytest.mark.parametrize(
    ("os_id", "pin"),
    [("ubuntu-24.04", "libnccl2=2.25.1-1+cuda12.8"), ("rocky-9", "libnccl-2.25.1-1+cuda12.8")],
)
def test_nccl_is_the_build_for_the_toolkits_cuda(os_id, pin):
    bundle = host_script(HostOptions(nccl=True), gpu="h100", os=os_id, cuda="12.8")
    script = bundle.file("install-nvidia.sh").content
    assert pin in script
    assert not re.search(r"install_pkgs libnccl2 libnccl-dev\b", script)


def test_nccl_needs_a_toolkit_with_a_recorded_build():
    with pytest.raises(InputError):
        host_script(HostOptions(nccl=True), gpu="h100", os="ubuntu-24.04")
    with pytest.raises(InputError) as info:
        host_script(HostOptions(nccl=True), gpu="h100", os="ubuntu-24.04", cuda="13.1")
    assert "12.8" in (info.value.fix or "")


def test_no_gpu_in_the_facts_writes_no_driver_install():
    from dlrig.machine.model import Driver, Machine, Origin, OsInfo
    from dlrig.provision.facts import from_machine

    machine = Machine(
        origin=Origin(kind="live", hostname="cpu01"),
        os=OsInfo(name="Debian GNU/Linux 12 (bookworm)"),
        driver=Driver(nvidia_pci_devices=0),
        gpus=(),
    )
    with pytest.raises(InputError) as info:
        provision.generate("host", from_machine(machine, "live probe of cpu01"))
    assert "no NVIDIA GPU" in str(info.value)
    # A GPU on the bus but no driver to name it: the model is asked for, not guessed.
    present = Machine(
        origin=machine.origin, os=machine.os, driver=Driver(nvidia_pci_devices=2), gpus=()
    )
    with pytest.raises(InputError) as info:
        provision.generate("host", from_machine(present, "snapshot"))
    assert "--gpu" in (info.value.fix or "")
    # Stated facts without a GPU: the module flavour depends on it, so it is asked for.
    with pytest.raises(InputError) as info:
        host_script(os="ubuntu-24.04")
    assert "architecture is not known" in str(info.value)


def test_host_choices_speak_only_of_what_the_script_does():
    bundle = host_script(gpu="rtx-5090", os="ubuntu-24.04", torch="2.9")
    whats = [d.what for d in bundle.decisions]
    assert "torch" not in whats and "wheel index" not in whats and "python" not in whats
    assert any(w.startswith("driver for torch 2.9") for w in whats)
    plain = host_script(gpu="rtx-5090", os="ubuntu-24.04")
    branch = next(d for d in plain.decisions if d.what == "driver branch")
    assert "at or above 0" not in branch.why and "kernel-modules" not in (branch.source or "")
    script = plain.file("install-nvidia.sh").content
    assert "docker run --rm --runtime=nvidia --gpus all ubuntu:24.04 nvidia-smi" in script


# --- --gpu names: one lookup -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gpu_id", "how"),
    [
        ("h100", "h100-sxm5-80gb", "preferred"),
        ("H100", "h100-sxm5-80gb", "preferred"),
        ("a100", "a100-sxm4-80gb", "preferred"),
        ("A100 40GB", "a100-sxm4-40gb", "preferred"),
        ("A100-SXM4-80GB", "a100-sxm4-80gb", "id"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb", "alias"),
        ("rtx 4090", "rtx-4090", "alias"),
        ("H100-SXM5-80GB", "h100-sxm5-80gb", "id"),
    ],
)
def test_gpu_lookup_takes_ids_aliases_and_preferred_short_names(name, gpu_id, how):
    match = gpus.lookup(name)
    assert (match.spec.id, match.how) == (gpu_id, how)
    if how == "preferred":
        assert match.note and match.source and gpu_id in match.note


def test_gpu_lookup_refuses_what_it_cannot_pin_to_one_sku():
    with pytest.raises(InputError) as info:
        gpus.lookup("v100")  # five SKUs, no preference row
    assert "matches several different GPUs" in str(info.value)
    with pytest.raises(InputError) as info:
        gpus.lookup("rtx 4080")  # only the SUPER is listed: suggested, not taken
    assert "rtx-4080-super" in (info.value.fix or "")


def test_every_preference_row_names_a_catalogue_sku_it_is_a_subset_of():
    for key, row in gpus.alias_preferences().items():
        spec = gpus.catalogue().get(row.gpu)
        assert spec is not None
        assert any(key <= gpus.tokens(s) for s in (spec.id, spec.name, *spec.aliases)), row.alias
        assert gpus.catalogue().resolve(row.alias) is None, f"{row.alias} is already an alias"


def test_provision_takes_short_names_and_says_which_sku():
    bundle = host_script(gpu="h100", os="ubuntu-24.04")
    first = bundle.decisions[0]
    assert (first.what, first.choice) == ("GPU model", "h100-sxm5-80gb") and first.source


# --- env: Python and stated facts ----------------------------------------------------------------


def test_the_snapshots_python_is_a_preference_a_stated_one_a_requirement():
    from dataclasses import replace

    snapshot = replace(
        facts(torch="1.12.0+cu116"), python="3.11.7", python_from="the snapshot's interpreter"
    )
    env = provision.generate("env", snapshot)
    assert '"python=3.10"' in env.file("environment.yml").content
    with pytest.raises(InputError) as info:
        provision.generate("env", facts(torch="1.12", python="3.11"))
    assert "--python 3.7..3.10" in (info.value.fix or "") and "--torch" in (info.value.fix or "")


@pytest.mark.parametrize(
    "stated",
    [{"torch": "abc"}, {"python": "abc"}, {"driver": "abc"}, {"cuda": "abc"}, {"torch": "9.9"}],
)
def test_values_that_are_not_versions_are_refused(stated):
    with pytest.raises(InputError):
        facts(**stated)


def test_a_cuda_the_torch_release_has_no_wheel_for_is_refused():
    with pytest.raises(InputError) as info:
        provision.generate("env", facts(torch="2.9", cuda="11.8"))
    assert "no CUDA 11.8 wheel" in str(info.value) and "cu128" in str(info.value)
    taken = provision.generate("env", facts(torch="2.9", cuda="12.6"))
    assert "whl/cu126" in taken.file("requirements-torch.txt").content


# --- launch, nccl, monitor ---------------------------------------------------------------------


def test_kubeflow_pods_get_no_hard_coded_memory_limit():
    bundle = provision.generate(
        "launch",
        facts(gpu="h100", gpu_count=8),
        options=LaunchOptions(script="t.py", nodes=2, scheduler="kubeflow"),
    )
    job = yaml.safe_load(bundle.file("pytorchjob.yaml").content)
    resources = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    assert "memory" not in resources["limits"] and resources["limits"]["nvidia.com/gpu"] == 8
    assert any(d.what == "pod memory" for d in bundle.decisions)
    stated = provision.generate(
        "launch",
        facts(gpu="h100", gpu_count=8),
        options=LaunchOptions(script="t.py", nodes=2, scheduler="kubeflow", memory="400Gi"),
    )
    job = yaml.safe_load(stated.file("trainjob.yaml").content)
    assert job["spec"]["trainer"]["resourcesPerNode"]["limits"]["memory"] == "400Gi"


def test_launch_refuses_zero_gpus_per_node():
    with pytest.raises(InputError):
        provision.generate("launch", facts(), options=LaunchOptions(script="t.py", gpus_per_node=0))


def _nccl_machine(conf: tuple[tuple[str, str], ...]):
    from dlrig.machine.model import Machine, Nccl, NetInterface, Origin
    from dlrig.provision.facts import from_machine

    machine = Machine(
        origin=Origin(kind="snapshot", hostname="gpu01"),
        network=(
            NetInterface("eth0", "ethernet", "up", 25000, ("10.0.0.5",)),
            NetInterface("eth1", "ethernet", "up", 25000, ("10.1.0.5",)),
            NetInterface("ib0", "infiniband", "up", 200000, ("10.2.0.5",), rdma_device="mlx5_0"),
        ),
        nccl=Nccl(conf_files=("/etc/nccl.conf",), conf=conf),
    )
    return from_machine(machine, "snapshot gpu01.json")


def test_nccl_keeps_the_machines_interface_choice_and_warns_on_unknown_keys():
    bundle = provision.generate(
        "nccl", _nccl_machine((("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_BOGUS_X", "1")))
    )
    settings = dict(re.findall(r"^(NCCL_\w+)=(.*)$", bundle.file("nccl.conf").content, re.M))
    assert settings["NCCL_SOCKET_IFNAME"] == "eth0"  # kept, not replaced by every interface
    assert any("NCCL_BOGUS_X" in w and "not a variable" in w for w in bundle.warnings)
    auto = provision.generate("nccl", _nccl_machine(()))
    conf = auto.file("nccl.conf").content
    assert "NCCL_SOCKET_IFNAME==eth0,eth1,ib0" in conf  # '=' applies to the whole list


def test_nccl_without_network_facts_claims_nothing():
    bundle = provision.generate("nccl", facts(gpu="h100"), options=NcclOptions())
    conf = bundle.file("nccl.conf").content
    assert "fit this machine" not in conf and "no network interfaces" in conf
    assert any("no network facts" in w for w in bundle.warnings)


def test_monitor_daemonset_sees_host_processes_and_says_what_that_costs():
    bundle = provision.generate("monitor-k8s", facts(gpu="h100"))
    daemonset = next(yaml.safe_load_all(bundle.file("dlrig-monitor.yaml").content))
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert spec["containers"][0]["securityContext"]["capabilities"]["drop"] == ["ALL"]
    note = next(d for d in bundle.decisions if d.what == "host PID and network")
    assert "Security" in note.why


def test_power_limit_below_the_gpus_minimum_is_refused():
    from dlrig.provision.power import PowerOptions

    with pytest.raises(InputError) as info:
        provision.generate(
            "power", facts(gpu="rtx-3090"), options=PowerOptions(power_limit_watts=50)
        )
    assert "100 W minimum" in str(info.value)


@pytest.mark.parametrize(
    "stated",
    [
        {"gpu": "rtx-4090", "torch": "2.9", "os": "rocky-9"},  # dnf, python3.12
        {"gpu": "t4", "torch": "1.12.0+cu116"},  # the plain OS base with NVIDIA_* variables
        {"gpu": "a100", "torch": "2.9", "driver": "580.95.05"},
    ],
)
def test_every_kind_of_dockerfile_passes_hadolint(tmp_path, stated):
    import subprocess
    from pathlib import Path

    hadolint = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "hadolint"
    provision.write(provision.generate("docker", facts(**stated)), tmp_path, overwrite=True)
    result = subprocess.run(
        [str(hadolint), str(tmp_path / "Dockerfile")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
