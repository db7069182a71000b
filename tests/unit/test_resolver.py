"""The install resolver against the tables it reads, over releases x variants x drivers x GPUs.

The oracle below reads the CSV rows itself (variants per release, arch lists, Table-3
minimums, MVC floors) with its own, simpler rules, so a resolver bug is not mirrored by the
check. Every answer must name a wheel the release shipped, with the GPU's architecture, on a
driver at or above the minimum; when the resolver says "upgrade the driver" or "nothing
fits", the oracle must find nothing that runs on the driver as it is.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools

import pytest

from dlrig.knowledge.command_check import check_command
from dlrig.knowledge.resolver import Request, resolve
from dlrig.knowledge.tables import rows

TODAY = dt.date(2026, 12, 1)

GPUS = ("3.5", "3.7", "5.0", "6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")
DRIVERS = (
    None,
    "396.37",  # CUDA 9.2
    "418.39",  # 10.1
    "455.23",  # 11.1
    "470.82.01",  # 11.4
    "525.60.13",  # 12.0, the 12.x MVC floor
    "535.104.05",  # 12.2
    "570.86.15",  # 12.8
    "580.65.06",  # 13.0, the 13.x MVC floor
    "595.58.03",  # 13.2
)


@functools.cache
def _v(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("+")[0].split(".") if p.isdigit())


def _minor(text: str) -> str:
    parts = text.split("+")[0].split(".")
    return f"{parts[0]}.{parts[1]}"


class Oracle:
    """The tables, read with the plainest rules."""

    def __init__(self) -> None:
        self.variants: dict[str, dict[str, dict[str, str]]] = {}
        for row in rows("pytorch_cuda_variants"):
            self.variants.setdefault(row["torch_version"], {})[row["cuda_variant"]] = row
        self.arch: dict[tuple[str, str], tuple[list[str], str]] = {}
        for row in rows("pytorch_arch_lists"):
            if row["platform"] != "linux-x86_64":
                continue
            start, _, end = row["torch_version"].partition("-")
            majors = (
                [start]
                if not end
                else [
                    f"{start.split('.')[0]}.{m}"
                    for m in range(int(start.split(".")[1]), int(end.split(".")[1]) + 1)
                ]
            )
            for minor in majors:
                self.arch[(minor, row["cuda_variant"])] = (
                    [c for c in row["arch_list"].split(";") if c],
                    row["ptx_arch"],
                )
        self.ga: dict[tuple[int, int], tuple[int, ...]] = {}
        self._ga_release: dict[tuple[int, int], tuple[int, ...]] = {}
        for row in rows("cuda_driver_minimum"):
            if "RC" in row["release_label"].split() or not row["min_driver_linux"]:
                continue
            key = _v(row["cuda_version"])[:2]
            value = _v(row["min_driver_linux"])
            full = _v(row["cuda_version"])
            # The lowest release of the minor sets its floor.
            if key not in self.ga or full < self._ga_release[key]:
                self.ga[key] = value
                self._ga_release[key] = full
        self.mvc = {
            int(r["cuda_major"]): _v(r["min_driver_linux"]) for r in rows("cuda_minor_compat")
        }
        self.first_cuda: dict[tuple[int, int], tuple[int, int]] = {}
        for row in rows("cuda_arch_support"):
            if row["event"] == "added":
                cap, cuda = _v(row["sm"])[:2], _v(row["cuda_version"])[:2]
                if cap not in self.first_cuda or cuda < self.first_cuda[cap]:
                    self.first_cuda[cap] = cuda

    def shipped(self, torch_version: str, variant: str) -> bool:
        row = self.variants.get(_minor(torch_version), {}).get(variant)
        if row is None:
            return False
        patches = [p for p in row["releases"].split(";") if p]
        exact = _v(torch_version)
        return not patches or len(exact) < 3 or any(_v(p) == exact for p in patches)

    @functools.cache  # noqa: B019 - one oracle for the whole module
    def runs(self, minor: str, variant: str, capability: str) -> bool:
        if (minor, variant) not in self.arch:
            return False
        caps, ptx = self.arch[(minor, variant)]
        want = _v(capability)
        if any(_v(c)[0] == want[0] and _v(c)[1] <= want[1] for c in caps):
            return True
        if ptx and _v(ptx) <= want:
            first = self.first_cuda.get(want[:2])
            built = _v(self.variants[minor][variant]["cuda_version"])[:2]
            return first is None or built >= first
        return False

    def gpu_floor(self, capability: str) -> tuple[int, ...]:
        first = self.first_cuda.get(_v(capability)[:2])
        return self.ga.get(first, ()) if first else ()

    @functools.cache  # noqa: B019 - one oracle for the whole module
    def needs(
        self, minor: str, variant: str, capability: str
    ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
        """(full-support driver, MVC driver or None) for this wheel on this GPU."""
        cuda = _v(self.variants[minor][variant]["cuda_version"])[:2]
        full = max(self.ga[cuda], self.gpu_floor(capability))
        caps, _ = self.arch[(minor, variant)]
        has_cubin = any(
            _v(c)[0] == _v(capability)[0] and _v(c)[1] <= _v(capability)[1] for c in caps
        )
        floor = self.mvc.get(cuda[0])
        if floor is None or not has_cubin or floor >= self.ga[cuda]:
            return full, None
        return full, max(floor, self.gpu_floor(capability))

    @functools.cache  # noqa: B019 - one oracle for the whole module
    def last_branch(self, capability: str) -> int | None:
        """The newest driver branch for this GPU's architecture (provision's table first)."""
        policy = {r["architecture"]: r["last_branch"] for r in rows("provision_driver_policy")}
        for row in rows("gpu_architectures"):
            low, high = _v(row["compute_capability_min"]), _v(row["compute_capability_max"])
            if low <= _v(capability)[:2] <= high:
                text = policy.get(row["architecture"]) or row["last_branch"]
                return int(text) if text else None
        return None

    def works_on(self, minor: str, variant: str, capability: str, driver: str) -> bool:
        full, compat = self.needs(minor, variant, capability)
        have = _v(driver)
        return have >= full or (compat is not None and have >= compat)


ORACLE = Oracle()
RELEASES = sorted(ORACLE.variants, key=_v)


def _check_answer(request: Request, capability: str) -> None:
    answer = resolve(request)
    driver = request.driver_version
    runnable = [
        (m, var)
        for m in RELEASES
        for var in ORACLE.variants[m]
        if ORACLE.runs(m, var, capability)
        and (
            request.torch_version is None
            or not request.torch_exact
            or m == _minor(request.torch_version)
        )
        and (request.cuda_variant is None or var == request.cuda_variant)
        and (
            request.torch_version is None
            or m != _minor(request.torch_version)
            or ORACLE.shipped(request.torch_version, var)
        )
    ]
    if answer.install is None:
        assert not runnable, (request, answer.problems, runnable[:3])
        assert answer.problems
        return
    install = answer.install
    assert install.cuda_variant in ORACLE.variants[install.torch_minor], (request, install)
    assert ORACLE.shipped(install.torch_version, install.cuda_variant), (request, install)
    assert ORACLE.runs(install.torch_minor, install.cuda_variant, capability), (request, install)
    full, compat = ORACLE.needs(install.torch_minor, install.cuda_variant, capability)
    assert install.min_driver is not None and _v(install.min_driver) == full, (request, install)
    if driver is not None:
        working = [(m, var) for m, var in runnable if ORACLE.works_on(m, var, capability, driver)]
        if answer.driver_upgrade is None:
            assert ORACLE.works_on(install.torch_minor, install.cuda_variant, capability, driver), (
                request,
                install,
            )
            if install.driver_mode == "minor_compat":
                assert compat is not None and _v(driver) >= compat
            if request.torch_version and not request.cuda_variant:
                kept = [w for w in working if w[0] == _minor(request.torch_version)]
                if kept:
                    assert install.torch_minor == _minor(request.torch_version), (request, install)
        else:
            # "Upgrade the driver" only when nothing in the tables runs on this driver.
            assert not working, (request, install, working[:3])
            # Up to the GPU's last branch: full support there, else minor-version compat.
            cap = ORACLE.last_branch(capability)
            floor = full if cap is None or full[0] <= cap else compat
            assert floor is not None, (request, install)
            assert _v(answer.driver_upgrade.min_version) >= floor
            if cap is not None:
                assert int(answer.driver_upgrade.branch.lstrip("R")) <= cap, (request, install)
    # A driver upgrade names one release of the branch it names (QA finding 2).
    for upgrade in [answer.driver_upgrade, *(o.driver_upgrade for o in answer.alternatives)]:
        if upgrade is not None and upgrade.install_version and upgrade.branch:
            assert _v(upgrade.install_version)[0] == int(upgrade.branch.lstrip("R")), upgrade
            assert _v(upgrade.install_version) >= _v(upgrade.min_version), upgrade
    problems = check_command(answer.fix_text(), (capability,), driver)
    assert problems == [], (request, answer.fix_text(), problems)


@pytest.mark.parametrize("capability", GPUS)
def test_every_gpu_and_driver_with_each_release_preferred(capability):
    for driver, wanted in itertools.product(DRIVERS, [None, *RELEASES]):
        _check_answer(
            Request(
                compute_capabilities=(capability,),
                driver_version=driver,
                torch_version=wanted,
                today=TODAY,
            ),
            capability,
        )


@pytest.mark.parametrize("release", RELEASES)
def test_every_variant_of_every_release(release):
    drivers = (None, "418.39", "470.82.01", "535.104.05", "570.86.15", "580.65.06", "595.58.03")
    for variant, capability, driver in itertools.product(
        ORACLE.variants[release], ("3.7", "6.1", "8.6", "9.0", "12.0"), drivers
    ):
        request = Request(
            compute_capabilities=(capability,),
            driver_version=driver,
            torch_version=release,
            torch_exact=True,
            cuda_variant=variant,
            today=TODAY,
        )
        _check_answer(request, capability)


# --- the cases issue 9 lists -------------------------------------------------------------------


def test_torch_181_never_had_cu126():
    answer = resolve(Request(torch_version="1.8.1", cuda_variant="cu126"))
    assert answer.install is None
    assert "cu101, cu102, cu111" in answer.problems[0]
    # and a CPU 1.8.1 on an RTX 3090 gets 1.8.1 from cu111, the one 1.8 variant with sm_86
    fix = resolve(Request(compute_capabilities=("8.6",), torch_version="1.8.1", today=TODAY))
    assert fix.install.torch_version == "1.8.1" and fix.install.cuda_variant == "cu111"
    assert fix.install.source_url == "https://download.pytorch.org/whl/cu111/torch_stable.html"


def test_torch_180_has_no_cu101_although_181_does():
    assert resolve(Request(torch_version="1.8.0", cuda_variant="cu101")).install is None
    assert resolve(Request(torch_version="1.8.1", cuda_variant="cu101")).install is not None


def test_rtx5090_on_driver_570_gets_one_answer_cu128_never_cu132():
    answer = resolve(Request(gpu_ids=("rtx-5090",), driver_version="570.86.15", today=TODAY))
    assert answer.ok
    assert answer.install.cuda_variant == "cu128"
    assert answer.install.min_driver == "570.26"
    assert "cu13" not in answer.install.pip_command()
    # the newer torch is offered only together with the driver it needs
    (alternative,) = answer.alternatives
    assert alternative.driver_upgrade is not None
    assert float(alternative.install.cuda_variant[2:]) >= 130
    assert _v(alternative.driver_upgrade.min_version) >= (580,)


def test_rtx5090_needs_torch_27_or_later():
    answer = resolve(
        Request(compute_capabilities=("12.0",), torch_version="2.6.0", torch_exact=True)
    )
    assert answer.install is None
    assert any("12.0" in p for p in answer.problems)
    later = resolve(Request(compute_capabilities=("12.0",), torch_version="2.6.0", today=TODAY))
    assert _v(later.install.torch_minor) >= (2, 7)
    assert "2.7 (cu128)" in later.problems[0]


def test_keep_the_driver_use_cu118_gives_cu118_for_every_package():
    answer = resolve(
        Request(
            compute_capabilities=("8.0",),
            driver_version="515.43.04",
            torch_version="2.3.1",
            cuda_variant="cu118",
            today=TODAY,
        )
    )
    command = answer.install.pip_command()
    assert "cu121" not in answer.fix_text()
    assert command.endswith("--index-url https://download.pytorch.org/whl/cu118")
    assert "torchvision==0.18.*" in command and "torchaudio==2.3.*" in command


def test_cuda_90_driver_never_gets_cu102():
    answer = resolve(Request(compute_capabilities=("7.0",), driver_cuda="9.0", today=TODAY))
    assert answer.ok
    assert answer.install.cuda_version == "9.0"
    assert "cu102" not in answer.fix_text().split("\n")[0]


def test_driver_470_keeps_the_driver_through_minor_version_compatibility():
    answer = resolve(
        Request(compute_capabilities=("8.6",), driver_version="470.82.01", torch_version="2.1.0")
    )
    assert answer.ok and answer.install.cuda_variant == "cu118"
    assert answer.install.driver_mode == "minor_compat"
    assert answer.install.min_driver == "520.61.05" and answer.install.min_driver_compat == "455.23"


def test_no_driver_given_chooses_what_the_long_term_branch_runs():
    answer = resolve(Request(compute_capabilities=("8.0",), today=TODAY))
    assert answer.install.torch_minor == "2.14" and answer.install.cuda_variant == "cu130"
    assert any("long-term" in r for r in answer.reasons)


def test_gpu_older_than_every_wheel():
    answer = resolve(Request(compute_capabilities=("1.2",)))
    assert answer.install is None
    assert "build PyTorch from source" in answer.problems[0]


def test_macos_gets_pypi_cpu_wheels():
    answer = resolve(Request(platform="macos", torch_version="2.5.1"))
    assert answer.install.cuda_variant == "cpu" and answer.install.index_url is None
    assert (
        answer.install.pip_command()
        == "pip install torch==2.5.1 'torchvision==0.20.*' 'torchaudio==2.5.*'"
    )


def test_old_releases_use_the_command_form_pytorch_published():
    styles = {
        "1.7.1": ("-f", "https://download.pytorch.org/whl/cu110/torch_stable.html", "cu110"),
        "1.12.1": ("--extra-index-url", "https://download.pytorch.org/whl/cu116", "cu116"),
        "2.0.1": ("--index-url", "https://download.pytorch.org/whl/cu118", "cu118"),
    }
    for version, (option, url, variant) in styles.items():
        install = resolve(Request(torch_version=version, cuda_variant=variant)).install
        assert install.pip_args() == (option, url), version


def test_torchaudio_after_211_is_the_stable_abi_release_where_its_wheel_exists():
    cu130 = resolve(Request(torch_version="2.14.0", cuda_variant="cu130")).install
    assert cu130.torchaudio_version == "2.11"
    cu132 = resolve(Request(torch_version="2.14.0", cuda_variant="cu132")).install
    assert cu132.torchaudio_version is None
    assert any("torchaudio" in note for note in cu132.notes)


# --- the checker catches the wrong fixes the issue quotes -------------------------------------


def test_check_command_refuses_the_wrong_fixes_from_the_issue():
    assert check_command(
        "pip install torch==1.8.1 torchvision torchaudio --index-url https://download.pytorch.org/whl/cu126"
    )
    assert check_command(
        "pip install --force-reinstall 'torch==2.14.*' 'torchvision==0.29.*' --index-url "
        "https://download.pytorch.org/whl/cu132",
        ("12.0",),
        "570.86.15",
    )
    assert check_command(
        "pip install --force-reinstall torch==2.3.1 torchvision==0.18.1+cu121 --index-url "
        "https://download.pytorch.org/whl/cu118"
    )
    assert check_command(
        "pip install --force-reinstall 'torch==2.5.*' 'torchvision==0.19.*' --index-url "
        "https://download.pytorch.org/whl/cu124"
    )
    assert check_command(
        "pip install 'torch==2.6.*' --index-url https://download.pytorch.org/whl/cu126", ("12.0",)
    )
    # a fix that says to upgrade the driver first is judged with that driver
    assert not check_command(
        "Upgrade the NVIDIA driver to ≥ 580.65.06: sudo apt install nvidia-driver-580\n"
        "then: pip install 'torch==2.14.*' --index-url https://download.pytorch.org/whl/cu130",
        ("12.0",),
        "535.104.05",
    )


def test_windows_cuda13_wheels_need_a_cuda13_driver_although_the_table_has_no_windows_minimum():
    answer = resolve(
        Request(
            compute_capabilities=("8.9",),
            driver_version="551.86",
            platform="windows",
            torch_version="2.14.0",
            torch_exact=True,
            today=TODAY,
        )
    )
    assert answer.ok
    assert answer.install.cuda_variant == "cu126"  # through 12.x minor-version compatibility
    assert answer.install.driver_mode == "minor_compat"
    cu130 = resolve(
        Request(
            compute_capabilities=("8.9",),
            driver_version="551.86",
            platform="windows",
            torch_version="2.14.0",
            cuda_variant="cu130",
            today=TODAY,
        )
    )
    assert cu130.driver_upgrade is not None
    assert any("Linux one used" in reason for reason in cu130.reasons)


# --- the GPU's last driver branch bounds every upgrade (QA findings 3/43) ----------------------


def test_a_kepler_gpu_is_upgraded_to_r470_at_most():
    answer = resolve(
        Request(
            compute_capabilities=("3.7",), driver_version="418.39", keep_driver=False, today=TODAY
        )
    )
    upgrade = answer.driver_upgrade
    assert upgrade is not None and upgrade.branch == "R470"
    assert "the last branch for Kepler GPUs" in upgrade.text()
    assert "580" not in answer.fix_text()


def test_a_wheel_past_the_gpus_last_branch_is_a_limit_not_an_upgrade():
    # torch 1.11 cu115 needs 495.29.05 in full; a K80 ends at R470, and without minor-version
    # compatibility nothing reaches it
    answer = resolve(
        Request(
            compute_capabilities=("3.7",),
            driver_version="460.32.03",
            torch_version="1.11.0",
            torch_exact=True,
            cuda_variant="cu115",
            allow_minor_compat=False,
            today=TODAY,
        )
    )
    assert answer.install is None and answer.driver_upgrade is None
    assert answer.driver_limit is not None and answer.driver_limit.last_branch == "R470"
    assert "no newer driver supports this GPU" in answer.fix_text()
    # with minor-version compatibility R470 runs it: upgrade to R470, said so
    compat = resolve(
        Request(
            compute_capabilities=("3.7",),
            driver_version="418.39",
            torch_version="1.11.0",
            torch_exact=True,
            cuda_variant="cu115",
            today=TODAY,
        )
    )
    assert compat.driver_upgrade is not None and compat.driver_upgrade.branch == "R470"
    assert "minor-version compatibility" in compat.driver_upgrade.text()


def test_the_driver_package_follows_the_architecture():
    pascal = resolve(
        Request(
            compute_capabilities=("6.1",), driver_version="440.64", keep_driver=False, today=TODAY
        )
    )
    assert pascal.driver_upgrade.kernel_modules == "proprietary"
    assert "cuda-drivers" in pascal.driver_upgrade.command
    hopper = resolve(
        Request(
            compute_capabilities=("9.0",),
            driver_version="535.104.05",
            keep_driver=False,
            os_name="Ubuntu 22.04.4 LTS",
            today=TODAY,
        )
    )
    assert hopper.driver_upgrade.kernel_modules == "open"
    assert hopper.driver_upgrade.command.startswith(
        "sudo apt install nvidia-driver-pinning-580 nvidia-open"
    )


def test_with_no_driver_known_the_fix_says_which_driver_each_wheel_needs():
    answer = resolve(Request(compute_capabilities=("12.0",), today=TODAY))
    first, *rest = answer.fix_text().splitlines()
    assert "whl/cu130" in first and "needs NVIDIA driver ≥ 580.65.06" in first
    (older,) = [line for line in rest if "cu128" in line]
    assert older.startswith("or, on a driver older than R580 (from 570.26):")
    assert answer.alternatives[-1].condition is not None
