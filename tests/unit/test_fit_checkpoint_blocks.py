"""Checkpointing a fraction of the blocks (`--checkpoint-blocks`), and causal attention under
checkpointing.

The block choice is checked against the two implementations users run: fms-fsdp's
`apply_fsdp_checkpointing` (the examples in its docstring, foundation-model-stack/fms-fsdp:
fms_fsdp/policies/ac_handler.py@4eb97d80) and transformers' own
`activation_checkpointing_enable(every_n_layers=n)` on a real model. The traced step of a
fraction is then checked to lie where the blocks say between no checkpointing and full.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, LlamaConfig

from dlrig import fit
from dlrig.errors import InputError
from dlrig.fit import checkpointing
from dlrig.fit.tracedata import PHASE_CODES, Trace
from dlrig.fit.tracing import make_workload, run_trace, traced_depths

LAYERS, BATCH, SEQ = 8, 1, 256


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("llama")
    LlamaConfig(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        max_position_embeddings=1024,
        torch_dtype="bfloat16",
        architectures=["LlamaForCausalLM"],
    ).save_pretrained(folder)
    return folder / "config.json"


def _options(config: Path, mode: str, blocks: float = 1.0) -> fit.Options:
    return fit.Options(
        model="small",
        config=str(config),
        batch_size=BATCH,
        seq_len=SEQ,
        precision="bf16",
        grad_checkpointing=mode,  # type: ignore[arg-type]
        checkpoint_blocks=blocks,
    )


def _trace(options: fit.Options) -> Trace:
    return run_trace(make_workload(options), options, BATCH, None)


def _flops(trace: Trace, phase: str, name: str | None = None) -> float:
    ops = trace.ops
    chosen = ops.phase == PHASE_CODES[phase]
    if name is not None:
        chosen &= ops.name == ops.names.index(name)
    return float((ops.flops * ops.weights())[chosen].sum())


def test_the_blocks_are_fms_fsdps_evenly_spaced_choice() -> None:
    # the examples of fms-fsdp's apply_fsdp_checkpointing docstring
    assert checkpointing.pattern(4, 1 / 2) == [True, False, True, False]
    assert checkpointing.pattern(6, 1 / 3) == [False, True, False, False, True, False]
    assert checkpointing.pattern(6, 2 / 3) == [True, False, True, True, False, True]
    assert checkpointing.pattern(5, 1.0) == [True] * 5


@pytest.mark.parametrize("every", [2, 3, 4])
def test_one_block_in_n_checkpoints_as_many_blocks_as_transformers_every_n_layers(
    config: Path, every: int
) -> None:
    model = AutoModelForCausalLM.from_config(LlamaConfig.from_pretrained(config.parent))
    model.activation_checkpointing_enable(
        activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=every
    )
    theirs = [bool(layer.gradient_checkpointing) for layer in model.model.layers]
    ours = checkpointing.pattern(LAYERS, 1 / every)
    assert sum(ours) == sum(theirs)
    if every == 2:
        assert ours == theirs


def test_a_fraction_traces_whole_repeats_of_its_pattern(config: Path) -> None:
    workload = make_workload(_options(config, "none"))
    assert traced_depths(workload, _options(config, "none")) == (2, 3)
    assert traced_depths(workload, _options(config, "full")) == (2, 3)
    assert traced_depths(workload, _options(config, "full", 1 / 2)) == (4, 6)
    # 3 repeats of a 3-block pattern and one more layer are 10: the 8 layers are traced whole
    assert traced_depths(workload, _options(config, "full", 2 / 3)) == ()


def test_a_fraction_costs_its_share_of_the_recompute_and_keeps_the_rest(config: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        none, full, half = (
            _trace(_options(config, mode, blocks))
            for mode, blocks in (("none", 1.0), ("full", 1.0), ("full", 0.5))
        )
    # the recompute: half the blocks run their forward again in the backward
    recompute_full = _flops(full, "backward") - _flops(none, "backward")
    recompute_half = _flops(half, "backward") - _flops(none, "backward")
    assert recompute_full > 0
    assert recompute_half == pytest.approx(recompute_full / 2, rel=0.02)
    # what the forward keeps for backward: between the two, half-way by the blocks
    kept = [float(t.curves["activation"][t.phase_spans["forward"][1]]) for t in (none, full, half)]
    assert kept[1] < kept[2] < kept[0]
    assert kept[2] == pytest.approx((kept[0] + kept[1]) / 2, rel=0.1)


def test_checkpointed_causal_attention_is_traced_causal(config: Path) -> None:
    """Gradient checkpointing turns transformers' KV cache off, and without one transformers
    looks for packed sequences in the position ids: on fake tensors it used to build a dense
    mask, and the causal attention was traced at twice its FLOPs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        none, full = (_trace(_options(config, mode)) for mode in ("none", "full"))
    heads, head_dim = 4, 64
    causal = 2 * 2 * BATCH * heads * SEQ * SEQ * head_dim / 2 * LAYERS  # QKᵀ and PV, half
    for trace in (none, full):
        assert _flops(trace, "forward", "dlrig_fit.attention") == pytest.approx(causal)


def test_the_advice_flag_for_every_block_is_the_cli_spelling() -> None:
    from dlrig.fit.advice import _flags

    assert _flags({"checkpoint_blocks": 1.0}) == "--checkpoint-blocks 1"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--grad-checkpointing", "full", "--checkpoint-blocks", "0.1"], "repeats within 4"),
        (["--grad-checkpointing", "full", "--checkpoint-blocks", "1.5"], "above 0 and at most 1"),
        (["--grad-checkpointing", "full", "--checkpoint-blocks", "half"], "is not a fraction"),
        (["--checkpoint-blocks", "1/2"], "add --grad-checkpointing full"),
        (["--inference", "--checkpoint-blocks", "1/2"], "applies to training"),
    ],
)
def test_a_wrong_fraction_is_one_line_and_exit_2(run_dlrig, args: list[str], says: str) -> None:
    ran = run_dlrig("fit", "llama3-8b", "--gpu", "h100", *args)
    assert ran.returncode == 2, ran.stderr
    assert says in ran.stderr
    assert len(ran.stderr.strip().splitlines()) <= 2  # the line and its fix
    assert "Traceback" not in ran.stderr


def test_the_api_refuses_a_fraction_without_full_checkpointing() -> None:
    with pytest.raises(InputError, match="checkpointing is none") as raised:
        fit.run(fit.Options(model="llama3-8b", gpu="h100", checkpoint_blocks=0.5))
    assert "--grad-checkpointing full" in raised.value.fix


def test_percent_and_ratio_spellings() -> None:
    assert checkpointing.parse("1/3") == pytest.approx(1 / 3)
    assert checkpointing.parse("50%") == 0.5
    assert checkpointing.parse(" 0.75 ") == 0.75
    assert checkpointing.describe(2 / 3) == "2 blocks in 3"
