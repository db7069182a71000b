"""A plan request: workload arguments and options (or a workload file's `constraints:`) turned
into workloads, constraints and inputs. Options given on the command line win over the file."""

from __future__ import annotations

import math
import re
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from dlrig.errors import InputError
from dlrig.knowledge.gpus import lookup as gpu_lookup
from dlrig.plan import workloads as parsing
from dlrig.plan.assume import Inputs, parse_assume
from dlrig.plan.builds import Condition, FormFactor
from dlrig.plan.buildspec import Circuit
from dlrig.plan.rank import Constraints
from dlrig.plan.workloads import Workload

CONSTRAINT_KEYS = (
    "budget",
    "deadline",
    "circuit",
    "form_factor",
    "condition",
    "cloud",
    "gpu",
    "max_gpus",
    "cooling",
    "price_per_kwh",
    "pue",
    "utilisation",
    "years",
)


def circuit(text: str | None) -> Circuit | None:
    """`230V16A`, `120V 15A`, `2x230V16A` (two circuits)."""
    if text is None:
        return None
    pattern = r"\s*(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*V\s*[ ,/]?\s*(\d+(?:\.\d+)?)\s*A\s*"
    match = re.fullmatch(pattern, str(text), re.I)
    if not match:
        raise InputError(
            f"--circuit {text!r} is not VOLTSvAMPSa",
            fix="e.g. --circuit 230V16A, --circuit 120V15A or --circuit 2x230V16A",
        )
    return Circuit(float(match.group(2)), float(match.group(3)), int(match.group(1) or 1))


def _fraction(value: Any, flag: str) -> float | None:
    if value is None:
        return None
    number = float(value)
    if not 0 < number <= 1:
        raise InputError(
            f"{flag} {number} is not between 0 and 1", fix=f"give {flag} as a fraction, e.g. 0.6"
        )
    return number


def request(
    arguments: Sequence[str], options: Mapping[str, Any], assume: Sequence[str] = ()
) -> tuple[list[Workload], Constraints, Inputs]:
    """`dlrig plan`'s arguments (workloads or a workloads file), its options (budget, circuit,
    ...) and `--assume KEY=VALUE`s, as the three values `plan.plan` takes."""
    parsed, from_file = parsing.from_arguments(list(arguments))
    unknown = sorted(set(from_file) - set(CONSTRAINT_KEYS))
    if unknown:
        raise InputError(
            f"workload file constraints: unknown key {unknown[0]!r}",
            fix="use the option names of `dlrig plan workloads --help`: "
            + ", ".join(CONSTRAINT_KEYS),
        )

    def pick(name: str, default: Any = None) -> Any:
        given = options.get(name)
        if given is not None and given != ():
            return given
        return from_file.get(name, default)

    ids = []
    names = pick("gpu", ())
    for name in [names] if isinstance(names, str) else list(names):
        ids.append(gpu_lookup(str(name)).spec.id)  # the one --gpu lookup: aliases, preferences
    most = int(pick("max_gpus", 8))
    if most < 1:
        raise InputError(f"--max-gpus {most}", fix="give at least 1")
    deadline = pick("deadline")
    budget = float(pick("budget")) if pick("budget") is not None else None
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise InputError(f"--budget {budget:g} is not a sum of money", fix="give USD > 0")
    constraints = Constraints(
        budget_usd=budget,
        deadline_hours=parsing.hours(str(deadline), "--deadline") if deadline is not None else None,
        circuit=circuit(pick("circuit")),
        form_factor=_one_of(FormFactor, pick("form_factor", "any"), "--form-factor"),
        condition=_one_of(Condition, pick("condition", "any"), "--condition"),
        cloud=bool(pick("cloud", True)),
        gpus=tuple(ids),
        max_gpus=most,
        liquid=str(pick("cooling", "air")) == "liquid",
        utilisation=_fraction(pick("utilisation"), "--utilisation"),
    )
    inputs = Inputs(
        parse_assume(assume),
        {
            "electricity_usd_per_kwh": ("--price-per-kwh", pick("price_per_kwh")),
            "pue": ("--pue", pick("pue")),
            "years_of_service": ("--years", pick("years")),
        },
    )
    return parsed, constraints, inputs


def _one_of(vocabulary: Any, value: object, option: str) -> Any:
    """`value` when it is one of the Literal `vocabulary`'s words, else the one-line error."""
    words = typing.get_args(vocabulary)
    if value not in words:
        raise InputError(f"{option} {value!r} is not known", fix=f"give one of: {', '.join(words)}")
    return value
