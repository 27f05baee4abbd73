"""Deployment limits agree with the settings (issue 14 §6).

Every manifest under ``deploy/`` (and a compose file at the top level, if any) that sets a
memory limit for netgrad must allow what the settings it configures can use:
``workers * job_memory_bytes + max_large_bodies * large_job_memory_bytes +
server_memory_bytes`` (:func:`app.api.isolation.deployment_memory_bytes`), and not much more
(within 1 GiB: the limit is derived, not guessed). systemd units and compose files must also
set an open-file limit above the connection cap. Manifests are read as text, whatever their
number and layout (environment given inline or block style), so new ones are checked too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.api.isolation import deployment_memory_bytes
from app.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
GiB = 1024**3

_BINARY = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_quantity(text: str, decimal_suffixes: bool) -> int:
    """Bytes of a memory quantity: ``12Gi`` / ``512Mi`` (binary), ``12G`` (decimal in
    Kubernetes, binary in systemd and Docker), or plain bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kKmMgGtT]?)(i?)[bB]?\s*", text)
    if m is None:
        raise ValueError(f"cannot read memory quantity {text!r}")
    value, unit, binary = float(m.group(1)), m.group(2).lower(), m.group(3)
    if not unit:
        return int(value)
    if binary or not decimal_suffixes:
        return int(value * _BINARY[unit])
    return int(value * 10 ** (3 * "kmgt".index(unit) + 3))


def env_settings(text: str) -> Settings:
    """The :class:`Settings` a manifest configures through ``NETGRAD_*`` variables."""
    env: dict[str, str] = {}
    patterns = (
        r"Environment=\"?(NETGRAD_\w+)=([^\s\"]+)",  # systemd
        r"name:\s*(NETGRAD_\w+)\s*,?\s*value:\s*\"?([^\"\s},]+)",  # Kubernetes
        r"^\s*-?\s*(NETGRAD_\w+)\s*[:=]\s*\"?([^\"\s]+)\"?\s*$",  # compose
    )
    for pattern in patterns:
        for name, value in re.findall(pattern, text, flags=re.MULTILINE):
            env[name[len("NETGRAD_"):].lower()] = value
    fields = {k: v for k, v in env.items() if k in Settings.model_fields}
    return Settings(**fields)


def _manifests() -> list[Path]:
    found = [p for p in sorted(DEPLOY.rglob("*")) if p.suffix in (".service", ".yaml", ".yml")]
    found += sorted(REPO.glob("*compose*.y*ml"))
    return found


def _memory_limits(path: Path, text: str) -> list[int]:
    if path.suffix == ".service":
        return [parse_quantity(v, False) for v in re.findall(r"^MemoryMax=(\S+)", text, re.M)]
    limits = []
    # Kubernetes: `limits: {cpu: .., memory: ..}` or a block `limits:` with `memory:` below
    for block in re.findall(r"limits:\s*(\{[^}]*\}|(?:\n\s+\w+:.*)+)", text):
        for v in re.findall(r"memory:\s*\"?([0-9.]+\s*[A-Za-z]*)\"?", block):
            limits.append(parse_quantity(v, decimal_suffixes="compose" not in path.name))
    for v in re.findall(r"mem_limit:\s*\"?([0-9.]+\s*[A-Za-z]*)\"?", text):
        limits.append(parse_quantity(v, False))
    return limits


def _nofile(path: Path, text: str) -> list[int]:
    if path.suffix == ".service":
        return [int(v) for v in re.findall(r"^LimitNOFILE=(\d+)", text, re.M)]
    return [int(v) for v in re.findall(r"nofile:\s*(?:\{[^}]*soft:\s*)?(\d+)", text)]


def test_there_are_manifests_to_check() -> None:
    assert any(_memory_limits(p, p.read_text()) for p in _manifests())


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: str(p.relative_to(REPO)))
def test_memory_limit_follows_the_settings(path: Path) -> None:
    if "ray" in path.name:
        pytest.skip("the Ray cluster's own pods: tests/distributed/test_deploy_ray.py")
    text = path.read_text()
    if path.name == "deployment.yaml" and (path.parent / "configmap.yaml").exists():
        text = (path.parent / "configmap.yaml").read_text() + text  # envFrom: the ConfigMap
    limits = _memory_limits(path, text)
    if not limits:
        pytest.skip(f"{path.name} sets no memory limit")
    need = deployment_memory_bytes(env_settings(text))
    for limit in limits:
        assert need <= limit <= need + GiB, (
            f"{path.name}: memory limit {limit / GiB:.2f} GiB, the settings need "
            f"{need / GiB:.2f} GiB (workers x job memory + large bodies x large-job memory "
            "+ server budget; deploy/README.md)"
        )


@pytest.mark.parametrize("path", [p for p in _manifests() if p.suffix == ".service"
                                  or "compose" in p.name], ids=lambda p: p.name)
def test_open_file_limit_is_above_the_connection_cap(path: Path) -> None:
    if "ray" in path.name:
        pytest.skip("the Ray profile (tests/distributed/test_deploy_ray.py)")
    text = path.read_text()
    settings = env_settings(text)
    values = _nofile(path, text)
    assert values, f"{path.name} sets no open-file limit"
    assert min(values) >= 2 * settings.max_connections + 1024


def test_the_rule_counts_every_process() -> None:
    s = Settings(workers=3, job_memory_bytes=2 * GiB, max_large_bodies=2,
                 large_job_memory_bytes=GiB, server_memory_bytes=GiB)
    assert deployment_memory_bytes(s) == 3 * 2 * GiB + 2 * GiB + GiB
    s2 = Settings(workers=3, job_memory_bytes=2 * GiB, isolate_large_bodies=False,
                  server_memory_bytes=GiB)
    assert deployment_memory_bytes(s2) == 7 * GiB


def test_quantities() -> None:
    assert parse_quantity("12Gi", True) == 12 * GiB
    assert parse_quantity("12G", False) == 12 * GiB
    assert parse_quantity("12G", True) == 12 * 10**9
    assert parse_quantity("512Mi", True) == 512 * 2**20
    assert parse_quantity("1073741824", True) == GiB
