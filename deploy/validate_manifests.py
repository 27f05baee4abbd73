"""Validate the Kubernetes manifests offline: ``python deploy/validate_manifests.py [PATH ...]``.

Built-in kinds (Deployment, Service, HorizontalPodAutoscaler, PodDisruptionBudget,
ConfigMap...) are checked by ``kubernetes-validate`` against the Kubernetes JSON schemas it
ships, in strict mode (unknown fields are errors), for :data:`KUBERNETES_VERSION`.

Custom resources are not in those schemas: ``kubernetes-validate`` only warns "couldn't
find schema" and passes them. Here a custom resource is checked against a schema vendored in
``deploy/k8s/schemas/<kind>-<group>-<version>.json`` (the ServiceMonitor one is written from
the structure the Prometheus Operator's CRD publishes; see its ``$comment``), and one without
a vendored schema is an error, never a silent pass.

Needs the ``k8s`` extra (``pip install -e '.[k8s]'``). Exit status 0 when every resource
passed, 1 otherwise; one line per resource.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import SchemaNotFoundError

ROOT = Path(__file__).resolve().parent
DEFAULT_PATHS = (ROOT / "k8s",)
SCHEMA_DIR = ROOT / "k8s" / "schemas"
#: Kubernetes release the manifests must be valid for.
KUBERNETES_VERSION = "1.32.0"


def manifest_files(paths: list[Path]) -> list[Path]:
    """Every ``.yaml``/``.yml`` file of ``paths`` (directories searched, sorted)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.suffix in (".yaml", ".yml"))
        else:
            out.append(p)
    return out


def resources(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of ``path``."""
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def vendored_schema(resource: dict[str, Any]) -> Path:
    """Where the vendored schema of a custom resource lives (it may be absent)."""
    group, _, version = str(resource.get("apiVersion", "")).rpartition("/")
    return SCHEMA_DIR / f"{str(resource.get('kind', '')).lower()}-{group}-{version}.json"


def check(resource: dict[str, Any], version: str = KUBERNETES_VERSION) -> str:
    """Validate one resource; return how it was checked.

    Raises:
        ValueError: the resource is invalid, or is a custom resource without a vendored
            schema (the message says which field and why).
    """
    try:
        validated = kubernetes_validate.validate(resource, version, strict=True)
        return f"Kubernetes {validated} schema (strict)"
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.path) or "(top)"
        raise ValueError(f"{where}: {exc.message}") from None
    except SchemaNotFoundError:
        pass
    schema_path = vendored_schema(resource)
    if not schema_path.exists():
        raise ValueError(
            f"{resource.get('apiVersion')} {resource.get('kind')} is not a built-in kind and "
            f"has no vendored schema at {schema_path.relative_to(ROOT.parent)}"
        )
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(resource),
                    key=lambda e: list(map(str, e.path)))
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.path) or "(top)"
        raise ValueError(f"{where}: {e.message} ({len(errors)} error(s))")
    return f"vendored CRD schema {schema_path.name} (subset, strict)"


def main(argv: list[str] | None = None) -> int:
    """Validate every resource of the given files/directories (default ``deploy/k8s``)."""
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or list(DEFAULT_PATHS)
    failed = checked = 0
    for path in manifest_files(paths):
        for res in resources(path):
            name = f"{res.get('kind')}/{(res.get('metadata') or {}).get('name')}"
            try:
                how = check(res)
                print(f"ok    {path}: {name} against {how}")
            except ValueError as exc:
                failed += 1
                print(f"FAIL  {path}: {name}: {exc}")
            checked += 1
    print(f"manifests: {checked - failed} valid, {failed} invalid")
    return 1 if failed or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
