"""Formats told apart by structure: the plain nvidia-smi table, kernel logs by line shape,
replays that refuse what is not GPU data, and several --from files merged into one machine.

Expected values are transcribed from the fixture files (real recorded outputs, see
tests/fixtures/nvidia-smi/SOURCES.md); the capture checks compare the table against the -q
output and the query-gpu CSV recorded in the same capture, in the same state.
"""

from __future__ import annotations

import pytest

from dlrig.errors import InputError
from dlrig.machine import readers
from dlrig.machine.readers import kernel_log, nvsmi_capture, nvsmi_table
from dlrig.machine.replay_source import ReplaySource
from tests.conftest import CORPUS, NVSMI

MIB = 1024**2

# file: driver, CUDA, [(name, bus id, used MiB, total MiB, util %, temp C, power W, cap W)], processes
TABLES = {
    "table-440.64-gtx1080-docker-1proc.txt": (
        "440.64.00", "10.1",
        [("GeForce GTX 1080", "00000000:01:00.0", 7997, 8116, 0, 34, 8, 200)],
        [(9174, "C", "/opt/conda/bin/python", 7985)],
    ),
    "table-470.57.02-quadro-p1000.txt": (
        "470.57.02", "11.4",
        [("Quadro P1000", "00000000:04:00.0", 11, 4040, 0, 38, None, None)],
        [],
    ),
    "table-470.82.01-a100-pcie-cuda-na.txt": (
        "470.82.01", None,
        [("NVIDIA A100-PCI...", "00000000:61:00.0", 0, 40536, 0, 66, 44, 250)],
        [],
    ),
    "table-550.127.05-a10.txt": (
        "550.127.05", "12.4",
        [("NVIDIA A10", "00000000:06:00.0", 1, 23028, 0, 32, 21, 150)],
        [],
    ),
    "table-580.173.02-h200-idle.txt": (
        "580.173.02", "13.0",
        [("NVIDIA H200", "00000000:83:00.0", 0, 143771, 0, 37, 85, 700)],
        [],
    ),
    "table-591.86-windows-rtx2080super-load.txt": (
        "591.86", "13.1",
        [("NVIDIA GeForce RTX 2080 ...", "00000000:0C:00.0", 1296, 8192, 7, 45, 97, 250)],
        [(2056, "C+G", r"C:\Windows\System32\dwm.exe", None)],
    ),
    "table-595.80-l40s-load.txt": (
        "595.80", "13.2",
        [("NVIDIA L40S", "00000000:01:00.0", 1235, 46068, 9, 54, 110, 350)],
        [(20037, "C", "ffmpeg", 538), (20038, "C", "ffmpeg", 681)],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TABLES))
