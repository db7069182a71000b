"""The live terminal view: per-GPU bars and sparklines, MIG instances, processes, a host row,
the reading; where no GPU can be read, the reason in place of the GPU table."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dlrig.monitor.columns import Column, lay_out, lines
from dlrig.monitor.finding import Reading
from dlrig.monitor.interactive import ViewState
from dlrig.monitor.processes import ProcessOptions, gib, process_table
from dlrig.monitor.reading import read_situation
from dlrig.monitor.sample import Sample

_SPARK = "▁▂▃▄▅▆▇█"
_SEVERITY_STYLE = {"critical": "bold red", "warn": "yellow", "info": "green"}


def sparkline(values: Sequence[float | None], width: int = 30, top: float = 100.0) -> str:
    """The last `width` values as block characters; gaps (None) as spaces."""
    tail = list(values)[-width:]
    out = []
    for value in tail:
        if value is None:
            out.append(" ")
            continue
        level = min(max(value / top, 0.0), 1.0)
        out.append(_SPARK[min(int(level * (len(_SPARK) - 1) + 0.5), len(_SPARK) - 1)])
    return "".join(out).rjust(width)


def bar(fraction: float | None, width: int = 12) -> str:
    if fraction is None:
        return "n/a".center(width)
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    return "█" * filled + "░" * (width - filled)


def _number(value: float | None, unit: str = "") -> str:
    # 0 is a reading (an idle SM clock), not a missing one.
    return "?" if value is None else f"{value:.0f}{unit}"


def _rate(previous: Sample | None, sample: Sample, attribute: str) -> float | None:
    if previous is None or previous.host is None or sample.host is None:
        return None
    before: int | None = getattr(previous.host, attribute)
    after: int | None = getattr(sample.host, attribute)
    elapsed = sample.timestamp_unix - previous.timestamp_unix
    if before is None or after is None or elapsed <= 0:
        return None
    return max(after - before, 0) / elapsed


def _mb(rate: float | None) -> str:
    return "?" if rate is None else f"{rate / 1e6:.0f} MB/s"


_VENDOR_WORDS = ("NVIDIA ", "GeForce ", "Tesla ", "Quadro ")


def short_name(name: str) -> str:
    """The model without the vendor's words: "NVIDIA GeForce RTX 4090" -> "RTX 4090"."""
    for word in _VENDOR_WORDS:
        name = name.replace(word, "")
    return name.strip() or name


@dataclass(frozen=True)
class _Row:
    """One line of the GPU table: a GPU or a MIG instance under it, as texts."""

    name: str
    full_name: str
    util: float | None = None  # for the bar
    util_text: str = ""
    video: str = ""
    memory: float | None = None
    memory_text: str = ""
    power: str = ""
    temp: str = ""
    clocks: str = ""
    pcie: str = ""
    throttle: str = ""
    history: tuple[float | None, ...] = ()
    problem: str = ""  # LOST / HUNG / ERROR: short, in the util column
    why: str = ""  # the reader's words for it, on a line of their own under the table
    drawn: bool = True  # bars and sparkline for this row (not for MIG or lost GPUs)


def _gpu_rows(samples: Sequence[Sample]) -> list[_Row]:
    sample = samples[-1]
    rows: list[_Row] = []
    for reading in sample.gpus:
        g = reading.gpu
        model = g.name if g else "?"
        name, full = f"{reading.index} {short_name(model)}", f"{reading.index} {model}"
        if not reading.up or g is None:
            status = reading.status.upper()
            rows.append(_Row(name, full, problem=status, why=reading.error or "", drawn=False))
            continue
        used, total = g.memory_used_bytes, g.memory_total_bytes
        enc, dec = g.utilization_encoder_percent, g.utilization_decoder_percent
        reasons = [r for r in g.clocks_event_reasons or () if r != "gpu_idle"]
        limit = "" if not g.power_limit_watts else f"/{g.power_limit_watts:.0f}"
        rows.append(
            _Row(
                name,
                full,
                util=g.utilization_gpu_percent,
                util_text=_number(g.utilization_gpu_percent, "%"),
                video="" if not (enc or dec) else f"{_number(enc, '%')}/{_number(dec, '%')}",
                memory=used / total if used is not None and total else None,
                memory_text=f"{gib(used)}/{gib(total)}",
                power=f"{_number(g.power_draw_watts)}{limit}",
                temp=_number(g.temperature_c, "°C"),
                clocks=f"{_number(g.sm_clock_mhz)}/{_number(g.sm_clock_max_mhz)}",
                pcie=f"Gen{g.pcie.gen_current or '?'} x{g.pcie.width_current or '?'}",
                throttle=",".join(reasons),
                history=tuple(_util_of(s, reading.index) for s in samples),
            )
        )
        for mig in g.mig_devices:
            used, total = mig.memory_used_bytes, mig.memory_total_bytes
            label = f"  └ MIG {mig.index}" + (f" {mig.profile}" if mig.profile else "")
            rows.append(
                _Row(
                    label,
                    label,
                    util_text="n/a",  # NVML reports no utilisation per MIG instance
                    memory=used / total if used is not None and total else None,
                    memory_text=f"{gib(used)}/{gib(total)}",
                    clocks="" if mig.sm_count is None else f"{mig.sm_count} SMs",
                    pcie="" if mig.gpu_instance_id is None else f"GI {mig.gpu_instance_id}",
                    drawn=False,
                )
            )
    return rows


