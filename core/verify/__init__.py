"""Numeric gradient verification (spec §6): the net-level checker and the per-op checker.

Facade: import from here, e.g. ``from core.verify import verify_net, VerifyOptions``.
"""

from __future__ import annotations

from core.verify.checker import seed_names, verify_net
from core.verify.specs import (
    BlobReport,
    InputSpec,
    RandomSpec,
    TensorSpec,
    VerifyOptions,
    VerifyReport,
    VerifyResult,
    materialize_inputs,
)

__all__ = [
    "BlobReport",
    "InputSpec",
    "RandomSpec",
    "TensorSpec",
    "VerifyOptions",
    "VerifyReport",
    "VerifyResult",
    "materialize_inputs",
    "seed_names",
    "verify_net",
]
