"""The workload syntax of `dlrig plan`: compact arguments and YAML files."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlrig.errors import InputError
from dlrig.plan import workloads


def test_compact_syntax_with_suffixes_and_frequency() -> None:
    w = workloads.parse(
        "resnet50:epochs=90,dataset=1.28M,precision=amp-bf16,every=month,deadline=2d"
    )
    assert (w.model, w.epochs, w.dataset_size, w.precision) == (
        "resnet50",
        90.0,
        1_280_000,
        "amp-bf16",
    )
    assert w.runs_per_year == 12 and w.runs_given and w.deadline_hours == 48
    w = workloads.parse("bert-large:batch=32,seq=128,tokens=3.3B,runs=4,deadline=90m")
    assert (w.batch_size, w.seq_len, w.tokens, w.runs_per_year) == (32, 128, 3.3e9, 4)
    assert w.deadline_hours == pytest.approx(1.5)
    assert workloads.parse("gpt2:every=10d").runs_per_year == pytest.approx(36.5)


def test_a_bare_model_takes_the_defaults() -> None:
    w = workloads.parse("llama3-8b")
    assert w.model == "llama3-8b" and w.precision == "auto" and w.strategy == "auto"
    assert not w.runs_given and w.runs_per_year == workloads.DEFAULT_RUNS_PER_YEAR
    assert not w.sized


def test_custom_factory_keeps_colons_and_commas_of_its_input_spec() -> None:
    w = workloads.parse(
        "mypkg.models:make_model:input=x:float32[B,3,224,224],y:int64[B],dataset=50k,epochs=3"
    )
    assert w.model == "mypkg.models:make_model"
    assert w.input_spec == "x:float32[B,3,224,224],y:int64[B]"
    assert (w.dataset_size, w.epochs) == (50_000, 3.0)


def test_duplicate_names_are_made_unique() -> None:
    ws, _ = workloads.from_arguments(["resnet50:precision=fp32", "resnet50:precision=amp-fp16"])
    assert [w.name for w in ws] == ["resnet50#1", "resnet50#2"]


def test_yaml_file_with_constraints(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "workloads:\n"
        "  - {model: resnet50, epochs: 90, dataset_size: 1281167, runs_per_year: 4, name: imagenet}\n"
        "  - {model: bert-large, seq_len: 128, tokens: 3.3B}\n"
        "constraints: {budget: 50000, circuit: 230V16A, form-factor: workstation}\n"
    )
    ws, constraints = workloads.from_arguments([str(path), "gpt2:tokens=1B"])
    assert [w.name for w in ws] == ["imagenet", "bert-large", "gpt2"]
    assert ws[0].dataset_size == 1281167 and ws[0].runs_per_year == 4 and ws[1].tokens == 3.3e9
    assert constraints == {"budget": 50000, "circuit": "230V16A", "form_factor": "workstation"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resnet50:epoch=90", "not KEY=VALUE with a known key"),
        ("resnet50:epochs=ninety", "not a number"),
        ("resnet50:batch=0", "whole number"),
        ("resnet50:precision=fp8", "precision='fp8'"),
        ("resnet50:every=fortnight", "every='fortnight'"),
        ("resnet50:runs=2,every=week", "both runs= and every="),
        ("resnet50:deadline=soon", "not a duration"),
        (":epochs=3", "has no model"),
    ],
)
def test_bad_workloads_say_what_and_how_to_fix(text: str, message: str) -> None:
    with pytest.raises(InputError) as raised:
        workloads.parse(text)
    assert message in raised.value.message and raised.value.fix


def test_bad_yaml_files(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("workload: []\n")
    with pytest.raises(InputError, match="no `workloads:` list"):
        workloads.load_file(path)
    path.write_text("workloads:\n  - {model: resnet50, epochz: 3}\n")
    with pytest.raises(InputError, match="unknown key 'epochz'"):
        workloads.load_file(path)
