"""Scrape latency of `dlrig monitor serve` with 8 replayed GPUs, against the per-scrape approach.

Both exporters run on loopback in this process and are scraped the way Prometheus scrapes (one
keep-alive connection, `Accept-Encoding: gzip`, body decompressed), one after the other:

- dlrig: the sampler reads the GPUs in the background every `--interval` seconds and renders the
  page once per sample; a scrape returns those bytes.
- per-scrape: what nvidia_gpu_exporter-style exporters do at every scrape (run `nvidia-smi` and
  parse its output). Without a GPU here, each scrape reads and parses the recorded output of
  the H200 capture from disk, once per GPU (the recording holds one GPU), then renders the same
  page. Spawning nvidia-smi (≈0.4 s for `-q -x` on real hardware) would come on top.

Also reported: the sampler's cost per sample (read 8 GPUs + render + gzip the page).

    python benchmarks/monitor_scrape.py [--scrapes 2000] [--samples 300]

Target: dlrig p99 <= 5 ms.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from dlrig.machine.gpu_sources import ReplaySource  # noqa: E402
from dlrig.machine.readers import nvsmi_capture  # noqa: E402
from dlrig.monitor.exporter import ExporterOptions, MetricsPage, MetricsServer, render  # noqa: E402
from dlrig.monitor.sample import GpuReading, Sample  # noqa: E402
from dlrig.monitor.sampler import Sampler  # noqa: E402

CAPTURE = ROOT / "tests" / "fixtures" / "nvidia-smi" / "h200-capture-idle-load.txt"
GPUS = 8


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def _scrape_times(host: str, port: int, scrapes: int) -> tuple[list[float], int]:
    connection = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"Accept-Encoding": "gzip", "Accept": "text/plain;version=0.0.4"}
    times = []
    size = 0
    for _ in range(scrapes):
        started = time.perf_counter()
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        body = response.read()
        if response.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        times.append(time.perf_counter() - started)
        size = len(body)
        assert response.status == 200
    connection.close()
    return times, size


class _PerScrapeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as in dlrig's handler: measure parsing, not delayed ACKs
    info: Any = None

    def do_GET(self) -> None:
        gpus = []
        for index in range(GPUS):
            text = CAPTURE.read_text()
            _, sections = nvsmi_capture.split_sections(text)
            gpu = nvsmi_capture.gpus_for_state(sections, "load")[0]
            gpus.append(GpuReading(index, "ok", gpu.__class__(**{**gpu.__dict__, "index": index})))
        sample = Sample(time.time(), 0.0, tuple(gpus), None, (), 1)
        body = render(sample, self.info, ExporterOptions(), None)
        if "gzip" in (self.headers.get("Accept-Encoding") or ""):
            body = gzip.compress(body, compresslevel=1)
            encoding = True
        else:
            encoding = False
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        if encoding:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scrapes", type=int, default=2000)
    parser.add_argument("--per-scrape-scrapes", type=int, default=300)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()

    source = ReplaySource([CAPTURE], state="load", replicate=GPUS)
    # The process view on, as on a live machine: the replay's pids are looked up on this host
    # every sample (psutil), though a replay would not by default.
    sampler = Sampler(source, interval_seconds=args.interval, host=True, host_processes=True)
    page = MetricsPage(source.info, ExporterOptions(), sampler)
    sampler.add_listener(page.update)

    # Cost per sample, measured on the sampler's own round (read + render + gzip).
    costs = []
    for _ in range(args.samples):
        started = time.perf_counter()
        sampler.sample_once()
        costs.append(time.perf_counter() - started)

    server = MetricsServer(page, "127.0.0.1", 0).start()
    sampler.start()  # keep sampling in the background while we scrape, as in production
    host, port = server.address
    _scrape_times(host, port, 50)  # warm-up
    dlrig_times, dlrig_size = _scrape_times(host, port, args.scrapes)
    server.stop()
    sampler.stop()

    _PerScrapeHandler.info = source.info
    baseline = ThreadingHTTPServer(("127.0.0.1", 0), _PerScrapeHandler)
    thread = threading.Thread(target=baseline.serve_forever, daemon=True)
    thread.start()
    b_host, b_port = baseline.server_address[:2]
    _scrape_times(str(b_host), int(b_port), 10)
    per_times, per_size = _scrape_times(str(b_host), int(b_port), args.per_scrape_scrapes)
    baseline.shutdown()

    ms = 1000.0
    d50, d99 = _percentile(dlrig_times, 50) * ms, _percentile(dlrig_times, 99) * ms
    p50, p99 = _percentile(per_times, 50) * ms, _percentile(per_times, 99) * ms
    print(f"GPUs replayed: {GPUS} (H200 capture, load state); page {dlrig_size} bytes")
    print(
        f"dlrig       scrape latency  p50 {d50:.3f} ms  p99 {d99:.3f} ms  "
        f"({args.scrapes} scrapes, sampler running every {args.interval:g} s)"
    )
    print(
        f"per-scrape  scrape latency  p50 {p50:.3f} ms  p99 {p99:.3f} ms  "
        f"({args.per_scrape_scrapes} scrapes, page {per_size} bytes)"
    )
    print(
        f"sampler cost per sample: median {statistics.median(costs) * ms:.2f} ms, "
        f"p99 {_percentile(costs, 99) * ms:.2f} ms (8 GPUs from replay + host + render + gzip)"
    )
    print(f"ratio per-scrape/dlrig p50 {p50 / d50:.1f}x, p99 {p99 / d99:.1f}x")
    print(f"target dlrig p99 <= 5 ms: {'met' if d99 <= 5.0 else 'NOT met'}")


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()
