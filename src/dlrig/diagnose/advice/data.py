"""Fixes for what a program reads (text in another encoding, NaN in an estimator's input) and
for torch.compile's failures, from the codec, byte and message kind the log gives."""

from __future__ import annotations

from dlrig.machine.model import Machine

# The first byte of common binary files: a file read as text that starts with one of these is
# not text at all (PNG, JPEG, a pickle of protocol 2 or later, a zip such as a torch checkpoint).
_BINARY_STARTS = {
    "0x89": "a PNG image",
    "0xff": "a JPEG image or a UTF-16 file",
    "0x80": "a pickle (or a checkpoint saved with pickle)",
    "0x50": "a zip archive (a torch checkpoint, an .npz)",
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
    "ascii",
)


def codec(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    name, direction = groups.get("codec", "").lower(), groups.get("direction", "decode")
    byte, position = groups.get("byte", "").lower(), groups.get("position", "")
    if not name:
        return {}
    if (
        direction == "decode"
        and facts.get("pickle_evidence")
        and name in ("ascii", "utf-8", "utf8")
    ):
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


def compile_failure(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    kind, python = groups.get("kind", ""), groups.get("python", "")
    if python:
        return {
            "compile_said": f": this torch does not support torch.compile on Python {python} and later",
            "compile_advice": "Use a torch release that supports compile on this Python (torch "
            "2.4 or later for Python 3.12, 2.6 for 3.13), or run under an older Python, or "
            "without torch.compile.",
        }
    if groups.get("windows") or kind in ("InvalidCxxCompiler", "CppCompileError"):
        return {
            "compile_said": ": its backend could not build code on this machine",
            "compile_advice": "Inductor needs a working C++ compiler for CPU code and Triton for "
            "GPU code: install one (Linux: g++; Windows: the Visual Studio Build Tools, run from "
            "their developer prompt, and triton-windows for the GPU), or compile with another "
            "backend (torch.compile(model, backend='aot_eager')) or none.",
        }
    if kind == "Unsupported":
        return {
            "compile_said": ": TorchDynamo met code it cannot trace",
            "compile_advice": "Find the construct in the message above the traceback (a "
            "data-dependent branch, a call into a C extension or NumPy, a generator): mark that "
            "function @torch.compiler.disable, compile a smaller module, or upgrade torch, "
            "whose later releases trace more.",
        }
    backend = groups.get("backend")
    return {
        "compile_said": f" in its backend ({backend})" if backend else "",
        "compile_advice": "Read the backend's own error under 'raised:' (a Triton or C++ "
        "compile error, a missing kernel for an op or dtype); most are bugs of that torch "
        "release: upgrade torch, or leave the failing module uncompiled.",
    }
