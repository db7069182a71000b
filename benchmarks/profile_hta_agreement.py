"""`dlrig profile` against Holistic Trace Analysis on every recorded trace in
tests/corpus/kineto (A100, H100, B200, MI250, MI300; MIT, with sources).

For each trace both tools run on the same file; the script prints HTA's temporal breakdown
(idle / compute / non-compute, % of the GPU's span) as installed and with its timestamp
rounding off (HTA_DISABLE_NS_ROUNDING=1), dlrig's figure computed HTA's way, the largest
difference, and whether the five largest kernels by total time are the same, in the same
order, with totals within 1 %. Target: every difference ≤ 2 percentage points.

    python benchmarks/profile_hta_agreement.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hta_env
from dlrig.profile import hta, kernels, trace

KINETO = hta_env.ROOT / "tests" / "corpus" / "kineto"
KEYS = (
    ("idle_pct", "idle_time_pctg"),
    ("compute_pct", "compute_time_pctg"),
    ("non_compute_pct", "non_compute_time_pctg"),
)


def main() -> None:
    hta_env.ensure()
    worst = {"exact": 0.0, "default": 0.0}
    kernel_ok = kernel_all = 0
    failed_default = 0
    files = sorted(KINETO.glob("*.json.gz"))
    for path in files:
        loaded = trace.load(path)
        split = hta.split(loaded)
        with tempfile.TemporaryDirectory() as folder:
            shutil.copy(path, Path(folder) / path.name)
            exact = hta_env.run(Path(folder), rounding=False)
            default = hta_env.run(Path(folder), rounding=True)
        assert split is not None
        ours = [getattr(split, k) for k, _ in KEYS]
        line = f"{path.name:42} dlrig " + "/".join(f"{v:5.1f}" for v in ours)
        for label, result in (("exact", exact), ("default", default)):
            if "error" in result:
                line += f"  HTA {label}: failed ({str(result['error'])[:40]})"
                failed_default += label == "default"
                continue
            row = result["temporal"][0]  # type: ignore[index]
            theirs = [row[k] for _, k in KEYS]
            diff = max(abs(a - b) for a, b in zip(ours, theirs, strict=True))
            worst[label] = max(worst[label], diff)
            line += f"  HTA {label} " + "/".join(f"{v:5.1f}" for v in theirs) + f" Δ{diff:.2f}"
        if "error" not in exact:
            totals = hta.kernel_totals(loaded)
            mine = sorted(
                (
                    n
                    for n in totals
                    if kernels.hta_type(n, "kernel") != "OTHER" or n.startswith("Mem")
                ),
                key=lambda n: -totals[n],
            )[:5]
            rows = sorted(exact["kernels"], key=lambda r: -r["sum (us)"])[:5]  # type: ignore[index]
            same = [r["name"] for r in rows] == mine and all(
                abs(totals[r["name"]] - r["sum (us)"]) <= max(2.0, 0.01 * r["sum (us)"])
                for r in rows
            )
            kernel_all += 1
            kernel_ok += same
            line += "  top-5 kernels " + ("same" if same else "DIFFER")
        print(line, flush=True)
    print(
        f"traces={len(files)} max_diff_pp_vs_hta_exact={worst['exact']:.2f} "
        f"max_diff_pp_vs_hta_default={worst['default']:.2f} hta_default_failed={failed_default} "
        f"top5_kernels_same={kernel_ok}/{kernel_all} target_pp=2.0 "
        f"ok={worst['exact'] <= 2.0 and kernel_ok == kernel_all}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()
