"""What `torch.compile` changes in a traced step: what is saved for backward, and fusion.

Inductor trains through AOTAutograd's min-cut partitioner: memory-bound (pointwise) operators
are recomputed in the backward kernels instead of saving their outputs, when what they are
recomputed from is no larger; reductions (norm statistics, softmax) and the inputs of
matmuls, convolutions and attention stay saved. Consecutive memory-bound operators become one
kernel that reads its inputs once and writes only what outlives it.

`apply` rewrites an eager trace's allocations and fused entries to that, by these rules:
- A forward allocation alive after the forward (saved for backward) that a pointwise operator
  made and no matmul/convolution/attention reads is replaced by what it can be recomputed from
  (its *roots*), taking the cheaper in bytes; roots are recursively the same, and stop at
  allocations made by other operators, at reductions and at matmul inputs.
- Such a replaced allocation lives only as long as the fused kernel that made it (it stays in
  registers); a root that eager freed early lives as long as what it stands for.
- A fused entry's traffic is the bytes it read from outside plus the bytes of its outputs that
  outlive it; an output that does not outlive it (forward or backward) is never in memory.

`tests/unit/test_fit_recipes.py` compares the saved bytes with the partitioner itself
(torch.compile with AOTAutograd's min_cut_rematerialization_partition, run on CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dlrig.fit.recorder import Allocation, FusedGroup


def _saved(allocation: Allocation, forward_end: int) -> bool:
    """Made in the forward and alive after it: kept for backward (or returned)."""
    return allocation.phase == "forward" and (
        allocation.end is None or allocation.end > forward_end
    )


def _roots(allocations: Sequence[Allocation], forward_end: int) -> list[frozenset[int]]:
    """For each allocation, the allocations it would be saved as (itself when not cheaper).

    Creation order is topological (an operator's inputs exist before its outputs), so one pass
    in index order sees every input's roots first. For a saved allocation the cost of its roots
    is what they add to the roots already kept (the partitioner's cut counts a tensor once)."""
    roots: list[frozenset[int]] = []
    kept: set[int] = set()
    for allocation in allocations:
        own = frozenset((allocation.index,))
        saved = _saved(allocation, forward_end)
        if (
            allocation.phase != "forward"
            or not allocation.pointwise
            or allocation.to_compute
            or allocation.start > forward_end
        ):
            chosen = own
        else:
            union: frozenset[int] = frozenset().union(*(roots[i] for i in allocation.inputs))
            cost = sum(allocations[i].nbytes for i in (union - kept if saved else union))
            chosen = union if cost <= allocation.nbytes else own
        roots.append(chosen)
        if saved:
            kept |= chosen
    return roots


def apply(
    allocations: Sequence[Allocation],
    groups: Sequence[FusedGroup],
    forward_end: int,
    traffic: np.ndarray,
) -> None:
    """Rewrite `allocations` (their `end`) and the fused entries' `traffic` in place."""
    roots = _roots(allocations, forward_end)
    replaced = {a.index for a in allocations if _saved(a, forward_end)}
    keep_until: dict[int, int | None] = {}
    for index in replaced:
        end = allocations[index].end
        for root in roots[index]:
            previous = keep_until.get(root, -1)
            keep_until[root] = None if previous is None or end is None else max(previous, end)
    replaced -= keep_until.keys()
    group_end = {a.index: g.last_event for g in groups for a in g.outputs}
    for allocation in allocations:
        if allocation.index in keep_until:
            end = keep_until[allocation.index]
            if end is None or (allocation.end is not None and allocation.end < end):
                allocation.end = end
        elif allocation.index in replaced:
            # recomputed in backward: in forward it lives as long as the kernel that made it
            allocation.end = group_end.get(allocation.index, allocation.start + 1)
    for group in groups:
        written = 0
        for allocation in group.outputs:
            if allocation.end is None or allocation.end > group.last_event:
                written += allocation.nbytes
            else:
                allocation.end = allocation.start  # read only inside the kernel: never in memory
        traffic[group.row] = float(sum(group.reads.values()) + written)
