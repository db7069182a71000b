"""OOM back-off in one process, fp16 collapse, and the activation-checkpointing and compile
switches. (The two-rank back-off is in tests/integration/test_train_ddp.py.)"""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

from dlrig import diagnose, fit, train
from dlrig.train.log import RunLog


def _batches(count: int = 4, size: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(5)
    return [
        (torch.randn(size, 6, generator=g), torch.randint(0, 3, (size,), generator=g))
        for _ in range(count)
    ]


def _train(**options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    stream = io.StringIO()
    run = train.Run(**options)
    run.log = RunLog(0, 1, stream=stream)  # capture what the run says
    wrapped, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    plans = []
    for x, y in _batches():
        run.step(lambda a, b: F.cross_entropy(wrapped(a), b), x, y)
        plans.append(run.plan.to_dict())
    run.close()
    return model, plans, stream.getvalue()


def test_injected_oom_halves_the_micro_batch_and_keeps_the_global_batch():
    reference, _, _ = _train()
    model, plans, said = _train(
        oom_backoff=True, inject_oom=train.OomInjector(rank=0, step=2, above_micro_batch=2)
    )
    # 8 -> 4 (still above the limit, the same step again) -> 2, every time the global batch 8.
    assert [p["micro_batch"] for p in plans] == [8, 2, 2, 2]
    assert {p["global_batch"] for p in plans} == {8}
    assert plans[-1]["accumulation"] == 4
    assert said.count("out of memory") == 2
    assert "micro-batch 8 -> micro-batch 4" in said and "micro-batch 4 -> micro-batch 2" in said
    for p, q in zip(reference.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def test_oom_at_micro_batch_one_is_the_cuda_oom_finding():
    with pytest.raises(train.TrainError) as stop:
        _train(oom_backoff=True, inject_oom=train.OomInjector(rank=0, step=1, above_micro_batch=0))
    assert stop.value.cause == "cuda_oom"
    assert "micro-batch of 1" in stop.value.message


def test_without_back_off_the_oom_is_the_users():
    with pytest.raises(torch.OutOfMemoryError):
        _train(oom_backoff=False, inject_oom=train.OomInjector(rank=0, step=1))


def test_fp16_overflow_streak_stops_with_the_diagnose_finding():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    run = train.Run(precision="fp16", fp16_overflow_streak=20, quiet=True)
    model, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    x = torch.randn(8, 4)
    with pytest.raises(train.TrainError) as stop:
        for _ in range(30):
            # Gradients far past fp16's 65504: every step overflows, the scale keeps halving.
            run.step(lambda a: (model(a).float() * 1e6).pow(2).mean(), x)
    run.close()
    assert stop.value.cause == "fp16_overflow_nan"
    assert run.steps == 19  # the 20th skipped step in a row stopped it
    assert "bf16" in (stop.value.fix or "")
    # The line the run prints is one `dlrig diagnose` recognises in a crashed run's log.
    found = diagnose.diagnose_text(f"step 5\n{stop.value}\n")
    assert found.root is not None and found.root.cause == "fp16_overflow_nan"


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))
        self.head = torch.nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _grads(**options) -> tuple[list[torch.Tensor], train.Run]:
    torch.manual_seed(0)
    model = Stack()
    run = train.Run(quiet=True, **options)
    wrapped, _ = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.0))
    x = torch.randn(4, 6)
    loss = wrapped(x).pow(2).sum()
    loss.backward()
    run.close()
    return [p.grad.clone() for p in model.parameters()], run


def test_activation_checkpointing_wraps_the_blocks_and_keeps_the_gradients():
    plain, _ = _grads()
    checkpointed, run = _grads(activation_checkpointing=True)
    for a, b in zip(plain, checkpointed, strict=True):
        torch.testing.assert_close(a, b)
    assert any(
        "activation checkpointing on the 3 blocks of blocks (Block)" in d.text
        for d in run.log.decisions
    )
    _by_type, run = _grads(activation_checkpointing=(Block,))
    assert any("on 3 modules (Block)" in d.text for d in run.log.decisions)


def test_activation_checkpointing_without_blocks_is_a_clear_error():
    from dlrig.errors import InputError

    run = train.Run(quiet=True, activation_checkpointing=True)
    model = torch.nn.Linear(2, 2)
    with pytest.raises(InputError, match=r"no nn\.ModuleList"):
        run.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_compile_switch_is_logged_and_trains():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    run = train.Run(quiet=True, compile="eager")  # inductor needs a C++ toolchain; same switch
    compiled, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))
    before = model.weight.detach().clone()
    run.step(lambda a: compiled(a).pow(2).mean(), torch.randn(4, 4))
    run.close()
    assert not torch.equal(before, model.weight)
    assert any("torch.compile(backend='eager')" in d.text for d in run.log.decisions)


def test_bad_options_are_input_errors():
    from dlrig.errors import InputError

    with pytest.raises(InputError, match="precision='fp8'"):
        train.Run(precision="fp8")
    with pytest.raises(InputError, match="micro_batch and accumulation"):
        train.Run(micro_batch=2, accumulation=2)
    with pytest.raises(InputError, match="save_on_sigterm=True without checkpoint_dir"):
        train.Run(save_on_sigterm=True)


def test_first_micro_batch_from_fit():
    micro = train.micro_batch_from_fit(
        fit.Options(
            model="tests.data.custom_models:make_mlp",
            input_spec="x:float32[B,1024]",
            gpu="t4",
            precision="fp32",
            optimizer="adam",
        )
    )
    assert micro > 1000  # a 8M-parameter MLP on a 16 GB T4: thousands of samples fit
