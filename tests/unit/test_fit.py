"""`dlrig fit`: traced memory, FLOPs and the time model on real transformers models."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dlrig import fit  # noqa: E402
from dlrig.errors import InputError  # noqa: E402
from dlrig.fit import presets  # noqa: E402

GIB = 1024**3


# workloads several tests (and tests/unit/test_fit_invariants.py) trace alike: traced once per
# session (fit.trace caches by the workload fields; "auto" shares the trace of its precision)
SHARED = {
    "gpt2": fit.Options(model="gpt2", seq_len=512, batch_size=4),
    "llama3-8b": fit.Options(
        model="llama3-8b", seq_len=1024, batch_size=1, grad_checkpointing="full"
    ),
    "bert-base": fit.Options(model="bert-base", seq_len=128, batch_size=8),
}


def run(model: str | None = None, **kwargs):
    if model is not None:
        kwargs["model"] = model
    kwargs.setdefault("gpu", "a100-sxm4-80gb")
    kwargs.setdefault("search_max_batch", False)
    kwargs.setdefault("advise", False)
    return fit.estimate(fit.Options(**kwargs))


@pytest.mark.parametrize(
    ("name", "millions"),
    # published parameter counts of the reference checkpoints
    [
        ("resnet50", 25.6),
        ("bert-base", 110),
        ("gpt2", 124),
        ("vit-b16", 86.6),
        ("t5-base", 223),
        ("llama3-8b", 8030),
        ("mistral-7b", 7242),
        ("llama3-70b", 70554),
    ],
)
def test_presets_have_the_published_size(name, millions):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlrig.fit.build import skip_weight_init

    workload = presets.preset_workload(name, None, None)
    with FakeTensorMode(), skip_weight_init():
        model = workload.build(None)
    count = sum(p.numel() for p in model.parameters()) / 1e6
    assert count == pytest.approx(millions, rel=0.02)
    if name in SHARED:
        # the depth-reduced trace extrapolates the same count
        traced = fit.trace(SHARED[name])
        assert traced.sizes.param_count == sum(p.numel() for p in model.parameters())


def test_gpt2_flops_match_the_analytic_count():
    result = run("gpt2", batch_size=4, seq_len=512, precision="amp-bf16", optimizer="sgd")
    # Kaplan et al.: forward ≈ 2N + 2·n_layer·n_ctx·d_model FLOPs per token, training ≈ 3× that
    n, layers, ctx, d, tokens = 124.4e6, 12, 512, 768, 4 * 512
    analytic = 3 * (2 * n + 2 * layers * ctx * d) * tokens
    assert result.flops_per_step == pytest.approx(analytic, rel=0.15)


def test_persistent_memory_per_parameter():
    result = run("gpt2", batch_size=1, seq_len=512, precision="amp-bf16", optimizer="adamw")
    n = result.trainable_params
    # fp32 parameters plus buffers (GPT-2 keeps none that persist beyond masks)
    assert result.memory_breakdown["parameters"] == pytest.approx(4 * result.params, rel=0.01)
    assert result.memory_breakdown["optimizer_state"] == 8 * n
    sgd = run("gpt2", batch_size=1, seq_len=512, precision="bf16", optimizer="sgd")
    assert sgd.memory_breakdown["parameters"] == pytest.approx(2 * sgd.params, rel=0.01)
    assert sgd.memory_breakdown["optimizer_state"] == 0
    # pure bf16: parameters are not counted a second time as activations (views of them)
    assert (
        sgd.activation_peak_bytes
        < run(
            "gpt2", batch_size=1, seq_len=512, precision="amp-bf16", optimizer="sgd"
        ).activation_peak_bytes
        * 1.2
    )


def test_activation_memory_grows_with_batch_and_shrinks_with_checkpointing():
    def activations(**kwargs):
        r = run("gpt2", seq_len=512, precision="amp-bf16", optimizer="sgd", **kwargs)
        trace_peak = r.memory_breakdown["activations"]
        return trace_peak, r

    small, _ = activations(batch_size=2)
    large, _ = activations(batch_size=8)
    assert 3.0 < large / small < 4.5  # close to linear in the batch
    none_peak = run("gpt2", batch_size=8, seq_len=512, optimizer="sgd").memory_reserved_bytes
    full_peak = run(
        "gpt2", batch_size=8, seq_len=512, optimizer="sgd", grad_checkpointing="full"
    ).memory_reserved_bytes
    sel_peak = run(
        "gpt2", batch_size=8, seq_len=512, optimizer="sgd", grad_checkpointing="selective"
    ).memory_reserved_bytes
    assert full_peak < sel_peak < none_peak


def test_attention_is_traced_as_the_fused_gpu_kernel():
    traced = fit.trace(SHARED["gpt2"])
    ops = traced.samples[4][-1][1].ops
    assert ops.has("dlrig_fit.attention") and ops.has("dlrig_fit.attention_backward")
    # T5 has no SDPA path: its eager attention is traced in tests/unit/test_fit_config.py


def test_fsdp_shards_the_persistent_state():
    # with accumulation the gradients are held all step, so the peak shows them
    single = run("gpt2", batch_size=2, seq_len=512, grad_accum=2)
    sharded = run("gpt2", batch_size=2, seq_len=512, gpus=8, strategy="fsdp", grad_accum=2)
    for part in ("parameters", "gradients", "optimizer_state"):
        assert sharded.memory_breakdown[part] < single.memory_breakdown[part] / 7
    zero1 = run("gpt2", batch_size=2, seq_len=512, gpus=8, strategy="zero1")
    assert (
        zero1.memory_breakdown["optimizer_state"] < single.memory_breakdown["optimizer_state"] / 2
    )


def test_llama_8b_does_not_fit_one_80gb_gpu_but_fits_with_fsdp():
    # Mixed precision keeps fp32 weights and Adam states: 16 bytes a parameter, 128 GB for 8B.
    # (The default for a bf16 checkpoint, pure bf16 weights, needs half that and does fit.)
    alone = run(
        "llama3-8b",
        batch_size=1,
        seq_len=1024,
        grad_checkpointing="full",
        gpu="h100-sxm5-80gb",
        precision="amp-bf16",
    )
    assert not alone.fits and alone.margin_bytes < 0
    shared = run(
        "llama3-8b",
        batch_size=1,
        seq_len=1024,
        grad_checkpointing="full",
        gpu="h100-sxm5-80gb",
        gpus=8,
        strategy="fsdp",
        precision="amp-bf16",
    )
    assert shared.fits


def test_largest_batch_fits_and_the_next_does_not():
    # "auto" on a T4 (no bf16) runs fp16 autocast, from the same trace as amp-bf16
    result = fit.estimate(
        fit.Options(model="gpt2", seq_len=512, gpu="t4", optimizer="adamw", advise=False)
    )
    assert result.setup["precision"] == "amp-fp16"
    best = result.max_batch_size
    assert best and best > 1
    at_best = run("gpt2", batch_size=best, seq_len=512, gpu="t4")
    above = run("gpt2", batch_size=best + max(1, best // 10), seq_len=512, gpu="t4")
    assert at_best.fits and not above.fits


def test_time_model_scaling_and_links():
    one = run("bert-large", batch_size=32, seq_len=128)
    eight = run("bert-large", batch_size=32, seq_len=128, gpus=8)
    pcie = run("bert-large", batch_size=32, seq_len=128, gpus=8, interconnect="pcie")
    assert 6 * one.samples_per_s < eight.samples_per_s <= 8 * one.samples_per_s * 1.001
    assert pcie.samples_per_s < eight.samples_per_s
    assert 0 < eight.scaling_efficiency <= 1.0
    assert 0.05 < one.mfu < 0.9
    assert pcie.scaling_efficiency <= eight.scaling_efficiency
    fp32 = run("bert-large", batch_size=32, seq_len=128, precision="fp32")
    assert fp32.samples_per_s < one.samples_per_s  # no tensor cores for fp32 matmuls


def test_time_to_train_and_global_batch():
    result = run("gpt2", batch_size=8, seq_len=512, tokens=1e9, global_batch=512, gpus=4)
    assert result.time_to_train_s == pytest.approx(1e9 / result.tokens_per_s)
    gb = result.global_batch
    assert gb["exact"] and gb["micro_batch_per_gpu"] * gb["grad_accum"] * gb["gpus"] == 512


def test_json_document_keys():
    document = run("resnet50", batch_size=32).to_dict()
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.fit" and document["schema_version"] == fit.SCHEMA_VERSION
    for key in (
        "schema_version",
        "model",
        "params",
        "memory",
        "fits",
        "max_batch_size",
        "flops_per_step",
        "step_time_s",
        "samples_per_s",
        "time_to_train_s",
        "mfu",
        "assumptions",
    ):
        assert key in document
    assert set(document["memory"]) >= {"peak_bytes", "breakdown"}
    assert document["assumptions"]


def test_bad_input():
    with pytest.raises(InputError, match="unknown model 'llama3-8x'") as unknown:
        run("llama3-8x")
    assert "did you mean llama3-8b" in unknown.value.fix
    with pytest.raises(InputError, match="factory raised FileNotFoundError"):
        run("tests.data.custom_models:make_raising", input_spec="x:float32[B,4]")
    with pytest.raises(InputError, match=r"not a torch\.nn\.Module"):
        run("tests.data.custom_models:make_not_a_module", input_spec="x:float32[B,4]")
    with pytest.raises(InputError, match="not name:dtype"):
        run("tests.data.custom_models:make_mlp", input_spec="x[B,4]")
    with pytest.raises(InputError, match="not in the GPU catalogue"):
        run("gpt2", gpu="h1000")
    # the cases the CLI once tested one subprocess each (it maps InputError to exit 2 and one
    # line: tests/cli/test_fit_cli.py::test_bad_input_exits_2_with_one_line)
    for kwargs, message in (
        (dict(model="gpt2", gpu="a100", seq_len=4096), "learned position embeddings"),
        (dict(model="bert-large", gpu="a100", epochs=-1, dataset_size=100), "epochs"),
        (dict(model="bert-large", gpu="a100", gpus_per_node=0), "gpus-per-node"),
        (dict(model="llama3-8b", gpu="t4", precision="amp-bf16"), "has no bf16 hardware"),
        (dict(model="gpt2", gpu="rtx"), "rtx"),
        (dict(model="gpt2", gpu="a100", optimizer="adamw-8bit", optimizer_impl="fused"), "impl"),
        (dict(model="gpt2", gpu="a100", inference=True, gpus=5), "does not divide"),
        (dict(model="gpt2", gpu="a100", lora=8, lora_dropout=1.0), "lora-dropout"),
        (dict(model="gpt2", gpu="a100", lora_dropout=0.1), "apply only to LoRA"),
        (dict(model="gpt2", gpu="a100", lora=8, double_quant=False), "no-double-quant"),
        (dict(model="gpt2", gpu="a100", activations="kernel"), "--activations"),
    ):
        with pytest.raises(InputError, match=message) as caught:
            run(**kwargs)
        assert caught.value.fix, kwargs


def test_untraceable_model_gets_a_labelled_analytic_estimate():
    result = run("tests.data.custom_models:make_data_dependent", input_spec="x:float32[B,256]")
    assert result.method == "analytic"
    assert "could not be traced" in result.notes[0]
    assert result.assumptions[0].startswith("ANALYTIC ESTIMATE")
    assert result.memory_breakdown["parameters"] == 4 * result.params
    assert result.to_dict()["method"] == "analytic"


def test_custom_model_traced():
    result = run("tests.data.custom_models:make_mlp", input_spec="x:float32[B,1024]", batch_size=64)
    assert result.method == "trace"
    layer = 2 * 64 * 1024 * 4096  # one Linear's forward FLOPs for the batch
    # forward: both layers; backward: both weight gradients, input gradient of the second only
    assert result.flops_per_step == pytest.approx(2 * layer + 3 * layer, rel=0.05)
