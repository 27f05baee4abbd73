"""Requests shared by the fan-out, async-jobs and Ray tests (and bench/bench_ray.py)."""

from __future__ import annotations

import copy
from typing import Any

from app.api import docs


def mlp_verify_request(batch: int = 64, features: int = 8, hidden: int = 16,
                       mode: str = "full") -> dict[str, Any]:
    """The OpenAPI MLP example (FC + Relu + Softmax) with ``batch x features`` data: a full
    check perturbs ``batch*features + hidden*features + hidden`` elements."""
    req = copy.deepcopy(docs.VERIFY_REQUEST)
    req["inputs"] = [
        {"blob": "data", "random": {"shape": [batch, features], "dtype": "float64", "seed": 1}},
        {"blob": "fc_w", "random": {"shape": [hidden, features], "dtype": "float64",
                                    "seed": 2}},
        {"blob": "fc_b", "random": {"shape": [hidden], "dtype": "float64", "seed": 3}},
    ]
    req["mode"] = mode
    return req


def elements(req: dict[str, Any]) -> int:
    """Elements a full check of ``req`` perturbs."""
    total = 0
    for spec in req["inputs"]:
        shape = (spec.get("random") or spec.get("tensor"))["shape"]
        n = 1
        for d in shape:
            n *= d
        total += n
    return total
