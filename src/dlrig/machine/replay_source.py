"""Recorded nvidia-smi outputs played back as if they were live GPUs (`monitor --replay`).

Every file is parsed once, by the same readers `doctor --from` uses; the sampler then reads the
frame of the moment, so a replay costs what a dictionary lookup costs.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dlrig.errors import InputError
from dlrig.machine.gpu_source_base import SourceInfo, now_iso
from dlrig.machine.model import Gpu, Machine, XidEvent
from dlrig.machine.nvml import GpuLost
from dlrig.machine.readers import MAX_INPUT_BYTES, load_gpu_readings, nvsmi_capture
from dlrig.machine.readers.merge import disagreements
from dlrig.machine.readers.source import read_evidence


@dataclass(frozen=True)
class ReplayFrame:
    label: str  # "h200-capture.txt:load"
    state: str | None  # the capture's machine state, if any
    gpus: tuple[Gpu, ...]


class ReplaySource:
    """Plays recorded nvidia-smi outputs as if they were live GPUs.

    Every file is parsed once. A capture with idle and load states, or several files, become
    successive frames; the replay moves to the next frame every `frame_seconds` (or stays on the
    frames of `state`). Kernel logs among the files feed their Xid lines as events, once.
    `replicate` copies the GPUs of each frame N times (load-testing an 8-GPU setup with a
    1-GPU recording); the copies get distinct indices and UUIDs with a "-replica-N" suffix.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        state: str | None = None,
        frame_seconds: float = 30.0,
        replicate: int | None = None,
    ) -> None:
        if not paths:
            raise InputError("--replay needs at least one file", fix="give a recorded file")
        if frame_seconds <= 0:
            raise InputError(
                f"replay frame time {frame_seconds} s is not positive", fix="give seconds > 0"
            )
        if replicate is not None and not 1 <= replicate <= 1024:
            raise InputError(
                f"--replicate {replicate} is out of range", fix="give a count from 1 to 1024"
            )
        frames: list[ReplayFrame] = []
        xid: list[XidEvent] = []
        driver: str | None = None
        cuda: str | None = None
        hostname: str | None = None
        recorded: list[tuple[str, Machine]] = []
        for path in paths:
            # gzip (a rotated log, a compressed capture) and pipes read as `doctor --from` reads
            text = read_evidence(path, MAX_INPUT_BYTES)
            name = Path(path).name
            if nvsmi_capture.looks_like(text):
                header, sections = nvsmi_capture.split_sections(text)
                machine = load_gpu_readings(text, str(path))
                for capture_state in nvsmi_capture.states(sections):
                    frames.append(
                        ReplayFrame(
                            f"{name}:{capture_state}",
                            capture_state,
                            _renumbered(nvsmi_capture.gpus_for_state(sections, capture_state)),
                        )
                    )
                hostname = hostname or header.get("hostname")
            else:
                machine = load_gpu_readings(text, str(path))
                if machine.kernel_log is not None and not machine.gpus:
                    xid.extend(machine.kernel_log.xid_events)
                    continue
                if not machine.gpus:
                    raise InputError(
                        f"{path}: has no GPU readings to replay",
                        fix="give nvidia-smi -q -x, --query-gpu CSV, -q text or a capture",
                    )
                frames.append(ReplayFrame(name, None, _renumbered(machine.gpus)))
            _same_machine(recorded, str(path), machine)
            recorded.append((str(path), machine))
            if machine.driver is not None:
                driver = driver or machine.driver.version
                cuda = cuda or machine.driver.cuda_version
        if not frames:
            raise InputError(
                "the replay files hold no GPU readings (only kernel logs)",
                fix="add an nvidia-smi recording next to the kernel log",
            )
        if state is not None:
            chosen = [f for f in frames if f.state == state]
            if not chosen:
                have = sorted({f.state for f in frames if f.state})
                raise InputError(
                    f"--replay-state {state!r} is not in the recording",
                    fix=f"pick one of: {', '.join(have)}" if have else "drop --replay-state",
                )
            frames = chosen
        if replicate:
            frames = [_replicated(f, replicate) for f in frames]
        self._frames = frames
        self._frame_seconds = frame_seconds
        self._started: float | None = None
        self._current = frames[0]
        self._xid = xid
        self.info = SourceInfo(
            kind="replay",
            description="replay of " + ", ".join(Path(p).name for p in paths),
            hostname=hostname or socket.gethostname(),
            gpu_count=max(len(f.gpus) for f in frames),
            driver_version=driver,
            cuda_version=cuda,
        )

    @property
    def frames(self) -> tuple[ReplayFrame, ...]:
        return tuple(self._frames)

    @property
    def current_frame(self) -> ReplayFrame:
        return self._current

    def advance(self, now: float) -> None:
        if self._started is None:
            self._started = now
        step = int((now - self._started) / self._frame_seconds)
        self._current = self._frames[step % len(self._frames)]

    def read_gpu(self, index: int) -> Gpu:
        gpus = self._current.gpus
        if index >= len(gpus):
            raise GpuLost(f"GPU {index} is not in {self._current.label}")
        return gpus[index]

    def drain_xid(self) -> list[XidEvent]:
        drained, self._xid = self._xid, []
        stamped = [dataclasses.replace(e, timestamp=e.timestamp or now_iso()) for e in drained]
        return stamped

    def close(self, calls_in_flight: bool = False) -> None:
        return None


def _renumbered(gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """GPUs numbered 0..n-1 in file order (a recording of `-i 2,3` replays as GPUs 0 and 1),
    the numbers the sampler gives its readings."""
    return tuple(dataclasses.replace(gpu, index=i) for i, gpu in enumerate(gpus))


def _replicated(frame: ReplayFrame, copies: int) -> ReplayFrame:
    gpus = []
    for copy in range(copies):
        for gpu in frame.gpus:
            index = copy * len(frame.gpus) + gpu.index
            uuid = gpu.uuid if copy == 0 or gpu.uuid is None else f"{gpu.uuid}-replica-{copy}"
            gpus.append(dataclasses.replace(gpu, index=index, uuid=uuid))
    return ReplayFrame(frame.label, frame.state, tuple(gpus))


def _same_machine(recorded: list[tuple[str, Machine]], path: str, machine: Machine) -> None:
    """InputError when this file is of another machine than one already read: a replay of
    two machines would serve one machine's GPUs as the other's (and their labels would clash)."""
    for earlier, other in recorded:
        found = disagreements(other, machine)
        if found:
            raise InputError(
                f"--replay {earlier} and {path}: not the same machine ({'; '.join(found)})",
                fix="replay one machine's recordings together; serve another machine with a "
                "monitor of its own (each on its own port)",
            )
