"""The monitor as a log: one line per GPU per sample (logfmt), for files, pipes and `nohup`.

Off a terminal the live view cannot redraw in place, so `dlrig monitor` writes as it goes, as
`nvidia-smi dmon` and `gpustat -i` do: a frame per sample by default, or with `--format lines`
one `key=value` line per GPU that grep, awk and log shippers (Loki, Vector) read without a
parser of their own. `--format json` writes the `--once --json` document once per sample.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from dlrig.monitor.sample import Sample


def _value(value: object) -> str:
    if value is None:
        return "?"
    if isinstance(value, float):
        return f"{value:.1f}".rstrip("0").rstrip(".") if value % 1 else f"{value:.0f}"
    text = str(value)
    # logfmt: quoted, with JSON's escapes, where a space, '=', a quote or a line break is in it
    # (an NVML error message), so one GPU stays one line.
    return json.dumps(text) if any(c in text for c in ' ="\\\n\r') else text


def timestamp(sample: Sample) -> str:
    return datetime.fromtimestamp(sample.timestamp_unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def sample_lines(sample: Sample) -> list[str]:
    """One logfmt line per GPU of the sample; "?" where the reading has no value."""
    when = timestamp(sample)
    out = []
    for reading in sample.gpus:
        g = reading.gpu
        fields: list[tuple[str, object]] = [("ts", when), ("gpu", reading.index)]
        fields.append(("status", reading.status))
        if g is not None:
            gib = 2**30
            fields += [
                ("name", g.name),
                ("util_pct", g.utilization_gpu_percent),
                ("enc_pct", g.utilization_encoder_percent),
                ("dec_pct", g.utilization_decoder_percent),
                (
                    "mem_used_gib",
                    None if g.memory_used_bytes is None else g.memory_used_bytes / gib,
                ),
                (
                    "mem_total_gib",
                    None if g.memory_total_bytes is None else g.memory_total_bytes / gib,
                ),
                ("power_w", g.power_draw_watts),
                ("power_limit_w", g.power_limit_watts),
                ("temp_c", g.temperature_c),
                ("sm_mhz", g.sm_clock_mhz),
                ("pcie", f"gen{g.pcie.gen_current or '?'}x{g.pcie.width_current or '?'}"),
                (
                    "throttle",
                    ",".join(r for r in g.clocks_event_reasons or () if r != "gpu_idle") or None,
                ),
                ("processes", None if g.processes is None else len(g.processes)),
            ]
        if reading.error:
            fields.append(("error", reading.error))
        out.append(
            " ".join(
                f"{key}={_value(value)}"
                for key, value in fields
                if not (key == "throttle" and value is None)
            )
        )
    return out
