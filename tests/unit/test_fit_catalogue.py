"""The GPU catalogue fit times against: every row parses, and its peaks are plausible for its
architecture (a shifted column or a sparse figure taken for a dense one shows up here)."""

from __future__ import annotations

import csv
import itertools
import re
from importlib import resources

import pytest

from dlrig.knowledge.gpus import catalogue, lookup

# NVIDIA compute capabilities by architecture (CUDA C++ Programming Guide, compute capabilities)
CAPABILITIES = {
    "pascal": ("6.0", "6.1", "6.2"),
    "volta": ("7.0", "7.2"),
    "turing": ("7.5",),
    "ampere": ("8.0", "8.6", "8.7"),
    "ada": ("8.9",),
    "hopper": ("9.0",),
    "blackwell": ("10.0", "10.3", "12.0", "12.1"),
}
# architectures whose tensor cores have the dtype (dense peaks must then be present)
HAS = {
    "bf16_tflops": ("ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "cdna4", "gaudi2"),
    "fp8_tflops": ("ada", "hopper", "blackwell", "cdna3", "cdna4"),
}
# TF32 exists only from Ampere on; a row may leave it blank where no datasheet gives it (A10G)
TF32 = ("ampere", "ada", "hopper", "blackwell", "cdna3")


def _raw_rows() -> list[dict[str, str]]:
    text = resources.files("dlrig.knowledge").joinpath("data", "gpus.csv").read_text("utf-8")
    return list(csv.DictReader(text.splitlines()))


def test_columns_before_source_hold_no_commas():
    """A reader that splits on commas (cut -d,) sees the same columns as a CSV parser up to
    `source`: a comma inside a quoted name shifted every later column of one row once."""
    rows = _raw_rows()
    header = list(rows[0])
    plain = header[: header.index("source")]
    for row in rows:
        for column in plain:
            assert "," not in (row[column] or ""), (row["id"], column, row[column])


@pytest.mark.parametrize("spec", catalogue().specs, ids=lambda s: s.id)
def test_capability_and_peaks_are_plausible(spec):
    if spec.vendor == "nvidia":
        assert spec.compute_capability in CAPABILITIES[spec.architecture], spec.compute_capability
        assert re.fullmatch(r"\d+\.\d+", spec.compute_capability or "")
    assert spec.memory_gb and 4 <= spec.memory_gb <= 300
    if spec.nvidia_smi_memory_mib:
        assert abs(spec.nvidia_smi_memory_mib / 1024 - spec.memory_gb) <= 0.1 * spec.memory_gb
    assert spec.memory_bandwidth_gbs and 100 <= spec.memory_bandwidth_gbs <= 20_000
    assert spec.fp32_tflops is None or 1 <= spec.fp32_tflops <= 200
    for column, architectures in HAS.items():
        value = getattr(spec, column)
        if spec.architecture in architectures and spec.vendor == "nvidia":
            assert value, (spec.id, column)
        if spec.architecture in ("volta", "turing", "pascal"):
            assert not value or column != "bf16_tflops", (spec.id, column)
    if spec.tf32_tflops:
        assert spec.architecture in TF32, (spec.id, spec.architecture)
    # dense tensor peaks rise as the dtype narrows (GeForce Ampere's dense TF32 is about its
    # FP32 rate: RTX 3060 12.7 vs 12.74, hence the 5% slack), and never pass 64x the fp32 rate
    order = [spec.fp32_tflops, spec.tf32_tflops, spec.bf16_tflops, spec.fp8_tflops]
    present = [v for v in order if v]
    for lower, higher in itertools.pairwise(present):
        assert higher >= 0.95 * lower, (spec.id, order)
    if spec.fp32_tflops and spec.bf16_tflops:
        assert spec.bf16_tflops <= 64 * spec.fp32_tflops, spec.id
    if spec.fp16_tflops and spec.fp32_tflops:
        assert spec.fp16_tflops >= spec.fp32_tflops, spec.id


def test_b200_row_reads_as_its_spec_sheet():
    """NVIDIA's HGX B200 per-GPU figures (sparse / 2 = dense): TF32 1.1 PF, BF16 2.25 PF,
    FP8 4.5 PF, FP32 75 TF, 180 GB HBM3E at 7.7 TB/s, compute capability 10.0."""
    b200 = catalogue().get("b200-sxm-180gb")
    assert b200 is not None
    assert b200.compute_capability == "10.0" and b200.architecture == "blackwell"
    assert (b200.fp32_tflops, b200.tf32_tflops, b200.bf16_tflops, b200.fp8_tflops) == (
        75.0,
        1100.0,
        2250.0,
        4500.0,
    )
    assert b200.memory_gb == 180 and b200.memory_bandwidth_gbs == 7700


@pytest.mark.parametrize(
    ("typed", "gpu"),
    [
        ("rtx4090", "rtx-4090"),
        ("RTX-4090", "rtx-4090"),
        ("geforce rtx4090", "rtx-4090"),
        ("A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("a100sxm4 80 GB", "a100-sxm4-80gb"),
        ("L40S", "l40s"),
        ("l40", "l40"),
        ("mi300x", "mi300x"),
        # issue 24's missing cards, as people type them
        ("3090 ti", "rtx-3090-ti"),
        ("RTX 4070 Ti Super", "rtx-4070-ti-super"),
        ("4070 super", "rtx-4070-super"),
        ("4060ti16gb", "rtx-4060-ti-16gb"),
        ("titan rtx", "titan-rtx"),
        ("a800", "a800-sxm4-80gb"),
        ("NVIDIA H800", "h800-sxm5-80gb"),
        ("H20", "h20-96gb"),
        ("NVIDIA GH200 480GB", "gh200-96gb"),
        ("RTX PRO 6000 Blackwell", "rtx-pro-6000-blackwell"),
        ("mi210", "mi210"),
        ("MI325X", "mi325x"),
        ("mi355x", "mi355x"),
    ],
)
def test_names_are_found_with_and_without_spaces_between_letters_and_digits(typed, gpu):
    # issue 24: "rtx4090" was refused while "4090" worked
    assert lookup(typed).spec.id == gpu


def test_an_mi250x_is_the_64_gb_device_pytorch_sees():
    # issue 24: the package holds two GCDs and software sees each as one 64 GB device, so
    # "mi250x" (and the name torch and rocminfo report) is one GCD; the package is mi250x-oam
    for typed in ("mi250x", "AMD Instinct MI250X", "AMD Instinct MI250X/MI250"):
        assert lookup(typed).spec.memory_gb == 64, typed
    package = lookup("mi250x-oam").spec
    device = lookup("mi250x").spec
    assert package.memory_gb == 2 * device.memory_gb
    assert package.bf16_tflops == 2 * device.bf16_tflops
