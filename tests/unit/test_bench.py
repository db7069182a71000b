"""`dlrig bench` parts on this machine's CPU, disk and processes (no GPU here)."""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlrig.bench import comms, compute, dataloader, memory, results, storage
from dlrig.bench.device import BenchDevice, pick
from dlrig.errors import InputError
from dlrig.knowledge import gpus, pcie

TESTS = Path(__file__).resolve().parents[1]
CORPUS = TESTS / "corpus"
FIXTURES = TESTS / "fixtures"


def test_compute_on_cpu_measures_each_dtype_over_sizes() -> None:
    found = compute.run(pick("cpu"), sizes=(64, 128), seconds_per_size=0.05)
    assert [r.test for r in found] == ["fp32_matmul", "bf16_matmul"]
    for r in found:
        assert r.unit == "TFLOP/s" and r.value is not None and r.value > 0
        assert set(r.detail["tflops_by_size"]) == {"64", "128"}
        assert r.verdict == "info" and r.expected is None  # the catalogue has no CPU peaks


def test_a_budget_leaves_out_the_sizes_it_cannot_afford() -> None:
    # 0.3 s for two dtypes: an 8192² matmul (1.1 TFLOP) takes over 0.1 s on any CPU, and a size
    # runs only where three of them fit in what is left of the dtype's share.
    found = compute.run(
        pick("cpu"), sizes=(64, 256, 1024, 8192), seconds_per_size=0.05, budget_seconds=0.3
    )
    for r in found:
        assert r.value is not None and "64" in r.detail["tflops_by_size"]
        assert 8192 in r.detail["left_out_sizes"], r.detail
        assert "left out: predicted past the" in (r.note or "")


