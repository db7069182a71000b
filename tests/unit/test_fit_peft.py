"""LoRA/QLoRA through peft on the real model, against published measured memory."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from dlrig import fit


def run(**kwargs):
    kwargs.setdefault("search_max_batch", False)
    kwargs.setdefault("advise", False)
    return fit.estimate(fit.Options(**kwargs))


def test_frozen_parameters_have_no_gradients_or_optimizer_state():
    full = run(model="gpt2", gpu="a100", seq_len=512, batch_size=4)
    lora = run(model="gpt2", gpu="a100", seq_len=512, batch_size=4, lora=8)
    assert lora.trainable_params < full.trainable_params / 100
    assert lora.memory_breakdown["optimizer_state"] == 8 * lora.trainable_params
    assert lora.memory_peak_bytes < full.memory_peak_bytes
    qlora = run(model="llama3-8b", gpu="a100", seq_len=256, batch_size=1, qlora=8)
    # NF4 + double quantisation: ~0.516 bytes for each of the 6.98e9 linear weights (3.6 GB);
    # peft's prepare_model_for_kbit_training (on by default) leaves the 2 x 525M embedding and
    # head weights in fp32 (4.2 GB)
    assert 7.3e9 < qlora.memory_breakdown["parameters"] < 8.3e9
    assert qlora.params == pytest.approx(8.03e9, rel=0.01)


LLAMA_3B = "tests/data/hf_configs/llama-3.2-3b.json"


def test_double_quantisation_stores_the_absmax_in_8_bits():
    """bitsandbytes keeps one fp32 absmax per 64 NF4 weights (0.0625 bytes a weight); double
    quantisation stores it as an 8-bit code plus an fp32 scale per 256 blocks."""
    kwargs = dict(config=LLAMA_3B, model=LLAMA_3B, gpu="a100", seq_len=128, batch_size=1)
    dq = run(qlora=8, kbit_prepare=False, **kwargs)
    plain = run(qlora=8, kbit_prepare=False, double_quant=False, **kwargs)
    # the quantised weights: every frozen Linear but the (tied) head, 3.21e9 less the 0.39e9 embedding
    quantised = dq.params - 128256 * 3072 - dq.trainable_params
    extra = plain.memory_breakdown["parameters"] - dq.memory_breakdown["parameters"]
    assert extra == pytest.approx(quantised * (4 / 64 - 1 / 64 - 4 / (64 * 256)), rel=0.02)
    assert any("fp32 absmax" in a for a in plain.assumptions)


def test_lora_dropout_keeps_a_mask_and_its_output():
    kwargs = dict(model="gpt2", gpu="a100", seq_len=512, batch_size=4, lora=8)
    plain = run(**kwargs)
    dropped = run(lora_dropout=0.05, **kwargs)
    extra = dropped.memory_breakdown["activations"] - plain.memory_breakdown["activations"]
    # peft's default target for GPT-2 is the fused c_attn: one dropout a layer on a 768-wide
    # input of 4 x 512 tokens. It keeps a bool mask (a byte an element), and its output takes
    # the place of the input lora_A would have kept anyway.
    elements = 12 * 4 * 512 * 768
    assert 0.5 * elements <= extra <= 3 * elements


def test_fused_activations_keep_only_the_input():
    """GPT-2's gelu_new is written as elementwise ops (each keeps its input); LitGPT, torchtune
    and hub kernels run one GELU kernel. A SiLU model has nothing to fuse."""
    kwargs = dict(model="gpt2", gpu="a100", seq_len=512, batch_size=4)
    composite = run(**kwargs)
    fused = run(activations="fused", **kwargs)
    saved = composite.memory_breakdown["activations"] - fused.memory_breakdown["activations"]
    # bf16 autocast: at least four bf16 tensors of the 3072-wide intermediate a layer fewer
    assert saved >= 4 * 2 * 12 * (4 * 512 * 3072)
    assert any("activations fused" in a for a in fused.assumptions)
    llama = dict(config=LLAMA_3B, model=LLAMA_3B, gpu="a100", seq_len=128, batch_size=1)
    assert run(**llama).memory_peak_bytes == run(activations="fused", **llama).memory_peak_bytes


# The published LoRA/QLoRA measurements (LitGPT's A100 and A10G tables, Unsloth's HF+FA2
# baseline) are rows of benchmarks/data/measured_training.csv, each checked in
# tests/unit/test_fit_accuracy.py::test_lora_and_qlora_memory_of_7_8b_models_against_published_figures
# with the trace the benchmark stores.


def test_qlora_quantises_subclasses_of_linear_as_bitsandbytes_does():
    # issue 24: Falcon's projections are FalconLinear(nn.Linear); transformers' bnb loading
    # checks isinstance, so they are NF4 too (dlrig took exact nn.Linear only, and a Falcon
    # QLoRA kept its weights in 16 bits)
    import torch
    from transformers import FalconConfig, FalconForCausalLM
    from transformers.models.falcon.modeling_falcon import FalconLinear

    from dlrig.fit.peft import NF4Linear, _quantise_frozen_linears

    config = FalconConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    with torch.device("meta"):
        model = FalconForCausalLM(config)
    model.requires_grad_(False)
    assert any(isinstance(m, FalconLinear) for m in model.modules())
    swapped = _quantise_frozen_linears(model, torch.bfloat16)
    assert swapped > 0
    assert not any(isinstance(m, FalconLinear) for m in model.modules())
    assert sum(isinstance(m, NF4Linear) for m in model.modules()) == 2 * 4  # 4 per layer
    assert isinstance(model.get_output_embeddings(), torch.nn.Linear)  # the head stays


@pytest.mark.slow
def test_modules_to_save_train_whole_copies_beside_the_adapters():
    # issue 24: peft's modules_to_save (a new token's embeddings and head) keeps a trainable
    # copy of each module, with its gradients and Adam state
    base = fit.estimate(
        fit.Options(model="llama3-8b", lora=16, seq_len=512, gpu="h100", advise=False)
    )
    saved = fit.estimate(
        fit.Options(
            model="llama3-8b",
            lora=16,
            seq_len=512,
            gpu="h100",
            modules_to_save="embed_tokens,lm_head",
            advise=False,
        )
    )
    vocab, hidden = 128256, 4096
    assert saved.trainable_params - base.trainable_params == 2 * vocab * hidden
    extra = saved.memory_breakdown["optimizer_state"] - base.memory_breakdown["optimizer_state"]
    assert extra == 2 * 4 * 2 * vocab * hidden  # two fp32 Adam moments per trained weight
    assert any("embed_tokens,lm_head trained in full" in a for a in saved.assumptions)


def test_lora_under_fsdp_across_nodes_pays_for_blocks_not_for_adapter_size():
    """A LoRA's sharded step gathers the same frozen blocks as a full fine-tune and reduces only
    the adapters, so its collectives cannot cost more. (The number of collectives had been
    the frozen bytes over one block's adapter count: ~10^5 latencies across two nodes.)"""
    kwargs = dict(
        model="llama3-8b",
        gpu="h100-sxm5-80gb",
        seq_len=1024,
        batch_size=1,
        gpus=16,
        gpus_per_node=8,
        strategy="fsdp",
        precision="amp-bf16",
        grad_checkpointing="full",
    )
    full = run(**kwargs)
    lora = run(lora=16, lora_targets="all-linear", **kwargs)
    assert lora.timing["communication_s"] <= full.timing["communication_s"]


def test_sharded_collectives_are_three_per_block_for_full_lora_and_blockless_models():
    """FSDP gathers each block forward and backward and reduces it once: three collectives a
    block, counted in bytes so that a LoRA's frozen base counts like a full model's weights, and
    a model without repeated blocks is one unit (three, not one per byte)."""
    from dlrig.fit import context, timing
    from dlrig.fit.sharding import Sizes
    from dlrig.knowledge import gpus

    spec = gpus.catalogue().get("h100-sxm5-80gb")
    assert spec is not None
    setup = timing.TimeSetup(
        precision="amp-bf16",
        strategy="fsdp",
        gpus=16,
        gpus_per_node=8,
        grad_accum=1,
        interconnect="nvlink",
        network_gbps=400.0,
        calibration=context.fitted(),
        mamf_ratio=0.8,
    )
    blocks, per_block = 32, 200_000_000
    full = Sizes(
        param_count=blocks * per_block,
        trainable_count=blocks * per_block,
        trainable_bytes=4 * blocks * per_block,
        frozen_bytes=0,
        block_trainable=per_block,
        block_frozen_bytes=0,
        root_trainable=0,
        root_frozen_bytes=0,
        state_bytes=0,
    )
    adapters = 1_000_000
    lora = Sizes(
        param_count=blocks * (per_block + adapters),
        trainable_count=blocks * adapters,
        trainable_bytes=4 * blocks * adapters,
        frozen_bytes=2 * blocks * per_block,
        block_trainable=adapters,
        block_frozen_bytes=2 * per_block,
        root_trainable=0,
        root_frozen_bytes=0,
        state_bytes=0,
    )
    blockless = dataclasses.replace(full, block_trainable=0)
    assert timing._collectives(full, spec, setup)[2] == pytest.approx(3 * blocks)
    assert timing._collectives(lora, spec, setup)[2] == pytest.approx(3 * blocks, rel=0.05)
    assert timing._collectives(blockless, spec, setup)[2] == 3.0


def test_fsdp1_mixed_units_give_the_frozen_weights_gradients():
    """FSDP1 with frozen and LoRA weights in one unit (use_orig_params=True, wrapped by block)
    reduce-scatters and keeps a gradient for the whole unit: sharded after each sync, unsharded
    while accumulating without sync (both held over the micro-batches here). The root unit (embeddings, head) is all frozen and gets
    none. Refused where there is no FSDP unit to mix."""
    from dlrig.errors import InputError

    kwargs = dict(
        model="gpt2",
        gpu="a100",
        seq_len=512,
        batch_size=2,
        lora=8,
        gpus=4,
        strategy="fsdp",
        precision="bf16",
    )
    fsdp2 = run(grad_accum=4, **kwargs)  # gradients kept between micro-batches: at the peak
    mixed = run(fsdp_mixed_units=True, grad_accum=4, **kwargs)
    kept = run(fsdp_mixed_units=True, grad_accum=4, grad_sync=False, **kwargs)
    hidden, layers = 768, 12
    block_frozen = 2 * 12 * hidden * hidden * layers  # bf16 attention + MLP weights
    extra = mixed.memory_breakdown["gradients"] - fsdp2.memory_breakdown["gradients"]
    assert 0.9 * block_frozen / 4 <= extra <= 1.1 * block_frozen / 4
    assert kept.memory_breakdown["gradients"] >= 0.95 * block_frozen
    assert kept.memory_breakdown["gradients"] < 1.1 * block_frozen  # the root unit gets none
    assert mixed.timing["communication_s"] > fsdp2.timing["communication_s"]
    with pytest.raises(InputError, match="--fsdp-mixed-units"):
        run(model="gpt2", gpu="a100", seq_len=512, batch_size=2, lora=8, fsdp_mixed_units=True)


def test_litgpt_13b_lora_on_two_a100s_runs_out_and_is_told_to_unmix_its_units():
    """LitGPT's resource table (commit 8641822, A100-SXM4-40GB): Llama 2 13B LoRA over 2 x A100
    is "OOM" with FSDP by Block (mixed units, 128-step no_sync accumulation). dlrig says it does
    not fit, and that adapters in their own units would."""
    kwargs = dict(
        model="llama-2-13b-hf",
        config="tests/data/hf_configs/llama-2-13b-hf.json",
        gpu="a100-sxm4-40gb",
        seq_len=1304,
        batch_size=1,
        precision="bf16",
        lora=8,
        lora_alpha=16,
        lora_targets="q_proj,v_proj",
        lora_dropout=0.05,
        activations="fused",
        grad_checkpointing="full",
        gpus=2,
        strategy="fsdp",
        grad_accum=128,
        grad_sync=False,
        fsdp_mixed_units=True,
        advise=True,
    )
    result = run(**kwargs)
    assert not result.fits
    unmixed = [a for a in result.advice if a.options == {"fsdp_mixed_units": False}]
    assert unmixed and unmixed[0].fits
    assert "own FSDP units" in unmixed[0].note
