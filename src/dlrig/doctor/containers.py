"""Container checks: can Docker hand GPUs to containers."""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.machine.model import Machine
from dlrig.report import CheckResult

_TOOLKIT_FIX = (
    "Install the NVIDIA Container Toolkit (https://docs.nvidia.com/datacenter/cloud-native/"
    "container-toolkit/latest/install-guide.html), then:\n"
    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker\n"
    "test: docker run --rm --gpus all ubuntu nvidia-smi"
)


@check("containers.toolkit", "Docker can use the GPUs", cause="container_toolkit_missing")
def toolkit(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """`docker run --gpus all` needs the NVIDIA Container Toolkit; without it Docker answers
    'could not select device driver "" with capabilities: [[gpu]]'. The snap package of Docker
    cannot use the toolkit at all."""
    cont = m.containers
    if cont is None:
        return c.skip("container facts not in this snapshot")
    if not cont.docker_installed:
        return c.skip("Docker is not installed")
    if cont.docker_is_snap and facts.has_nvidia_gpu(m):
        return c.warn(
            "Docker is the snap package, which cannot pass GPUs to containers",
            fix="sudo snap remove docker && install docker-ce from Docker's apt repository; then "
            + _TOOLKIT_FIX,
        )
    if not facts.has_nvidia_gpu(m):
        return c.skip("no NVIDIA GPU")
    if not cont.nvidia_container_toolkit:
        return c.fail(
            "Docker is installed but the NVIDIA Container Toolkit is not",
            "no nvidia-ctk / nvidia-container-cli on PATH",
            fix=_TOOLKIT_FIX,
        )
    return c.ok(
        "NVIDIA Container Toolkit installed",
        *(
            ["Docker's daemon.json registers the nvidia runtime"]
            if cont.docker_nvidia_runtime_configured
            else []
        ),
    )


@check("containers.inside", "running inside a container")
def inside(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Inside a container the driver comes from the host, /dev/shm and the open-file limit come
    from the container runtime's settings, and what this report says about hardware is what the
    container was given."""
    cont = m.containers
    if cont is None or cont.in_container is None:
        return c.skip("container facts not in this snapshot")
    if cont.in_container:
        return c.info(
            f"running inside a {cont.container_kind or ''} container".replace("  ", " "),
            "host-level settings (driver, firewall, CPU governor) are the host's; run dlrig on the host to check them",
        )
    return c.ok("not inside a container")
