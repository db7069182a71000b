"""`dlrig report`: one self-contained HTML page from saved dlrig JSON."""

from __future__ import annotations

import sys

import click

from dlrig.accept import report
from dlrig.cli.common import console, json_option, print_json

EXIT = (
    "Exit codes: 0 written and nothing fails; 1 written, and the summary has a failing item; "
    "2 bad usage or an input that is not a dlrig document."
)


@click.command("report", epilog=EXIT)
@click.argument("files", nargs=-1, required=True)
@click.option("--out", "out", metavar="FILE", help="The HTML page (default: report.html).")
@click.option(
    "--compare",
    metavar="OLD.json",
    help="An earlier run (accept, doctor, bench, snapshot): what changed is shown first.",
)
@click.option(
    "--several-machines",
    is_flag=True,
    help="Put files of different machines on one page (named in its title); without it they "
    "are refused.",
)
@json_option
def report_command(
    files: tuple[str, ...],
    out: str | None,
    compare: str | None,
    several_machines: bool,
    as_json: bool,
) -> None:
    """Render FILES (the JSON of accept, doctor, bench, fit, monitor report, a doctor --save
    snapshot, or a monitor --db history) into one HTML page: the summary first, charts of
    measured against expected, the burn-in's time series and the machine's facts."""
    page = report.build(list(files), compare, several_machines=several_machines)
    target = out or (None if as_json else "report.html")
    if target:
        written = report.write_html(page, target)
    if as_json:
        print_json(page)
    else:
        summary = page["summary"]
        counts = summary["counts"]
        out_console = console()
        out_console.print(
            f"{page['result'].upper()}: {counts.get('fail', 0)} fail, {counts.get('warn', 0)} "
            f"warn, {counts.get('pass', 0)} pass"
        )
        if page.get("changes"):
            out_console.print(
                f"{len(page['changes'])} change(s) since {page['compare_with']['label']}"
            )
        for problem in summary["problems"][:3]:
            out_console.print(f"  {problem['status'].upper()} {problem['title']}", markup=False)
        out_console.print(f"wrote {written}")
    if page["result"] == "fail":
        sys.exit(1)
