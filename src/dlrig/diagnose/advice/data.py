"""Fixes for what a program reads and writes (text in another encoding, NaN in an estimator's
input or a loss, an ONNX export, pickles sent to workers or loaded from files), from what the log
gives: the codec and the byte, the operator and the opset, the object and the module."""

from __future__ import annotations

import re

from dlrig.knowledge.extensions import known_module
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


# The fact's last pattern: a bare word, whose setting after it may say it is off ("fp16=False")
_HALF_WORDS = frozenset({"fp16", "float16", "bf16", "bfloat16", "--amp", "mixed precision"})


def nan_loss(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """A NaN loss: fp16 overflow first only where the log shows the run computes in half
    precision; otherwise divergence (a learning rate too high, bad inputs) is the likelier one."""
    half = facts.get("half_evidence", "")
    setting = facts.get("half_setting", "").lower()
    bare = half.lower().replace("_", " ") in _HALF_WORDS
    if bare and re.search(r"\b(?:false|no|none|0|off)\b", setting):
        half = ""  # "fp16=False", "Mixed precision type: no": the log says it is not used
    fp16 = "Switch to bf16 (Ampere or newer) or fp32 for the overflowing layers"
    if half.lower() in ("bf16", "bfloat16"):
        return {
            "nan_why": "the optimisation diverged (a learning rate too high for this model, batch "
            "or data, or NaN in the inputs): the run is in bf16, whose range is fp32's, so an "
            "overflow of the format is unlikely",
            "nan_first": "Lower the learning rate (a tenth, or add warmup) and clip gradients "
            "(clip_grad_norm_(params, 1.0)).",
            "nan_second": "Look for an operation undefined at the values it met (a log or sqrt "
            "of zero, a division by a sum that can be zero): torch.autograd.set_detect_anomaly"
            "(True) for one step names it.",
        }
    diverge = "Lower the learning rate (a tenth, or add warmup) and clip gradients (clip_grad_norm_(params, 1.0))"
    if half:
        return {
            "nan_why": f"the run computes in half precision ({half}): values overflowed (fp16 "
            "tops out at 65504) or the optimisation diverged",
            "nan_first": f"{fp16}: fp16 overflows where bf16 and fp32 do not.",
            "nan_second": f"{diverge}.",
        }
    return {
        "nan_why": "the optimisation diverged (a learning rate too high for this model, batch "
        "or data, or NaN in the inputs), or, where the run uses fp16, values overflowed",
        "nan_first": f"{diverge}: nothing in the log shows half precision, so divergence is the "
        "likelier reason.",
        "nan_second": f"If the run does use fp16 (AMP, --fp16, .half()): {fp16[0].lower() + fp16[1:]}.",
    }


def onnx_export(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    op, opset, supported = groups.get("op", ""), groups.get("opset", ""), groups.get("supported")
    op = op.lstrip(":")  # torch 1.13 printed the operator as "::_upsample_bicubic2d_aa"
    out = {
        "onnx_said": f"torch.onnx.export has no translation of {f'the operator {op}' if op else 'an operator'} into ONNX"
        + (f" opset {opset}" if opset else "")
        + (f" ({groups['detail'].strip()})." if groups.get("detail") else "."),
    }
    if op.endswith("_aa") or "_aa." in op:
        # aten::_upsample_bilinear2d_aa and friends: interpolate or Resize with antialias=True
        out["onnx_export_advice"] = (
            f"{op} is a resize with antialias=True (F.interpolate(..., antialias=True), "
            "torchvision's Resize, which antialiases by default from 0.17): pass "
            "antialias=False where the model or its preprocessing resizes, for the export; "
            "results differ slightly when downscaling."
        )
    elif supported:
        out["onnx_export_advice"] = (
            f"Export with opset_version={supported} (or later): torch.onnx.export(..., "
            f"opset_version={supported}); the ONNX runtime that loads the model must support "
            "that opset."
        )
    else:
        out["onnx_export_advice"] = (
            "Try a newer opset (torch.onnx.export(..., opset_version=17) or the newest your "
            "runtime loads) and a newer torch, whose exporter translates more operators."
        )
    return out


# Packages whose wheels come in builds (CPU, CUDA, ROCm variants): no bare pip command for them.
_BUILDS = {"torch", "torchvision", "torchaudio", "tensorflow", "jax", "jaxlib"}

# Objects that hold an open handle (as pickle names them): what each one is in a training program.
_HANDLES = {
    "environment": "an LMDB environment (lmdb.open)",
    "_thread.lock": "a lock (a logger's handler, a SummaryWriter, a queue or a client object)",
    "_thread.rlock": "a lock (a logger's handler, a SummaryWriter, a queue or a client object)",
    "generator": "a generator",
    "_io.bufferedreader": "an open file",
    "_io.textiowrapper": "an open file",
    "sqlite3.connection": "an SQLite connection",
}


def pickling(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """What could not be pickled, and where it was going: a spawned worker or a saved file."""
    obj, kind = groups.get("object", ""), groups.get("object_type", "")
    handle = _HANDLES.get(kind.lower())
    saving = bool(facts.get("save_evidence")) and not facts.get("spawn_evidence")
    if kind:
        said = f"an object of type {kind}" + (f" ({handle})" if handle else "")
    else:
        said = f"'{obj}'" if obj else "an object"
    where = " to send it to a worker process" if facts.get("spawn_evidence") else ""
    confirm = (
        ""
        if saving
        else "To confirm it is the workers, run once with num_workers=0 (no pickling happens then)."
    )
    if saving:
        where = " while saving"
        advice = (
            "Save the model's weights, not the object: torch.save(model.state_dict(), path) "
            "(and rebuild the model in code to load them); the object holds "
            + (handle or "something pickle cannot store (a lambda, a nested function, a handle)")
            + "."
        )
    elif kind:
        advice = (
            f"Do not keep {handle or 'an object of type ' + kind} on the dataset (or on "
            "whatever is sent to the workers: a transform, collate_fn, the function a process "
            "runs): create it lazily in each worker (in __getitem__ when it is still None, or "
            "in worker_init_fn) and keep only what makes it (a path, a setting) in __init__; "
            "worker processes started by spawn (Windows, macOS) receive these by pickle."
        )
    else:
        outer, _, inner = obj.partition(".<locals>.")
        if obj == "<lambda>" or inner.endswith("<lambda>"):
            what = "the lambda" + (f" inside {outer}" if inner else "") + " as a named function"
        elif inner:
            what = f"{inner} (now defined inside {outer})"
        else:
            what = "it"
        advice = (
            f"Define {what} at a module's top level (a named function or class, not a lambda "
            "or a function defined inside another): DataLoader workers and multiprocessing "
            "under spawn (Windows, macOS) receive the dataset, collate_fn and worker_init_fn "
            "by pickle."
        )
    return {
        "pickle_said": f"Python could not pickle {said}{where}.",
        "pickle_advice": advice,
        "pickle_confirm": confirm,
    }


def pickled_class(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    name, module = groups.get("name", "the class"), groups.get("module", "")
    if module == "__mp_main__":
        # a spawned child imports the parent's script as __mp_main__, without running what
        # sits under `if __name__ == "__main__":`
        return {
            "class_where": " in a worker started by spawn, which imports the script as "
            "__mp_main__: the class is defined under `if __name__ == '__main__':` (or in a "
            "function), so the worker never defines it",
            "class_advice": f"Define {name} at the script's top level, outside the `if "
            "__name__ == '__main__':` block (or in a module it imports); keep only the work "
            "itself under the guard.",
        }
    if module == "__main__" and (groups.get("builtin") or facts.get("spawn_evidence")):
        return {
            "class_where": " in a worker started by spawn: it was defined in a notebook or an "
            "interactive session, which the worker cannot re-import",
            "class_advice": f"Move {name} (the Dataset, collate_fn, worker function) into a .py "
            "file next to the notebook and import it from there; or num_workers=0.",
        }
    if module == "__main__":
        return {
            "class_where": ": the file was pickled with a class defined in the saving script "
            "itself (its __main__), so loading looks for it in this script",
            "class_advice": f"Make {name} exist in the loading script before loading (import it "
            "from the module that defines it and set it there: import __main__; "
            f"__main__.{name} = {name}); better, save model.state_dict() and load it into a "
            "model built in code.",
        }
    installed = known_module(module.split(".")[0])[0]
    site = re.search(r"[/\\](?:site|dist)-packages[/\\]", groups.get("module_file", ""))
    if installed is not None or site:
        package = module.split(".")[0]
        if installed is not None and installed.distribution:
            package = installed.distribution
        # torch and its companions: the command depends on the build (CUDA variant), which a
        # pickle does not tell; the resolver gives it where the machine is known (doctor)
        how = (
            f" ({installed.command} --upgrade)"
            if installed is not None and installed.distribution and package not in _BUILDS
            else " (the same build: CPU, or the CUDA or ROCm variant installed now)"
        )
        return {
            "class_where": f": the installed {package} lacks it, so the file was written by "
            f"another version of {package}, most often a newer one",
            "class_advice": f"Install the {package} release that saved the file, or a later one, "
            f"with the Python that loads it{how}, then load again; or have the file re-saved as "
            "a state_dict (model.state_dict()) by the version that wrote it.",
        }
    return {
        "class_where": f": the module {module} has no {name} (renamed or moved since the file "
        "was saved, or another version of the code)",
        "class_advice": f"Load with the version of the code that saved it ({module} with {name} "
        "importable), or alias the old name before loading; then save model.state_dict(), which "
        "does not depend on the code's layout.",
    }


_RAM_FIRST = (
    "Lower host memory use: DataLoader(num_workers=fewer, prefetch_factor=2, "
    "persistent_workers=False); keep large data out of the Dataset object (numpy memmap, Arrow) "
    "so workers do not copy it."
)


def worker_signal(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """A DataLoader worker killed by a signal: 'Killed' is most often the RAM; a fault is the
    worker's own crash in native code, which num_workers=0 shows with its traceback."""
    signal = groups.get("signal", "")
    oom_check = (
        "Confirm: sudo dmesg -T | grep -i 'killed process' (the OOM killer names its victim)."
    )
    if signal in ("Segmentation fault", "Illegal instruction", "Floating point exception"):
        return {
            "worker_signal_said": "the worker crashed in native code (a decoder or library the "
            "Dataset calls: OpenCV, an unusual or corrupt file, a library not safe to use after "
            "fork)",
            "worker_first": "Run with num_workers=0: the same fault then happens in the main "
            "process, with its traceback and the sample it was reading. With OpenCV in the "
            "Dataset, call cv2.setNumThreads(0); DataLoader(..., multiprocessing_context='spawn') "
            "avoids state inherited by fork.",
            "worker_confirm": "sudo dmesg -T | tail names the library of a segmentation fault "
            "('segfault at ... in libX.so').",
        }
    if signal == "Terminated":
        return {
            "worker_signal_said": "something sent it SIGTERM: the job's scheduler stopping the "
            "run (a time or memory limit), or the main process shutting its workers down after "
            "an error of its own",
            "worker_first": "Look above this line for the main process's first error and in the "
            "scheduler's record for the job's end (sacct -j <job> -o State,ExitCode,Reason).",
            "worker_confirm": oom_check,
        }
    if signal == "Killed":
        return {
            "worker_signal_said": "the kernel killed it, most often for the host running out of "
            "RAM (the OOM killer)",
            "worker_first": _RAM_FIRST,
            "worker_confirm": oom_check,
        }
    # Aborted (a C++ exception, std::bad_alloc among them) or a signal the log does not name
    return {
        "worker_signal_said": "the log does not say why (SIGABRT is a C++ exception in the "
        "worker, std::bad_alloc for memory among them)",
        "worker_first": "Run with num_workers=0: the worker's own error then shows in the main "
        "process. If it is memory: " + _RAM_FIRST[0].lower() + _RAM_FIRST[1:],
        "worker_confirm": oom_check,
    }
