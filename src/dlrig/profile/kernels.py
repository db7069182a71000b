"""What a GPU kernel is, from its name: the category the report groups time by, the precision
of a matrix multiply, and whether it moves data between GPUs.

Names are the vendor libraries' own (cuBLAS `sm90_xmma_gemm_bf16bf16_...`, `nvjet_tst_...`,
`ampere_sgemm_128x64_tn`; hipBLASLt `Cijk_Alik_Bljk_...`; NCCL/RCCL `ncclDevKernel_...`;
PyTorch `at::native::vectorized_elementwise_kernel`; Inductor `triton_poi_fused_...`), so the
rules are substrings the libraries have kept across releases; anything else is "other".
"""

from __future__ import annotations

import functools
import re

CATEGORIES = (
    "gemm",
    "attention",
    "convolution",
    "elementwise",
    "reduction",
    "optimizer",
    "communication",
    "memcpy",
    "memset",
    "other",
)
# HTA's three kernel types: communication, memory (copies and sets), computation (the rest).
COMMUNICATION = frozenset({"communication"})
MEMORY = frozenset({"memcpy", "memset"})

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "communication",
        re.compile(
            r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv"
            r"|cross_device_reduce|nvshmem",
            re.I,
        ),
    ),
    ("attention", re.compile(r"flash|fmha|attention|attn|sdpa|_fwd_kernel|_bwd_kernel", re.I)),
    (
        "convolution",
        re.compile(r"conv|fprop|dgrad|wgrad|implicit_?gemm|winograd|igemm|miopen", re.I),
    ),
    (
        "gemm",
        re.compile(
            r"gemm|gemv|cutlass|cublas|xmma|nvjet|Cijk_|matmul|triton_tem|wmma|s16816|h16816"
            r"|s1688|h1688|s884|h884|dot_?product|splitK",
            re.I,
        ),
    ),
    (
        "optimizer",
        re.compile(r"multi_tensor_apply|adam|lamb_|_foreach|sgd_kernel", re.I),
    ),
    (
        "reduction",
        re.compile(
            r"reduce|softmax|norm|_sum|sum_|mean|argmax|argmin|topk|cross_?entropy|nll_loss"
            r"|triton_red|triton_per|scan|cumsum|welford",
            re.I,
        ),
    ),
    (
        "elementwise",
        re.compile(
            r"elementwise|vectorized|triton_poi|copy|fill|cat_?array|index|gather|scatter"
            r"|where|dropout|embedding|gelu|relu|silu|rotary|unrolled|pointwise|bitonic|sort",
            re.I,
        ),
    ),
)


def head(name: str) -> str:
    """The kernel's function name: no `void`, template arguments or parameter list (which
    name functors, lambdas and types that would mislead the rules: a `sum_functor` inside a
    copy kernel, `lambda` inside anything)."""
    text = name.replace("(anonymous namespace)::", "")
    text = re.sub(r"^void\s+", "", text)
    cut = min((i for i in (text.find("<"), text.find("(")) if i > 0), default=len(text))
    return text[:cut].strip() or name


@functools.lru_cache(maxsize=65536)
def category(name: str, kind: str) -> str:
    """The category of a GPU event; copies and sets are what their kind says."""
    if kind == "memcpy":
        return "memcpy"
    if kind == "memset":
        return "memset"
    function = head(name)
    for label, pattern in _RULES:
        if pattern.search(function):
            return label
    return "other"


_HTA_COMMUNICATION = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"^(Memcpy|Memset|dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


@functools.lru_cache(maxsize=65536)
def hta_type(name: str, kind: str) -> str:
    """HTA 0.5's kernel type (hta/utils/utils.py): COMMUNICATION for `^nccl.*Kernel`, MEMORY
    for `^Memcpy|^Memset|^dma`, OTHER for syncs, COMPUTATION otherwise. (dlrig's own
    `category` also knows RCCL, custom all-reduce and ROCm copies.)"""
    if _HTA_COMMUNICATION.match(name):
        return "COMMUNICATION"
    if _HTA_MEMORY.match(name):
        return "MEMORY"
    if _HTA_NOT_COMPUTE.match(name):
        return "OTHER"
    return "COMPUTATION"


# AMD Tensile/hipBLASLt: Cijk_<A layout>_<B layout>_<data type>..., S single, B bf16, H half.
_TENSILE = re.compile(r"Cijk_A[a-z]+_B[a-z]+_([A-Z0-9]+)_")
_TENSILE_TYPES = {"S": "fp32", "B": "bf16", "H": "fp16", "D": "fp64", "F8": "fp8", "I8": "int8"}
_FP32 = re.compile(r"sgemm|f32f32_f32|_fp32_|gemm_f32|_sgemv", re.I)
_TF32 = re.compile(r"tf32|s1688|s16816gemm_tf32|xf32", re.I)
_BF16 = re.compile(r"bf16|bfloat16", re.I)
_FP16 = re.compile(r"fp16|f16f16|h884|h1688|h16816|half", re.I)
_FP8 = re.compile(r"e4m3|e5m2|fp8|f8f8", re.I)


def gemm_precision(name: str) -> str | None:
    """The input precision a matrix-multiply kernel's name states, or None when it says none
    (cuBLASLt's `nvjet_*` kernels do not)."""
    tensile = _TENSILE.match(name)
    if tensile:
        return _TENSILE_TYPES.get(tensile.group(1)[:2]) or _TENSILE_TYPES.get(tensile.group(1)[0])
    for label, pattern in (
        ("fp8", _FP8),
        ("bf16", _BF16),
        ("fp16", _FP16),
        ("tf32", _TF32),
        ("fp32", _FP32),
    ):
        if pattern.search(name):
            return label
    return None


def short_name(name: str, limit: int = 70) -> str:
    """A kernel's name for a table: the parameter list dropped; template arguments dropped
    too when the name is longer than `limit`; then cut to `limit`."""
    text = re.sub(r"^void\s+", "", name).replace("(anonymous namespace)::", "")
    depth = 0
    for i, char in enumerate(text):  # the parameter list starts at the first "(" outside <>
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(0, depth - 1)
        elif char == "(" and depth == 0 and i > 0:
            text = text[:i]
            break
    if len(text) > limit and "<" in text:
        stripped = head(text)
        inner = text[len(stripped) + 1 :].split(",")[0].strip()
        text = f"{stripped}<{inner}…>" if inner else stripped
    return text if len(text) <= limit else text[: limit - 1] + "…"
