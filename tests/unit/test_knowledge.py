"""The knowledge tables load, carry sources, and answer the questions checks ask."""

from __future__ import annotations

import pytest

from dlrig.knowledge import cuda, drivers, gpus, pytorch, tables, xid
from dlrig.knowledge.versions import Version

REQUIRED_IDS = [
    "v100-sxm2-16gb",
    "v100-pcie-16gb",
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "a100-pcie-40gb",
    "a100-pcie-80gb",
    "h100-sxm5-80gb",
    "h100-pcie-80gb",
    "h200-sxm-141gb",
    "a10",
    "a30",
    "l4",
    "l40s",
    "t4",
    "rtx-3090",
    "rtx-4090",
    "rtx-5090",
    "rtx-a6000",
    "rtx-6000-ada",
    "quadro-rtx-8000",
    "mi250x",
    "mi300x",
    "gaudi2",
]


@pytest.mark.parametrize("name", sorted(tables.manifest()))
def test_every_table_loads_with_source_and_date(name):
    rows = tables.rows(name)
    assert rows, name
    for row in rows:
        assert row["source"], (name, row)
        assert row["as_of"], (name, row)


def test_catalogue_has_required_ids_and_resolves_spellings():
    catalogue = gpus.catalogue()
    for gpu_id in REQUIRED_IDS:
        assert catalogue.get(gpu_id) is not None, gpu_id
    assert catalogue.resolve("NVIDIA A100-SXM4-80GB").id == "a100-sxm4-80gb"
    assert catalogue.resolve("A100 80GB SXM4").id == "a100-sxm4-80gb"
    assert catalogue.resolve("Tesla T4").id == "t4"
    assert catalogue.resolve("NVIDIA H100 80GB HBM3 MIG 1g.10gb").id == "h100-sxm5-80gb"
    assert catalogue.resolve("A100") is None  # ambiguous: never guessed
    assert "a100-sxm4-80gb" in catalogue.suggestions("a100-80gb")


def test_catalogue_values_are_dense_and_consistent():
    for spec in gpus.catalogue().specs:
        assert spec.id == spec.id.lower() and " " not in spec.id
        if spec.bf16_tflops and spec.fp8_tflops:
            assert spec.fp8_tflops >= spec.bf16_tflops, spec.id
    h100 = gpus.catalogue().get("h100-sxm5-80gb")
    assert h100.bf16_tflops == pytest.approx(989, rel=0.01)  # dense, not the 1979 sparse figure
    assert gpus.catalogue().get("l40s").tdp_watts == 350  # the seed's 300 W was wrong


def test_compute_capability_by_family():
    assert gpus.compute_capability("NVIDIA GeForce GTX 1080 Ti")[0] == "6.1"
    assert gpus.compute_capability("NVIDIA GeForce RTX 5070 Ti")[0] == "12.0"
    assert gpus.compute_capability("GeForce GTX TITAN X")[0] == "5.2"
    assert gpus.compute_capability("NVIDIA TITAN Xp")[0] == "6.1"
    assert gpus.compute_capability("Tesla K80")[0] == "3.7"


def test_driver_requirements_from_nvidia_table():
    requirement = cuda.driver_requirement("12.4")
    assert requirement.full_support == Version.parse("550.54.14")
    assert requirement.minor_compat_floor == Version.parse("525.60.13")
    assert cuda.driver_requirement("12.4", windows=True).full_support == Version.parse("551.61")
    assert cuda.driver_requirement("11.8").full_support == Version.parse("520.61.05")
    assert cuda.max_cuda_for_driver("535.54.03") == "12.2"


def test_arch_support_events():
    assert cuda.arch_status("13.0", "7.0").event == "removed"
    assert cuda.arch_status("12.8", "7.0").event == "deprecated"
    assert cuda.first_cuda_for("12.0") == Version.parse("12.8")


