"""Causes in the hardware, and the ones that slow a run without crashing it: GPU memory errors,
Xids, a GPU gone from the bus, throttling, a degraded PCIe link, a starved input pipeline."""

from __future__ import annotations

from dlrig.causes.model import Cause

CAUSES: tuple[Cause, ...] = (
    Cause(
        "gpu_ecc_error",
        "Uncorrectable GPU memory (ECC) error",
        "The GPU detected an error in its memory that ECC could not correct. The process using "
        "it is killed; the page is retired or the row remapped at the next reset. Repeated "
        "errors mean failing hardware.",
        "Drain the node, reset the GPU or reboot so the row remap takes effect, run `dcgmi "
        "diag -r 3`; if errors recur or remapping fails, RMA the GPU.",
    ),
    Cause(
        "gpu_too_old_for_feature",
        "The GPU is too old for a feature the run asks for",
        "Some kernels and number formats exist only from a GPU generation on: bf16 and "
        "FlashAttention 2 from Ampere (compute capability 8.0), FP8 from Ada and Hopper (8.9, "
        "9.0), Triton (torch.compile's backend) from Volta (7.0), and quantisation kernels each "
        "from their own. The library checks the GPU's compute capability and refuses.",
        "Ask for what the GPU has: float16 instead of bf16 (vLLM --dtype half, "
        "torch_dtype=torch.float16, Trainer fp16=True), PyTorch's SDPA instead of "
        'FlashAttention 2 (attn_implementation="sdpa"), bf16/fp16 or int8/4-bit weights '
        "instead of FP8, eager mode instead of torch.compile; or run on a newer GPU.",
    ),
    Cause(
        "xid_error",
        "NVIDIA driver reported an Xid error",
        "Xid messages in the kernel log are the driver's error reports. Their code says whether "
        "the application, the driver or the hardware is at fault.",
        "Look the code up (`dlrig doctor --explain gpu.xid_events`, NVIDIA's Xid catalogue) and "
        "act on its severity: restart the job for application Xids, reset or drain for "
        "hardware ones.",
    ),
    Cause(
        "kernel_launch_timeout",
        "A GPU kernel ran past the display watchdog",
        "CUDA ends a kernel that runs longer than the watchdog allows (cudaErrorLaunchTimeout, "
        "Xid 8) only on a GPU with kernel run-time limits on: one that drives a display (an X "
        "server or the Windows desktop, whose TDR resets the GPU after 2 s by default). A "
        "large batch, a long sequence or a slow kernel on such a GPU trips it.",
        "Run on a GPU that drives no display, or stop the display on it; on Windows raise "
        "TdrDelay (HKLM\\SYSTEM\\CurrentControlSet\\Control\\GraphicsDrivers) or put a "
        "data-centre card in TCC mode; split the work into shorter kernels (a smaller batch).",
    ),
    Cause(
        "gpu_p2p_unsupported",
        "The GPUs cannot reach each other peer-to-peer",
        "Direct GPU-to-GPU access (P2P over PCIe or NVLink, CUDA IPC) is refused or broken "
        "between these GPUs: GeForce cards without an NVLink bridge, GPUs under different CPU "
        "sockets or PCIe root ports, ACS or the IOMMU redirecting peer traffic, or a virtual "
        "machine that does not pass it through.",
        "Check the topology and what P2P it allows: nvidia-smi topo -m and nvidia-smi topo -p2p "
        "r; run NCCL without P2P (NCCL_P2P_DISABLE=1; slower, correct); on bare metal turn off "
        "ACS on the PCIe switches or set the IOMMU to passthrough (iommu=pt).",
    ),
    Cause(
        "gpu_fell_off_bus",
        "GPU fell off the bus (Xid 79)",
        "The GPU stopped answering on PCIe. Most common reasons are power (PSU, cables), "
        "overheating, a bad riser or slot, or old system BIOS. It needs a reboot at least.",
        "Reboot; reseat the card and its power cables, check the PSU and cooling, update the "
        "system BIOS; if it recurs on the same GPU, RMA it.",
    ),
    Cause(
        "gpu_throttling",
        "The GPU slows its clocks",
        "The GPU lowers its clocks when it reaches its power limit, its temperature limit, or "
        "when the board asserts a hardware slowdown (power brake from the PSU, overheating). "
        "Training runs proportionally slower.",
        "Check cooling (airflow, fan curve, dust, blanking panels), the power limit "
        "(`nvidia-smi -q -d POWER`; restore it with `sudo nvidia-smi -pl <default>`), and for "
        "hardware slowdown the PSU capacity and the GPU's power cables.",
        crashes=False,
    ),
    Cause(
        "pcie_link_degraded",
        "A GPU's PCIe link runs below its rated speed",
        "The link trained at fewer lanes or a lower generation than both ends support: a card "
        "in a narrower slot, a riser or extender, a BIOS bifurcation setting, or a bad contact. "
        "Host-device copies (data loading, offload) run proportionally slower.",
        "Reseat the card, move it to a full x16 slot attached to the CPU, remove risers, check "
        "the BIOS PCIe settings; confirm with `dlrig bench memory` (host-to-device bandwidth).",
        crashes=False,
    ),
    Cause(
        "input_pipeline_bound",
        "The GPU waits for data",
        "The training step finishes faster than the input pipeline produces the next batch, so "
        "the GPU sits idle between steps: too few DataLoader workers, CPU-heavy decoding and "
        "augmentation, or a slow disk or network filesystem.",
        "Raise DataLoader num_workers (up to the CPU cores per GPU), set pin_memory=True and "
        "persistent_workers=True, move decoding to the GPU (DALI, torchvision.io on CUDA) or "
        "pre-pack the dataset into large shards on local NVMe; `dlrig bench dataloader` finds "
        "the best settings.",
        crashes=False,
    ),
    Cause(
        "kernel_resources_exceeded",
        "A GPU kernel asked for more resources than the GPU has",
        "A kernel's launch needs more shared memory, registers or threads per block than this "
        "GPU provides: a Triton kernel tuned for a larger GPU (A100 and H100 have 164-227 KiB of "
        "shared memory per block, most others 48-100 KiB), or a CUDA extension built in debug "
        "mode or for another architecture using more registers than its block size allows.",
        "Triton: update the library (newer releases carry configurations for smaller GPUs), use "
        "its smaller block sizes or fewer num_stages, or drop torch.compile's max-autotune; CUDA "
        "extensions: rebuild for this GPU (TORCH_CUDA_ARCH_LIST) without -G, or launch fewer "
        "threads per block.",
    ),
)
