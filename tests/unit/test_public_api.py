"""The public API is pinned: `dlrig.__all__`, every command package's `__all__`, the shape of
each command's `run`, and a docstring on each public name (httpx's
tests/test_exported_members.py is the model). A change here is a change users see: say it in
the CHANGELOG."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import subprocess
import sys
import typing

import pytest

import dlrig

COMMANDS = (
    "accept",
    "bench",
    "diagnose",
    "doctor",
    "fit",
    "health",
    "monitor",
    "pack",
    "plan",
    "profile",
    "provision",
    "train",
)

# Each command package's public names. Everything else in `dlrig` is internal: it may change
# in any release.
PINNED = {
    "accept": ["SCHEMA_NAME", "SCHEMA_VERSION", "AcceptOptions", "AcceptRun", "run"],
    "bench": [
        "PARTS",
        "BenchOptions",
        "BenchReport",
        "BenchResult",
        "comms",
        "compute",
        "dataloader",
        "memory",
        "pick_device",
        "run",
        "storage",
    ],
    "diagnose": [
        "Diagnosis",
        "DiagnoseOptions",
        "Evidence",
        "Finding",
        "Session",
        "diagnose_paths",
        "diagnose_stream",
        "diagnose_text",
        "run",
    ],
    "doctor": [
        "SCHEMA_VERSION",
        "Check",
        "DoctorOptions",
        "DoctorReport",
        "all_checks",
        "get",
        "run",
    ],
    "fit": [
        "CHECKPOINTING",
        "OPTIMIZERS",
        "PRECISIONS",
        "SCHEMA",
        "SCHEMA_VERSION",
        "STRATEGIES",
        "WEIGHT_FORMATS",
        "Advice",
        "FitResult",
        "Options",
        "SetupChanges",
        "estimate",
        "evaluate",
        "run",
        "trace",
    ],
    "health": ["Fault", "HealthOptions", "HealthReport", "run"],
    "monitor": [
        "MonitorOptions",
        "MonitorReport",
        "run",
        "ExporterService",
        "GpuReading",
        "GpuSource",
        "HistoryRecorder",
        "NoGpuSource",
        "NvmlSource",
        "Reading",
        "RecordSummary",
        "ReplaySource",
        "Sample",
        "Sampler",
        "SmiSource",
        "SourceInfo",
        "XidCount",
        "once",
        "open_source",
        "read_situation",
        "sample_document",
    ],
    "pack": [
        "FORMATS",
        "Dataset",
        "IterableDataset",
        "PackIndex",
        "PackJob",
        "PackOptions",
        "PackReader",
        "PackReport",
        "StatefulLoader",
        "VerifyReport",
        "pack",
        "run",
        "verify",
    ],
    "plan": [
        "CheckReport",
        "Constraints",
        "CostReport",
        "Inputs",
        "Option",
        "PlanOptions",
        "PlanResult",
        "UpgradeReport",
        "Workload",
        "check_build",
        "check_file",
        "cost",
        "parse_assume",
        "parse_workload",
        "plan",
        "request",
        "run",
        "upgrade",
    ],
    "profile": [
        "SCHEMA",
        "SCHEMA_VERSION",
        "Finding",
        "KernelRow",
        "ProfileOptions",
        "ProfileReport",
        "RankProfile",
        "Session",
        "StepProfile",
        "analyse",
        "build",
        "run",
    ],
    "provision": [
        "SCHEMA",
        "SCHEMA_VERSION",
        "TARGETS",
        "Bundle",
        "Decision",
        "Facts",
        "GeneratedFile",
        "Stated",
        "gather",
        "generate",
        "write",
    ],
    "train": [
        "BatchPlan",
        "OomInjector",
        "Options",
        "Run",
        "Summary",
        "TrainError",
        "micro_batch_from_fit",
    ],
}

# The commands whose `run(options, *, ...)` judges or measures a machine take its snapshot.
TAKES_MACHINE = {"accept", "bench", "diagnose", "doctor", "fit", "health"}
# Heavy optional dependencies: each command package imports them only when it runs.
LAZY = ("train", "pack")


def test_the_top_level_lists_the_commands_and_imports_none_of_them():
    assert dlrig.__all__ == list(COMMANDS)
    code = (
        "import sys, dlrig; "
        "print(sorted(m for m in sys.modules if m.startswith('dlrig.') or m in "
        "('torch', 'rich', 'pynvml')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]", loaded
    assert dlrig.doctor is importlib.import_module("dlrig.doctor")  # imported on first use
    with pytest.raises(AttributeError):
        _ = dlrig.no_such_command


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_exports_exactly_its_pinned_names(command):
    if command in LAZY:
        pytest.importorskip("torch")
    module = importlib.import_module(f"dlrig.{command}")
    assert sorted(module.__all__) == sorted(PINNED[command])
    for name in module.__all__:
        assert hasattr(module, name), f"dlrig.{command}.{name} is listed but missing"


@pytest.mark.parametrize("command", COMMANDS)
def test_each_public_name_says_what_it_is(command):
    if command in LAZY:
        pytest.importorskip("torch")
    module = importlib.import_module(f"dlrig.{command}")
    undocumented = [
        name
        for name in module.__all__
        if (inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name)))
        and not inspect.getdoc(getattr(module, name))
    ]
    assert undocumented == []


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"provision", "train"}))
def test_every_command_runs_from_one_options_value(command):
    if command in LAZY:
        pytest.importorskip("torch")
    module = importlib.import_module(f"dlrig.{command}")
    parameters = inspect.signature(module.run).parameters
    first, *rest = parameters.values()
    assert first.name == "options" and first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in rest), rest
    assert "progress" in parameters
    assert ("machine" in parameters) == (command in TAKES_MACHINE)


# Keyword arguments passed through unchanged to a library's own callable, which types them.
PASS_THROUGH = {"dlrig.pack.StatefulLoader(**kwargs)"}  # torch.utils.data.DataLoader's


def test_no_public_callable_takes_untyped_keyword_arguments():
    loose = []
    for command in COMMANDS:
        if command in LAZY and importlib.util.find_spec("torch") is None:
            continue
        module = importlib.import_module(f"dlrig.{command}")
        for name in module.__all__:
            target = getattr(module, name)
            if typing.is_typeddict(target) or getattr(target, "_is_protocol", False):
                continue  # a TypedDict's or a Protocol's own constructor
            target = target.__init__ if inspect.isclass(target) else target
            if not callable(target):
                continue
            try:
                parameters = inspect.signature(target).parameters.values()
            except (TypeError, ValueError):
                continue
            for p in parameters:
                if p.kind is inspect.Parameter.VAR_KEYWORD and "Unpack[" not in str(p.annotation):
                    loose.append(f"dlrig.{command}.{name}(**{p.name})")
    assert set(loose) - PASS_THROUGH == set()


def test_typed_keyword_arguments_are_the_fields_they_stand_for():
    from dlrig.fit.options import WORKLOAD_FIELDS, Options, SetupChanges

    evaluated = {f.name for f in dataclasses.fields(Options)} - set(WORKLOAD_FIELDS)
    assert set(SetupChanges.__annotations__) == evaluated | {"precision", "optimizer"}
    if importlib.util.find_spec("torch") is not None:
        from dlrig.train.options import OptionFields
        from dlrig.train.options import Options as TrainOptions

        fields = {f.name: f.type for f in dataclasses.fields(TrainOptions)}
        assert {k: v.__forward_arg__ for k, v in OptionFields.__annotations__.items()} == fields
