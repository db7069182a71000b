"""The plan's knowledge tables: every row sourced and dated, every id known, every value sane."""

from __future__ import annotations

import re

import pytest

from dlrig.knowledge import plan as knowledge
from dlrig.knowledge.gpus import catalogue
from dlrig.knowledge.tables import manifest, rows

DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


def undated_or_unsourced(table_rows: list[dict[str, str]]) -> list[int]:
    """Indexes of rows lacking a source or a YYYY[-MM[-DD]] as_of."""
    return [
        i
        for i, row in enumerate(table_rows)
        if not row.get("source", "").strip() or not DATE.match(row.get("as_of", "").strip())
    ]


@pytest.mark.parametrize("table", knowledge.PLAN_TABLES)
def test_every_row_has_a_source_and_a_date(table: str) -> None:
    info = manifest()[table]
    assert "source" in info.required_columns and "as_of" in info.required_columns
    assert rows(table), f"{table} is empty"
    assert undated_or_unsourced(list(rows(table))) == []


def test_the_check_catches_a_row_without_a_date_or_source() -> None:
    good = dict(rows("plan_gpu_prices")[0])
    assert undated_or_unsourced([good]) == []
    assert undated_or_unsourced([{**good, "as_of": ""}, {**good, "source": " "}, good]) == [0, 1]


def test_every_table_is_registered_in_the_manifest() -> None:
    from importlib import resources

    files = {p.name for p in resources.files("dlrig.knowledge").joinpath("data").iterdir()}
    plan_files = {f for f in files if f.startswith("plan_") and f.endswith(".csv")}
    assert plan_files == {manifest()[t].file for t in knowledge.PLAN_TABLES}


def test_ids_resolve_and_values_are_in_range() -> None:
    known = catalogue()
    for price in knowledge.gpu_prices():
        assert known.get(price.gpu) is not None, price.gpu
        assert price.price_usd > 0
    for gpu in knowledge.gpu_boards():
        assert known.get(gpu) is not None, gpu
    for offer in knowledge.cloud_prices():
        assert known.get(offer.gpu) is not None, offer.gpu
        assert offer.usd_per_hour > 0 and offer.gpus >= 1
    for point in knowledge.psu_curve():
        assert 0.7 < point.efficiency < 1.0
    for cpu in knowledge.cpus().values():
        assert cpu.cores > 0 and cpu.pcie_lanes > 0 and cpu.tdp_watts > 0
    for wall in knowledge.wall_power():
        assert known.get(wall.gpu) is not None


def test_priced_gpus_have_board_data() -> None:
    """The planner needs slots and cooler of every GPU it can price."""
    boards = knowledge.gpu_boards()
    assert [p.gpu for p in knowledge.gpu_prices() if p.gpu not in boards] == []


def test_spot_is_cheaper_than_on_demand_for_the_same_instance() -> None:
    by_instance: dict[tuple[str, str], dict[str, float]] = {}
    for offer in knowledge.cloud_prices():
        by_instance.setdefault((offer.provider, offer.instance), {})[offer.pricing] = (
            offer.usd_per_hour
        )
    compared = 0
    for prices in by_instance.values():
        if "spot" in prices and "on_demand" in prices:
            assert prices["spot"] < prices["on_demand"]
            compared += 1
    assert compared >= 4


def test_the_seeds_unsupported_figures_are_assumptions() -> None:
    table = knowledge.assumptions()
    for name in ("liquid_pue_factor", "liquid_capex_factor", "spot_discount"):
        assert table[name].sourced is False, name
        assert "ASSUMPTION" in table[name].source
    assert table["liquid_pue_factor"].number == 0.85 and table["liquid_capex_factor"].number == 1.30
    assert table["spot_discount"].number == 0.70


def test_storage_threshold_is_bench_s() -> None:
    from dlrig.bench.storage import NEEDED_MB_S
    from dlrig.plan.rules import NEEDED_MB_S_PER_8_GPUS

    assert NEEDED_MB_S_PER_8_GPUS == NEEDED_MB_S == knowledge.rule("storage.throughput").threshold


def test_psu_efficiency_interpolates_between_certified_points() -> None:
    assert knowledge.psu_efficiency("platinum", "115v_internal", 0.5) == pytest.approx(0.92)
    assert knowledge.psu_efficiency("platinum", "115v_internal", 0.75) == pytest.approx(0.905)
    assert knowledge.psu_efficiency("platinum", "115v_internal", 0.05) == pytest.approx(0.90)
    assert knowledge.psu_efficiency("titanium", "230v_eu_internal", 1.3) == pytest.approx(0.94)


def test_every_assumption_default_lies_in_its_allowed_interval():
    from dlrig.plan.assume import within

    for name, row in knowledge.assumptions().items():
        if row.allowed:
            assert within(float(row.value), row.allowed), name
        else:
            assert row.unit == "level", name  # the one word-valued input
    assert within(1.0, "[1,inf)") and not within(0.99, "[1,inf)")
    assert within(1.0, "(0,1]") and not within(0.0, "(0,1]") and not within(float("nan"), "[0,1]")
