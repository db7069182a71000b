"""dlrig.train against the plain loop it replaces: same losses, same weights (Fabric's parity
test shape: same model, data, seeds)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from dlrig import train

STEPS_DATA = 48


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(3)
    return TensorDataset(
        torch.randn(STEPS_DATA, 8, generator=g), torch.randint(0, 3, (STEPS_DATA,), generator=g)
    )


def _model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 3)
    )


def plain_loop(epochs: int = 2, autocast_dtype: torch.dtype | None = None, scaler: bool = False):
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    grad_scaler = torch.amp.GradScaler("cpu") if scaler else None
    loader = DataLoader(_data(), batch_size=8, shuffle=True)
    losses = []
    for _ in range(epochs):
        for x, y in loader:
            with torch.autocast(
                "cpu", dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None
            ):
                loss = F.cross_entropy(model(x), y)
            if grad_scaler is not None:
                grad_scaler.scale(loss).backward()
                grad_scaler.step(optimizer)
                grad_scaler.update()
            else:
                loss.backward()
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
    return losses, model


def dlrig_loop(epochs: int = 2, **options):
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    run = train.Run(quiet=True, **options)
    wrapped, optimizer = run.setup(model, optimizer)
    loader = run.setup_dataloader(DataLoader(_data(), batch_size=8, shuffle=True))
    losses = []
    for _epoch in run.epochs(epochs):
        for x, y in loader:
            losses.append(run.step(lambda a, b: F.cross_entropy(wrapped(a), b), x, y).item())
    summary = run.finish()
    return losses, model, summary


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(
        torch.equal(p, q)
        for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_fp32_matches_the_plain_loop_bit_for_bit():
    plain, plain_model = plain_loop()
    ours, our_model, summary = dlrig_loop()
    assert ours == plain  # shuffle order and dropout masks drawn exactly as the plain loop does
    assert _same_weights(plain_model, our_model)
    assert summary.steps == 12 and summary.samples == 96


def test_bf16_autocast_matches_plain_autocast():
    plain, plain_model = plain_loop(autocast_dtype=torch.bfloat16)
    ours, our_model, summary = dlrig_loop(precision="bf16")
    assert ours == plain
    assert _same_weights(plain_model, our_model)
    assert summary.precision == "bf16"


def test_fp16_uses_torch_amp_grad_scaler_without_deprecation_warnings():
    plain, plain_model = plain_loop(autocast_dtype=torch.float16, scaler=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ours, our_model, _ = dlrig_loop(precision="fp16")
    assert ours == plain
    assert _same_weights(plain_model, our_model)


def test_accumulation_equals_the_whole_batch_and_scales_the_loss_once():
    plain, plain_model = plain_loop()
    ours, our_model, summary = dlrig_loop(micro_batch=3)  # 8 = 3 + 3 + 2: unequal micro-batches
    assert summary.plan == {
        "global_batch": 8,
        "world_size": 1,
        "per_rank_batch": 8,
        "micro_batch": 3,
        "accumulation": 3,
    }
    # The returned loss is the batch mean (micro-losses weighted 3/8, 3/8, 2/8), not a sum and
    # not divided twice; weights agree to float rounding.
    assert ours == pytest.approx(plain, abs=1e-5)
    for p, q in zip(plain_model.parameters(), our_model.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5)


def test_accumulation_option_sets_the_micro_batch():
    _, _, summary = dlrig_loop(epochs=1, accumulation=4)
    assert summary.plan["micro_batch"] == 2 and summary.plan["accumulation"] == 4


def test_step_without_a_loader_of_ours_splits_the_batch_it_is_given():
    model = _model()
    run = train.Run(quiet=True, micro_batch=2)
    model, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x, y = torch.randn(6, 8), torch.randint(0, 3, (6,))
    whole = F.cross_entropy(model.eval()(x), y).item()
    loss = run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
    assert loss.item() == pytest.approx(whole, abs=1e-6)
    assert run.plan is not None and run.plan.accumulation == 3
    run.close()


def test_no_call_to_the_deprecated_amp_api_in_the_package():
    import re
    from pathlib import Path

    import dlrig.train

    call = re.compile(r"torch\.(cuda|cpu)\.amp\.\w+\(")
    for source in Path(dlrig.train.__file__).parent.glob("*.py"):
        assert not call.search(source.read_text()), source