def test_a_size_is_predicted_from_the_last_by_n_cubed() -> None:
    last = compute.Timing(tflops=1.0, seconds_per_matmul=0.1, elapsed=0.2)
    assert compute._fits(last, 1024, 2048, left=2.5)  # 0.8 s each, three of them: 2.4 s
    assert not compute._fits(last, 1024, 2048, left=2.3)
    assert compute._fits(None, 1024, 2048, left=0.0)  # the first size always runs
    assert compute._fits(last, 1024, 2048, left=None)  # no budget


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() != "x86_64", reason="oneDNN's ISA cap is an x86 switch")
def test_a_dtype_the_cpu_only_emulates_is_said_so() -> None:
    # oneDNN held to AVX2 has no native bf16 (AVX512-BF16/AMX), as on CPUs without it.
    code = (
        "from dlrig.bench import compute; from dlrig.bench.device import pick; "
        "r = compute.run(pick('cpu'), sizes=(256,), seconds_per_size=0.05)[1]; print(r.note)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        # One thread: on a loaded machine a multi-threaded fp32 matmul can lose 100x to
        # OpenMP threads waiting on each other, which hides the ratio being measured.
        env={**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1"},
        check=True,
    )
    assert "no native bf16 on this device (emulated)" in done.stdout, done.stdout


def test_compute_figures_keep_significant_digits_whatever_the_scale() -> None:
    # a CPU's 64x64 matmul under load: 0.3 GFLOP/s must not be reported as 0.0 TFLOP/s
    assert compute.significant(0.000312345) == 0.0003123
    assert compute.significant(989.4321) == 989.4
    assert compute.significant(0.0) == 0.0


def test_gpu_dtypes_follow_compute_capability() -> None:
    h200 = BenchDevice("cuda", 0, "NVIDIA H200", gpus.catalogue().resolve("NVIDIA H200"), (9, 0))
    v100 = BenchDevice("cuda", 0, "Tesla V100-SXM2-16GB", None, (7, 0))
    assert compute.dtypes_for(h200) == ("fp32", "tf32", "fp16", "bf16", "fp8")
    assert compute.dtypes_for(v100) == ("fp32", "fp16")


def _rocm_device(collect_env: str) -> BenchDevice:
    """A HIP device as torch describes it, from a real collect_env paste: its GPU line is
    `get_device_name (gcnArchName)` and its "ROCM used to build PyTorch" is torch.version.hip."""
    text = (CORPUS / "collect_env" / collect_env).read_text(encoding="utf-8")
    gpu = re.search(r"^GPU models and configuration: (.+) \((gfx[^)]+)\)$", text, re.M)
    hip = re.search(r"^ROCM used to build PyTorch: (\S+)$", text, re.M)
    assert gpu and hip
    name = gpu.group(1)
    return BenchDevice(
        "cuda",
        0,
        name,
        gpus.catalogue().resolve(name),
        None,
        platform="rocm",
        gfx_target=gpu.group(2),
        hip_version=hip.group(1),
    )


def test_hip_dtypes_follow_torchs_own_fp8_rule() -> None:
    mi250 = _rocm_device("none-rocm-mi250-torch260dev.txt")
    rdna3 = _rocm_device("none-rocm-wsl-rx7900xtx-torch270.txt")
    # CDNA2 and RDNA3 have no FP8 GEMM in torch; HIP fills compute capability with ISA digits,
    # so an "(9, 0)" must not turn on Hopper's tf32 and fp8.
    assert compute.dtypes_for(mi250) == ("fp32", "fp16", "bf16")
    assert compute.dtypes_for(rdna3) == ("fp32", "fp16", "bf16")
    mi300 = dataclasses.replace(
        mi250, name="AMD Instinct MI300X", gfx_target="gfx942:sramecc+:xnack-"
    )
    assert compute.dtypes_for(mi300)[-1] == "fp8"
    rdna4 = dataclasses.replace(rdna3, gfx_target="gfx1201")  # ROCm 6.3: torch runs FP8 there
    assert compute.dtypes_for(rdna4)[-1] == "fp8"
    assert "fp8" not in compute.dtypes_for(dataclasses.replace(rdna4, hip_version="6.2.41133"))
    torch = pytest.importorskip("torch")
    assert compute._fp8_dtype(torch, mi300) is torch.float8_e4m3fnuz  # MI300's FNUZ format
    gfx950 = dataclasses.replace(mi300, gfx_target="gfx950", hip_version="7.0.51831")
    assert compute._fp8_dtype(torch, gfx950) is torch.float8_e4m3fn


def test_a_hip_device_round_trips_through_a_saved_document() -> None:
    mi250 = _rocm_device("none-rocm-mi250-torch260dev.txt")
    written = mi250.to_dict()
    assert written["platform"] == "rocm" and written["gfx_target"] == "gfx90a:sramecc+:xnack-"
    again = BenchDevice.from_dict(written)
    assert (again.platform, again.gfx_target, again.hip_version) == (
        "rocm",
        "gfx90a:sramecc+:xnack-",
        "6.2.41133-dd7f95766",
    )
    assert "platform" not in BenchDevice("cuda", 0, "NVIDIA H200", None, (9, 0)).to_dict()


def test_a_gpu_without_a_matching_uuid_is_found_by_its_pci_address() -> None:
    from dlrig.bench import _gpu_of
    from dlrig.machine.readers import rocm_smi

    # rocm-smi's own recording (ROCm 6.0.2, two MI100s): HIP's UUID is not rocm-smi's Unique
    # ID, so bench finds the GPU (and its PCIe link) by the bus address torch reports.
    machine = rocm_smi.read((FIXTURES / "amd" / "mi100_rocm602.json").read_text(), None)
    second = machine.gpus[1]
    assert second.pci_bus_id
    device = BenchDevice(
        "cuda", 0, second.name, None, None, platform="rocm", pci_bus_id=second.pci_bus_id.lower()
    )
    assert _gpu_of(machine, device) is second
    # NVML writes an 8-digit domain; sysfs and torch 4
    from dlrig.bench.device import same_pci_address

    assert same_pci_address("00000000:83:00.0", "0000:83:00.0")
    assert not same_pci_address("00000000:83:00.0", "0000:84:00.0")
    assert not same_pci_address(None, "0000:83:00.0")


def test_verdicts_against_the_catalogue_peak() -> None:
    peak = gpus.catalogue().resolve("NVIDIA H200").peak_tflops("bf16")  # type: ignore[union-attr]
    # bf16 on an H200 was measured near 790 TFLOP/s (80% of the 989.5 dense peak): ok.
    ok = results.judged("compute", "bf16_matmul", 790.0, "TFLOP/s", peak, 60.0, "fix", "n")
    assert ok.verdict == "ok" and ok.fix is None and ok.percent == pytest.approx(79.8, abs=0.1)
    low = results.judged(
        "compute", "bf16_matmul", 400.0, "TFLOP/s", peak, 60.0, "fix it", "n", "gpu_throttling"
    )
    assert (low.verdict, low.fix, low.cause) == ("low", "fix it", "gpu_throttling")


def test_pcie_link_rates() -> None:
    assert pcie.link_gbs_per_direction(4, 16) == pytest.approx(31.5, abs=0.01)
    assert pcie.link_gbs_per_direction(3, 8) == pytest.approx(7.88, abs=0.01)
    assert pcie.link_gbs_per_direction(None, 16) is None


def test_host_memory_copy_on_cpu() -> None:
    [copy] = memory.run(pick("cpu"), repeats=2)
    assert copy.test == "host_copy" and copy.unit == "GB/s" and copy.value > 1  # type: ignore[operator]


@pytest.mark.slow
def test_gloo_collectives_with_two_processes() -> None:
    found = comms.run(pick("cpu"), processes=2, sizes=(1 << 12, 1 << 16, 1 << 20), iterations=3)
    assert [r.test for r in found] == list(comms.OPS)
    for r in found:
        assert r.detail["backend"] == "gloo" and r.detail["ranks"] == 2
        rows = r.detail["sizes"]
        assert len(rows) == 3 and all(row["time_us"] > 0 for row in rows)
        factor = comms.bus_factor(r.test, 2)
        for row in rows:
            assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * factor, rel=0.01)
    assert comms.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert comms.bus_factor("all_gather", 8) == pytest.approx(0.875)


