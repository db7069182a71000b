"""The provision tables obey the rules the generators rely on (checked on every row)."""

from __future__ import annotations

import datetime as dt

from dlrig.knowledge import drivers, gpus
from dlrig.knowledge import provision as tables
from dlrig.knowledge.tables import manifest, rows
from dlrig.knowledge.versions import Version

PROVISION_TABLES = [name for name in manifest() if name.startswith("provision_")]


def test_every_provision_table_loads_with_a_source_and_date_per_row():
    assert len(PROVISION_TABLES) >= 7
    for name in PROVISION_TABLES:
        loaded = rows(name)
        assert loaded, name
        for row in loaded:
            assert row["source"] and row["as_of"], (name, row)


def test_cudnn8_tags_end_before_12_4_and_no_cudnn_tags_from_cuda_13():
    for image in tables.cuda_images():
        version = image.cuda_version
        if image.cudnn == "cudnn8":
            assert version < Version((12, 4, 0)), image.tag(
                "runtime"
            )  # 12.4.0-cudnn8 never existed
        if image.cudnn == "cudnn":
            assert Version((12, 4, 1)) <= version < Version((13,)), image.tag("runtime")
        if version >= Version((13,)):
            assert image.cudnn == "", image.tag("runtime")
        assert "base" not in image.flavors or image.cudnn == "", image.tag("base")


def test_image_status_follows_the_driver_branch_end_of_life():
    """supported: the branch is supported at as_of; deleted: EOL more than 6 months before."""
    for image in tables.cuda_images():
        branch = drivers.branches().get(image.driver_branch)
        if branch is None:
            # Feature branches (R520, R530, R545, R555) are not in NVIDIA's data-centre list:
            # no support dates, so never "supported".
            assert image.status in {"eol", "deleted"}, image
            continue
        as_of = dt.date.fromisoformat(_as_of(image) + "-01")
        if image.status == "supported":
            assert branch.end_of_life is not None and branch.end_of_life > as_of, image
        elif image.status == "deleted":
            if branch.end_of_life is not None:
                months = (
                    (as_of.year - branch.end_of_life.year) * 12
                    + as_of.month
                    - branch.end_of_life.month
                )
                assert months > 6, image
            else:
                assert branch.eol_without_date, image
        else:
            assert image.status == "eol"
            assert branch.eol_without_date or (
                branch.end_of_life is not None and branch.end_of_life <= as_of
            )


def _as_of(image: tables.CudaImage) -> str:
    for row in rows("provision_cuda_images"):
        if (
            row["cuda_version"] == str(image.cuda_version)
            and row["os"] == image.os
            and row["cudnn"] == image.cudnn
        ):
            return row["as_of"]
    raise AssertionError(image)


def test_only_the_latest_point_release_of_each_toolkit_is_listed():
    seen: dict[tuple[int, int, str, str], Version] = {}
    for image in tables.cuda_images():
        key = (image.cuda_version.major, image.cuda_version.minor, image.os, image.cudnn)
        assert key not in seen, f"two point releases of {key}"
        seen[key] = image.cuda_version


def test_toolkit_packages_are_named_for_their_cuda_release():
    for package in tables.repo_packages():
        if package.component == "cuda_toolkit":
            assert package.cuda_min is not None
            assert (
                package.package == f"cuda-toolkit-{package.cuda_min.major}-{package.cuda_min.minor}"
            )
            assert package.version.startswith(str(package.cuda_min) + ".")


def test_every_os_release_has_a_complete_driver_stack():
    for os_id, release in tables.os_releases().items():
        for component in (
            "driver_open",
            "driver_proprietary",
            "persistenced",
            "container_toolkit",
            "nccl",
        ):
            assert tables.repo_package(os_id, component) is not None, (os_id, component)
        if release.family == "apt":
            assert tables.repo_package(os_id, "keyring") is not None
            assert tables.repo_package(os_id, "driver_pin", branch="580") is not None
        else:
            assert tables.repo_package(os_id, "driver_stream", branch="580") is not None


def test_every_nvidia_architecture_in_the_catalogue_has_a_driver_policy():
    architectures = {s.architecture for s in gpus.catalogue().specs if s.vendor == "nvidia"}
    assert architectures <= set(tables.driver_policies()), architectures - set(
        tables.driver_policies()
    )
    for policy in tables.driver_policies().values():
        if policy.kernel_modules == "proprietary":
            assert policy.open_supported == "no"


def test_os_release_spellings_resolve():
    for text, expected in [
        ("Ubuntu 22.04.4 LTS", "ubuntu-22.04"),
        ("ubuntu-24.04", "ubuntu-24.04"),
        ("Debian GNU/Linux 12 (bookworm)", "debian-12"),
        ("Rocky Linux 9.4 (Blue Onyx)", "rocky-9"),
        ("Red Hat Enterprise Linux 9.2 (Plow)", "rocky-9"),
        ("rhel-9", "rocky-9"),
    ]:
        found = tables.match_os_release(text)
        assert found is not None and found.id == expected, text
    assert tables.match_os_release("Ubuntu 20.04.6 LTS") is None


def test_nccl_debug_variables_are_refused_and_system_ones_kept():
    variables = tables.nccl_variables()
    assert variables["NCCL_DEBUG"].refuses("INFO") and not variables["NCCL_DEBUG"].refuses("WARN")
    assert variables["NCCL_P2P_DISABLE"].refuses("1")
    assert not variables["NCCL_SOCKET_IFNAME"].refuses("=eth0")
    assert not variables["NCCL_IB_HCA"].refuses("mlx5_0")
