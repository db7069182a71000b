"""Live AMD GPU readings for `monitor`, through AMD's library (the `amdsmi` binding): the same
calls and reading as the doctor probe (`amdsmi_library`), once per GPU per sampling round."""

from __future__ import annotations

import socket
from typing import Any

from dlrig.machine import amdsmi_library
from dlrig.machine.gpu_source_base import SourceInfo
from dlrig.machine.model import Gpu, XidEvent


class AmdSmiSource:
    """An initialised libamd_smi; AmdSmiUnavailable from the constructor when it cannot be."""

    def __init__(self) -> None:
        self._module: Any = amdsmi_library.load()
        with amdsmi_library.quiet():
            self._handles = amdsmi_library.start(self._module)
            if not self._handles:
                amdsmi_library.stop(self._module)
                raise amdsmi_library.AmdSmiUnavailable("amdsmi found no AMD GPU")
            first = amdsmi_library.answers(self._module, self._handles[0])
        self.info = SourceInfo(
            kind="amdsmi",
            description="AMD's amdsmi library (libamd_smi)",
            hostname=socket.gethostname(),
            gpu_count=len(self._handles),
            driver_version=amdsmi_library.driver_version(first),
        )

    def read_gpu(self, index: int) -> Gpu:
        with amdsmi_library.quiet():
            answers = amdsmi_library.answers(self._module, self._handles[index])
        return amdsmi_library.gpu_from_calls(index, answers)

    def drain_xid(self) -> list[XidEvent]:
        return []  # AMD's RAS events are not read here

    def advance(self, now: float) -> None:
        return None

    def close(self, calls_in_flight: bool = False) -> None:
        if not calls_in_flight:
            with amdsmi_library.quiet():
                amdsmi_library.stop(self._module)
