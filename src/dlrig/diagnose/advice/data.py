"""Fixes for what a program reads (text in another encoding, NaN in an estimator's input), from
the codec and the byte the log gives."""

from __future__ import annotations

from dlrig.machine.model import Machine

# The first byte of common binary files: a file read as text that starts with one of these is
# not text at all (PNG, JPEG, a pickle of protocol 2 or later).
_BINARY_STARTS = {
    "0x89": "a PNG image",
    "0xff": "a JPEG image or a UTF-16 file",
    "0x80": "a pickle (or a checkpoint saved with pickle)",
}
_LOCALE_CODECS = (
    "gbk",
    "gb2312",
    "gb18030",
    "cp936",
    "cp1252",
    "charmap",
    "cp950",
    "cp949",
    "cp932",
)


def codec(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    name, direction = groups.get("codec", "").lower(), groups.get("direction", "decode")
    byte, position = groups.get("byte", "").lower(), groups.get("position", "")
    if not name:
        return {}
    if direction == "decode" and facts.get("pickle_evidence") and name == "ascii":
        said = f"A pickle was decoded with '{name}': one written by Python 2, whose byte strings Python 3 reads as text."
        advice = (
            "Load it with encoding='latin1' (pickle.load(f, encoding='latin1'); torch.load(path, "
            "encoding='latin1') for a checkpoint of Python 2), and open the file with 'rb'."
        )
    elif direction == "encode":
        said = f"Python could not write a character in the '{name}' encoding."
        advice = (
            f"The output goes through '{name}' (a Windows console or a file opened without an "
            "encoding): open files with encoding='utf-8', and for the console set "
            "PYTHONIOENCODING=utf-8 or PYTHONUTF8=1."
        )
    elif (
        name.replace("-", "").replace("_", "") in ("utf8", "utf8sig")
        and position == "0"
        and byte in _BINARY_STARTS
    ):
        said = f"A file read as UTF-8 text starts with byte {byte}: it is {_BINARY_STARTS[byte]}, not text."
        advice = (
            "A binary file was opened as text: check the path given (a checkpoint or image "
            "where a config, list or label file is expected), and open binary files with 'rb'."
        )
    elif name == "ascii":
        said = "A file or stream was read with the 'ascii' encoding, which is not the data's."
        advice = (
            "'ascii' is the encoding of the C/POSIX locale (LANG unset: a container, cron, an ssh "
            "session without a locale), which open() and the standard streams then use: set "
            "LANG=C.UTF-8 (or PYTHONUTF8=1) for the run, or give encoding='utf-8' where the file "
            "is opened."
        )
    elif name in _LOCALE_CODECS:
        said = f"A file was read with the '{name}' encoding, which is not the file's."
        advice = (
            f"'{name}' is the system locale's encoding (Windows), which open() uses when no "
            "encoding is given: open(path, encoding='utf-8') where the file is read (pandas: "
            "encoding='utf-8'), or set PYTHONUTF8=1 for the whole run."
        )
    else:
        said = f"A file read as '{name}' text is not in that encoding (byte {byte or 'unknown'})."
        advice = (
            "Open it with the encoding it was written in (often encoding='utf-8', or 'latin-1' "
            "for old files; chardet or file -i tells), or with 'rb' if it is not text."
        )
    return {"codec_said": said, "codec_advice": advice}


def nan_input(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    name = groups.get("input")
    return {"input_said": f"the input {name}" if name else "an input"}
