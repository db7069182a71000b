"""Tensor, pipeline and context parallelism in `dlrig fit` (fit/parallel.py): what one GPU
holds and waits for, from one trace of the whole model. The published runs these are checked
against are in tests/unit/test_fit_accuracy.py (torchtitan's 2024 tables)."""

from __future__ import annotations

import pytest

from dlrig import fit
from dlrig.errors import InputError
from dlrig.fit import parallel

GPU = "h100-sxm5-80gb"


@pytest.fixture(scope="module")
def traced():
    return fit.trace(
        fit.Options(
            model="llama3-8b",
            seq_len=2048,
            batch_size=2,
            precision="amp-bf16",
            grad_checkpointing="full",
            gpu=GPU,
            search_max_batch=False,
            advise=False,
        )
    )


def _evaluate(traced, **changes):
    changes.setdefault("gpu", GPU)
    return fit.evaluate(traced, **changes)


def test_tensor_parallel_splits_weights_and_activations(traced):
    """FSDP over 8 GPUs and TP 2 × FSDP 4 hold the same weight bytes per GPU; TP halves the
    activations (sequence parallel) and adds exposed collectives."""
    fsdp = _evaluate(traced, gpus=8, strategy="fsdp")
    tp = _evaluate(traced, gpus=8, strategy="fsdp", tp=2)
    for part in ("parameters", "optimizer_state"):
        assert tp.memory_breakdown[part] == pytest.approx(fsdp.memory_breakdown[part], rel=0.02)
    assert tp.activation_peak_bytes == pytest.approx(fsdp.activation_peak_bytes / 2, rel=0.01)
    # four replicas' samples, not eight: per GPU the same tokens need twice the step
    assert tp.samples_per_s == pytest.approx(2 * 4 / tp.step_time_s, rel=1e-6)
    assert tp.timing["exposed_communication_s"] > fsdp.timing["exposed_communication_s"]
    one = _evaluate(traced, gpus=1)
    ddp_tp = _evaluate(traced, gpus=2, tp=2)
    assert ddp_tp.memory_breakdown["parameters"] == pytest.approx(
        one.memory_breakdown["parameters"] / 2, rel=0.02
    )


def test_pipeline_holds_the_micro_batches_in_flight(traced):
    """1F1B: the first stage holds pp micro-batches of 1/pp of the layers (the activations of
    one micro-batch of the whole model); GPipe all of them; the bubble is (pp - 1) / m."""
    one = _evaluate(traced, gpus=1, grad_accum=8)
    pipe = _evaluate(traced, gpus=4, pp=4, grad_accum=8)
    gpipe = _evaluate(traced, gpus=4, pp=4, grad_accum=8, pp_schedule="gpipe")
    interleaved = _evaluate(traced, gpus=4, pp=4, grad_accum=8, pp_schedule="interleaved-1f1b")
    assert pipe.activation_peak_bytes == pytest.approx(one.activation_peak_bytes, rel=0.01)
    assert gpipe.activation_peak_bytes == pytest.approx(2 * one.activation_peak_bytes, rel=0.01)
    # the first stage: 8 of the 32 blocks and the embedding (test_the_first_stage_...)
    assert pipe.memory_breakdown["parameters"] == pytest.approx(
        one.memory_breakdown["parameters"] * 2.27 / 8.03, rel=0.02
    )
    busy = 8 * (pipe.timing["forward_s"] + pipe.timing["backward_s"])
    assert pipe.timing["pipeline_bubble_s"] == pytest.approx(busy * 3 / 8, rel=1e-6)
    assert interleaved.timing["pipeline_bubble_s"] == pytest.approx(busy * 3 / 16, rel=1e-6)
    assert interleaved.activation_peak_bytes > pipe.activation_peak_bytes
    # one replica: its 8 micro-batches of 2 samples per step
    assert pipe.samples_per_s == pytest.approx(16 / pipe.step_time_s, rel=1e-6)
    assert any("pipeline bubble" in line for line in pipe.assumptions)


def test_context_parallel_splits_the_sequence(traced):
    one = _evaluate(traced, gpus=2, strategy="fsdp")
    cp = _evaluate(traced, gpus=2, strategy="fsdp", cp=2)
    assert cp.activation_peak_bytes == pytest.approx(one.activation_peak_bytes / 2, rel=0.01)
    # FSDP shards over dp × cp: the same two GPUs hold the weights
    assert cp.memory_breakdown["parameters"] == pytest.approx(
        one.memory_breakdown["parameters"], rel=0.02
    )
    assert cp.tokens_per_s < one.tokens_per_s  # one sequence per step instead of two


def test_mesh_arithmetic():
    mesh = parallel.Mesh(tp=8, pp=8, cp=2, dp=4, microbatches=16, schedule="interleaved-1f1b")
    assert (mesh.model_split, mesh.compute_split, mesh.data_parallel) == (64, 128, 8)
    assert mesh.bubble == pytest.approx((16 + 7 / 2) / 16)
    assert mesh.in_flight == pytest.approx(8 * (1 + 7 / 16))
    assert "TP 8" in mesh.describe() and "DP 4" in mesh.describe()
    assert parallel.Mesh(1, 1, 1, 8, 1, "1f1b").trivial


