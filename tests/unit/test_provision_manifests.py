"""Generated Kubernetes manifests validate: custom resources against their operators' CRD
schemas (Kubeflow's and the Prometheus Operator's, in
tests/data/schemas), built-in kinds with kubernetes-validate (Kubernetes' own schemas)."""

from __future__ import annotations

import copy
import functools
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from dlrig import provision
from dlrig.provision.launch import LaunchOptions

ROOT = Path(__file__).resolve().parents[2]
OUR_SCHEMAS = ROOT / "tests" / "data" / "schemas"


def crd_schema(path: Path) -> dict[str, Any]:
    """openAPIV3Schema of the served version, Kubernetes extensions made JSON Schema."""
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    version = next(v for v in crd["spec"]["versions"] if v.get("served"))
    schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])

    def convert(node: Any) -> Any:
        if isinstance(node, dict):
            node = {k: convert(v) for k, v in node.items()}
            if node.pop("x-kubernetes-int-or-string", False):
                node.pop("type", None)
                node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
            return node
        if isinstance(node, list):
            return [convert(item) for item in node]
        return node

    return convert(schema)


@functools.cache
def _validator(schema_file: Path) -> jsonschema.Draft7Validator:
    # The CRD schemas are large: build each validator once, without re-checking the schema.
    return jsonschema.Draft7Validator(crd_schema(schema_file))


def validate(document: dict[str, Any], schema_file: Path) -> None:
    error = jsonschema.exceptions.best_match(_validator(schema_file).iter_errors(document))
    if error is not None:
        raise error


def facts() -> provision.Facts:
    return provision.gather(None, provision.Stated(gpu="h100-sxm5-80gb", gpu_count=8), probe=False)


@pytest.mark.parametrize("nodes", [1, 4])
def test_pytorchjob_and_trainjob_validate_against_the_kubeflow_crds(nodes):
    bundle = provision.generate(
        "launch",
        facts(),
        options=LaunchOptions(script="train.py", nodes=nodes, scheduler="kubeflow"),
    )
    job = yaml.safe_load(bundle.file("pytorchjob.yaml").content)
    validate(job, OUR_SCHEMAS / "kubeflow.org_pytorchjobs.yaml")
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert job["spec"]["nprocPerNode"] == "8"  # a string, and explicit: WORLD_SIZE = replicas x 8
    assert ("Worker" in specs) is (nodes > 1)  # replicas: 0 would still make a pod
    assert sum(s["replicas"] for s in specs.values()) == nodes
    for spec in specs.values():
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        assert (
            container["name"] == "pytorch"
            and container["resources"]["limits"]["nvidia.com/gpu"] == 8
        )
        assert pod["volumes"][0]["emptyDir"]["medium"] == "Memory"
        assert container["volumeMounts"][0]["mountPath"] == "/dev/shm"
    train = yaml.safe_load(bundle.file("trainjob.yaml").content)
    validate(train, OUR_SCHEMAS / "trainer.kubeflow.org_trainjobs.yaml")
    assert (
        train["spec"]["trainer"]["numNodes"] == nodes
        and train["spec"]["trainer"]["numProcPerNode"] == 8
    )


def test_a_broken_job_is_rejected_by_the_same_check():
    bundle = provision.generate(
        "launch", facts(), options=LaunchOptions(script="train.py", nodes=2, scheduler="kubeflow")
    )
    job = yaml.safe_load(bundle.file("pytorchjob.yaml").content)
    job["spec"]["nprocPerNode"] = 8  # the CRD wants a string
    with pytest.raises(jsonschema.ValidationError):
        validate(job, OUR_SCHEMAS / "kubeflow.org_pytorchjobs.yaml")


def test_monitor_daemonset_service_and_servicemonitor_validate(tmp_path):
    bundle = provision.write(provision.generate("monitor-k8s", facts()), tmp_path)
    documents = list(yaml.safe_load_all(bundle.file("dlrig-monitor.yaml").content))
    kinds = [d["kind"] for d in documents]
    assert kinds == ["DaemonSet", "Service", "ServiceMonitor"]
    validate(documents[2], OUR_SCHEMAS / "monitoring.coreos.com_servicemonitors.yaml")
    paths = []
    for document in documents[:2]:
        path = tmp_path / f"{document['kind']}.yaml"
        path.write_text(yaml.safe_dump(document))
        paths.append(str(path))
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "kubernetes-validate"), "--strict", "-k", "1.32.0", *paths],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed") == 2, result.stdout
    daemonset = documents[0]["spec"]["template"]["spec"]
    container = daemonset["containers"][0]
    assert "nvidia.com/gpu" not in str(container.get("resources"))  # monitoring takes no GPU
    assert container["args"][:2] == ["monitor", "serve"] and "0.0.0.0" in container["args"]
    assert documents[2]["spec"]["selector"]["matchLabels"] == documents[1]["metadata"]["labels"]
