"""Reading this machine's GPUs while `dlrig profile -- CMD` runs (device.py averages the
readings over each rank's window)."""

from __future__ import annotations

import threading
import time
from types import TracebackType

from dlrig.machine.gpu_source_base import GpuSource
from dlrig.machine.gpu_sources import open_live_source
from dlrig.machine.nvml import GpuLost
from dlrig.profile.device import FIELDS, Reading

INTERVAL_S = 0.2


class Watcher:
    """Reads every GPU of `source` every INTERVAL_S in a thread, between enter and exit."""

    def __init__(self, source: GpuSource, interval_s: float = INTERVAL_S) -> None:
        self.source = source
        self.interval_s = interval_s
        self.readings: list[Reading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlrig-profile-gpus", daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.source.close(calls_in_flight=self._thread.is_alive())

    def _loop(self) -> None:
        lost: set[int] = set()
        while not self._stop.is_set():
            now = time.time()
            self.source.advance(time.monotonic())
            for index in range(self.source.info.gpu_count):
                if index in lost:
                    continue
                try:
                    gpu = self.source.read_gpu(index)
                except GpuLost:
                    lost.add(index)
                    continue
                self.readings.append(
                    Reading(
                        now,
                        index,
                        {name: getattr(gpu, name, None) for name in FIELDS},
                        getattr(gpu, "uuid", None),
                    )
                )
            self._stop.wait(self.interval_s)


def watch() -> Watcher | None:
    """A watcher of this machine's GPUs through NVML; None where there is none (a CPU machine,
    or only nvidia-smi, too slow to read a few times a second)."""
    source = open_live_source()
    if source.info.kind != "nvml" or source.info.gpu_count == 0:
        source.close()
        return None
    return Watcher(source)