def test_plain_table_of_each_driver_generation(name):
    driver, cuda, expected_gpus, expected_processes = TABLES[name]
    machine = readers.load(NVSMI / name)
    assert machine.origin.kind == "nvidia-smi-table"
    assert (machine.driver.version, machine.driver.cuda_version) == (driver, cuda)
    got = [
        (
            g.name,
            g.pci_bus_id,
            g.memory_used_bytes // MIB,
            g.memory_total_bytes // MIB,
            g.utilization_gpu_percent,
            g.temperature_c,
            g.power_draw_watts,
            g.power_limit_watts,
        )
        for g in machine.gpus
    ]
    assert got == expected_gpus
    processes = [
        (p.pid, p.kind, p.name, p.used_memory_bytes // MIB if p.used_memory_bytes else None)
        for p in machine.gpus[0].processes
    ]
    assert processes[: len(expected_processes)] == expected_processes
    if not expected_processes:
        assert processes == []


@pytest.mark.parametrize(
    "capture",
    [
        "h100-80gb-mig-4inst-capture-idle-load.txt",
        "h200-capture-idle-load.txt",
        "rtx4080super-capture-idle-load.txt",
    ],
)
@pytest.mark.parametrize("state", ["idle", "load"])
def test_table_agrees_with_the_q_output_recorded_next_to_it(capture, state):
    _, sections = nvsmi_capture.split_sections((NVSMI / capture).read_text())
    table = next(
        s for s in sections if s.state == state and s.what.startswith("nvidia-smi (default")
    )
    query = next(s for s in sections if s.state == state and s.what.startswith("query (-q)"))
    from_table = readers.load_text(table.body, "table")
    from_query = readers.load_text(query.body, "-q")
    assert from_table.origin.kind == "nvidia-smi-table"
    assert from_table.driver.version == from_query.driver.version
    assert from_table.driver.cuda_version == from_query.driver.cuda_version
    for t, q in zip(from_table.gpus, from_query.gpus, strict=True):
        assert t.pci_bus_id == q.pci_bus_id
        assert t.memory_total_bytes == q.memory_total_bytes
        assert t.performance_state == q.performance_state
        assert t.mig_mode_enabled == q.mig_mode_enabled
        assert {p.pid for p in t.processes} == {p.pid for p in q.processes or ()}


def test_a_markdown_readme_that_mentions_xid_is_refused():
    text = (NVSMI / "readme-gpud-xid-component.md").read_text()
    assert "NVRM: Xid (PCI:0000:cb:00): 13" in text  # it quotes real dmesg lines
    assert not kernel_log.looks_like(text)
    with pytest.raises(InputError, match="not a format dlrig reads"):
        readers.load(NVSMI / "readme-gpud-xid-component.md")


def test_real_kernel_logs_are_recognised_by_their_line_shape():
    logs = CORPUS / "logs"
    for relative in (
        "xid_error/gpud-dmesg-xid13-xid109.log",  # dmesg -T
        "gpu_fell_off_bus/nvsentinel-dmesg-no-xid.log",  # dmesg, continuation lines
        "gpu_fell_off_bus/open-gpu-kmod-5070ti-xid79-journal.log",  # journalctl, localised month
        "xid_error/open-gpu-kmod-xid45-after-149.log",  # "kernel: NVRM:" only
        "cpu_oom_killed/tranx-dmesg-oom-kill.log",
    ):
        assert kernel_log.looks_like((logs / relative).read_text(errors="replace")), relative
    # TensorFlow's own timestamps are not a kernel log
    tf = (logs / "illegal_memory_access/mask-rcnn-tf2-event-poll.log").read_text(errors="replace")
    assert not kernel_log.looks_like(tf)


def test_replays_refuse_a_collect_env_paste():
    paste = CORPUS / "collect_env" / "none-vllm-v100s-torch251-cu118.txt"
    with pytest.raises(InputError, match="holds no GPU readings"):
        readers.load_gpu_readings(paste.read_text(), str(paste))
    with pytest.raises(InputError, match="holds no GPU readings"):
        ReplaySource([paste])
    # a plain table is GPU data and replays
    source = ReplaySource([NVSMI / "table-595.80-l40s-load.txt"])
    assert source is not None


def _h100_capture_sections(tmp_path):
    """The H100 capture's default table and -q output of the same state: one machine."""
    _, sections = nvsmi_capture.split_sections(
        (NVSMI / "h100-80gb-mig-4inst-capture-idle-load.txt").read_text()
    )
    table = tmp_path / "nvidia-smi.txt"
    query = tmp_path / "nvidia-smi-q.txt"
    for path, prefix in ((table, "nvidia-smi (default"), (query, "query (-q)")):
        section = next(s for s in sections if s.state == "load" and s.what.startswith(prefix))
        path.write_text(section.body)
    return table, query


def test_from_files_of_one_machine_are_merged(tmp_path):
    table, query = _h100_capture_sections(tmp_path)
    machine = readers.load_many([table, query])
    assert machine.origin.kind == "merged"
    (gpu,) = machine.gpus
    assert gpu.uuid is not None  # only the -q output has it
    assert {p.pid for p in gpu.processes} == {21180, 21181, 21198}  # listed by both
    assert not [i for i in machine.probe_issues if i.source == "gpus"]  # no disagreement


def test_a_kernel_log_of_another_machine_is_refused_naming_its_gpu(tmp_path):
    # The dmesg log's Xid events are of a GPU at PCI 0000:9b:00 (a Dell XE9680); the H100
    # capture's only GPU sits elsewhere.
    table, query = _h100_capture_sections(tmp_path)
    with pytest.raises(InputError, match=r"not the same machine.*9b:00"):
        readers.load_many([table, query, NVSMI / "dmesg-xid119-gsp-rpc-timeout.log"])


def test_files_of_different_machines_are_refused_naming_the_disagreement():
    # QA's case: an H100 paste (driver 535.104.12) with a Tesla T4's XML (driver 515.105.01)
    # used to become one machine, the H100 and its driver gone without a word.
    paste = CORPUS / "collect_env" / "sm90-h100-torch201-cu117-warning.txt"
    with pytest.raises(InputError) as caught:
        readers.load_many([paste, NVSMI / "tesla-t4-2procs-q-x.xml"])
    line = caught.value.one_line()
    assert "not the same machine" in line
    assert "driver 535.104.12 vs 515.105.01" in line
    assert "NVIDIA H100 PCIe vs Tesla T4" in line
    # an H100 PCIe paste and an H200 table: the GPU model and the driver disagree
    with pytest.raises(InputError, match="H100 PCIe vs NVIDIA H200"):
        readers.load_many([paste, NVSMI / "table-580.173.02-h200-idle.txt"])


def test_one_unreadable_file_among_several_is_an_input_error(tmp_path):
    bad = tmp_path / "notes.md"
    bad.write_text((NVSMI / "readme-gpud-xid-component.md").read_text())
    with pytest.raises(InputError, match=r"notes\.md: not a format"):
        readers.load_many([NVSMI / "table-550.127.05-a10.txt", bad])


def test_table_header_alone_is_unreadable_not_empty():
    text = (NVSMI / "table-550.127.05-a10.txt").read_text().split("|===")[0]
    assert nvsmi_table.looks_like(text)
    with pytest.raises(InputError, match="unreadable nvidia-smi table"):
        readers.load_text(text, "cut.txt")


# --- where --from reads from: gzip, pipes, /proc, stdin -----------------------------------------


def test_a_gzip_file_reads_like_the_plain_one(tmp_path):
    import gzip

    plain = NVSMI / "tesla-t4-2procs-q-x.xml"
    packed = tmp_path / "t4.xml.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert readers.load(packed).gpus == readers.load(plain).gpus


def test_a_damaged_gzip_file_is_one_clear_error(tmp_path):
    import gzip

    damaged = tmp_path / "t4.xml.gz"
    damaged.write_bytes(gzip.compress((NVSMI / "tesla-t4-2procs-q-x.xml").read_bytes())[:200])
    with pytest.raises(InputError, match="damaged gzip"):
        readers.load(damaged)


def test_a_pipe_is_read_although_its_size_is_zero(tmp_path):
    # `dlrig doctor --from <(nvidia-smi -q -x)`: process substitution hands over a FIFO.
    import os
    import threading

    fifo = tmp_path / "nvidia-smi.fifo"
    os.mkfifo(fifo)
    data = (NVSMI / "tesla-t4-2procs-q-x.xml").read_bytes()

    def write() -> None:
        with open(fifo, "wb") as stream:
            stream.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    machine = readers.load(fifo)
    writer.join(timeout=10)
    assert [g.name for g in machine.gpus] == ["Tesla T4"]


def test_a_proc_file_is_judged_by_its_content_not_its_size():
    # /proc files report size 0; the old reader called them empty.
    with pytest.raises(InputError) as caught:
        readers.load("/proc/self/status")
    assert "not a format dlrig reads" in caught.value.one_line()
    assert "empty" not in caught.value.one_line()
