"""Prometheus exporter: the sampler's last sample served over HTTP at /metrics.

The page is rendered once per sample (in the sampler's thread, by `dlrig.monitor.exposition`)
and every scrape is served from those bytes, so a scrape costs the same with 1 GPU or 8 and
never touches NVML.
"""

from __future__ import annotations

import gzip
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dlrig.errors import InputError
from dlrig.machine.gpu_source_base import SourceInfo
from dlrig.monitor.exposition import ExporterOptions, render
from dlrig.monitor.sample import Sample

__all__ = ["CONTENT_TYPE", "ExporterOptions", "MetricsPage", "MetricsServer", "render"]


class MetricsPage:
    """The rendered page of the last sample, plain and gzip-compressed, swapped atomically."""

    def __init__(self, info: SourceInfo, options: ExporterOptions, stats: Any) -> None:
        self._info = info
        self._options = options
        self._stats = stats
        self._lock = threading.Lock()
        self._plain = b""
        self._gzipped = b""
        self.update(None)

    def update(self, sample: Sample | None) -> None:
        plain = render(sample, self._info, self._options, self._stats)
        gzipped = gzip.compress(plain, compresslevel=1)
        with self._lock:
            self._plain, self._gzipped = plain, gzipped

    def get(self, gzip_ok: bool) -> bytes:
        with self._lock:
            return self._gzipped if gzip_ok else self._plain


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_INDEX = (
    b"<html><head><title>dlrig exporter</title></head><body><h1>dlrig monitor</h1>"
    b'<p><a href="/metrics">Metrics</a></p></body></html>'
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # bursts of concurrent scrapes must not be refused
    allow_reuse_address = True
    page: MetricsPage


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; without TCP_NODELAY the body waits for the
    # client's delayed ACK (40 ms on Linux) on every keep-alive scrape.
    disable_nagle_algorithm = True
    timeout = 30  # an idle keep-alive connection must not hold its thread for ever

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            gzip_ok = "gzip" in (self.headers.get("Accept-Encoding") or "")
            body = self.server.page.get(gzip_ok)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            if gzip_ok:
                self.send_header("Content-Encoding", "gzip")
        elif path in ("/", "/index.html"):
            body = _INDEX
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
        elif path == "/healthz":
            body = b"ok\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
        else:
            body = b"not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per scrape would flood the journal


class MetricsServer:
    """Serves a MetricsPage over HTTP from a background thread."""

    def __init__(self, page: MetricsPage, host: str, port: int) -> None:
        server_class: type[_Server] = _Server
        if ":" in host:  # an IPv6 address such as "::" or "::1"
            server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
        try:
            self._server = server_class((host, port), _Handler)
        except OSError as exc:
            raise InputError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                fix="pick a free port with --port, or an address of this machine with --listen",
            ) from None
        self._server.page = page
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="dlrig-exporter", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket. `shutdown()` waits for `serve_forever` to
        notice, so it is only asked of a server that was started: on one that never served
        it would wait for ever (a `serve` whose --db could not be opened hung like that)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5.0)
        self._server.server_close()
