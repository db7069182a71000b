"""`tables.record`: a packaged table row becomes a typed dataclass by its field types.

Every loader in dlrig.knowledge stands on it, so these hold its rules on real rows of the
shipped tables (changed where a rule needs a bad value): empty optional cells are None,
yes/no columns are booleans, `;` lists are tuples, and a value outside a column's
vocabulary, or a field type it cannot read, is refused at load time.
"""

from __future__ import annotations

import pytest

from dlrig.knowledge import cuda, plan, pytorch, tables
from dlrig.knowledge.drivers import DriverBranch
from dlrig.knowledge.versions import Version


def _row(table: str, **changes: str) -> dict[str, str]:
    return {**tables.rows(table)[0], **changes}


def test_each_column_is_read_by_its_field_type():
    row = _row("plan_gpu_boards", slots="3", transient_peak_watts="", ecc="yes")
    board = tables.record("plan_gpu_boards", plan.GpuBoard, row)
    assert board.slots == 3
    assert board.transient_peak_watts is None
    assert board.ecc is True
    assert board.gpu == row["gpu"] and board.source == row["source"]


def test_a_yes_no_column_refuses_anything_else():
    with pytest.raises(tables.KnowledgeError, match="plan_gpu_boards: 'maybe' is not yes or no"):
        tables.record("plan_gpu_boards", plan.GpuBoard, _row("plan_gpu_boards", ecc="maybe"))


def test_choices_refuse_a_value_outside_the_vocabulary():
    row = _row("plan_gpu_prices", condition="refurbished")
    with pytest.raises(tables.KnowledgeError, match="condition 'refurbished' is not one of"):
        tables.record("plan_gpu_prices", plan.GpuPrice, row, {"condition": plan.CONDITIONS})


def test_lists_versions_and_given_values():
    row = _row("pytorch_cuda_variants", releases="1.8.0;1.8.1;")
    variant = tables.record("pytorch_cuda_variants", pytorch.CudaVariant, row)
    assert variant.releases == ("1.8.0", "1.8.1")
    minimum = tables.record(
        "cuda_driver_minimum",
        cuda.DriverMinimum,
        _row("cuda_driver_minimum", min_driver_windows=""),
        cuda_version=Version((12, 4)),
    )
    assert minimum.cuda_version == Version((12, 4))
    assert minimum.min_driver_windows is None
    assert isinstance(minimum.min_driver_linux, Version)


def test_a_field_with_a_default_keeps_it_where_the_table_has_no_column():
    row = {k: v for k, v in _row("pytorch_cuda_variants").items() if k != "releases"}
    assert tables.record("pytorch_cuda_variants", pytorch.CudaVariant, row).releases == ()


def test_a_type_it_cannot_read_must_be_given():
    row = _row("driver_branches")
    with pytest.raises(TypeError, match=r"DriverBranch\.end_of_life"):
        tables.record("driver_branches", DriverBranch, row)


def test_records_match_the_rows_one_for_one():
    cpus = tables.records("plan_cpus", plan.Cpu)
    rows = tables.rows("plan_cpus")
    assert [c.id for c in cpus] == [r["id"] for r in rows]
    assert [c.cores for c in cpus] == [int(r["cores"]) for r in rows]


def test_entry_names_the_table_when_a_key_is_missing():
    with pytest.raises(tables.KnowledgeError, match=r"plan_rules has no rule 'no\.such\.rule'"):
        plan.rule("no.such.rule")