def _leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".dlrig-bench-")]


@pytest.mark.slow
def test_storage_reads_a_test_file_and_removes_it(tmp_path) -> None:
    found = storage.run(tmp_path, size=32 << 20, random_seconds=0.3)
    assert [r.test for r in found] == ["seq_read", "random_read"]
    seq, rnd = found
    assert seq.expected == storage.NEEDED_MB_S and seq.verdict in ("ok", "low")
    assert rnd.expected is None and rnd.verdict == "info"  # one read at a time: informs only
    for r in found:
        assert r.unit == "MB/s" and r.value > 0  # type: ignore[operator]
        assert r.detail["iops"] > 0 and r.detail["filesystem"]
        if shutil.which("fio"):
            assert r.detail["fio_mb_s"] > 0
            # the verdict's figure is one of the two, and the note says which and why
            assert r.detail["trusted"] in ("dlrig", "fio") and "fio" in (r.note or "")
        # issue 23: a 32 MiB file read in a few ms measured nothing; every figure rests on 1 s+
        assert r.detail["seconds"] >= 1.0
    assert _leftovers(tmp_path) == []


def test_storage_trusts_a_figure_only_with_a_reason() -> None:
    from dlrig.bench.reads import ReadFigures

    def figures(mb_s: float, buffer: str) -> ReadFigures:
        return ReadFigures(mb_s, mb_s, 1.0, int(mb_s * 1e6), buffer)

    huge = "a transparent huge page"
    assert storage.agreement(figures(1000, huge), figures(900, "huge pages"))[0] == "dlrig"
    # 3x fio with both on huge pages: nothing explains it, the lower figure is claimed
    trusted, why = storage.agreement(figures(3000, huge), figures(1000, "huge pages"))
    assert trusted == "fio" and "lower" in why
    # fio on scattered 4 KiB pages reads low on VMs: dlrig's figure stands, and the note says why
    trusted, why = storage.agreement(figures(3000, huge), figures(1000, "ordinary pages"))
    assert trusted == "dlrig" and "ordinary 4 KiB pages" in why
    assert storage.agreement(figures(500, huge), figures(1000, "huge pages"))[0] == "dlrig"


@pytest.mark.slow
def test_storage_reads_an_existing_file_without_writing(tmp_path) -> None:
    data = tmp_path / "shard-0000.tar"
    data.write_bytes(os.urandom(20 << 20))
    before = sorted(p.name for p in tmp_path.iterdir())
    found = storage.run(data, random_seconds=0.2, with_fio=False)
    assert {r.test for r in found} == {"seq_read", "random_read"}
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_storage_bad_input(tmp_path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        storage.run(tmp_path / "missing")
    free = shutil.disk_usage(tmp_path).free
    with pytest.raises(InputError, match="no room for the"):
        storage.run(tmp_path, size=free + (1 << 40))
    assert _leftovers(tmp_path) == []
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 1000)
    with pytest.raises(InputError, match="too small to measure"):
        storage.run(small)
    with pytest.raises(InputError, match="not a size"):
        storage.parse_size("lots")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_storage_unwritable_directory(tmp_path) -> None:
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(InputError, match="cannot write a test file here"):
            storage.run(locked, size=32 << 20)
    finally:
        locked.chmod(0o755)


