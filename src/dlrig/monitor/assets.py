"""The Prometheus alert rules, their promtool tests and the Grafana dashboard shipped with dlrig.

Two sets: one for dlrig's metric names, one for dcgm-exporter's (`serve --dcgm-names`, or
NVIDIA's dcgm-exporter itself). Each is written under the same file names, so a Prometheus
configuration names `alerts.yml` whichever set it loads.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from dlrig.outputs import ensure_directory, write_bytes_atomic

ASSET_NAMES = ("alerts.yml", "alerts_test.yml", "grafana-dashboard.json", "prometheus-scrape.yml")
# The dcgm-exporter set: the shipped file holding each asset's DCGM-names version.
DCGM_FILES = {
    "alerts.yml": "alerts-dcgm.yml",
    "alerts_test.yml": "alerts-dcgm_test.yml",
    "grafana-dashboard.json": "grafana-dashboard-dcgm.json",
    "prometheus-scrape.yml": "prometheus-scrape.yml",
}


def asset_bytes(name: str, dcgm_names: bool = False) -> bytes:
    """An asset as written for the user; the DCGM rules name their file `alerts.yml` too."""
    if name not in ASSET_NAMES:
        raise KeyError(name)
    shipped = DCGM_FILES[name] if dcgm_names else name
    data = resources.files("dlrig.monitor").joinpath("assets", shipped).read_bytes()
    if dcgm_names and name == "alerts_test.yml":
        data = data.replace(b"  - alerts-dcgm.yml\n", b"  - alerts.yml\n")
    return data


def write_assets(directory: Path, dcgm_names: bool = False) -> list[Path]:
    """Copy the assets into `directory` (created if needed); the paths written."""
    ensure_directory(directory)
    return [
        write_bytes_atomic(directory / name, asset_bytes(name, dcgm_names)) for name in ASSET_NAMES
    ]
