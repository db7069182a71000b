"""torch.compile, Float8 and chunked cross-entropy in `dlrig fit`, checked against the real things.

fit/compiled.py decides what a compiled step saves for backward. The tests run the real thing
on CPU: torch.compile with AOTAutograd's min-cut partitioner (the one inductor trains with) over
small models of two families — Llama (RMSNorm, SwiGLU, RoPE) and GPT-2 (LayerNorm, tanh GELU,
learned positions) — and compare the bytes torch.compile stops saving with the bytes dlrig's
compiled trace stops saving. Measured when written: Llama 1.924 (torch) against 1.955 MiB
(dlrig); GPT-2 3.064 against 3.070 MiB. A Phi config is further off (torch 2.00, dlrig
3.02 MiB: the partitioner keeps gelu_new's tanh, which dlrig recomputes); that is in the fit
docs. Chunked cross-entropy (torchtune's) is checked against the cross-entropy over the whole
logits on real tensors.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, LlamaConfig

from dlrig import fit
from dlrig.errors import InputError
from dlrig.fit.options import COMPILES
from dlrig.fit.tracedata import KIND_CODES, Trace
from dlrig.fit.tracing import make_workload, run_trace
from dlrig.fit.workload import chunked_loss
from dlrig.knowledge.gpus import catalogue

BATCH, SEQ = 2, 128
CONFIGS = {
    "llama": lambda: LlamaConfig(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        max_position_embeddings=512,
        torch_dtype="bfloat16",
        architectures=["LlamaForCausalLM"],
    ),
    "gpt2": lambda: GPT2Config(
        n_embd=256,
        n_layer=2,
        n_head=4,
        vocab_size=1000,
        n_positions=512,
        bos_token_id=0,
        eos_token_id=0,
        torch_dtype="bfloat16",
        architectures=["GPT2LMHeadModel"],
    ),
}


def _config(folder: Path, family: str) -> Path:
    CONFIGS[family]().save_pretrained(folder / family)
    return folder / family / "config.json"


def _trace(config: Path, scope: str, **extra: object) -> Trace:
    options = fit.Options(
        model="small",
        config=str(config),
        batch_size=BATCH,
        seq_len=SEQ,
        precision="bf16",
        compile=scope,  # type: ignore[arg-type]
        **extra,  # type: ignore[arg-type]
    )
    return run_trace(make_workload(options), options, BATCH, None)


def _saved_by_dlrig(trace: Trace) -> float:
    """Activation bytes alive when the forward ends: what backward keeps."""
    return float(trace.curves["activation"][trace.phase_spans["forward"][1]])


def _base(node: torch.fx.Node) -> torch.fx.Node:
    """The node that owns a view's storage (the partitioner may save a view of it)."""
    views = ("view", "detach", "aten.t.", "permute", "transpose", "expand", "alias", "slice")
    while node.op == "call_function" and any(v in str(node.target) for v in views):
        node = node.args[0]  # type: ignore[assignment]
    return node


