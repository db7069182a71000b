"""The Prometheus alert rules, their promtool tests and the Grafana dashboard shipped with dlrig."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dlrig.outputs import ensure_directory, write_bytes_atomic

ASSET_NAMES = ("alerts.yml", "alerts_test.yml", "grafana-dashboard.json", "prometheus-scrape.yml")


def asset_bytes(name: str) -> bytes:
    if name not in ASSET_NAMES:
        raise KeyError(name)
    return resources.files("dlrig.monitor").joinpath("assets", name).read_bytes()


def write_assets(directory: Path) -> list[Path]:
    """Copy the assets into `directory` (created if needed); the paths written."""
    ensure_directory(directory, "--to")
    return [write_bytes_atomic(directory / name, asset_bytes(name)) for name in ASSET_NAMES]
