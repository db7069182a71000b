"""Optional dependencies and the shared readers built on them: a missing package names its
extra, the plotting backend draws without a display, templates fail loudly on a missing value,
and a JSON input that is not JSON says where it broke."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dlrig import extras, inputs, jinja
from dlrig.errors import InputError, MissingExtraError


def test_a_missing_module_names_its_pip_package_and_extra():
    with pytest.raises(MissingExtraError) as caught:
        extras.require("dlrig_no_such_module", "plan", "reading build files", package="pyyaml")
    assert caught.value.message == (
        "reading build files needs the Python package 'pyyaml', which is not installed"
    )
    assert caught.value.fix == "pip install 'dlrig[plan]'"


def test_a_module_blocked_in_a_fresh_interpreter_is_a_missing_extra():
    # sys.modules[name] = None is how Python marks a module unimportable: a real ImportError.
    code = (
        "import sys; sys.modules['jinja2'] = None\n"
        "from dlrig.errors import MissingExtraError\n"
        "from dlrig.jinja import template_environment\n"
        "try:\n"
        "    template_environment('dlrig.provision', 'provision', 'dlrig provision')\n"
        "except MissingExtraError as exc:\n"
        "    print(exc.message, '|', exc.fix)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == (
        "dlrig provision needs the Python package 'jinja2', which is not installed"
        " | pip install 'dlrig[provision]'"
    )


def test_pyplot_draws_on_the_agg_backend():
    plt = extras.pyplot("monitor", "a test plot")
    assert plt.get_backend().lower() == "agg"


def test_templates_refuse_a_missing_value_and_escape_only_what_is_asked():
    html = jinja.template_environment(
        "dlrig.accept.report", "report", "dlrig report", autoescape=("html", "j2")
    )
    assert html.autoescape("page.html.j2") is True
    assert html.autoescape("style.css") is False  # included raw: CSS has > selectors
    plain = jinja.template_environment("dlrig.provision", "provision", "dlrig provision")
    assert plain.from_string("{{ x }}").render(x="<b>") == "<b>"
    import jinja2

    with pytest.raises(jinja2.UndefinedError):
        plain.from_string("{{ missing }}").render()


def test_read_json_names_the_file_and_the_line_that_is_not_json(tmp_path):
    bad = tmp_path / "doc.json"
    bad.write_text('{"a": 1,\n oops}\n')
    with pytest.raises(InputError) as caught:
        inputs.read_json(bad, "dlrig document", 1 << 20, fix="give a --json output")
    assert (
        caught.value.message
        == f"{bad}: not JSON (Expecting property name enclosed in double quotes at line 2)"
    )
    assert caught.value.fix == "give a --json output"
    good = tmp_path / "ok.json"
    good.write_text('{"schema": "dlrig.fit"}')
    assert inputs.read_json(good, "dlrig document", 1 << 20, fix="-") == {"schema": "dlrig.fit"}
