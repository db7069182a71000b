"""`dlrig.profile.Session`: profile a few steps of your own training loop.

    with profile.Session(steps=5, out="prof") as session:
        for batch in loader:
            loss = model(batch).loss
            loss.backward()
            optimizer.step()        # each optimizer step ends a step; no other change
            optimizer.zero_grad()
    print(session.report.verdict)

A loop without an optimizer (inference, a custom update) calls `session.step()` at the end of
each step and passes `auto_step=False`. The first step inside the session is never recorded
(cold start), the next is counted by FlopCounterMode, then `warmup` steps, then `steps` steps
are recorded.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from dlrig.profile import analysis, device, trace
from dlrig.profile.boot.dlrig_profile_boot import Driver, first_recorded_step
from dlrig.profile.model import ProfileReport
from dlrig.profile.report import build


class Session:
    """Profile `steps` steps of your own training loop (`with profile.Session() as s:` around
    it, one `optimizer.step()` a step); `session.report` is what `dlrig profile` says."""

    def __init__(
        self,
        steps: int = 5,
        out: Path | str | None = None,
        warmup: int = 1,
        wait: int = 1,
        flops: bool = True,
        auto_step: bool = True,
    ) -> None:
        if steps < 1:
            raise ValueError("steps must be at least 1")
        self._tmp = None if out is not None else tempfile.TemporaryDirectory(prefix="dlrig-")
        self.out = Path(out) if out is not None else Path(self._tmp.name)  # type: ignore[union-attr]
        self._driver = Driver(str(self.out), steps=steps, wait=wait, warmup=warmup, flops=flops)
        self._auto = auto_step
        self.report: ProfileReport | None = None

    def __enter__(self) -> Session:
        if self._auto:
            self._driver.attach()
        return self

    def step(self) -> None:
        """End a step by hand (only with auto_step=False, or a loop with no optimizer)."""
        self._driver.step()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._driver.finish()
        written = self._driver.written
        if kind is None and written is not None:
            # this session's own trace only: the folder may hold an earlier run's
            self.report = collect(self.out, paths=[Path(written)])

    @property
    def first_recorded_step(self) -> int:
        """The first optimizer step inside the session that is recorded (1-based)."""
        return first_recorded_step(self._driver.wait, self._driver.warmup)

    @property
    def trace(self) -> Path | None:
        written = self._driver.written
        return Path(written) if written else None


def _cpus_per_rank(meta: dict[str, object]) -> int | None:
    cpus = meta.get("cpus")
    ranks = meta.get("local_world_size")
    if isinstance(cpus, int) and isinstance(ranks, int) and ranks > 0:
        return max(1, cpus // ranks)
    return None


def collect(
    out: Path,
    command: list[str] | None = None,
    exit_code: int | None = None,
    readings: Sequence[device.Reading] = (),
    paths: Sequence[Path] | None = None,
) -> ProfileReport | None:
    """The report for what the driver(s) wrote to `out` (a trace per rank), or None."""
    profiles = []
    for path in sorted(out.glob("trace-*.json.gz")) if paths is None else paths:
        meta_path = path.with_name(
            path.name.replace("trace-", "meta-").replace(".json.gz", ".json")
        )
        meta: dict[str, object] = {}
        if meta_path.exists():
            meta = json.loads(meta_path.read_text())
        flops = meta.get("flops_per_step")
        optimizers = meta.get("optimizers")
        loaded = trace.load(path)
        incomplete = meta.get("incomplete_step")
        if incomplete:
            import dataclasses

            whole = tuple(s for s in loaded.steps if s.name != incomplete)
            loaded = dataclasses.replace(loaded, steps=whole)
        if not loaded.steps:
            continue
        profiles.append(
            analysis.analyse(
                loaded,
                float(flops) if isinstance(flops, (int, float)) else None,
                str(meta.get("flops_source")) if flops is not None else None,
                optimizers=optimizers if isinstance(optimizers, dict) else None,
                cpus_per_rank=_cpus_per_rank(meta),
                readings=readings,
                device_uuid=str(meta["device_uuid"]) if meta.get("device_uuid") else None,
            )
        )
    if not profiles:
        return None
    return build(profiles, command=command, exit_code=exit_code)
