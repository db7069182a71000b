"""Readable report of a fit estimate, with the memory breakdown drawn as a bar."""

from __future__ import annotations

from typing import Any

from dlrig.fit import checkpointing
from dlrig.fit.result import FitResult
from dlrig.units import human_bytes, human_seconds

_COLOURS = {
    "parameters": "blue",
    "gradients": "magenta",
    "optimizer_state": "yellow",
    "activations": "green",
    "optimizer_temporaries": "bright_yellow",
    "communication_buffers": "cyan",
    "allocator_reserve": "bright_black",
    "workspaces": "white",
    "cuda_context": "red",
    "nccl_buffers": "bright_cyan",
    "autocast_weight_copies": "bright_green",
    "gathered_parameters": "bright_blue",
    "weights": "blue",
    "kv_cache": "magenta",
}
BAR_WIDTH = 60


def _bar(result: FitResult) -> Any:
    from rich.text import Text

    capacity = max(result.gpu_memory_bytes, result.memory_peak_bytes, 1)
    bar = Text()
    used = 0
    for name, value in result.memory_breakdown.items():
        cells = round(BAR_WIDTH * value / capacity)
        if value > 0 and cells == 0:
            cells = 1 if value / capacity > 0.005 else 0
        bar.append("█" * cells, style=_COLOURS.get(name, "white"))
        used += cells
    free = max(0, BAR_WIDTH - used)
    bar.append("░" * free, style="dim")
    bar.append(
        f"  {human_bytes(result.memory_peak_bytes)} of {human_bytes(result.gpu_memory_bytes)}"
    )
    return bar


def _model_parallel(setup: dict[str, Any]) -> bool:
    return any(setup.get(key, 1) > 1 for key in ("tp", "pp", "cp"))


