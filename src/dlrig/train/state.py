"""What a checkpoint holds, and putting it back: the training objects, counters, data, RNG.

Rank 0's `shared.pt` holds what is the same on every rank (weights and optimizer state of a
replicated model, scheduler, scaler, step counters, the batch plan and the epoch's global
order); each `rank-NNNNN.pt` holds what is not (the random generators, the epoch-start state
its DataLoader drew its workers' seed from, a DistributedSampler's own order).
"""

from __future__ import annotations

from typing import Any

import torch

from dlrig.train import rng
from dlrig.train.data import TrainLoader

FORMAT_VERSION = 1


def _order_out(order: list[Any] | None) -> Any:
    if order and isinstance(order[0], int):
        return torch.tensor(order, dtype=torch.int64)
    return order


def _order_in(order: Any) -> list[Any] | None:
    if isinstance(order, torch.Tensor):
        return [int(v) for v in order.tolist()]
    return list(order) if order is not None else None


def data_state(loader: TrainLoader | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(shared part, this rank's part) of the data position."""
    if loader is None:
        return None, None
    state = loader.position.to_state()
    state["order"] = _order_out(state["order"])
    per_rank = loader.batches is not None and loader.batches.kind == "per_rank"
    mine = {"epoch_start_rng": loader.epoch_start_rng, "data": state if per_rank else None}
    return (None if per_rank else state), mine


def combined_data(shared: dict[str, Any], mine: dict[str, Any] | None) -> dict[str, Any] | None:
    """The data position to restore on this rank."""
    own = (mine or {}).get("data")
    state = dict(own) if own is not None else shared.get("data")
    if state is None:
        return None
    state = dict(state)
    state["order"] = _order_in(state.get("order"))
    state["epoch_start_rng"] = (mine or {}).get("epoch_start_rng")
    if own is None and mine is None:
        # A rank the checkpoint did not have (more ranks now): rank 0's order, no RNG of its own.
        state["epoch_start_rng"] = None
    return state


def shared_payload(
    module: torch.nn.Module | None,
    optimizer: Any,
    scheduler: Any,
    scaler: Any,
    counters: dict[str, Any],
    data: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "model": module.state_dict() if module is not None else None,
        "optimizer": (
            optimizer.state_dict() if optimizer is not None and module is not None else None
        ),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "counters": counters,
        "data": data,
    }


def rank_payload(
    generators: dict[str, torch.Generator], data_mine: dict[str, Any] | None
) -> dict[str, Any]:
    payload: dict[str, Any] = {"rng": rng.capture(generators)}
    payload.update(data_mine or {})
    return payload


def sharded_state(model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
    """The DCP state dict of an FSDP model and its optimizer (each rank holds its shards)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def apply_sharded(model: torch.nn.Module, optimizer: Any, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import set_state_dict

    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
    )
