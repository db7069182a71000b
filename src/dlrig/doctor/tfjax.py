"""TensorFlow and JAX checks: the NVIDIA wheels their GPU builds asked for, and the retired
`tensorflow-gpu` package. `pip list | grep -i -E "tensorflow|jax|nvidia"` shows the same
versions; the pins are each wheel's own Requires-Dist (`pip show tensorflow` lists them)."""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.knowledge import framework_pins
from dlrig.machine.model import Machine, PackageInfo
from dlrig.report import CheckResult


def _installed(m: Machine) -> dict[str, str]:
    packages = m.frameworks.packages if m.frameworks else ()
    return {framework_pins.normalise(name): version for name, version in packages}


def _gpu_framework(m: Machine) -> tuple[str, PackageInfo, str] | None:
    """(table framework, package, the install command's extra) of the TF or JAX GPU build."""
    fw = m.frameworks
    if fw is None:
        return None
    if fw.jax_cuda_plugin is not None and fw.jax_cuda_plugin.name.startswith("jax-cuda1"):
        plugin = fw.jax_cuda_plugin
        major = plugin.name.removeprefix("jax-cuda").split("-")[0]
        return plugin.name, plugin, f'pip install -U "jax[cuda{major}]"'
    tf = fw.tensorflow
    if tf is not None and tf.name == "tensorflow":
        return "tensorflow", tf, f"pip install 'tensorflow[and-cuda]=={tf.version}'"
    return None


@check(
    "frameworks.gpu_wheels_match",
    "the NVIDIA wheels are the versions TensorFlow/JAX asked for",
)
def gpu_wheels_match(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """TensorFlow (`tensorflow[and-cuda]`, 2.14+) and JAX's CUDA plugins load CUDA, cuBLAS, cuDNN
    and NCCL from the `nvidia-*` pip wheels their metadata requires: exact versions up to TF
    2.19, ranges from 2.20, floors for JAX. Another package or a manual install that moved one of
    them leaves "Cannot dlopen some GPU libraries" (TF) or "Unable to load cuDNN" (JAX)."""
    found = _gpu_framework(m)
    if found is None:
        return c.skip("no TensorFlow or JAX GPU build in this snapshot")
    framework, package, install = found
    pins = framework_pins.pins_for(framework, package.version)
    if not pins:
        known = framework_pins.known_versions(framework)
        return c.skip(
            f"{package.name} {package.version}: its pins are not in dlrig's table "
            f"({known[0]} to {known[-1]})"
            if known
            else f"{package.name}: no pins known"
        )
    installed = _installed(m)
    nvidia = {name for name in installed if name.startswith("nvidia-")}
    if not nvidia:
        # No nvidia-* wheel at all: the build uses system CUDA libraries (or a paste without pip
        # list); nothing to compare.
        return c.skip(f"no nvidia-* wheels recorded next to {package.name} {package.version}")
    wrong = []
    missing = []
    for pin in pins:
        have = installed.get(framework_pins.normalise(pin.requirement))
        if have is None:
            missing.append(pin)
        elif not framework_pins.satisfies(have, pin.specifier):
            wrong.append((pin, have))
    if not wrong and not missing:
        return c.ok(f"{len(pins)} nvidia-* wheels as {package.name} {package.version} asks")
    cudnn = any("cudnn" in pin.requirement for pin, _ in wrong)
    if framework == "tensorflow":
        cause = "cudnn_version_mismatch" if cudnn else "tf_gpu_libraries_missing"
    else:
        cause = "jax_cuda_backend_failed"
    status = c.fail if wrong else c.warn
    return status(
        f"{package.name} {package.version}: "
        + ", ".join(
            part
            for part in (
                f"{len(wrong)} nvidia-* wheel(s) at versions it does not accept" if wrong else "",
                f"{len(missing)} it requires not installed" if missing else "",
            )
            if part
        ),
        *(f"{pin.requirement} {have} installed; {pin.specifier} required" for pin, have in wrong),
        *(f"{pin.requirement} {pin.specifier} required, not installed" for pin in missing),
        f"pins from {pins[0].source}",
        fix=f"{install}   # reinstalls the nvidia-* wheels it pins; check `pip check` after",
        cause=cause,
    )


@check("frameworks.tensorflow_gpu_package", "TensorFlow is not the retired tensorflow-gpu")
def tensorflow_gpu_package(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """`tensorflow-gpu` ended at 2.11 (2.12.0 on PyPI is an empty package that refuses to
    install); since 2.1 the `tensorflow` package itself holds the GPU build, and since 2.14
    `tensorflow[and-cuda]` brings the CUDA libraries."""
    tf = m.frameworks.tensorflow if m.frameworks else None
    if tf is None:
        return c.skip(facts.absent(m, "TensorFlow"))
    if tf.name != "tensorflow-gpu":
        return c.ok(f"{tf.name} {tf.version}")
    return c.warn(
        f"tensorflow-gpu {tf.version} is a retired package (its last release is 2.11)",
        fix="pip uninstall -y tensorflow-gpu && pip install 'tensorflow[and-cuda]'",
        cause=None,
    )
