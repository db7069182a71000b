"""A real two-node Slurm cluster on this machine, for tests that submit real jobs.

munged, slurmctld and two slurmd (nodes n1 and n2, both on 127.0.0.1 with their own ports)
run in the foreground, each in its own session, with every file (config, state, spool, logs,
pids, the munge socket) under one temporary folder. GPUs are faked for GRES with character
devices (`mknod DIR/nvidiaN c 195 N`), so `--gpus-per-node=1` sets CUDA_VISIBLE_DEVICES like
on a real GPU node. The recipe is the one checked on this machine in
shared/docs/notes/round2.md. No systemd and no cgroups are needed.

Use it from any test module:

    from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401  (the fixture)

    def test_job(slurm_cluster):
        out = slurm_cluster.run(["srun", "-N2", "--ntasks-per-node=1", "hostname"])
        job = slurm_cluster.sbatch(script_path, cwd=tmp)  # waits; returns the finished job

or without pytest: `with SlurmCluster.start(path) as cluster: ...`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NODES = ("n1", "n2")
_PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo")


def missing_programs() -> list[str]:
    return [p for p in _PROGRAMS if shutil.which(p) is None and not Path(f"/usr/sbin/{p}").exists()]


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class FinishedJob:
    job_id: str
    state: str  # COMPLETED | FAILED | CANCELLED | TIMEOUT ...
    exit_code: str  # "0:0"
    stdout: str  # the job's output file


@dataclass
class SlurmCluster:
    root: Path
    gpus_per_node: int = 1
    cpus_per_node: int = 2
    # More slurm.conf lines (HealthCheckProgram=..., HealthCheckInterval=...) for one test's own
    # cluster; the shared one has none.
    extra_config: tuple[str, ...] = ()
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    # --- paths and environment ---------------------------------------------------------------

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket.2"

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment a client command (sbatch, srun, scontrol) needs for this cluster."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        # A client started from inside another job would otherwise inherit that job's ids.
        for key in list(env):
            if key.startswith("SLURM_") and key != "SLURM_CONF":
                del env[key]
        env.update(extra or {})
        return env

    def run(
        self,
        argv: Sequence[str],
        timeout_s: float = 60,
        extra_env: dict[str, str] | None = None,
        cwd: Path | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=self.env(extra_env),
            cwd=cwd,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {result.returncode}\n{result.stdout}\n{result.stderr}\n"
                + self.logs()
            )
        return result

    def logs(self, tail_lines: int = 30) -> str:
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-tail_lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    # --- jobs ----------------------------------------------------------------------------------

    def sbatch(
        self,
        script: Path,
        cwd: Path,
        args: Sequence[str] = (),
        timeout_s: float = 120,
        extra_env: dict[str, str] | None = None,
    ) -> FinishedJob:
        """Submit a batch script, wait for it to finish, return its state and output."""
        out_file = cwd / "slurm-%j.out"
        result = self.run(
            ["sbatch", "--parsable", f"--output={out_file}", *args, str(script)],
            cwd=cwd,
            extra_env=extra_env,
        )
        job_id = result.stdout.strip().split(";")[0]
        state, exit_code = self.wait(job_id, timeout_s)
        output = cwd / f"slurm-{job_id}.out"
        return FinishedJob(
            job_id=job_id,
            state=state,
            exit_code=exit_code,
            stdout=output.read_text(errors="replace") if output.exists() else "",
        )

    def wait(self, job_id: str, timeout_s: float) -> tuple[str, str]:
        """Poll scontrol until the job leaves PENDING/RUNNING; (state, exit code)."""
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            shown = self.run(["scontrol", "show", "job", "-o", job_id], check=False)
            last = shown.stdout
            fields = dict(item.split("=", 1) for item in shown.stdout.split() if "=" in item)
            state = fields.get("JobState", "")
            if state and state not in {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING"}:
                return state, fields.get("ExitCode", "")
            time.sleep(0.3)
        self.run(["scancel", job_id], check=False)
        raise AssertionError(
            f"job {job_id} did not finish in {timeout_s} s: {last}\n" + self.logs()
        )

    def set_node_env(self, node: str, variables: dict[str, str] | None) -> None:
        """Give every task on `node` these extra environment variables (None: none)."""
        path = self.conf.parent / "node-env" / f"{node}.env"
        if not variables:
            path.unlink(missing_ok=True)
            return
        path.write_text("".join(f"{key}={value}\n" for key, value in variables.items()))

    def set_node_state(self, node: str, state: str, reason: str = "test") -> None:
        argv = ["scontrol", "update", f"nodename={node}", f"state={state}"]
        if state.lower() in {"drain", "down"}:
            argv.append(f"reason={reason}")
        self.run(argv)

    # --- life cycle ----------------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def start(
        cls, root: Path, gpus_per_node: int = 1, extra_config: tuple[str, ...] = ()
    ) -> Iterator[SlurmCluster]:
        cluster = cls(root=root, gpus_per_node=gpus_per_node, extra_config=extra_config)
        try:
            cluster._start()
            yield cluster
        finally:
            cluster.stop()

    def _start(self) -> None:
        for name in ("etc", "state", "spool", "log", "run", "munge", "dev"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        self._fake_gpus()
        self._start_munge()
        ctld, *node_ports = _free_ports(1 + len(NODES))
        self.ports = {"slurmctld": ctld, **dict(zip(NODES, node_ports, strict=True))}
        self._write_config()
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait_for(
            lambda: self.run(["scontrol", "ping"], check=False).returncode == 0, "slurmctld"
        )
        for node in NODES:
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])
        self._wait_for(self._nodes_idle, "both slurmd idle")

    def _fake_gpus(self) -> None:
        for node in NODES:
            (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
            folder = self.root / "dev" / node
            folder.mkdir(exist_ok=True)
            for index in range(self.gpus_per_node):
                device = folder / f"nvidia{index}"
                if not device.exists():
                    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(195, index))

    def _start_munge(self) -> None:
        folder = self.root / "munge"
        shutil.chown(folder, "munge", "munge")
        # munged insists that everyone may traverse to its socket (the root and its parents).
        os.chmod(folder, 0o755)
        os.chmod(self.root, 0o755)
        self._spawn(
            "munged",
            [
                "munged",
                "-F",
                f"--socket={self.munge_socket}",
                f"--pid-file={folder / 'munged.pid'}",
                f"--log-file={folder / 'munged.log'}",
                f"--seed-file={folder / 'munged.seed'}",
            ],
            user="munge",
        )
        self._wait_for(self.munge_socket.exists, "munged socket")

    def _write_config(self) -> None:
        root = self.root
        host = socket.gethostname()
        lines = [
            "ClusterName=dlrigtest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ports['slurmctld']}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "GresTypes=gpu",
            "ReturnToService=2",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "MinJobAge=600",
            "KillWait=5",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool/%n",
            f"SlurmctldPidFile={root}/run/slurmctld.pid",
            f"SlurmdPidFile={root}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={root}/log/slurmctld.log",
            f"SlurmdLogFile={root}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # Per-node task environment (set_node_env): like a node whose /etc/environment or
            # module setup differs from the others'.
            f"TaskProlog={root}/etc/task_prolog.sh",
        ]
        for node in NODES:
            lines.append(
                f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={self.ports[node]} "
                f"CPUs={self.cpus_per_node} RealMemory=2000 Gres=gpu:{self.gpus_per_node} "
                "State=UNKNOWN"
            )
        lines.append(
            f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP"
        )
        lines.extend(self.extra_config)
        self.conf.write_text("\n".join(lines) + "\n")
        prolog = self.conf.parent / "task_prolog.sh"
        prolog.write_text(
            "#!/bin/sh\n"
            f'env_file="{root}/etc/node-env/$SLURMD_NODENAME.env"\n'
            '[ -r "$env_file" ] && sed "s/^/export /" "$env_file"\n'
            "exit 0\n"
        )
        prolog.chmod(0o755)
        (self.conf.parent / "node-env").mkdir(exist_ok=True)
        # gres.conf does not expand %n: one line per node.
        gres = []
        for node in NODES:
            files = ",".join(f"{root}/dev/{node}/nvidia{i}" for i in range(self.gpus_per_node))
            gres.append(f"NodeName={node} Name=gpu File={files}")
        (self.conf.parent / "gres.conf").write_text("\n".join(gres) + "\n")

    def _spawn(self, name: str, argv: list[str], user: str | None = None) -> None:
        log = open(self.root / "log" / f"{name}.out", "wb")  # noqa: SIM115 - owned by the process
        self.processes[name] = subprocess.Popen(
            argv,
            # Dropped in the child itself (not through runuser), so the PID we stop is munged's.
            user=user,
            group=user,
            extra_groups=[] if user else None,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env(),
            start_new_session=True,
        )
        log.close()

    def _nodes_idle(self) -> bool:
        shown = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        states = dict(line.split() for line in shown.stdout.splitlines() if line.strip())
        return all(states.get(node, "").startswith("idle") for node in NODES)

    def _wait_for(self, condition: object, what: str, timeout_s: float = 30) -> None:
        assert callable(condition)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(
                        f"{name} exited {process.returncode} while waiting for {what}\n"
                        + self._outputs()
                    )
            if condition():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}\n" + self._outputs() + self.logs())

    def _outputs(self) -> str:
        parts = []
        for out in sorted((self.root / "log").glob("*.out")):
            parts.append(f"--- {out.name}\n{out.read_text(errors='replace')[-2000:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Stop every daemon by its own PID (slurmd first, munged last)."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=5)
        self.processes.clear()


_SHARED: dict[str, object] = {"cluster": None, "users": 0, "stack": None}


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """One two-node cluster for the whole session (start-up takes about a second).

    Each test module that imports this fixture gets its own fixture definition from pytest,
    so the cluster itself is shared through a reference count: started by the first user,
    stopped (each daemon by its PID) after the last one.
    """
    missing = missing_programs()
    if missing:
        pytest.fail(
            "the Slurm cluster needs " + ", ".join(missing) + ": run `make system` (apt-get "
            "install munge slurmctld slurmd slurm-client)"
        )
    if os.geteuid() != 0:
        pytest.fail("the Slurm test cluster runs its daemons as root (SlurmUser=root)")
    if _SHARED["cluster"] is None:
        # Not under pytest's basetemp: its 0700 folders would hide munged's socket from munged.
        root = Path(tempfile.mkdtemp(prefix="dlrig-slurm-"))
        stack = contextlib.ExitStack()
        stack.callback(shutil.rmtree, root, True)
        _SHARED["cluster"] = stack.enter_context(SlurmCluster.start(root))
        _SHARED["stack"] = stack
    _SHARED["users"] = int(str(_SHARED["users"])) + 1
    cluster = _SHARED["cluster"]
    assert isinstance(cluster, SlurmCluster)
    try:
        yield cluster
    finally:
        _SHARED["users"] = int(str(_SHARED["users"])) - 1
        if _SHARED["users"] == 0:
            stack = _SHARED["stack"]
            assert isinstance(stack, contextlib.ExitStack)
            _SHARED.update(cluster=None, stack=None)
            stack.close()