def _gpu_columns(rows: Sequence[_Row]) -> list[Column]:
    def drawn(draw: Callable[[_Row, int], str]) -> Callable[[int], list[str]]:
        return lambda width: [draw(row, width) if row.drawn else "" for row in rows]

    def text(pick: Callable[[_Row], str]) -> list[str]:
        return [pick(row) for row in rows]

    columns = [
        Column("GPU", text(lambda r: r.name), least=8, cut=True),
        Column("util", text(lambda r: r.problem or r.util_text), right=True),
        Column(
            "",
            drawn(lambda r, w: bar(None if r.util is None else r.util / 100, w)),
            rank=3,
            least=5,
            most=20,
        ),
        Column("trend", drawn(lambda r, w: sparkline(r.history, w)), rank=5, least=8, most=40),
        Column("mem GiB", text(lambda r: r.memory_text), right=True),
        Column("", drawn(lambda r, w: bar(r.memory, w)), rank=4, least=4, most=16),
        Column("power W", text(lambda r: r.power), right=True),
        Column("temp", text(lambda r: r.temp), right=True),
        Column("SM MHz", text(lambda r: r.clocks), right=True),
        Column("PCIe", text(lambda r: r.pcie)),
    ]
    if any(r.video for r in rows):
        columns.insert(2, Column("enc/dec", text(lambda r: r.video), right=True, rank=1))
    if any(r.throttle for r in rows):
        columns.append(Column("throttled", text(lambda r: r.throttle), rank=2, least=8, cut=True))
    if any(r.name != r.full_name for r in rows):
        # The full name ("0 NVIDIA GeForce RTX 4090") where there is room, else the short one:
        # it grows with the numbers' rank, before any bar.
        def names(width: int) -> list[str]:
            return [r.full_name if len(r.full_name) <= width else r.name for r in rows]

        columns[0] = Column(
            "GPU",
            names,
            least=max(len(r.name) for r in rows),
            most=max(len(r.full_name) for r in rows),
        )
    return columns


def _gpu_table(rows: Sequence[_Row], width: int) -> list[Any]:
    from rich.text import Text

    layout = lay_out(_gpu_columns(rows), width)
    if layout is None:
        # Narrower than the numbers: one block per GPU, wrapped by the console.
        return [Text(_block(r)) for r in rows]
    header, *body = lines(layout)
    out: list[Any] = [Text(header, style="bold")]
    for row, line in zip(rows, body, strict=True):
        out.append(Text(line, style="bold red" if row.problem else ""))
    # Why a GPU could not be read, in full: in the table it would push the numbers aside.
    out += [Text(f"GPU {r.name}: {r.problem} — {r.why}", style="red") for r in rows if r.why]
    return out


def _block(row: _Row) -> str:
    if row.problem:
        return f"GPU {row.full_name}  {row.problem}  {row.why}".rstrip()
    if not row.drawn and row.util_text == "n/a":  # a MIG instance
        return f"{row.name}  mem {row.memory_text} GiB  {row.clocks}  {row.pcie}".rstrip()
    parts = [
        f"GPU {row.full_name}",
        f"util {row.util_text}",
        f"enc/dec {row.video}" if row.video else "",
        f"mem {row.memory_text} GiB",
        f"power {row.power} W",
        row.temp,
        f"SM {row.clocks} MHz",
        row.pcie,
        f"throttled {row.throttle}" if row.throttle else "",
    ]
    return "  ".join(part for part in parts if part)


