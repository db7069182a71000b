"""Checkpoints that are whole or absent, kept K deep, and found again after any crash.

Each checkpoint is a new folder `step-00000120/`. It is written under a hidden
`.step-00000120.partial/` name: every rank's file (temp name, fsync, rename), the sharded state
through `torch.distributed.checkpoint` when the model is FSDP, then `manifest.json` last. The
folder is renamed into place and the `latest` file is replaced atomically to name it. A run
killed at any moment (`kill -9` included) leaves either the previous checkpoint or the new one
as `latest`, never half of one.

Why a new folder each time: `torch.distributed.checkpoint` commits a checkpoint with its
`.metadata` file, and saving over an existing checkpoint deletes the old `.metadata` first, so
a crash in the middle of an in-place overwrite leaves nothing loadable.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
import time
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from dlrig.errors import InputError
from dlrig.outputs import ensure_directory, write_text_atomic
from dlrig.train.distributed import World

_STEP_DIR = re.compile(r"^step-(\d+)$")
CheckpointFormat = Literal["auto", "torch", "dcp"]  # auto: dcp under FSDP, else torch
FORMATS: tuple[CheckpointFormat, ...] = typing.get_args(CheckpointFormat)


@dataclass(frozen=True)
class Saved:
    path: Path
    step: int
    seconds: float


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save_file(obj: Any, path: Path) -> None:
    """torch.save through a temporary name, flushed to disk, then renamed."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temp, "wb") as stream:
            torch.save(obj, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def load_file(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        # A scheduler (or the user's extra state) holding Python objects: the checkpoint is
        # the run's own, written by this code, so reading it in full is safe.
        return torch.load(path, map_location="cpu", weights_only=False)


def complete_steps(directory: Path) -> list[tuple[int, Path]]:
    """Committed checkpoints (a manifest present), oldest first."""
    found = []
    if directory.is_dir():
        for entry in directory.iterdir():
            match = _STEP_DIR.match(entry.name)
            if match and (entry / "manifest.json").is_file():
                found.append((int(match.group(1)), entry))
    return sorted(found)


def find_latest(directory: Path) -> Path | None:
    """The folder `latest` names, or else the newest committed one."""
    pointer = directory / "latest"
    if pointer.is_file():
        name = pointer.read_text().strip()
        candidate = directory / name
        if _STEP_DIR.match(name) and (candidate / "manifest.json").is_file():
            return candidate
    steps = complete_steps(directory)
    return steps[-1][1] if steps else None


class Checkpointer:
    def __init__(self, directory: Path, keep: int, world: World, sharded: bool) -> None:
        if keep < 1:
            raise InputError(f"keep_checkpoints={keep}", fix="keep at least 1 checkpoint")
        self.directory = directory
        self.keep = keep
        self.world = world
        self.sharded = sharded
        if world.rank == 0:
            ensure_directory(directory, "checkpoint_dir")

    def save(
        self,
        step: int,
        shared: dict[str, Any] | None,
        mine: dict[str, Any],
        sharded_state: dict[str, Any] | None = None,
    ) -> Saved:
        """Write one checkpoint; `shared` is rank 0's, `mine` every rank's own."""
        started = time.perf_counter()
        world = self.world
        final = self.directory / step_dir_name(step)
        partial = self.directory / f".{final.name}.partial"
        if world.rank == 0:
            if partial.exists():
                shutil.rmtree(partial)
            partial.mkdir(parents=True)
        world.barrier(f"the checkpoint of step {step}")
        save_file(mine, partial / f"rank-{world.rank:05d}.pt")
        if sharded_state is not None:
            import torch.distributed.checkpoint as dcp

            dcp.save(  # type: ignore[attr-defined]
                sharded_state, checkpoint_id=str(partial / "dcp")
            )
        if world.rank == 0 and shared is not None:
            save_file(shared, partial / "shared.pt")
        world.barrier(f"the checkpoint of step {step}")
        if world.rank == 0:
            manifest = {
                "step": step,
                "world_size": world.world_size,
                "format": "dcp" if sharded_state is not None else "torch",
                "written_unix": time.time(),
                "files": sorted(p.name for p in partial.iterdir()),
            }
            write_text_atomic(partial / "manifest.json", json.dumps(manifest, indent=2) + "\n")
            _fsync_dir(partial)
            trash = None
            if final.exists():
                trash = self.directory / f".{final.name}.old"
                if trash.exists():
                    shutil.rmtree(trash)
                os.rename(final, trash)
            os.rename(partial, final)
            _fsync_dir(self.directory)
            write_text_atomic(self.directory / "latest", final.name + "\n")
            if trash is not None:
                shutil.rmtree(trash, ignore_errors=True)
            self._prune(final)
        world.barrier(f"the checkpoint of step {step}")
        return Saved(final, step, time.perf_counter() - started)

    def _prune(self, newest: Path) -> None:
        steps = complete_steps(self.directory)
        for _, path in steps[: max(0, len(steps) - self.keep)]:
            if path != newest:
                shutil.rmtree(path, ignore_errors=True)
        for entry in self.directory.iterdir():
            # Leftovers of a run killed while writing (never the one being written: that is
            # renamed already).
            if entry.name.endswith(".partial") and entry.name.startswith(".step-"):
                shutil.rmtree(entry, ignore_errors=True)

    def load(self, path: Path) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
        """(shared, this rank's own or None, manifest) of a committed checkpoint."""
        try:
            manifest = json.loads((path / "manifest.json").read_text())
        except (OSError, ValueError) as exc:
            raise InputError(
                f"{path}: not a readable dlrig.train checkpoint ({exc})",
                fix="point checkpoint_dir at a folder dlrig.train wrote, or resume=False",
            ) from None
        shared = load_file(path / "shared.pt")
        mine_path = path / f"rank-{self.world.rank:05d}.pt"
        mine = load_file(mine_path) if mine_path.is_file() else None
        return shared, mine, manifest


def load_sharded(path: Path, state: dict[str, Any]) -> None:
    """Fill `state` (a DCP state dict of this run's model/optimizer) from a checkpoint."""
    import torch.distributed.checkpoint as dcp

    dcp.load(state, checkpoint_id=str(path / "dcp"))  # type: ignore[attr-defined]
