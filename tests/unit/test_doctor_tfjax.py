"""TensorFlow and JAX: the nvidia-* wheels their GPU builds require, from the wheels' own
METADATA (framework_gpu_pins.csv), against what is installed."""

from __future__ import annotations

from dlrig import doctor
from dlrig.knowledge import framework_pins
from dlrig.machine.model import Frameworks, Machine, Origin, PackageInfo


def _machine(framework: PackageInfo, packages: dict[str, str], *, plugin: bool) -> Machine:
    return Machine(
        origin=Origin(kind="snapshot"),
        frameworks=Frameworks(
            tensorflow=None if plugin else framework,
            jax=PackageInfo("jax", framework.version) if plugin else None,
            jax_cuda_plugin=framework if plugin else None,
            packages=tuple(sorted(packages.items())),
        ),
    )


def _result(machine: Machine, check_id: str):
    return next(r for r in doctor.run(machine=machine).checks if r.id == check_id)


def _exact(framework: str, version: str) -> dict[str, str]:
    """The install pip makes of the release: each pin at its exact or lowest allowed version."""
    out = {}
    for pin in framework_pins.pins_for(framework, version):
        lowest = next(c for c in pin.specifier.split(",") if c.startswith(("==", ">=")))
        out[pin.requirement] = lowest.lstrip("=>")
    return out


def test_a_complete_tensorflow_install_passes_and_a_moved_cudnn_fails() -> None:
    tf = PackageInfo("tensorflow", "2.19.0", build="cuda-12.5.1")
    wheels = _exact("tensorflow", "2.19.0")
    assert wheels["nvidia-cudnn-cu12"] == "9.3.0.75"  # TF 2.19's METADATA: ==9.3.0.75
    assert _result(_machine(tf, wheels, plugin=False), "frameworks.gpu_wheels_match").status == "ok"
    # A second package pinned cuDNN 8.9 (the TF 2.16/2.17 pin) into the same environment.
    moved = {**wheels, "nvidia-cudnn-cu12": "8.9.7.29"}
    result = _result(_machine(tf, moved, plugin=False), "frameworks.gpu_wheels_match")
    assert result.status == "fail"
    assert result.cause == "cudnn_version_mismatch"
    assert any(
        "nvidia-cudnn-cu12 8.9.7.29 installed; ==9.3.0.75 required" in e for e in result.evidence
    )
    assert "tensorflow[and-cuda]==2.19.0" in (result.fix or "")


def test_jax_plugin_floors_name_an_old_cudnn() -> None:
    # conda-forge/jax-feedstock#149: cuDNN 8.9.7 under a JAX that needs cuDNN 9.
    version = framework_pins.known_versions("jax-cuda12-plugin")[-1]
    plugin = PackageInfo("jax-cuda12-plugin", version)
    wheels = {**_exact("jax-cuda12-plugin", version), "nvidia-cudnn-cu12": "8.9.7.29"}
    result = _result(_machine(plugin, wheels, plugin=True), "frameworks.gpu_wheels_match")
    assert result.status == "fail"
    assert result.cause == "jax_cuda_backend_failed"
    assert "jax[cuda12]" in (result.fix or "")


def test_no_nvidia_wheels_is_not_judged_and_tensorflow_gpu_is_retired() -> None:
    tf = PackageInfo("tensorflow-gpu", "2.11.0")
    machine = _machine(tf, {}, plugin=False)
    assert _result(machine, "frameworks.gpu_wheels_match").status == "skip"
    retired = _result(machine, "frameworks.tensorflow_gpu_package")
    assert retired.status == "warn" and "tensorflow[and-cuda]" in (retired.fix or "")


def test_specifiers_read_as_pep_440() -> None:
    assert framework_pins.satisfies("9.10.2.21", ">=9.3.0.75,<10")
    assert not framework_pins.satisfies("10.0.0", ">=9.3.0.75,<10")
    assert framework_pins.satisfies("12.5.82", "==12.5.82")
    assert not framework_pins.satisfies("12.5.39", "==12.5.82")
    assert framework_pins.satisfies("2.2.1", "~=2.2")
    assert not framework_pins.satisfies("3.0", "~=2.2")
