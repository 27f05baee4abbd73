"""Deployment files are checked: the image's command line and healthcheck are the CLI's, the
compose file and the Kubernetes manifests agree with the app, and the manifests validate.

No Docker engine exists here, so the image is not built: the Dockerfile's ENTRYPOINT + CMD
and HEALTHCHECK are read, mapped onto the installed CLI (``netgrad`` -> ``python -m
app.cli``) and run against a real server with the image's environment.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.api.isolation import deployment_memory_bytes
from app.main import create_app
from app.settings import Settings
from tests.api.live_server import REPO_ROOT, free_port

yaml = pytest.importorskip("yaml", reason="needs PyYAML (dev extra)")

DOCKERFILE = REPO_ROOT / "Dockerfile"
K8S = REPO_ROOT / "deploy" / "k8s"


def dockerfile() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def instruction(name: str) -> str:
    (value,) = [v for k, v in dockerfile() if k == name]  # exactly one
    return value


def image_env() -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", instruction("ENV")))


def image_command() -> list[str]:
    return [*json.loads(instruction("ENTRYPOINT")), *json.loads(instruction("CMD"))]


def healthcheck_command() -> list[str]:
    hc = instruction("HEALTHCHECK")
    assert "--interval=" in hc and "--timeout=" in hc
    exec_form = hc.split("CMD", 1)[1].strip()
    return list(json.loads(exec_form))  # exec form: no shell, no curl needed


def app_paths() -> set[str]:
    """The paths the app serves (from its OpenAPI document)."""
    return set(create_app(Settings(workers=0)).openapi()["paths"])


def as_local(argv: list[str]) -> list[str]:
    """The image's ``netgrad ...`` as this checkout's ``python -m app.cli ...``."""
    assert argv[0] == "netgrad"
    return [sys.executable, "-m", "app.cli", *argv[1:]]


def test_netgrad_is_the_console_script_of_the_cli() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["netgrad"] == "app.cli:main"


def test_base_image_is_pinned_and_user_is_not_root() -> None:
    base = instruction("FROM")
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base), base
    user = instruction("USER")
    assert user.isdigit() and int(user) != 0


def test_entrypoint_and_healthcheck_parse_as_cli_commands() -> None:
    serve = cli.build_parser().parse_args(image_command()[1:])
    assert serve.func is cli._cmd_serve and serve.host is None and serve.port is None
    probe = cli.build_parser().parse_args(healthcheck_command()[1:])
    assert probe.command == "probe" and probe.path == "livez"
    assert instruction("EXPOSE") == image_env()["NETGRAD_PORT"]
    assert image_env()["NETGRAD_HOST"] == "0.0.0.0"  # reachable from outside the container
    assert "/" + probe.path in app_paths()


def test_image_command_serves_and_its_healthcheck_passes(tmp_path: Path) -> None:
    """Run ENTRYPOINT + CMD with the image's ENV (host and port overridden as `docker run -e`
    would, to stay on loopback), then the HEALTHCHECK command: 0 while up, 1 once stopped."""
    port = free_port()
    env = {**os.environ, **image_env(), "NETGRAD_HOST": "127.0.0.1",
           "NETGRAD_PORT": str(port), "NETGRAD_WORKERS": "0"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    log = tmp_path / "server.log"

    def healthcheck() -> int:
        return subprocess.run(as_local(healthcheck_command()), cwd=REPO_ROOT, env=env,
                              capture_output=True, timeout=30).returncode

    with open(log, "wb") as out:
        server = subprocess.Popen(as_local(image_command()), cwd=REPO_ROOT, env=env,
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while healthcheck() != 0:
            assert server.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "healthcheck never passed"
            time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=15)
    assert healthcheck() == 1
    first = next(ln for ln in log.read_text().splitlines() if ln.startswith("{"))
    assert json.loads(first)["level"]  # NETGRAD_LOG_FORMAT=json from the image


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_compose_uses_the_same_healthcheck_and_port() -> None:
    compose = _docs(REPO_ROOT / "deploy" / "compose.yaml")[0]
    svc = compose["services"]["netgrad"]
    assert svc["healthcheck"]["test"] == ["CMD", *healthcheck_command()]
    assert svc["ports"][0].rsplit(":", 1)[1] == instruction("EXPOSE")
    assert svc["ports"][0].startswith("127.0.0.1:")
    assert set(svc["environment"]) <= {f"NETGRAD_{f.upper()}" for f in Settings.model_fields}


def _k8s() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "raycluster.yaml":  # the Ray mode alternative: tests/distributed
            continue
        for doc in _docs(path):
            out[doc["kind"]] = doc
    return out


def test_k8s_manifests_agree_with_the_app_and_each_other() -> None:
    m = _k8s()
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
            "ConfigMap", "ServiceMonitor"} <= set(m)
    pod = m["Deployment"]["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    routes = app_paths()
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"],
            m["ServiceMonitor"]["spec"]["endpoints"][0]["path"]} <= routes
    assert c["args"] == json.loads(instruction("CMD"))
    config = m["ConfigMap"]["data"]
    fields = {f"NETGRAD_{f.upper()}" for f in Settings.model_fields}
    assert set(config) <= fields, set(config) - fields
    Settings.model_validate({k.removeprefix("NETGRAD_").lower(): v for k, v in config.items()})
    port = c["ports"][0]
    assert port["containerPort"] == int(config["NETGRAD_PORT"]) == int(instruction("EXPOSE"))
    sec = pod["spec"]["securityContext"]
    assert sec["runAsNonRoot"] and sec["runAsUser"] == int(instruction("USER"))
    assert c["securityContext"]["readOnlyRootFilesystem"]
    assert not c["securityContext"]["allowPrivilegeEscalation"]
    assert pod["spec"]["enableServiceLinks"] is False  # no NETGRAD_PORT=tcp://... injected
    labels = pod["metadata"]["labels"]
    for selector in (m["Service"]["spec"]["selector"],
                     m["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
                     m["Deployment"]["spec"]["selector"]["matchLabels"]):
        assert selector.items() <= labels.items()
    assert (m["ServiceMonitor"]["spec"]["selector"]["matchLabels"].items()
            <= m["Service"]["metadata"]["labels"].items())
    assert m["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == (
        m["Service"]["spec"]["ports"][0]["name"])
    assert m["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == (
        m["Deployment"]["metadata"]["name"])
    # Memory: the limit holds every process at its limit (app.api.isolation's rule).
    gib = 1024**3
    limit = c["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    settings = Settings(**{k[len("NETGRAD_"):].lower(): v for k, v in config.items()})
    assert int(limit[:-2]) * gib >= deployment_memory_bytes(settings)


def test_manifests_validate_offline(tmp_path: Path) -> None:
    """kubernetes-validate (strict) for built-in kinds, the vendored schema for the CRD; and
    the validator fails on broken copies (it is not a check that cannot fail)."""
    pytest.importorskip("kubernetes_validate", reason="needs the k8s extra")
    sys.path.insert(0, str(REPO_ROOT / "deploy"))
    try:
        import validate_manifests as vm
    finally:
        sys.path.pop(0)
    assert vm.main([str(K8S), str(REPO_ROOT / "deploy" / "kubernetes.yaml")]) == 0
    m = _k8s()
    broken: list[tuple[dict[str, Any], str]] = []
    d = json.loads(json.dumps(m["Deployment"]))
    d["spec"]["replica"] = 2  # typo: unknown field
    broken.append((d, "replica"))
    d = json.loads(json.dumps(m["Deployment"]))
    d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSeconds"] = "15s"
    broken.append((d, "periodSeconds"))
    s = json.loads(json.dumps(m["ServiceMonitor"]))
    del s["spec"]["selector"]
    broken.append((s, "selector"))
    s = json.loads(json.dumps(m["ServiceMonitor"]))
    s["spec"]["endpoints"][0]["interval"] = "15 seconds"
    broken.append((s, "interval"))
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    broken.append((unknown, "no vendored schema"))
    for resource, why in broken:
        with pytest.raises(ValueError) as info:
            vm.check(resource)
        assert why in str(info.value) or why in repr(resource), (why, info.value)
        path = tmp_path / "broken.yaml"
        path.write_text(yaml.safe_dump(resource))
        assert vm.main([str(path)]) == 1
