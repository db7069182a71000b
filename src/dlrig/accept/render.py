"""`dlrig accept`'s readable report: the result, what to do first, and where the files are."""

from __future__ import annotations

from typing import Any

STYLE = {"fail": "bold red", "warn": "yellow", "pass": "green", "skip": "dim"}
BADGE = {"fail": "FAIL", "pass": "PASS", "incomplete": "INCOMPLETE"}


def render(document: dict[str, Any], console: Any, written: list[str]) -> None:
    from rich.markup import escape

    result = document["result"]
    counts = document["summary"]["counts"]
    where = document.get("hostname") or "recorded evidence"
    style = (
        "bold red" if result == "fail" else ("bold green" if result == "pass" else "bold yellow")
    )
    console.print(
        f"[{style}]{BADGE.get(result, result.upper())}[/]  dlrig accept {escape(where)}: level "
        f"{document['level']}, {document['mode']}"
        + (f", burn-in {document['minutes']:g} min" if document["mode"] == "live" else "")
    )
    if document.get("stopped_by"):
        console.print(
            f"[bold yellow]stopped by {document['stopped_by']} during "
            f"{document.get('stopped_during')}[/]: the document holds what was done until then"
        )
    console.print(
        f"{counts.get('fail', 0)} fail  {counts.get('warn', 0)} warn  {counts.get('pass', 0)} "
        f"pass  {counts.get('skip', 0)} not judged"
    )
    problems = document["summary"]["problems"]
    if problems:
        console.print("\n[bold]What to do first[/]")
    for number, problem in enumerate(problems, 1):
        tag = problem["status"].upper()
        console.print(
            f"{number:>2}. [{STYLE[problem['status']]}]{tag}[/] {escape(problem['title'])}"
        )
        for line in problem["evidence"][:3]:
            console.print(f"      {escape(line)}", style="dim")
        if problem.get("fix"):
            console.print(f"      fix: {escape(problem['fix'])}")
        if problem.get("also"):
            console.print(f"      also: {escape('; '.join(problem['also']))}", style="dim")
    burn = document.get("burn_in") or {}
    for item in burn.get("absent") or ():
        console.print(
            f"[dim]not part of this run: {escape(item['part'])}: {escape(item['reason'])}[/]"
        )
    if written:
        console.print("\nwrote " + ", ".join(written))