def test_a_model_without_layers_and_sequence_is_refused():
    mesh = parallel.Mesh(tp=2, pp=1, cp=1, dp=1, microbatches=1, schedule="1f1b")
    with pytest.raises(InputError, match="hidden_size") as error:
        parallel.check_model(mesh, None, None, None)
    assert error.value.fix


def test_advice_offers_more_context_parallel_ranks_for_a_long_sequence():
    """torchtitan's 8B at 131k tokens over CP 4 needs 84 GiB of a 96 GiB H100 (table 2, dlrig
    80 GiB); on an 80 GB H100 it is over, and the same eight GPUs as CP 8 fit."""
    result = fit.estimate(
        fit.Options(
            model="llama3-8b",
            seq_len=131072,
            batch_size=1,
            precision="amp-bf16",
            grad_checkpointing="full",
            gpu=GPU,
            gpus=8,
            cp=4,
            strategy="fsdp",
            search_max_batch=False,
        )
    )
    assert not result.fits
    offered = {advice.change: advice for advice in result.advice}
    assert offered["--cp 8"].fits
    assert offered["--cp 8"].memory_peak_bytes < result.memory_peak_bytes * 0.7


def test_the_largest_batch_is_found_when_the_optimizer_step_holds_the_peak(traced):
    """A model-parallel GPU's activations are small: at the traced batches the peak is in the
    optimizer step and does not move with the batch, so the memory line alone would guess an
    astronomical batch (torch refused to size its tensors). The activations' growth bounds it."""
    result = _evaluate(traced, gpus=8, strategy="fsdp", tp=2, search_max_batch=True)
    assert not any("search stopped" in note for note in result.notes)
    assert 4 <= (result.max_batch_size or 0) <= 200


def test_no_data_parallelism_means_no_unsynced_gradients(traced):
    """Two pipeline stages on two GPUs leave one data-parallel rank: FSDP has nothing to shard
    or sync, so gradients are those of DDP (found in review: they had halved)."""
    fsdp = _evaluate(traced, gpus=2, pp=2, grad_accum=4, strategy="fsdp")
    ddp = _evaluate(traced, gpus=2, pp=2, grad_accum=4, strategy="ddp")
    assert fsdp.memory_breakdown["gradients"] == pytest.approx(
        ddp.memory_breakdown["gradients"], rel=0.01
    )


def test_each_model_parallel_group_gets_its_own_link(traced):
    """TP 8 × CP 2 on two 8-GPU nodes at 100 Gb/s per GPU: the tp group stays on NVLink (0.8 of
    450 GB/s), the cp pairs cross the nodes over one NIC each (0.8 of 12.5 GB/s); pipeline
    stages of a node each send over NVLink (found in review: tp was charged the network)."""
    from dlrig.fit import context

    def links(**changes):
        ctx = context.resolve(traced, None, {"gpu": GPU, **changes})
        return context.model_parallel_links(ctx, context.time_setup(ctx))

    tensor, across, _ = links(gpus=16, tp=8, cp=2, strategy="fsdp", network_gbps=100)
    assert tensor == pytest.approx(360.0)
    assert across == pytest.approx(10.0)
    _, within, stage = links(gpus=8, tp=2, cp=2, pp=2, grad_accum=4, network_gbps=100)
    assert within == pytest.approx(360.0) and stage == pytest.approx(360.0)
    *_, remote = links(gpus=16, tp=8, pp=2, grad_accum=4, network_gbps=100)
    assert remote == pytest.approx(10.0)


def test_fsdp_under_a_pipeline_gathers_once_a_step(traced):
    few = _evaluate(traced, gpus=8, pp=2, grad_accum=4, strategy="fsdp")
    many = _evaluate(traced, gpus=8, pp=2, grad_accum=16, strategy="fsdp")
    assert many.timing["communication_s"] == pytest.approx(few.timing["communication_s"], rel=0.05)


def test_the_first_stage_holds_its_end_of_the_model(traced):
    """At PP 4 a stage of Llama 3 8B holds 8 of 32 blocks plus the embedding: 2.27 B
    parameters, not a quarter of 8.03 B."""
    stage = parallel.split_sizes(traced.sizes, parallel.Mesh(1, 4, 1, 1, 8, "1f1b"))
    assert stage.trainable_count == pytest.approx(2.27e9, rel=0.01)


def test_advice_never_offers_a_layout_fit_refuses(traced):
    """TP 16 passes the GPU count but not Llama 3 8B's 8 key-value heads: not offered."""
    result = _evaluate(
        traced, gpu="rtx-3060", gpus=16, tp=8, gpus_per_node=16, strategy="ddp", advise=True
    )
    assert not result.fits
    assert result.advice
    assert all("--tp 16" not in advice.change for advice in result.advice)