def test_arch_lists_semantics():
    cu124 = pytorch.arch_list("2.5.1", "cu124")
    assert "9.0" in cu124.compute_capabilities
    assert cu124.supports("8.6") and cu124.supports("8.9")  # 8.0/8.6 cubins run on 8.9
    assert not cu124.supports("12.0")  # compute_90 PTX cannot help: CUDA 12.4 predates sm_120
    assert pytorch.arch_list("2.8.0", "cu128").supports("12.0")
    assert not pytorch.arch_list("2.11.0", "cu128").supports("6.1")  # Pascal dropped


def test_companions():
    assert pytorch.companions()["2.5"].torchvision_version == "0.20"
    assert pytorch.torch_for_torchvision("0.15.2+cu118") == "2.0"


def test_driver_branches():
    assert drivers.lookup("535.54.03").designation == "LTSB"
    assert drivers.lookup("580.65.06").end_of_life.year == 2028


def test_xid_table():
    assert xid.lookup(79).severity == "critical"
    assert xid.lookup(13).severity == "info"
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120):
        assert xid.lookup(code) is not None, code


def test_variants_are_patch_exact_where_the_table_says():
    from dlrig.knowledge import pytorch as torch_knowledge

    def names(version: str) -> list[str]:
        return [v.cuda_variant for v in torch_knowledge.variants_of(version)]

    # previous-versions.md: v1.8.0 lists cu111/cu102 wheels, v1.8.1 adds cu101
    assert names("1.8.0") == ["cu102", "cu111"]
    assert names("1.8.1") == ["cu101", "cu102", "cu111"]
    assert names("1.8") == ["cu101", "cu102", "cu111"]
    assert names("1.7.1") == ["cu92", "cu101", "cu102", "cu110"]
    assert torch_knowledge.releases()[0] == "1.0"


def test_a_torchvision_minor_shared_by_two_torch_minors():
    from dlrig.knowledge import pytorch as torch_knowledge

    assert torch_knowledge.torch_for_torchvision("0.4.0") == "1.2"
    assert torch_knowledge.torch_for_torchvision("0.4.2") == "1.3"
    assert torch_knowledge.torch_for_torchvision("0.20.1") == "2.5"


def test_newest_cuda_for_old_and_new_drivers():
    from dlrig.knowledge import cuda

    # Table 3 names build versions before CUDA 11 (10.1.105, 10.0.130): they count too.
    assert cuda.max_cuda_for_driver("410.48") == "10.0"
    assert cuda.max_cuda_for_driver("418.67") == "10.1"
    assert cuda.max_cuda_for_driver("470.82.01") == "11.4"
    assert cuda.max_cuda_for_driver("570.86.15") == "12.8"
    # the 11.0.1 release candidate does not set 11.0's floor
    assert str(cuda.driver_requirement("11.0").full_support) == "450.51.05"


def test_how_pip_reaches_each_release():
    from dlrig.knowledge.install_commands import install_style

    assert install_style("1.7").pip_option == "-f"
    assert install_style("1.12").pip_option == "--extra-index-url"
    assert install_style("2.14").pip_option == "--index-url"


# --- driver branches, architectures and the driver package policy (issue 9/10 QA) ---------------


def test_r470_and_r590_are_in_the_branch_table():
    r470 = drivers.lookup("470.57.02")
    assert r470 is not None and r470.designation == "LTSB"
    assert f"{r470.end_of_life:%Y-%m}" == "2024-07"
    r590 = drivers.lookup("590.48.01")
    assert r590 is not None and r590.designation == "NFB" and r590.end_of_life is None
    # Windows drivers number past their branch: 591.86 is R590, 572.83 R570, 551.86 R550
    assert drivers.branch_of("591.86", windows=True) == "R590"
    assert drivers.branch_of("572.83", windows=True) == "R570"


def test_every_table3_driver_has_a_branch_verdict():
    # Each Linux minimum in Table 3 lies on a branch the table knows, or on one older than
    # every supported branch (NVIDIA: every branch it no longer lists is end of life).
    import datetime as dt

    oldest = drivers.supported(dt.date(2026, 12, 1))[0].major
    for row in cuda.driver_minimums():
        version = row.min_driver_linux
        if version is None:
            continue
        assert drivers.lookup(str(version)) is not None or version.major < oldest, version


