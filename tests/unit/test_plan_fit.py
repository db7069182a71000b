"""Plan's use of fit, and the seeds' cases answered with fit's figures.

Real traces on fake tensors (torch, no GPU): about six traces in all, shared through fit's
in-process cache. The figures are printed (pytest -s) and quoted in the README.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from dlrig import fit
from dlrig.errors import InputError
from dlrig.knowledge.gpus import catalogue
from dlrig.plan import workloads
from dlrig.plan.fitting import WorkloadFit, predicted_peak

IMAGENET = "epochs=90,dataset=1281167"


def gpu(name: str):  # type: ignore[no-untyped-def]
    spec = catalogue().get(name)
    assert spec is not None
    return spec


def test_resnet50_on_1_vs_4_a100_80gb() -> None:
    """The seeds claim 3.8x from 4 GPUs. fit: data-parallel ResNet-50 on NVLink hides its
    all-reduce under backward, so it scales almost linearly."""
    rn = WorkloadFit(workloads.parse(f"resnet50:{IMAGENET}"))
    one, four = rn.evaluate(gpu("a100-sxm4-80gb"), 1), rn.evaluate(gpu("a100-sxm4-80gb"), 4)
    assert one.fits and four.fits and one.time_per_run_s and four.time_per_run_s
    speedup = one.time_per_run_s / four.time_per_run_s
    print(
        f"\nResNet-50 90 epochs: 1 x A100 80GB {one.time_per_run_s / 3600:.1f} h, 4 x {four.time_per_run_s / 3600:.2f} h: {speedup:.2f}x (seeds: 3.8x)"
    )
    assert 3.0 < speedup <= 4.0
    assert rn.traces_made == 1  # one trace served both counts


def test_resnet50_amp_against_fp32() -> None:
    """The seeds claim AMP takes a ResNet-50 run from 12 h to 8 h (1.5x)."""
    results = {}
    for precision in ("fp32", "amp-fp16"):
        wf = WorkloadFit(workloads.parse(f"resnet50:{IMAGENET},precision={precision}"))
        for name in ("v100-sxm2-16gb", "a100-sxm4-80gb"):
            ev = wf.evaluate(gpu(name), 8)
            assert ev.fits and ev.time_per_run_s, ev
            results[(precision, name)] = ev.time_per_run_s / 3600
    for name in ("v100-sxm2-16gb", "a100-sxm4-80gb"):
        ratio = results[("fp32", name)] / results[("amp-fp16", name)]
        print(
            f"\nResNet-50 on 8 x {name}: FP32 {results[('fp32', name)]:.1f} h, AMP {results[('amp-fp16', name)]:.1f} h: {ratio:.2f}x (seeds: 12 h -> 8 h, 1.5x)"
        )
        assert ratio > 1.2
    # V100 has no TF32: FP32 there runs on CUDA cores, so AMP's tensor cores gain more than on
    # the A100, where cuDNN already runs FP32 convolutions as TF32.
    v100 = results[("fp32", "v100-sxm2-16gb")] / results[("amp-fp16", "v100-sxm2-16gb")]
    a100 = results[("fp32", "a100-sxm4-80gb")] / results[("amp-fp16", "a100-sxm4-80gb")]
    assert v100 > a100


def test_amp_fp16_reuses_the_bf16_trace_exactly() -> None:
    """An fp16-only GPU is evaluated on the amp-bf16 trace with its FP16 rate: the answer must
    equal a real amp-fp16 trace's."""
    wf = WorkloadFit(workloads.parse("gpt2:batch=4,tokens=1B,precision=amp-fp16"))
    shortcut = wf.evaluate(gpu("v100-sxm2-32gb"), 1)
    real = fit.evaluate(
        fit.trace(fit.Options(model="gpt2", batch_size=4, precision="amp-fp16")),
        gpu="v100-sxm2-32gb",
        tokens=1e9,
    )
    assert shortcut.memory_peak_bytes == pytest.approx(real.memory_peak_bytes, rel=0.01)
    assert shortcut.time_per_run_s == pytest.approx(real.time_to_train_s, rel=0.01)