def render_text(result: FitResult, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    head = Text()
    head.append(f"{result.model}", style="bold")
    head.append(f"  {result.params / 1e6:,.1f} M parameters  on {result.gpu}")
    if result.method == "analytic":
        head.append("  ANALYTIC ESTIMATE (not traced)", style="bold red")
    console.print(head)
    if result.inference is not None:
        _render_inference(result, console)
        return
    setup = result.setup
    shape = (
        f"seq {result.seq_len}"
        if result.seq_len
        else f"image {result.image_size}px"
        if result.image_size
        else ""
    )
    console.print(
        f"batch {result.batch_size}/{'replica' if _model_parallel(setup) else 'GPU'}{' ' + shape if shape else ''}, {setup['precision']}, {setup['optimizer']}, "
        f"checkpointing {_checkpointing(setup)}, accumulation {setup['grad_accum']}, "
        f"{setup['gpus']} GPU(s) {setup['strategy']}"
        + "".join(
            f" {key.upper()} {setup[key]}" for key in ("tp", "pp", "cp") if setup.get(key, 1) > 1
        )
        + (f", torch.compile {setup['compile']}" if setup.get("compile", "none") != "none" else "")
        + (", fp8 linears" if setup.get("fp8") else ""),
        style="dim",
    )
    console.print()
    verdict = Text()
    if result.fits:
        verdict.append("FITS", style="bold green")
        verdict.append(f" with {human_bytes(result.margin_bytes)} to spare")
        if result.pageable_bytes and result.memory_peak_bytes > result.gpu_memory_bytes:
            verdict.append(
                f" once {human_bytes(result.memory_peak_bytes - result.gpu_memory_bytes)} of the "
                "paged optimizer state moves to host RAM"
            )
    else:
        verdict.append("DOES NOT FIT", style="bold red")
        verdict.append(f": {human_bytes(-result.margin_bytes)} over")
    if result.peak_phase:
        verdict.append(f"  (peak in {result.peak_phase})", style="dim")
    console.print(verdict)
    console.print(_bar(result))
    legend = Table.grid(padding=(0, 2))
    legend.add_column()
    legend.add_column(justify="right")
    for name, value in result.memory_breakdown.items():
        if value:
            legend.add_row(
                Text(f"█ {name.replace('_', ' ')}", style=_COLOURS.get(name, "white")),
                human_bytes(value),
            )
    console.print(legend)
    if result.activation_peak_bytes and result.activation_peak_bytes != result.memory_breakdown.get(
        "activations"
    ):
        console.print(
            f"activations at their own peak: {human_bytes(result.activation_peak_bytes)} (the same for every strategy)",
            style="dim",
        )
    if result.host_memory_bytes_per_node:
        console.print(
            f"host RAM for CPU offload: {human_bytes(result.host_memory_bytes_per_node)} per node"
        )
    if result.max_batch_size is not None:
        unit = "per replica" if _model_parallel(setup) else "per GPU"
        console.print(f"largest batch that fits: [bold]{result.max_batch_size}[/bold] {unit}")
    if result.global_batch:
        gb = result.global_batch
        console.print(
            f"global batch {gb['target']}: micro-batch {gb['micro_batch_per_gpu']} × accumulation "
            f"{gb['grad_accum']} × {gb['gpus']} GPU(s) = {gb['global_batch']}"
            + ("" if gb["exact"] else " (nearest achievable)")
        )
        if gb.get("reason"):
            console.print(Text(f"  {gb['reason']}", style="dim"))
    if result.advice:
        console.print(Text("what would fit:", style="bold"))
        for advice in result.advice:
            mark = "fits" if advice.fits else "still over"
            console.print(
                f"  {advice.change:40} {human_bytes(advice.memory_peak_bytes):>10} per GPU  {mark}"
                + (f"  ({advice.note})" if advice.note else "")
            )
    if result.step_time_s is not None:
        console.print()
        speed = Table.grid(padding=(0, 2))
        speed.add_column(style="bold")
        speed.add_column()
        speed.add_row("step time", human_seconds(result.step_time_s))
        if result.samples_per_s:
            speed.add_row(
                "throughput",
                f"{result.samples_per_s:,.1f} samples/s (all GPUs)"
                + (f", {result.tokens_per_s:,.0f} tokens/s" if result.tokens_per_s else ""),
            )
        if result.flops_per_step:
            speed.add_row("FLOPs per step", f"{result.flops_per_step / 1e12:,.1f} TFLOP per GPU")
        if result.mfu is not None:
            speed.add_row("MFU", f"{result.mfu:.1%}")
        if result.scaling_efficiency is not None:
            speed.add_row(
                "scaling efficiency",
                f"{result.scaling_efficiency:.1%} of {setup['gpus']} × one GPU",
            )
        if result.time_to_train_s is not None:
            speed.add_row("time to train", human_seconds(result.time_to_train_s))
        console.print(speed)
    for note in result.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    console.print()
    console.print(Text("assumptions:", style="bold"))
    for assumption in result.assumptions:
        console.print(Text(f"  - {assumption}", style="dim"))


def _render_inference(result: FitResult, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    served = result.inference or {}
    console.print(
        f"serving batch {served.get('batch_size')} × context {served.get('context')} tokens, "
        f"weights {served.get('weights')}",
        style="dim",
    )
    console.print()
    verdict = Text()
    gpus = served.get("gpus", 1)
    if result.fits:
        verdict.append(
            "FITS ONE GPU" if gpus == 1 else f"FITS {gpus} GPUs (tensor parallel {gpus})",
            style="bold green",
        )
    else:
        verdict.append(
            f"NEEDS {gpus} GPUs: tensor parallel {served.get('tensor_parallel')} × "
            f"{served.get('pipeline_stages')} pipeline stage(s)",
            style="bold yellow",
        )
    console.print(verdict)
    console.print(_bar(result))
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    if "weights_bytes" in served:
        table.add_row("weights (all GPUs)", human_bytes(served["weights_bytes"]))
    table.add_row("KV cache (all GPUs)", human_bytes(served.get("kv_cache_bytes", 0)))
    if "max_concurrency" in served:
        # vLLM's start-up line: "Maximum concurrency for N tokens per request: X"
        table.add_row(
            "room for",
            f"{served['max_concurrency']:,.1f} sequences of {served['context']:,} tokens at once "
            f"(KV cache for {served['kv_cache_tokens']:,} tokens)",
        )
        longest = f"{served['max_context']:,} tokens for one sequence"
        if served["max_context"] < served["kv_cache_tokens"]:
            longest += " (the model's max_position_embeddings)"
        table.add_row("longest context", longest)
    if "prefill_tokens_per_s" in served:
        table.add_row("prefill", f"{served['prefill_tokens_per_s']:,.0f} tokens/s")
        table.add_row(
            "decode",
            f"{served['decode_tokens_per_s']:,.0f} tokens/s ({served['decode_tokens_per_s_per_sequence']:,.1f} per sequence)",
        )
        table.add_row("time to first token", human_seconds(served["time_to_first_token_s"]))
        if (
            "end_to_end_output_tokens_per_s" in served
            and served["context"] > served["prompt_tokens"]
        ):
            # what a static benchmark of this batch prints (prefill included)
            output = max(1, served["context"] - served["prompt_tokens"])
            table.add_row(
                "whole batch",
                f"{served['end_to_end_output_tokens_per_s']:,.0f} output tokens/s over "
                f"{served['batch_size']:,} × ({served['prompt_tokens']:,} prompt + {output:,} "
                "generated) tokens, prefill included",
            )
    console.print(table)
    console.print()
    console.print(Text("assumptions:", style="bold"))
    for assumption in result.assumptions:
        console.print(Text(f"  - {assumption}", style="dim"))


def _checkpointing(setup: dict[str, Any]) -> str:
    blocks = setup.get("checkpoint_blocks") or 1.0
    if setup["grad_checkpointing"] != "full" or blocks == 1.0:
        return str(setup["grad_checkpointing"])
    return f"full on {checkpointing.fraction_of(blocks)} of the blocks"