def test_dataloader_search_on_a_user_dataset() -> None:
    dataset = dataloader.load_dataset("tests.data.custom_datasets:make_squares")
    runner = dataloader.TrialRunner(dataset, 32, batches_per_epoch=3, trial_seconds=0.1)
    found = dataloader.search(runner, cores=2, cuda=False)
    assert found.default is not None and found.default.settings.num_workers == 0
    assert found.best.samples_per_s >= max(t.samples_per_s for t in found.trials) - 1e-9
    tried = [t.settings.num_workers for t in found.trials]
    assert tried[:2] == [0, 1]
    line = found.best.settings.line(32)
    assert line.startswith("DataLoader(dataset, batch_size=32, shuffle=True, num_workers=")


class _SlowItems:
    """Each sample takes 5 ms to make: a reader slower than its epoch is long."""

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, index: int) -> tuple[bytes, int]:
        import time

        time.sleep(0.005)
        return b"x", 0


def test_a_budgeted_trial_ends_mid_epoch_at_its_limit() -> None:
    # Unbudgeted, a trial reads two epochs at least (here 2 x 16 batches of 4): with --quick on
    # a many-core machine that was minutes of reading before the first verdict.
    from dlrig.bench.dataloader import LoaderSettings

    runner = dataloader.TrialRunner(_SlowItems(), 4, batches_per_epoch=16, limit_s=0.05)
    trial = runner.run(LoaderSettings(0, None, False, False))
    samples = trial.samples_per_s * trial.seconds
    assert 0 < samples < 16 * 4  # less than one epoch


def test_dataloader_grid_covers_every_combination() -> None:
    dataset = dataloader.load_dataset("tests.data.custom_datasets:make_squares")
    runner = dataloader.TrialRunner(dataset, 64, batches_per_epoch=1, trial_seconds=0.0)
    full = dataloader.grid(runner, cores=1, cuda=False)
    # 1 worker-less setting + workers {1, 2} x prefetch {2, 4, 8} x persistent {no, yes}
    assert len(full.trials) == 1 + 2 * 3 * 2
    assert dataloader.worker_counts(6) == [1, 2, 4, 6, 8]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("tests.data.custom_datasets:make_raising", "the factory raised FileNotFoundError"),
        ("tests.data.custom_datasets:make_not_a_dataset", "returned int, not a Dataset"),
        ("tests.data.custom_datasets:nothing", "has no callable 'nothing'"),
        ("tests.data.no_such_module:f", "cannot import it"),
        ("no-colon", "not package.module:factory"),
    ],
)
def test_dataloader_bad_factories(target: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        dataloader.load_dataset(target)


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_dataset_that_raises_while_loading(workers: int) -> None:
    dataset = dataloader.load_dataset("tests.data.custom_datasets:make_broken")
    runner = dataloader.TrialRunner(dataset, 8, batches_per_epoch=1, trial_seconds=0.0, label="x")
    settings = dataloader.LoaderSettings(workers, 2 if workers else None, False, bool(workers))
    with pytest.raises(InputError, match=r"reading a batch failed \(KeyError"):
        runner.run(settings)


def test_synthetic_images_look_like_imagenet_samples() -> None:
    data = dataloader.SyntheticImages(length=10)
    image, label = data[3]
    assert tuple(image.shape) == (3, 224, 224) and 0 <= label < 1000
    assert all(40_000 < len(jpeg) < 150_000 for jpeg in data.images)  # ImageNet-sized JPEGs


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
@pytest.mark.slow
def test_storage_on_tmpfs_is_not_judged_as_a_disk() -> None:
    found = storage.run("/dev/shm", size=32 << 20, random_seconds=0.2, with_fio=False)
    assert {r.verdict for r in found} == {"info"}
    assert all("keeps files in RAM" in (r.note or "") for r in found)
    assert _leftovers(Path("/dev/shm")) == []


@pytest.mark.slow
def test_more_gloo_ranks_than_cores_are_capped_and_progress_is_reported() -> None:
    import os

    seen: list[float] = []
    found = comms.run(
        pick("cpu"),
        processes=64,
        sizes=(1 << 12, 1 << 14),
        iterations=2,
        progress=lambda label, fraction: seen.append(fraction),
    )
    cores = max(os.cpu_count() or 1, 2)
    assert all(r.detail["ranks"] == min(64, cores) for r in found)
    if cores < 64:
        assert "capped at the" in found[0].note
    # Progress came from rank 0 while the ranks ran, not only at the start and the end.
    assert len([f for f in seen if 0 < f < 1]) >= 3
    assert seen[-1] == 1.0