def _saved_by_torch(config: Path) -> tuple[int, int]:
    """(eager, compiled) activation bytes saved for backward by the real model: eager through
    saved_tensors_hooks; compiled as the extra outputs of the forward graph that
    min_cut_rematerialization_partition cuts (parameters and inputs not counted)."""
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        AutoConfig.from_pretrained(config.parent), attn_implementation="sdpa"
    ).to(torch.bfloat16)
    ids = torch.randint(0, model.config.vocab_size, (BATCH, SEQ))
    owned = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    eager: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in owned:
            eager[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    compiled: list[int] = []

    def backend(graph, example_inputs):
        def partition(joint, joint_inputs, **kwargs):
            forward, backward = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
            (outputs,) = [n.args[0] for n in forward.graph.nodes if n.op == "output"]
            bases = {_base(n) for n in outputs[kwargs["num_fwd_outputs"] :]}
            compiled.append(
                sum(
                    b.meta["val"].untyped_storage().nbytes() for b in bases if b.op != "placeholder"
                )
            )
            return forward, backward

        return aot_module_simplified(
            graph,
            example_inputs,
            fw_compiler=lambda g, _: g,
            bw_compiler=lambda g, _: g,
            partition_fn=partition,
        )

    torch._dynamo.reset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.compile(model, backend=backend)(input_ids=ids, labels=ids).loss.backward()
    finally:
        torch._dynamo.reset()
    return sum(eager.values()), sum(compiled)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_what_compile_stops_saving_matches_the_partitioner(tmp_path, family):
    config = _config(tmp_path, family)
    eager, compiled = _saved_by_torch(config)
    assert compiled < eager  # the partitioner recomputes something
    dropped_by_torch = eager - compiled
    dropped_by_dlrig = _saved_by_dlrig(_trace(config, "none")) - _saved_by_dlrig(
        _trace(config, "model")
    )
    assert abs(dropped_by_dlrig - dropped_by_torch) <= 0.1 * dropped_by_torch, (
        dropped_by_torch,
        dropped_by_dlrig,
    )


def _memory_traffic(trace: Trace) -> float:
    memory = trace.ops.kind == KIND_CODES["memory"]
    return float((trace.ops.traffic * trace.ops.weights())[memory].sum())


def test_compile_fuses_memory_bound_kernels_and_keeps_the_matmuls(tmp_path):
    config = _config(tmp_path, "llama")
    eager, blocks, whole = (_trace(config, s) for s in ("none", "blocks", "model"))
    for trace in (blocks, whole):
        assert trace.flops() == pytest.approx(eager.flops())
        computing = trace.ops.kind != KIND_CODES["memory"]
        assert np.array_equal(
            np.sort(trace.ops.flops[computing]),
            np.sort(eager.ops.flops[eager.ops.kind != KIND_CODES["memory"]]),
        )
    # fewer kernels, fewer bytes; compiling the whole model fuses the head too
    assert len(whole.ops) < len(blocks.ops) < len(eager.ops)
    assert _memory_traffic(whole) < _memory_traffic(blocks) < _memory_traffic(eager)
    assert _saved_by_dlrig(whole) <= _saved_by_dlrig(blocks) < _saved_by_dlrig(eager)
    # what the optimizer does is not compiled
    steps = [t.ops.traffic[t.ops.phase == 2].sum() for t in (eager, whole)]
    assert steps[1] == pytest.approx(steps[0])


def _liger_trace(config: Path, **extra: object) -> Trace:
    return _trace(config, str(extra.pop("compile", "none")), activations="liger", **extra)


def _forward_kernels(trace: Trace, name: str) -> int:
    return sum(
        1
        for n, p in zip(trace.ops.names_of(), trace.ops.phase, strict=True)
        if p == 0 and n == name
    )


def test_liger_fuses_what_its_kernels_replace_and_nothing_else(tmp_path):
    config = _config(tmp_path, "llama")
    eager, liger, whole = _trace(config, "none"), _liger_trace(config), _trace(config, "model")
    assert liger.flops() == pytest.approx(eager.flops())
    # one kernel for each norm, the rotary embedding and SwiGLU of each of the 2 layers, and
    # the final norm; the residual adds, the loss and the optimizer stay eager
    assert _forward_kernels(liger, "inductor.fused") == 2 * 4 + 1
    assert _forward_kernels(liger, "aten.add") >= 2 * 2
    assert _memory_traffic(whole) < _memory_traffic(liger) < _memory_traffic(eager)
    assert _saved_by_dlrig(whole) <= _saved_by_dlrig(liger) < _saved_by_dlrig(eager)
    steps = [t.ops.traffic[t.ops.phase == 2].sum() for t in (eager, liger)]
    assert steps[1] == pytest.approx(steps[0])
    # a LoRA's adapters inside the fused regions keep their own (eager) kernels
    lora = {"lora": 8, "lora_dropout": 0.1, "lora_targets": "all-linear"}
    plain = _trace(config, "none", **lora)
    fused = _liger_trace(config, **lora)
    assert (
        _forward_kernels(fused, "aten.native_dropout")
        == _forward_kernels(plain, "aten.native_dropout")
        == 2 * 7
    )
    # a checkpointed block recomputes inside the backward: its residual adds stay eager, only
    # the two norms' and the rotary embedding's adds (4 a layer) run inside fused kernels
    recomputed = [
        _liger_trace(config, grad_checkpointing="full"),
        _trace(config, "none", grad_checkpointing="full"),
    ]
    adds = [
        sum(
            1
            for n, p in zip(t.ops.names_of(), t.ops.phase, strict=True)
            if p == 1 and n == "aten.add"
        )
        for t in recomputed
    ]
    assert adds[0] == adds[1] - 4 * 2
    # torch.compile already fuses all of it
    compiled = _trace(config, "model")
    assert len(_liger_trace(config, compile="model").ops) == len(compiled.ops)


def test_liger_keeps_quantised_projections_and_unusual_mlps_as_they_are(tmp_path):
    from transformers.models.bitnet.modeling_bitnet import BitNetMLP
    from transformers.models.llama.modeling_llama import LlamaMLP

    from dlrig.fit.liger import _plain_gated, liger_scope
    from dlrig.fit.recorder import Recorder

    config = _config(tmp_path, "llama")
    # QLoRA with peft's default targets leaves the MLP's NF4 projections bare inside the fused
    # SwiGLU region: each still dequantises in its own kernel
    eager, liger = (
        _trace(config, "none", qlora=8, activations=activations)
        for activations in ("model", "liger")
    )
    assert (
        _forward_kernels(liger, "dlrig_fit.nf4_dequantize")
        == _forward_kernels(eager, "dlrig_fit.nf4_dequantize")
        > 0
    )
    # only an MLP whose forward is act(gate) * up is run in Liger's order: BitNet's has a
    # norm inside it, and keeps its own forward
    assert _plain_gated(LlamaMLP(CONFIGS["llama"]()))
    from transformers import BitNetConfig

    bitnet = BitNetMLP(BitNetConfig(hidden_size=64, intermediate_size=128))
    assert all(hasattr(bitnet, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn"))
    assert not _plain_gated(bitnet)
    # a forward set on the instance before (accelerate's hooks do that) is put back
    mlp = LlamaMLP(CONFIGS["llama"]())
    marker = mlp.forward
    mlp.forward = marker  # an instance attribute, as a wrapper would set
    with liger_scope(Recorder(), mlp):
        assert mlp.forward is not marker
    assert mlp.__dict__["forward"] is marker


def _estimate(**options):
    base = {"batch_size": 4, "seq_len": 512, "search_max_batch": False, "advise": False}
    return fit.run(fit.Options(**{"model": "gpt2", **base, **options}))


@pytest.mark.slow
def test_fp8_pays_where_matmuls_dominate():
    """Float8 matmuls run at twice the bf16 peak but every operand is cast first: an 8B model
    at 8k tokens per GPU gains, GPT-2 small at 2k tokens (768-wide matmuls) loses, as
    torchao's float8 tables show for small shapes."""
    big = {"model": "llama3-8b", "batch_size": 1, "seq_len": 8192, "gpu": "h100-sxm5-80gb"}
    big |= {"grad_checkpointing": "full", "compile": "model"}
    bf16, fp8 = _estimate(**big), _estimate(**big, fp8=True)
    assert fp8.flops_per_step == pytest.approx(bf16.flops_per_step)
    assert fp8.memory_peak_bytes == bf16.memory_peak_bytes
    assert 1.1 < bf16.step_time_s / fp8.step_time_s < 2.0
    assert fp8.setup["fp8"] is True and any("Float8" in a for a in fp8.assumptions)
    assert fp8.mfu < bf16.mfu  # against the FP8 peak, which FP8 matmuls are timed at
    # eager Float8 pays for its casts in extra kernels: slower than compiled Float8
    assert _estimate(**{**big, "compile": "none"}, fp8=True).step_time_s > fp8.step_time_s
    small = {"gpu": "h100-sxm5-80gb", "compile": "model"}
    assert _estimate(**small, fp8=True).step_time_s > _estimate(**small).step_time_s


def test_fp8_and_compile_are_refused_where_they_cannot_run():
    for bad, named in (
        ({"gpu": "a100-sxm4-80gb", "fp8": True}, "no fp8 tensor cores"),
        ({"gpu": "h100-sxm5-80gb", "fp8": True, "lora": 8}, "LoRA"),
        ({"gpu": "h100-sxm5-80gb", "fp8": True, "precision": "amp-fp16"}, "amp-fp16"),
        ({"gpu": "h100-sxm5-80gb", "fp8": True, "inference": True}, "--fp8"),
        ({"gpu": "a100-sxm4-80gb", "fp8": True, "analytic": True}, "no fp8 tensor cores"),
        ({"gpu": "h100-sxm5-80gb", "compile": "model", "inference": True}, "--compile"),
        ({"gpu": "h100-sxm5-80gb", "compile": "everything"}, "--compile"),
    ):
        with pytest.raises(InputError, match=named):
            _estimate(**bad)


def test_chunked_loss_is_the_same_cross_entropy(tmp_path):
    """On real tensors: the chunked loss equals cross-entropy over the whole logits."""
    config = _config(tmp_path, "llama")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(config.parent))
    ids = torch.randint(0, model.config.vocab_size, (BATCH, SEQ))
    whole = torch.nn.functional.cross_entropy(
        model(input_ids=ids).logits.float().flatten(0, 1), ids.flatten()
    )
    for chunks in (1, 3, 8):
        chunked = chunked_loss(model, {"input_ids": ids}, chunks)["loss"]
        assert chunked.item() == pytest.approx(whole.item(), rel=1e-5)


def test_chunked_loss_keeps_the_matmuls_and_lowers_the_peak(tmp_path):
    config = _config(tmp_path, "llama")
    traces = []
    for chunks in (0, 8):
        options = fit.Options(
            model="small", config=str(config), batch_size=BATCH, seq_len=SEQ, loss_chunks=chunks
        )
        traces.append(run_trace(make_workload(options), options, BATCH, None))
    whole, chunked = traces
    assert chunked.flops() == pytest.approx(whole.flops())
    peak = [float((t.curves["activation"] + t.curves["backward_temp"]).max()) for t in traces]
    assert peak[1] < peak[0]
    with pytest.raises(InputError, match="causal LM"):
        make_workload(fit.Options(model="resnet50", loss_chunks=8))


def test_fp8_advice_offers_only_gpus_with_fp8():
    result = _estimate(model="gpt2-xl", gpu="l4", fp8=True, batch_size=4, seq_len=1024, advise=True)
    assert not result.fits
    offered = [a.options["gpu"] for a in result.advice if "gpu" in a.options]
    assert offered, result.advice
    for gpu in offered:
        assert catalogue().resolve(gpu).fp8_tflops


def test_advice_offers_chunked_loss_where_the_logits_matter():
    """GPT-2's 50,257-token logits at 8 x 1,024 tokens (3 GiB in fp32, with their gradient)
    on a 16 GB T4: chunking them is one remedy, at the peak `--loss-chunks 8` reports."""
    run = {"gpu": "t4", "batch_size": 8, "seq_len": 1024}
    result = _estimate(**run, advise=True)
    assert not result.fits
    (offer,) = [a for a in result.advice if "loss_chunks" in a.options]
    assert offer.change == "--loss-chunks 8" and offer.fits
    assert offer.memory_peak_bytes == _estimate(**run, loss_chunks=8).memory_peak_bytes


def test_chunked_loss_casts_a_weight_once_under_autocast():
    """bf16 autocast over fp32 weights (GPT-2's default): the chunked output projection reuses
    one bf16 copy of its weight, as CUDA autocast's cast cache does, so chunking lowers the
    peak instead of keeping a copy per chunk."""
    whole = _estimate(gpu="h100-sxm5-80gb", batch_size=2, seq_len=256)
    chunked = _estimate(gpu="h100-sxm5-80gb", batch_size=2, seq_len=256, loss_chunks=8)
    assert whole.setup["precision"] == "amp-bf16"
    assert chunked.memory_peak_bytes < whole.memory_peak_bytes


def test_compiling_the_blocks_does_less_than_compiling_the_model():
    """T5: encoder and decoder blocks both count as blocks, whatever the traced depth."""
    times = {
        s: _estimate(model="t5-base", gpu="h100", compile=s, seq_len=128).step_time_s
        for s in COMPILES
    }
    assert times["model"] <= times["blocks"] < times["none"]


def test_data_moving_operators_named_like_views_are_timed(tmp_path):
    """cat, native_dropout and rsqrt end in a view's name ("t"): they still move data."""
    options = fit.Options(model="gpt2", batch_size=2, seq_len=128)
    names = set(run_trace(make_workload(options), options, 2, 1).ops.names_of())
    assert {"aten.cat", "aten.native_dropout", "aten.t"} & names == {
        "aten.cat",
        "aten.native_dropout",
    }


def test_fsdp_units_are_every_block_of_every_list():
    """FSDP wraps each repeated block: a T5's encoder blocks and decoder blocks alike, so the
    root unit holds the shared embedding and the final norms only, whatever the depth."""
    from transformers import T5Config, T5ForConditionalGeneration

    from dlrig.fit.step import sizes

    for layers in (2, 3):
        config = T5Config(d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=512)
        config.num_layers = config.num_decoder_layers = layers
        model = T5ForConditionalGeneration(config)
        found = sizes(model)
        embeddings = sum(p.numel() for p in model.shared.parameters())
        norms = sum(
            p.numel()
            for stack in (model.encoder, model.decoder)
            for p in stack.final_layer_norm.parameters()
        )
        head = 0 if config.tie_word_embeddings else model.lm_head.weight.numel()
        assert found["root_trainable"] == embeddings + norms + head, layers
        # the largest unit is the first decoder block (self- and cross-attention, and the
        # relative position bias that only the first block of a stack holds)
        decoder_block = sum(p.numel() for p in model.decoder.block[0].parameters())
        assert found["block_trainable"] == decoder_block


def test_a_model_that_is_a_sequential_is_not_its_own_block_list():
    from dlrig.fit.step import sizes

    def block() -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)
        )

    head = [torch.nn.Embedding(100, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 100)]
    model = torch.nn.Sequential(
        head[0], torch.nn.Sequential(*[block() for _ in range(8)]), *head[1:]
    )
    found = sizes(model)
    assert found["block_trainable"] == sum(p.numel() for p in block().parameters())
    assert found["root_trainable"] == sum(p.numel() for m in head for p in m.parameters())
    # a Sequential of plain layers and nothing inside: its layers are the units
    flat = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(4)])
    assert sizes(flat)["root_trainable"] == 0
