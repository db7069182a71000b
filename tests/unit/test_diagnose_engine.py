"""The diagnose engine: ranking, fixes from the log's numbers, streaming, odd input."""

from __future__ import annotations

import gzip
import io
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlrig import diagnose
from dlrig.diagnose import Session
from dlrig.diagnose.scanner import Scanner
from dlrig.knowledge import signatures
from dlrig.machine import readers
from tests.conftest import CORPUS

LOGS = CORPUS / "logs"


def _text(*files: str) -> str:
    return "\n".join((LOGS / f).read_text(encoding="utf-8") for f in files)


def test_oom_on_one_rank_explains_timeouts_on_the_others():
    # two real logs as one run: a rank's OOM, and another job's watchdog timeouts
    text = _text(
        "cuda_oom/trl-fsdp-sft-rank0-rtx3080.log",
        "nccl_timeout/discoscene-8xp40-broadcast-torchrun.log",
    )
    result = diagnose.diagnose_text(text)
    assert [f.cause for f in result.causes][:2] == ["cuda_oom", "nccl_timeout"]
    assert result.causes[1].role == "secondary"
    assert result.causes[1].reason.startswith("follows from cuda_oom: ")
    assert "explains nccl_timeout" in result.causes[0].reason


def test_device_side_assert_explains_cudnn_and_illegal_access():
    text = _text(
        "illegal_memory_access/detectron2-multigpu-thcudacheck.log",
        "cudnn_status_error/pytorch-segmentation-backward.log",
        "device_side_assert_label_range/person-reid-nllcriterion.log",
    )
    result = diagnose.diagnose_text(text)
    assert result.root.cause == "device_side_assert_label_range"
    assert {f.cause for f in result.causes[1:]} >= {"illegal_memory_access", "cudnn_status_error"}


def test_oom_fix_uses_the_logs_numbers():
    result = diagnose.diagnose_paths([LOGS / "cuda_oom/trl-fsdp-sft-rank0-rtx3080.log"])
    fixes = " ".join(result.root.fixes)
    # "Tried to allocate 388.00 MiB ... total capacity of 9.68 GiB ... this process has 9.54 GiB
    # memory in use ... 2.57 GiB is reserved by PyTorch but unallocated"
    assert "9.68 GiB GPU" in fixes
    assert "expandable_segments:True" in fixes and "2.57 GiB" in fixes
    evidence = result.root.lines[0]
    assert evidence.line == 1 and "Tried to allocate 388.00 MiB" in evidence.text


def test_oom_fix_with_batch_size_from_the_log():
    text = "args: per_device_train_batch_size=16, gradient_accumulation_steps=2\n" + _text(
        "cuda_oom/dcrnn-train-2020.log"
    )
    fixes = " ".join(diagnose.diagnose_text(text).root.fixes)
    # torch <= 2.0 names no per-process figure: the GPU had 5.80 GiB - 6.69 MiB in use, plus the
    # 20 MiB requested = 5.81 GiB needed against 0.9 x 5.80 = 5.22 GiB usable: 16 x 0.898 -> 14,
    # and 8 is the largest batch <= 14 that divides the global batch of 32 (16 x 2)
    assert "5.81 GiB" in fixes and "in use on the GPU" in fixes
    assert "from 16 to at most 8" in fixes and "from 2 to 4" in fixes


def test_machine_facts_make_the_driver_fix_exact():
    machine = readers.load(CORPUS / "collect_env" / "driver470-torch210-cu121-warning.txt")
    result = diagnose.diagnose_paths(
        [LOGS / "driver_too_old/fooocus-470-driver-11040.log"], machine=machine
    )
    assert result.root.cause == "driver_too_old"
    # torch 2.1.0+cu121 needs the CUDA 12.1 GA driver from NVIDIA's table (via the resolver)
    assert "≥ 530.30.02" in result.root.fixes[0]
    assert "cu118" in result.root.fixes[1]  # or keep driver 470 (CUDA 11.4) with a cu118 build


