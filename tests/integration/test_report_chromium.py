"""The report page in a real browser: headless Chromium (Debian's chromium-headless-shell)
driven over the DevTools protocol on a pipe. The page must load with no console error and no
request, show the summary and draw every chart at a readable size, not overflow the window,
and print to PDF. The screenshots and the PDF are kept under out/test-artefacts/.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NVSMI, ROOT

pytestmark = pytest.mark.integration

BROWSER = shutil.which("chromium-headless-shell") or "/usr/lib/chromium/chromium-headless-shell"
ARTEFACTS = ROOT / "out" / "test-artefacts"
WIDTH = 1280

PROBE = """JSON.stringify((() => {
  const size = e => { const r = e.getBoundingClientRect(); return {w: r.width, h: r.height}; };
  const summary = document.querySelector('#summary');
  return {
    summary: summary ? size(summary) : null,
    problems: [...document.querySelectorAll('#summary li.problem')].map(li => li.innerText),
    charts: [...document.querySelectorAll('figure.chart')].map(f => {
      const svg = f.querySelector('svg');
      return {id: f.dataset.chart, ...(svg ? size(svg) : {w: 0, h: 0}),
              marks: svg ? svg.querySelectorAll('path, use, text').length : 0};
    }),
    firstSection: document.querySelector('body > section').id,
    firstChange: (document.querySelector('#changes tbody tr') || {}).innerText || null,
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    scripts: document.scripts.length,
    requests: performance.getEntriesByType('resource').map(r => r.name),
  };
})())"""


class Chromium:
    """A minimal DevTools-protocol client over --remote-debugging-pipe (fd 3 in, fd 4 out,
    messages ended by NUL)."""

    def __init__(self) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        self.process = subprocess.Popen(
            [
                BROWSER,
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire,
            pass_fds=(3, 4),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._buffer = b""
        self.events: list[dict[str, Any]] = []
        self.session = None

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next:
                assert "error" not in answer, answer
                return answer["result"]
            self.events.append(answer)

    def wait_for(self, method: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method:
                self.events.remove(event)
                return event
        while True:
            event = self._read(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=1000,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def errors(self) -> list[str]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:300])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args"))[:300])
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                found.append(params["entry"]["text"])
        return found

    def probe(self) -> dict[str, Any]:
        value = self.call("Runtime.evaluate", expression=PROBE, returnByValue=True)
        return json.loads(value["result"]["value"])

    def screenshot(self, path: Path) -> Path:
        height = self.call("Page.getLayoutMetrics")["cssContentSize"]["height"]
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=int(min(height, 16000)),
            deviceScaleFactor=1,
            mobile=False,
        )
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def pdf(self, path: Path) -> bytes:
        data = base64.b64decode(self.call("Page.printToPDF", printBackground=True)["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError, AssertionError):
            self.call("Browser.close", timeout=10)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


@pytest.fixture
def browser():
    if not Path(BROWSER).exists():
        pytest.fail("chromium-headless-shell is not installed (it is in .ci/system-packages.txt)")
    chromium = Chromium()
    yield chromium
    chromium.close()


def _page_checks(found: dict[str, Any], expected_charts: int) -> None:
    assert found["summary"] and found["summary"]["h"] > 60
    assert found["scripts"] == 0 and found["requests"] == [], "the page must be self-contained"
    assert found["scrollWidth"] <= found["innerWidth"], "the page overflows the window"
    assert len(found["charts"]) == expected_charts
    for chart in found["charts"]:
        assert chart["w"] >= 300 and chart["h"] >= 100 and chart["marks"] > 10, chart


def _start_dlrig(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "DLRIG_DEBUG"}
    return subprocess.Popen(
        [sys.executable, "-m", "dlrig.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _finished(process: subprocess.Popen[str], codes: tuple[int, ...] = (0, 1)) -> str:
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode in codes, stderr[-2000:]
    return stdout


def test_a_live_acceptance_page_renders_its_summary_and_every_chart(tmp_path, browser):
    """A live acceptance of this machine (the quick level's compute and memory bench, a
    3-second burn-in), run through the Python API, which writes the document `dlrig accept`
    writes; `dlrig fit` meanwhile; then `dlrig report` makes the page the browser opens."""
    from dlrig import accept

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    fit_command = _start_dlrig("fit", "llama3-8b", "--gpu", "t4", "--analytic", "--json")
    run = accept.run(
        accept.AcceptOptions(
            level="quick", minutes=0.05, out_dir=str(tmp_path / "run"), skip=("storage",)
        )
    )
    assert run.burn_in is not None and run.burn_in.stopped_by is None
    (document,) = run.write(with_report=False)
    fit = tmp_path / "fit.json"
    fit.write_text(_finished(fit_command))
    page = tmp_path / "report.html"
    _finished(_start_dlrig("report", str(document), str(fit), "--out", str(page)))
    expected = page.read_text().count('<figure class="chart"')
    browser.open(page.as_uri())
    found = browser.probe()
    shot = browser.screenshot(ARTEFACTS / "report-live-accept.png")
    pdf = browser.pdf(ARTEFACTS / "report-live-accept.pdf")
    print(f"screenshot: {shot}")
    assert browser.errors() == []
    # Host charts of the burn-in (CPU, CPU load, memory, disk), bench (one per unit), fit.
    assert expected >= 7
    _page_checks(found, expected)
    ids = {c["id"] for c in found["charts"]}
    assert {
        "burn-in-0-host-cpu",
        "burn-in-0-cpu-load",
        "burn-in-0-disk-load",
        "fit-0-memory",
    } <= ids
    assert pdf.startswith(b"%PDF") and len(pdf) > 20_000


def test_recorded_evidence_and_a_driver_change_read_first(tmp_path, browser):
    from dlrig import accept

    ARTEFACTS.mkdir(parents=True, exist_ok=True)

    def accepted(name: str, evidence: Path) -> str:
        """accept.json of `dlrig accept --replay EVIDENCE` (its API writes the same file)."""
        run = accept.run(
            accept.AcceptOptions(replay=(str(evidence),), out_dir=str(tmp_path / name))
        )
        return str(run.write(with_report=False)[0])

    old = accepted("old", NVSMI / "table-580.173.02-h200-idle.txt")
    new = accepted("new", NVSMI / "h200-capture-idle-load.txt")
    t4 = accepted("t4", NVSMI / "tesla-t4-2procs-q-x.xml")
    compare_page, t4_page = tmp_path / "compare.html", tmp_path / "t4.html"
    # The two pages are made side by side; each is `dlrig report` on its own.
    making = [
        _start_dlrig("report", new, "--compare", old, "--out", str(compare_page)),
        _start_dlrig("report", t4, "--out", str(t4_page)),
    ]
    _finished(making[0], codes=(0,))
    _finished(making[1], codes=(1,))

    browser.open(compare_page.as_uri())
    found = browser.probe()
    print(f"screenshot: {browser.screenshot(ARTEFACTS / 'report-compare-driver.png')}")
    assert browser.errors() == []
    assert found["firstSection"] == "changes"
    assert "NVIDIA driver" in found["firstChange"] and "590.48.01" in found["firstChange"]
    _page_checks(found, compare_page.read_text().count('<figure class="chart"'))

    browser.open(t4_page.as_uri())
    found = browser.probe()
    print(f"screenshot: {browser.screenshot(ARTEFACTS / 'report-t4-pcie.png')}")
    assert browser.errors() == []
    assert found["firstSection"] == "summary"
    assert "x8 of x16" in found["problems"][0]
