"""The Ray deployment files agree with each other and with the settings (needs PyYAML, which
Ray brings; skipped without it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
yaml = pytest.importorskip("yaml", reason="PyYAML comes with the ray extra")


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def _known(env: dict[str, str]) -> None:
    fields = set(Settings.model_fields)
    for name in env:
        if name.startswith("NETGRAD_"):
            assert name.removeprefix("NETGRAD_").lower() in fields, name


def test_raycluster_and_its_api_deployment_agree() -> None:
    docs = {d["kind"]: d for d in _docs("k8s/raycluster.yaml")}
    assert set(docs) == {"RayCluster", "Deployment", "Service"}
    rc = docs["RayCluster"]
    assert rc["apiVersion"] == "ray.io/v1"
    spec = rc["spec"]
    major, minor, _ = (int(p) for p in spec["rayVersion"].split("."))
    pin = re.search(r'"ray\[client\]>=(\d+)\.(\d+),<(\d+)"',
                    (DEPLOY.parent / "pyproject.toml").read_text())
    assert pin is not None
    assert (int(pin[1]), int(pin[2])) <= (major, minor) and major < int(pin[3])
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    workers = spec["workerGroupSpecs"]
    assert workers and all(w["rayStartParams"]["num-cpus"] == "1" for w in workers)
    images = {head["image"]} | {w["template"]["spec"]["containers"][0]["image"]
                                for w in workers}
    api = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert images == {api["image"]}  # one image: same Ray and Python on both sides
    env = _env(api)
    _known(env)
    assert env["NETGRAD_EXECUTOR"] == "ray"
    client_port = {p["name"]: p["containerPort"] for p in head["ports"]}["client"]
    assert env["NETGRAD_RAY_ADDRESS"] == f"ray://{rc['metadata']['name']}-head-svc:{client_port}"
    selector = docs["Service"]["spec"]["selector"]
    assert selector == docs["Deployment"]["spec"]["template"]["metadata"]["labels"]


def test_compose_ray_profile() -> None:
    (doc,) = _docs("compose.ray.yaml")
    services = doc["services"]
    assert {"ray-head", "ray-worker", "netgrad"} <= set(services)
    assert all(s["profiles"] == ["ray"] for s in services.values())
    head_cmd = " ".join(services["ray-head"]["command"])
    port = re.search(r"--ray-client-server-port=(\d+)", head_cmd)
    assert port is not None
    env = services["netgrad"]["environment"]
    _known(env)
    assert env["NETGRAD_RAY_ADDRESS"] == f"ray://ray-head:{port[1]}"
    assert "--address=ray-head:6379" in services["ray-worker"]["command"]
