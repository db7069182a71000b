"""Running `dlrig monitor serve` and a real Prometheus server for the integration tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

_SERVING = re.compile(r"at http://([\d.]+):(\d+)/metrics")


class Exporter:
    """`dlrig monitor serve --port 0` in a subprocess; the port is read from its banner."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ)
        env.pop("DLRIG_DEBUG", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dlrig", "monitor", "serve", "--port", "0", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env=env,
        )
        assert self.process.stderr is not None
        deadline = time.monotonic() + 30
        banner = ""
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            banner += line
            match = _SERVING.search(banner.replace("\n", " "))
            if match:
                self.host, self.port = match.group(1), int(match.group(2))
                break
            if not line and self.process.poll() is not None:
                raise RuntimeError(f"exporter exited: {banner}")
        else:
            self.stop()
            raise RuntimeError(f"exporter did not start: {banner}")

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, path: str = "/metrics") -> str:
        return f"http://{self.target}{path}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    """A real Prometheus server (the Debian package's binary) scraping `jobs` every second."""

    def __init__(self, workdir: Path, jobs: dict[str, str], rule_files: list[Path]) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed (apt-get install prometheus)")
        workdir.mkdir(parents=True, exist_ok=True)
        scrape = "\n".join(
            f"  - job_name: {name}\n    static_configs:\n      - targets: ['{target}']"
            for name, target in jobs.items()
        )
        rules = "\n".join(f"  - {path}" for path in rule_files)
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n{rules}\n" * bool(rule_files) + f"scrape_configs:\n{scrape}\n"
        )
        self.port = free_port()
        self.log = (workdir / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self._url("/-/ready"), timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("prometheus did not become ready")

    def _url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(self._url(f"/api/v1/{path}?{query}"), timeout=10) as response:
            document = json.loads(response.read())
        assert document["status"] == "success", document
        return document["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=promql)["result"]
        return result

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The query's result once it is not empty (the first scrapes take a moment)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.25)
        raise AssertionError(f"no result for {promql!r} within {timeout} s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
