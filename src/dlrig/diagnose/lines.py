"""One log line made plain for the signatures: ANSI codes and launcher/rank prefixes removed,
the rank a prefix or the message names, and whether the line states an error."""

from __future__ import annotations

import re

MAX_PREFIX_CHARS = 160  # launcher prefixes ("host [stderr] [rank3]:") sit in the first chars

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# Where a rank's own output starts. torchrun --tee / --log-line-prefix: "[rank3]:",
# "[default3]:"; OpenMPI --tag-output: "[1,3]<stderr>:"; srun -l: "3: ". Ray and cluster
# launchers put their own prefix first ("(RayWorkerWrapper pid=1) [rank1]:", "node [stderr]").
_RANK_PREFIXES = (
    re.compile(r"\[(?:rank|default)(\d+)\]:\s?"),
    re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:\s?"),
)
_SRUN_PREFIX = re.compile(r"^\s*(\d{1,4}): (?=\S)")
# A Markdown quote ("> RuntimeError: ...", "> > Traceback"): issue threads and forum posts quote
# the log they answer, and the quote marks are no part of the line the program printed. One
# space after each mark goes with it; the line's own indentation stays.
_QUOTE = re.compile(r"[ \t]*(?:>[ \t]?)+")
_RANK_IN_TEXT = re.compile(
    r"\[(?:PG [^\]]*?)?Rank ?(\d+)\]|\brank(\d+)\]|\blocal_rank: (\d+)|\bRANK (\d+)\b|\bRank (\d+)\b"
)


# A line that states an error, rather than mentioning one: a Python exception ("RuntimeError: ...",
# "torch.OutOfMemoryError: ..."), a C++ abort, a fatal signal, a logger's ERROR/FATAL record.
STATES_ERROR = re.compile(
    r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Failure)\b:?"
    r"|terminate called after throwing|[Ss]egmentation fault|Aborted \(core dumped\)"
    r"|Floating point exception|Illegal instruction|Bus error \(core dumped\)"
    r"|interrupted by signal \d+|killed by signal"
    r"|Fatal Python error|\bERROR\b|^\s*[EF]\d{4} |\bFATAL\b"
)
# The last line of an exception Python raised ("RuntimeError: element 0 of tensors does not
# require grad"): printed only when it went uncaught (or was logged as an error), so a paste of
# that line alone, without its traceback, shows a failure too.
RAISED = re.compile(r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception): \S")
RAISED_TAIL_LINES = 40  # how near the end of its input that line must be


def clean_line(raw: str) -> tuple[str, int | None]:
    """(text without ANSI codes and launcher/rank prefix, rank if the prefix named one)."""
    text = _ANSI.sub("", raw)
    quoted = _QUOTE.match(text)  # fails at the first character that is not a blank or '>'
    if quoted:
        text = text[quoted.end() :]
    head = text[:MAX_PREFIX_CHARS]
    for prefix in _RANK_PREFIXES:
        found = prefix.search(head)
        if found:
            return text[found.end() :].rstrip("\n"), int(found.group(1))
    found = _SRUN_PREFIX.match(head)
    if found:
        return text[found.end() :].rstrip("\n"), int(found.group(1))
    return text.rstrip("\n"), None


def rank_in_text(text: str) -> int | None:
    """The rank a message names itself ("[Rank 3]", "[PG 0 Rank 3]", "local_rank: 3")."""
    found = _RANK_IN_TEXT.search(text)
    if not found:
        return None
    return int(next(g for g in found.groups() if g))
