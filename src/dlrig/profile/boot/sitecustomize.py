"""Started by Python before the profiled program (dlrig profile -- CMD). It arms the profiler
for when the program imports torch, then runs the sitecustomize the program would have run
without dlrig. It never stops the program: a failure here is one line on stderr."""

import os
import sys

if os.environ.get("DLRIG_PROFILE_DIR"):
    try:
        import dlrig_profile_boot  # type: ignore[import-not-found]  # this folder, on PYTHONPATH

        dlrig_profile_boot.arm_from_environment()
    except Exception as exc:  # noqa: BLE001 - the program runs unprofiled rather than not at all
        sys.stderr.write(f"dlrig profile: not profiling this process: {exc}\n")


def _chain() -> None:
    """Run the next `sitecustomize` on sys.path (a conda or distro one), as Python would
    have without this folder in front."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - reported, as Python itself would
        sys.stderr.write(f"dlrig profile: the program's own sitecustomize failed: {exc}\n")


_chain()
