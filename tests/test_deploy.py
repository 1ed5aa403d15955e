"""The production topology (deploy/compose, deploy/k8s; issue 27 §5), validated by the tools
that run here: Debian's ``docker-compose config`` parses the Compose files without an engine,
``kubectl kustomize`` builds the manifests, the Kubernetes JSON schemas check them when
``kubernetes-validate`` is installed, and a structural test that always runs checks what the
topology must hold (replicas, n8n queue mode, one encryption key, secrets only as references)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from countersign.n8n import N8N_VERSION

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy" / "compose"
K8S = ROOT / "deploy" / "k8s"
#: files the Compose files name under ./secrets/ or as env files (never committed)
SECRET_FILES = [
    "postgres_password",
    "n8n_db_password",
    "temporal_db_password",
    "n8n_encryption_key",
    "payload-k1.key",
    "temporal-client.pem",
    "temporal-client.key",
]
ENV_FILES = ["countersign.env", "temporal.env"]
#: environment names that hold a secret: never given a value in a deployment file
_SECRET_NAME = re.compile(r"PASSWORD|ENCRYPTION_KEY|API_KEY|SIGNING_KEY$|SECRET|TOKEN|_URL$")
#: ..._URL names that are addresses, not credentials
_PLAIN_URLS = {"WEBHOOK_URL", "COUNTERSIGN_N8N_URL", "COUNTERSIGN_TEMPORAL_UI_URL"}


def _compose_copy(tmp: Path) -> Path:
    """deploy/compose with empty stand-ins for the secret and env files it names."""
    out = tmp / "compose"
    shutil.copytree(COMPOSE, out)
    (out / "secrets").mkdir(exist_ok=True)
    for name in SECRET_FILES:
        (out / "secrets" / name).write_text("")
    for name in ENV_FILES:
        (out / name).write_text("")
    return out


def _compose_config(folder: Path, *files: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("docker-compose")
    if tool is None:
        pytest.skip("docker-compose is missing: apt-get install docker-compose (Debian package)")
    args = [tool, *(a for f in files for a in ("-f", f)), "config", "-q"]
    return subprocess.run(args, check=False, cwd=folder, capture_output=True, text=True, timeout=60)


def test_docker_compose_parses_the_topology_and_refuses_a_broken_one(tmp_path: Path) -> None:
    folder = _compose_copy(tmp_path)
    for files in (["compose.yaml"], ["compose.yaml", "compose.temporal-cloud.yaml"]):
        done = _compose_config(folder, *files)
        assert done.returncode == 0, done.stderr
    text = (folder / "compose.yaml").read_text()
    (folder / "compose.yaml").write_text(text.replace("replicas: 2", "replicas: two", 1))
    assert _compose_config(folder, "compose.yaml").returncode != 0  # the tool does check


def _compose() -> dict[str, Any]:
    doc = yaml.safe_load((COMPOSE / "compose.yaml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_compose_holds_the_topology() -> None:
    services = _compose()["services"]
    assert {"postgres", "redis", "temporal", "n8n-main", "n8n-worker", "api", "worker"} <= set(
        services
    )
    assert services["api"]["deploy"]["replicas"] >= 2
    assert services["worker"]["deploy"]["replicas"] >= 2
    assert services["n8n-worker"]["deploy"]["replicas"] >= 2
    assert "pgvector" in services["postgres"]["image"]
    for name in ("n8n-main", "n8n-worker"):
        env = services[name]["environment"]
        assert env["EXECUTIONS_MODE"] == "queue" and env["QUEUE_BULL_REDIS_HOST"] == "redis"
        assert env["DB_TYPE"] == "postgresdb"
        assert env["N8N_ENCRYPTION_KEY_FILE"] == "/run/secrets/n8n_encryption_key"
        assert services[name]["image"].endswith(f":{N8N_VERSION}")
    assert services["n8n-main"]["command"] == ["start"]
    assert services["n8n-worker"]["command"][0] == "worker"
    assert services["api"]["command"][:2] == ["countersign", "api"]
    assert services["worker"]["command"] == ["countersign", "temporal", "worker"]


def _env_pairs(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (name, value) of an environment mapping or list, anywhere in a document."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "environment" and isinstance(v, dict):
                yield from v.items()
            elif k == "env" and isinstance(v, list):
                yield from ((e.get("name"), e.get("value", e.get("valueFrom"))) for e in v)
            elif k == "data" and isinstance(v, dict) and value.get("kind") == "ConfigMap":
                yield from v.items()
            else:
                yield from _env_pairs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _env_pairs(v)


def _secret_values(docs: list[Any]) -> list[str]:
    bad = []
    for name, value in (p for d in docs for p in _env_pairs(d)):
        if not isinstance(name, str) or not _SECRET_NAME.search(name) or name in _PLAIN_URLS:
            continue
        if isinstance(value, dict) and "secretKeyRef" in value:
            continue  # a reference
        if name.endswith("_FILE") and str(value).startswith("/run/secrets/"):
            continue
        bad.append(name)
    return bad


def _manifests() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is not None:
        done = subprocess.run(
            [kubectl, "kustomize", str(K8S)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        text = done.stdout
    else:  # the kustomization's resources, as files
        kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
        text = "\n---\n".join((K8S / r).read_text() for r in kust["resources"])
    return [d for d in yaml.safe_load_all(text) if d]


def test_no_secret_value_in_any_deployment_file() -> None:
    assert _secret_values([_compose()]) == []
    assert _secret_values(_manifests()) == []
    assert not [d for d in _manifests() if d["kind"] == "Secret"]
    # the check finds one: a password given as a value
    assert _secret_values([{"environment": {"DB_POSTGRESDB_PASSWORD": "hunter2"}}])
    ignored = (COMPOSE / ".gitignore").read_text().split()
    assert "secrets/" in ignored and "*.env" in ignored


def _by(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = doc["spec"]["template"]["spec"]["containers"][0]
    return c


def test_manifests_hold_the_topology() -> None:
    docs = _manifests()
    assert all(d["metadata"].get("namespace", "countersign") == "countersign" for d in docs)
    assert _by(docs, "Deployment", "countersign-api")["spec"]["replicas"] >= 2
    assert _by(docs, "Deployment", "countersign-worker")["spec"]["replicas"] >= 2
    assert _by(docs, "Deployment", "n8n-worker")["spec"]["replicas"] >= 2
    assert "pgvector" in _container(_by(docs, "StatefulSet", "postgres"))["image"]
    n8n = _by(docs, "ConfigMap", "n8n-config")["data"]
    assert n8n["EXECUTIONS_MODE"] == "queue" and n8n["DB_TYPE"] == "postgresdb"
    assert n8n["QUEUE_BULL_REDIS_HOST"].startswith("redis.")
    keys = []
    for name in ("n8n-main", "n8n-worker"):
        c = _container(_by(docs, "Deployment", name))
        assert c["image"].endswith(f":{N8N_VERSION}")
        assert {"configMapRef": {"name": "n8n-config"}} in c["envFrom"]
        keys.append(next(e for e in c["env"] if e["name"] == "N8N_ENCRYPTION_KEY")["valueFrom"])
    assert keys[0] == keys[1]  # one key for main and workers
    images = [
        c["image"]
        for d in docs
        if "template" in d.get("spec", {})
        for c in d["spec"]["template"]["spec"]["containers"]
    ]
    assert images and all(":" in i and not i.endswith(":latest") for i in images), images


def test_manifests_pass_the_kubernetes_schemas(tmp_path: Path) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    docs = _manifests()
    for doc in docs:
        kv.validate(doc, "1.32.0", strict=True)
    broken = _by(docs, "Deployment", "countersign-api")
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, "1.32.0", strict=True)