def test_xid_meaning_from_the_table():
    result = diagnose.diagnose_paths([LOGS / "xid_error/gpud-dmesg-xid13-xid109.log"])
    assert result.root.cause == "xid_error"
    assert "Xid 109" in result.root.explanation  # the critical code leads, not the first one
    assert "Context Switch Timeout" in result.root.explanation
    # each code keeps its own meaning: Xid 13 is never called a context-switch timeout
    assert "Xid 13 ×3: Graphics Engine Exception" in result.root.explanation
    assert "Xid 13 on" not in result.root.explanation


def test_xid79_is_fell_off_bus():
    result = diagnose.diagnose_paths(
        [LOGS / "gpu_fell_off_bus/open-gpu-kmod-5070ti-xid79-journal.log"]
    )
    assert result.root.cause == "gpu_fell_off_bus"


def test_no_failure_no_cause():
    assert diagnose.diagnose_text("").causes == ()
    assert diagnose.diagnose_text("").note == "the input is empty"
    assert (
        diagnose.diagnose_paths([LOGS / "clean/swin-apex-o1-gradient-overflow-info.log"]).causes
        == ()
    )


def test_every_cause_has_signatures_with_sources():
    loaded = signatures.load()
    from dlrig import causes

    covered = {s.cause for s in loaded.signatures} | set(loaded.xid_causes.values())
    assert covered == {c.id for c in causes.CAUSES.values() if c.crashes}
    for signature in loaded.signatures:
        assert signature.source and signature.fixes and signature.anchors


def _diagnose_in_pieces(data: bytes, sizes: list[int]) -> list[tuple[str, int]]:
    session = Session()
    session.start("log")
    position = 0
    for size in sizes:
        session.feed(data[position : position + size])
        position += size
    session.feed(data[position:])
    result = session.finish()
    return [(f.cause, f.lines[0].line) for f in result.causes]


WHOLE_TEXT = _text(
    "cuda_oom/trl-fsdp-sft-rank0-rtx3080.log",
    "nccl_timeout/milabench-dinov2-multinode-reduce.log",
    "no_kernel_image/wyoming-xtts-rtx5060ti-sm120.log",
).encode()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=3000), max_size=30))
def test_any_chunking_gives_the_same_answer(sizes):
    assert _diagnose_in_pieces(WHOLE_TEXT, sizes) == _diagnose_in_pieces(WHOLE_TEXT, [])


