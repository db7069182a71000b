"""`dlrig monitor`'s live view: one reading (`--once`), the view redrawn on a terminal with its
keys, or a frame (or a line, or a JSON document) per sample off one."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

from dlrig import monitor
from dlrig.cli.common import console_wide, print_json
from dlrig.cli.monitor_keys import keys
from dlrig.cli.monitor_options import SourceSettings
from dlrig.machine.host_processes import send_signal
from dlrig.monitor import live, stream
from dlrig.monitor.interactive import ViewState
from dlrig.monitor.processes import ProcessOptions, process_table


def once(settings: SourceSettings, as_json: bool, processes: ProcessOptions) -> None:
    source = settings.open()
    samples = monitor.once(source, host=settings.host, gpu_indices=settings.gpu_index)
    if as_json:
        readings = monitor.read_situation(samples)
        print_json(monitor.sample_document(samples[-1], source.info, readings))
        return
    info = source.info
    console_wide().print(live.render(samples, info.description, info.note, processes))


def _samples(sampler: Any, interval: float, count: int | None) -> Iterator[Any]:
    """Each new sample as the sampler takes it, `count` of them (None: until stopped)."""
    last = 0
    taken = 0
    while count is None or taken < count:
        sample = sampler.wait_for_sample(after=last, timeout=interval * 5)
        if sample is not None and sample.sequence != last:
            last = sample.sequence
            taken += 1
            yield sample


def watch(
    settings: SourceSettings,
    output_format: str,
    count: int | None,
    redraw: bool,
    processes: ProcessOptions | None = None,
) -> None:
    """Sample until stopped (or `count` samples): redrawn in place on a terminal (`redraw`),
    else each sample written as it comes and flushed, so a pipe, `nohup` or `tee` sees it."""

    source = settings.open()
    try:
        sampler = monitor.Sampler(source, **settings.sampling())
    except BaseException:
        source.close()
        raise
    info = source.info
    out = console_wide()
    try:
        sampler.start()
        if redraw:
            _interactive(sampler, info, out, count, processes or ProcessOptions(), settings)
            return
        for sample in _samples(sampler, settings.interval, count):
            if output_format == "json":
                readings = monitor.read_situation(sampler.history())
                document = monitor.sample_document(sample, info, readings)
                sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
            elif output_format == "lines":
                sys.stdout.write("".join(line + "\n" for line in stream.sample_lines(sample)))
            else:
                out.print(f"── {stream.timestamp(sample)} " + "─" * 20)
                out.print(live.render(sampler.history(), info.description, info.note, processes))
            sys.stdout.flush()
    finally:
        sampler.stop()  # joins the sampler, closes the source (NVML shutdown)


def _interactive(
    sampler: Any,
    info: Any,
    out: Any,
    count: int | None,
    processes: ProcessOptions,
    settings: SourceSettings,
) -> None:
    """The view on a terminal: redrawn at each sample and at each key (see
    `dlrig.monitor.interactive` for the keys)."""
    from rich.live import Live

    state = ViewState(processes, can_signal=not settings.replay)
    # Live hides the cursor and redraws in place; leaving the block (a signal's Stopped
    # included) shows the cursor again and leaves the last frame on screen.
    with (
        keys() as read_key,
        Live(live.render([], info.description), console=out, refresh_per_second=8) as view,
    ):
        last = 0
        taken = 0
        while not state.quit and (count is None or taken < count):
            pressed = read_key(min(settings.interval, 0.1))
            history = sampler.history()
            for key in pressed if history else ():
                sample = history[-1]
                _, rows = process_table(sample, out.width, state.options)
                send = state.press(key, rows)
                if send is not None:
                    state.message = send_signal(send.pid, send.signum, send.started_unix)
            latest = sampler.latest()
            if latest is not None and latest.sequence != last:
                last = latest.sequence
                taken += 1
            elif not pressed:
                continue
            view.update(live.render(sampler.history(), info.description, info.note, None, state))