class LiveView:
    """The live view of a sample history, laid out for the width it is drawn at (rich calls
    `__rich_console__` on every refresh, so a resized terminal gets a new layout)."""

    def __init__(
        self,
        samples: Sequence[Sample],
        title: str,
        note: str | None,
        processes: ProcessOptions | None = None,
        state: ViewState | None = None,
    ) -> None:
        self.samples = tuple(samples)
        self.title = title
        self.note = note
        self.processes = processes or ProcessOptions()
        self.state = state  # the interactive view's selection and status line

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.text import Text

        width = max(int(options.max_width), 20)
        if not self.samples:
            yield Text("waiting for the first sample…")
            return
        sample = self.samples[-1]
        if not sample.gpus:
            yield Text(f"{self.title}: {self.note or 'the source has no GPUs'}", style="yellow")
        else:
            yield Text(self.title, style="bold")
            yield from _gpu_table(_gpu_rows(self.samples), width)
        options = self.state.options if self.state is not None else self.processes
        processes, rows = process_table(sample, width, options)
        if processes:
            yield Text("")
            yield Text(processes[0], style="bold")
            for position, line in enumerate(processes[1:]):
                chosen = (
                    self.state is not None
                    and position < len(rows)
                    and self.state.is_selected(rows[position])
                )
                yield Text(line, style="reverse" if chosen else "")
        if sample.host is not None:
            previous = self.samples[-2] if len(self.samples) > 1 else None
            yield Text("")
            yield from (Text(line) for line in host_lines(sample, previous, width))
        for reading_line in read_situation(self.samples)[:4]:
            yield _reading_text(reading_line)
        if self.state is not None:
            yield Text(self.state.status(), style="dim" if self.state.message is None else "bold")


def render(
    samples: Sequence[Sample],
    title: str = "dlrig monitor",
    note: str | None = None,
    processes: ProcessOptions | None = None,
    state: ViewState | None = None,
) -> Any:
    """A rich renderable of the last sample, with sparklines from the earlier ones, laid out
    for the console's width; `note` says why there are no GPU readings; `processes` how the
    process list is sorted and filtered; `state` the interactive view's (it overrides
    `processes`)."""
    return LiveView(samples, title, note, processes, state)


def host_lines(sample: Sample, previous: Sample | None, width: int) -> list[str]:
    """The host row, in as many lines as the width needs (parts are never split)."""
    h = sample.host
    if h is None:
        return []
    busiest = max(h.cpu_percent_per_core, default=0.0)
    parts = [
        f"host CPU {bar(h.cpu_percent / 100, 10)} {h.cpu_percent:3.0f}% "
        f"(busiest core {busiest:.0f}%, {len(h.cpu_percent_per_core)} cores)",
        f"RAM {gib(h.memory_used_bytes)}/{gib(h.memory_total_bytes)} GiB",
        f"/dev/shm {gib(h.shm_used_bytes)}/{gib(h.shm_total_bytes)} GiB",
        f"disk r {_mb(_rate(previous, sample, 'disk_read_bytes_total'))} "
        f"w {_mb(_rate(previous, sample, 'disk_write_bytes_total'))}",
        f"net rx {_mb(_rate(previous, sample, 'network_receive_bytes_total'))} "
        f"tx {_mb(_rate(previous, sample, 'network_transmit_bytes_total'))}",
    ]
    out: list[str] = []
    for part in parts:
        if out and len(out[-1]) + 3 + len(part) <= width:
            out[-1] += "   " + part
        else:
            out.append(part if not out else "     " + part)
    return out


def _reading_text(reading: Reading) -> Any:
    from rich.text import Text

    return Text(f"» {reading.text}", style=_SEVERITY_STYLE.get(reading.severity, ""))


def _util_of(sample: Sample, index: int) -> float | None:
    for reading in sample.gpus:
        if reading.index == index and reading.up and reading.gpu is not None:
            return reading.gpu.utilization_gpu_percent
    return None