class _Trickle(io.RawIOBase):
    """A pipe that hands over the given numbers of bytes per read (then the rest)."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data, self._sizes, self._at = data, list(sizes), 0

    def readinto(self, target) -> int:  # type: ignore[override]
        want = self._sizes.pop(0) if self._sizes else len(target)
        piece = self._data[self._at : self._at + min(want, len(target))]
        target[: len(piece)] = piece
        self._at += len(piece)
        return len(piece)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=3000), max_size=30),
    st.sampled_from([4096, 65536, 1 << 20]),
)
def test_reading_a_stream_in_any_pieces_gives_the_same_answer(sizes, chunk):
    # the scanner's own buffer (feed_from), with reads of any size and chunks down to 4 KiB
    session = Session()
    session.scanner.feed_from(_Trickle(WHOLE_TEXT, sizes), "<pipe>", chunk_bytes=chunk)
    result = session.finish()
    assert [(f.cause, f.lines[0].line) for f in result.causes] == _diagnose_in_pieces(
        WHOLE_TEXT, []
    )
    assert result.bytes == len(WHOLE_TEXT)
    assert result.lines == WHOLE_TEXT.count(b"\n")


def test_every_engine_gives_the_same_answer():
    from dlrig.diagnose import anchors

    answers = set()
    for name in anchors.ENGINES:
        try:
            engine = anchors.select_engine(["x"], name)
        except ImportError:
            continue  # hyperscan is an extra
        assert engine.name == name
        session = Session()
        session.scanner = Scanner(session.signature_set, engine=name)
        session.feed(WHOLE_TEXT)
        answers.add(tuple((f.cause, f.lines[0].line) for f in session.finish().causes))
    assert len(answers) == 1


def test_long_noise_before_the_error_keeps_line_numbers(tmp_path):
    rng = random.Random(3)
    noise = "".join(f"step {i} loss {rng.random():.4f}\r{i}%|###|\n" for i in range(200_000))
    path = tmp_path / "big.log.gz"
    with gzip.open(path, "wt") as stream:
        stream.write(noise)
        stream.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    result = diagnose.diagnose_paths([path])
    assert result.root.cause == "illegal_memory_access"
    assert result.root.lines[0].line == 200_001
    assert result.lines == 200_001


def test_ansi_and_rank_prefixes_are_cleaned():
    text = "\x1b[31m[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\x1b[0m\n"
    result = diagnose.diagnose_text(text)
    assert result.root.cause == "gpu_ecc_error"
    assert result.root.ranks == (3,)
    assert result.root.lines[0].text.startswith("RuntimeError")


def test_line_numbers_of_a_large_input_count_every_newline():
    """Past the first whole chunk the newlines are counted with numpy where it is installed;
    the line numbers and the total are those of bytes.count."""
    filler = b"step 12 | loss 2.31 | lr 3e-4 | it/s 1.9\n" * 120_000  # ~4.9 MB
    error = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    data = filler + error + filler + error + b"last line without newline"
    session = Session()
    session.scanner.feed_from(io.BytesIO(data), "big.log", chunk_bytes=1 << 20)
    result = session.finish()
    first = data[: data.index(error)].count(b"\n") + 1
    assert result.lines == data.count(b"\n")
    assert result.root is not None and result.root.cause == "cuda_oom"
    assert result.root.lines[0].line == first


def test_a_message_wrapped_by_a_paste_is_read_across_the_wrap_on_its_own_line(tmp_path):
    """vLLM's KV-cache refusal as a user pasted it, cut inside "(\\n3984)": read joined to the
    next line, credited to the line that starts it, with LF and with CRLF line ends."""
    original = (CORPUS / "logs" / "fresh16" / "012-vllm-kv-cache-max-seq-len.log").read_bytes()
    for name, data in (("lf.log", original), ("crlf.log", original.replace(b"\n", b"\r\n"))):
        path = tmp_path / name
        path.write_bytes(data)
        root = diagnose.diagnose_paths([path]).root
        assert root is not None and root.cause == "serving_config_invalid", name
        assert root.evidence[0].startswith(f"{path}:1: ValueError"), root.evidence
        assert "3984" in root.fixes[0], name  # the number after the wrap reached the fix


def test_a_large_chunk_scanned_in_two_halves_finds_what_one_pass_finds(monkeypatch):
    """Hyperscan cuts a chunk of a MB or more at a newline near its middle and scans the halves
    at once: every anchored line, the one right after the cut included, is found in order, with
    one thread or two."""
    from dlrig.diagnose import anchors

    try:
        engine = anchors.select_engine(["CUDA out of memory", "Killed"], "hyperscan")
    except ImportError:
        pytest.skip("hyperscan (the `fast` extra) is not installed")
    reference = anchors.select_engine(["CUDA out of memory", "Killed"], "python-re")
    filler = b"step 12 | loss 2.31 | lr 3e-4\n" * 40_000  # ~1.2 MB, past SPLIT_BYTES
    data = bytearray(b"Killed\n" + filler + b"CUDA out of memory\n" + filler + b"killed\n")
    half = len(data) // 2
    cut = data.find(b"\n", half) + 1
    data[cut : cut + 6] = b"KILLED"  # an anchor starting exactly at the cut
    lines_of = lambda offsets: [data.count(b"\n", 0, o) for o in offsets]  # noqa: E731
    expected = lines_of(reference.offsets(data, len(data)))
    assert len(expected) == 4
    for threads in ("1", "2"):
        monkeypatch.setenv("DLRIG_DIAGNOSE_THREADS", threads)
        assert lines_of(engine.offsets(data, len(data))) == expected
        # one thread scans in one piece; two hand the second half to the helper thread
        assert (getattr(engine, "_helper", None) is not None) == (threads == "2")
    data.extend(b"x")  # no view of the buffer is left behind: it can be resized