def test_predicted_micro_batch_matches_a_real_trace() -> None:
    """ResNet-50 at batch 256 does not fit a 12 GB RTX 3060; plan predicts the micro-batch that
    does from the one trace. A real trace at that micro-batch must agree."""
    rn = WorkloadFit(workloads.parse(f"resnet50:{IMAGENET}"))
    ev = rn.evaluate(gpu("rtx-3060"), 1)
    assert (
        ev.fits and ev.micro_batch and ev.micro_batch < 256 and ev.note and "PREDICTED" in ev.note
    )
    real = fit.evaluate(
        fit.trace(fit.Options(model="resnet50", batch_size=ev.micro_batch, precision="amp-bf16")),
        gpu="rtx-3060",
    )
    assert real.fits
    assert ev.memory_peak_bytes == pytest.approx(real.memory_peak_bytes, rel=0.03)
    full = fit.evaluate(
        fit.trace(fit.Options(model="resnet50", precision="amp-bf16")), gpu="rtx-3060"
    )
    assert predicted_peak(full, 256, ev.micro_batch) == pytest.approx(
        real.memory_peak_bytes, rel=0.03
    )
    print(
        f"\nResNet-50 on RTX 3060: micro-batch {ev.micro_batch} x {ev.grad_accum}, predicted {ev.memory_peak_bytes / 2**30:.2f} GiB, traced {real.memory_peak_bytes / 2**30:.2f} GiB"
    )


def test_bert_large_on_rtx_3060_against_a_24_gb_card() -> None:
    """The seeds say an RTX 3060 cannot train BERT-large in FP16."""
    bert = WorkloadFit(
        workloads.parse("bert-large:batch=32,seq=128,precision=amp-fp16,tokens=3.3B")
    )
    small, big = bert.evaluate(gpu("rtx-3060"), 1), bert.evaluate(gpu("rtx-3090"), 1)
    assert big.fits and big.grad_accum == 1
    margin = (small.gpu_memory_bytes or 0) - (small.memory_peak_bytes or 0)
    print(
        f"\nBERT-large seq 128 batch 32 AMP FP16: RTX 3060 {'fits' if small.fits else 'does not fit'} "
        f"({small.memory_peak_bytes / 2**30:.1f} of {small.gpu_memory_bytes / 2**30:.1f} GiB, margin {margin / 2**30:.2f} GiB, "
        f"{small.time_per_run_s / 3600 if small.time_per_run_s else float('nan'):.0f} h), RTX 3090 {big.memory_peak_bytes / 2**30:.1f} of "
        f"{big.gpu_memory_bytes / 2**30:.1f} GiB, {big.time_per_run_s / 3600:.0f} h"
    )
    assert small.memory_peak_bytes == big.memory_peak_bytes  # same step, different card
    assert big.time_per_run_s
    if small.fits and small.time_per_run_s:
        assert small.time_per_run_s > 2 * big.time_per_run_s


def test_used_v100_against_a100_on_a_bandwidth_bound_model() -> None:
    """Small-batch GPT-2 is dominated by memory-bound kernels: the A100's lead sits near its
    2.27x bandwidth lead, below its 2.5x FP16 tensor lead."""
    wf = WorkloadFit(workloads.parse("gpt2:batch=4,tokens=1B,precision=amp-fp16"))
    v100, a100 = wf.evaluate(gpu("v100-sxm2-32gb"), 1), wf.evaluate(gpu("a100-sxm4-80gb"), 1)
    assert v100.time_per_run_s and a100.time_per_run_s
    ratio = v100.time_per_run_s / a100.time_per_run_s
    bandwidth = (gpu("a100-sxm4-80gb").memory_bandwidth_gbs or 0) / (
        gpu("v100-sxm2-32gb").memory_bandwidth_gbs or 1
    )
    tensor = (gpu("a100-sxm4-80gb").fp16_tflops or 0) / (gpu("v100-sxm2-32gb").fp16_tflops or 1)
    from dlrig.knowledge import plan as knowledge

    used = knowledge.gpu_price("v100-sxm2-32gb", "used")
    new = knowledge.gpu_price("a100-sxm4-80gb", "new")
    assert used and new
    energy_ratio = (300 * ratio) / 400  # TDP x time per run
    print(
        f"\nGPT-2 batch 4, 1B tokens: used V100 32GB {v100.time_per_run_s / 3600:.1f} h, A100 80GB {a100.time_per_run_s / 3600:.1f} h: "
        f"{ratio:.2f}x (bandwidth {bandwidth:.2f}x, FP16 tensor {tensor:.2f}x); price ${used.price_usd:,.0f} used vs ${new.price_usd:,.0f} new; "
        f"energy per run {energy_ratio:.2f}x on the V100"
    )
    assert bandwidth * 0.95 < ratio < tensor * 1.05