def test_a_production_branch_is_chosen_before_a_new_feature_branch():
    import datetime as dt

    from dlrig.knowledge.driver_choice import branch_for

    # CUDA 13.1 (590.44.01): R590 is a new feature branch, R595 the production one
    assert branch_for(Version((590, 44, 1)), dt.date(2026, 12, 1)).branch == "R595"


def test_architecture_ranges_agree_with_the_gpu_tables():
    from dlrig.knowledge import architectures
    from dlrig.knowledge.provision import driver_policies

    # every model and family the catalogue and NVIDIA's capability table name
    pairs = [(r["compute_capability"], r["architecture"]) for r in tables.rows("gpus")]
    pairs += [
        (r["compute_capability"], r["architecture"]) for r in tables.rows("gpu_compute_capability")
    ]
    for capability, name in pairs:
        if not capability or name.startswith(("cdna", "gaudi")):
            continue
        found = architectures.architecture_of(capability)
        assert found is not None and found.name == name, (capability, name)
    # provision's policy is the source of the last branch wherever it has the architecture
    own = {r["architecture"]: r["last_branch"] for r in tables.rows("gpu_architectures")}
    for name, policy in driver_policies().items():
        assert name in own, name
        assert not own[name], f"{name}: last branch belongs to provision_driver_policy.csv"
        assert architectures.architecture_of(
            str(next(a for a in architectures.architectures() if a.name == name).capability_min)
        ).last_branch == (int(policy.last_branch) if policy.last_branch else None)
    assert architectures.architecture_of("1.2").last_branch == 340
    assert architectures.architecture_of("2.1").last_branch == 390
    assert architectures.architecture_of("3.7").last_branch == 470


def test_doctor_and_provision_choose_the_same_driver_package():
    # provision's host script and doctor's fixes: the same kernel-module flavour and the same
    # NVIDIA repository packages, for every OS release and architecture provision handles.
    from dlrig.knowledge import architectures
    from dlrig.knowledge.driver_choice import driver_package
    from dlrig.knowledge.provision import driver_policies, os_releases, repo_package
    from dlrig.provision.model import Facts
    from dlrig.provision.stack import driver_choice

    for name, policy in driver_policies().items():
        if policy.kernel_modules == "unsupported":
            continue
        arch = next(a for a in architectures.architectures() if a.name == name)
        capability = str(arch.capability_min)
        for release in os_releases().values():
            chosen = driver_choice(
                Facts(origin="test", architecture=name, compute_capability=capability, os=release)
            )
            package = driver_package(int(chosen.branch), (capability,), release.name)
            assert package.kernel_modules == chosen.kernel_modules, (name, release.id)
            component = "driver_open" if chosen.kernel_modules == "open" else "driver_proprietary"
            meta = repo_package(release.id, component)
            assert meta is not None and meta.package in package.command(), (name, release.id)


def test_a_console_script_names_the_package_that_installs_it() -> None:
    from dlrig.knowledge import extensions

    def module_of(command: str) -> str | None:
        row = extensions.command_provider(command)
        return row.module if row else None

    assert module_of("torchrun") == "torch"
    assert module_of("llamafactory-cli") == "llamafactory"
    assert module_of("huggingface-cli") == "huggingface_hub"
    assert module_of("accelerate") == "accelerate"
    assert module_of("compute-0-1") is None
    assert module_of("ollama") is None


def test_the_torch_releases_with_wheels_for_a_python_come_from_the_table() -> None:
    from dlrig.knowledge import provision

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(x) for x in version.split("."))

    for python in ("3.9", "3.12", "3.13"):
        releases = provision.torch_releases_for_python(python)
        assert releases, python
        for release in releases:
            found = provision.torch_python(release)
            assert found is not None
            assert key(found[0]) <= key(python) <= key(found[1])
    assert provision.torch_releases_for_python("2.7") == []
