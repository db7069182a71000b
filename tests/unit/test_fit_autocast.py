"""The trace casts as CUDA's autocast does, not as the CPU's (fit/autocast.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dlrig.fit import autocast  # noqa: E402

HEADER = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
MACROS = {
    "lower_precision_fp": "AT_FORALL_LOWER_PRECISION_FP",
    "fp32": "AT_FORALL_FP32",
    "fp32_set_opt_dtype": "AT_FORALL_FP32_SET_OPT_DTYPE",
    "promote": "AT_FORALL_PROMOTE",
}
# registered in autocast_mode.cpp's CUDA block outside the macros (KERNEL_CUDA lines)
CPP_ONLY = {"cudnn_convolution", "cudnn_convolution_transpose"}


def _macro(text: str, macro: str) -> set[str]:
    body = text.split(f"#define {macro}(_)", 1)[1].split("\n\n", 1)[0]
    found = set()
    for name, overload in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body):
        found.add(f"{name}.{overload}" if overload else name)
    return found


@pytest.mark.skipif(not HEADER.exists(), reason="this torch build ships no ATen headers")
def test_lists_match_the_installed_header():
    """fit_autocast.toml is torch's own CUDA list: the installed header's macros, entry by
    entry (a torch upgrade that moves an op between lists fails here)."""
    text = HEADER.read_text()
    lists = autocast.cuda_lists()
    for policy, macro in MACROS.items():
        ours = {name for name, p in lists.items() if p == policy} - CPP_ONLY
        assert ours == _macro(text, macro), policy
    redispatch = text.split("#define AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(_)", 1)[1]
    redispatch = redispatch.split("#define", 1)[0]
    assert set(autocast.append_targets()) == set(re.findall(r'"(norm\.\w+)"', redispatch))


def _run(fn):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return fn()


def test_cpu_lists_differ_from_cuda_ones():
    """Without the swap the CPU casts layer_norm's output to bf16 and leaves softmax alone;
    under CUDA's lists layer_norm runs (and returns) fp32 and softmax of bf16 returns fp32."""
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    w = torch.ones(8)
    b = torch.zeros(8)
    cpu = _run(lambda: torch.nn.functional.layer_norm(x, (8,), w, b))
    with autocast.cuda_cast_lists():
        cuda_norm = _run(lambda: torch.nn.functional.layer_norm(x, (8,), w, b))
        cuda_softmax = _run(lambda: torch.softmax(x, dim=-1))
        cuda_mm = _run(lambda: torch.randn(4, 8) @ torch.randn(8, 2))
        cuda_sum = _run(lambda: x.sum())
    assert cpu.dtype == torch.bfloat16
    assert cuda_norm.dtype == torch.float32
    assert cuda_softmax.dtype == torch.float32
    assert cuda_mm.dtype == torch.bfloat16
    assert cuda_sum.dtype == torch.float32


def test_explicit_dtype_is_kept_and_lists_restored():
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with autocast.cuda_cast_lists():
        kept = _run(lambda: torch.softmax(x, -1, torch.bfloat16))
    assert kept.dtype == torch.bfloat16
    after = _run(lambda: torch.nn.functional.layer_norm(x, (8,)))
    assert after.dtype == torch.bfloat16  # the CPU's own kernels are back


def test_backward_through_swapped_kernels():
    """Gradients flow through the re-registered kernels (checkpointed layers re-run under them)."""
    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(2, 8)
    with autocast.cuda_cast_lists():
        y = _run(lambda: torch.nn.functional.layer_norm(x @ w, (8,)).exp().sum())
        y.backward()
    assert w.grad is not None and w.grad.dtype == torch.float32