# issue 24 "one answer": plan and `dlrig fit` share their defaults (precision, strategy), so
# for one workload on one GPU model and count they say the same: fits or not, precision, peak.
AGREEMENT = [
    ("llama3-8b:seq=2048,checkpointing=full", "rtx-a6000", (1, 2, 4)),
    ("llama3-8b:seq=1024,checkpointing=full,qlora=16", "rtx-4090", (1, 2)),
    ("llama3-8b:seq=1024,checkpointing=full", "v100-sxm2-32gb", (4, 8)),
    ("resnet50", "t4", (1, 2)),
    ("gpt2:seq=1024", "h100-sxm5-80gb", (1, 2)),
]


@pytest.mark.slow
@pytest.mark.parametrize(("text", "gpu_id", "counts"), AGREEMENT)
def test_plan_and_fit_give_one_answer(text: str, gpu_id: str, counts: tuple[int, ...]) -> None:
    workload = workloads.parse(text)
    fitted = WorkloadFit(workload)
    for count in counts:
        planned = fitted.evaluate(gpu(gpu_id), count)
        if planned.note and "PREDICTED" in planned.note:
            continue  # plan's micro-batch prediction; fit is asked at the batch it traced
        asked = fit.estimate(
            fit.Options(
                model=workload.model,
                seq_len=workload.seq_len,
                grad_checkpointing=workload.grad_checkpointing,
                lora=workload.lora,
                qlora=workload.qlora,
                gpu=gpu_id,
                gpus=count,
                strategy=planned.strategy,
                search_max_batch=False,
                advise=False,
            )
        )
        assert asked.fits == planned.fits, (count, planned)
        assert asked.setup["precision"] == planned.precision, (count, planned)
        assert asked.memory_peak_bytes == planned.memory_peak_bytes, (count, planned)


@pytest.mark.slow
def test_more_gpus_never_raise_a_sharded_peak() -> None:
    """Issue 24's 2 x A6000 case: an 8B full fine-tune over 2 GPUs came out at 152.5 GiB, more
    than on one GPU, because the traced 2-layer backward peaked at its start and the 3-layer one
    at its end, and their parts were extended together (95 GiB of gradients)."""
    traced = fit.trace(
        fit.Options(
            model="llama3-8b", seq_len=2048, grad_checkpointing="full", precision="amp-bf16"
        )
    )
    peaks = [
        fit.evaluate(traced, gpu="rtx-a6000", gpus=n, strategy="fsdp").memory_peak_bytes
        for n in (2, 3, 4, 8)
    ]
    assert peaks == sorted(peaks, reverse=True), peaks
    one = fit.evaluate(traced, gpu="rtx-a6000", gpus=1).memory_peak_bytes
    assert peaks[0] < one


def test_fp8_is_planned_where_the_gpu_has_it_and_refused_elsewhere() -> None:
    """fp8= is fit's --fp8: the bf16 trace evaluated with Float8 matmuls, on GPUs with FP8
    tensor cores only; the step on an H100 is the one `dlrig fit --fp8` gives."""
    text = "gpt2-xl:seq=1024,batch=4,tokens=100M"
    plain, float8 = (
        WorkloadFit(workloads.parse(text)),
        WorkloadFit(workloads.parse(text + ",fp8=true")),
    )
    h100, a100 = gpu("h100-sxm5-80gb"), gpu("a100-sxm4-80gb")
    refused = float8.evaluate(a100, 1)
    assert not refused.fits and "no fp8 tensor cores" in (refused.note or "").lower(), refused
    assert plain.evaluate(a100, 1).fits
    planned = float8.evaluate(h100, 1)
    asked = fit.estimate(
        fit.Options(
            model="gpt2-xl",
            seq_len=1024,
            batch_size=4,
            gpu="h100-sxm5-80gb",
            fp8=True,
            search_max_batch=False,
            advise=False,
        )
    )
    assert planned.fits and planned.time_per_run_s is not None
    # the same trace, another step time (gpt2-xl's 1,600-wide matmuls gain little or lose)
    assert planned.time_per_run_s != plain.evaluate(h100, 1).time_per_run_s
    assert planned.time_per_run_s == pytest.approx(100e6 / asked.tokens_per_s, rel=1e-6)


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("gpt2:fp8=maybe", "true or false"),
        ("llama3-8b:fp8=true,lora=16", "drop fp8="),
        ("gpt2:fp8=yes,precision=amp-fp16", "amp-bf16"),
    ],
)
def test_fp8_key_refuses_what_fit_refuses(text: str, fix: str) -> None:
    with pytest.raises(InputError) as caught:
        workloads.parse(text)
    assert fix in (caught.value.fix or "")
