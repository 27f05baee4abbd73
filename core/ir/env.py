"""Per-request state of gradient generation: limits, diagnostics, sub-net path, name counters.

Upstream Caffe2 keeps process-global net-name counters (``gradient_loop_cond_net_1``...);
netgrad keeps them per request so answers are deterministic (spec §8).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.errors import LimitExceededError
from core.types import Diagnostic


@dataclass(frozen=True)
class GenLimits:
    """Limits of one generation request.

    Attributes:
        max_depth: deepest allowed nesting of sub-nets (Do/If/While inside each other), in
            sub-net levels; an If/While lowered by ``add_if_op``/``add_while_op`` costs two
            per level (its branch net and the Do wrapper inside), so 128 admits 64 levels.
        max_ops: most forward ops one request may differentiate, sub-nets included; bounds
            the time generation takes in the server process.
    """

    max_depth: int = 128
    max_ops: int = 200_000


@dataclass
class GenEnv:
    """Generation environment shared by the backward pass and the control-flow makers.

    Attributes:
        limits: request limits.
        diagnostics: warnings and notes collected so far (shared with child envs).
        path: sub-net path prefix of the ops being processed, e.g. ``op[3]:If/then_net/``.
        depth: current nesting depth (0 = top-level net).
        counters: per-request counters for unique net names (shared with child envs).
        op_index: index of the forward op whose gradient is being made (set by the pass).
        recompute: when a gradient op needs a forward value that a later in-place write
            overwrote, re-run the op(s) that produced it into fresh blobs instead of failing
            (opt-in; Caffe2 raises the version error).
        densify: where sparse and dense gradients of one blob meet, turn the sparse parts
            dense (``SparseToDense``) and sum them (opt-in; Caffe2 raises, see
            :mod:`core.ir.densify`).
        slices: set by the registry when a maker's ``g_input`` holds a GradientSlice; the
            pass version-checks the forward blobs it names, then clears it.
        memo: per-request results about sub-nets that every nesting level asks for
            (:func:`core.ir.ssa.hidden_do_writes`), shared with child envs: each is worked
            out once, not once per level above it.
    """

    limits: GenLimits = field(default_factory=GenLimits)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    path: str = ""
    depth: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    op_index: int = -1
    recompute: bool = False
    densify: bool = False
    slices: bool = False
    memo: dict[Any, Any] = field(default_factory=dict)

    def op_path(self, op_index: int, op_type: str) -> str:
        """Full path of op ``op_index`` of the current net, e.g. ``op[0]:Do/net/op[1]:Add``."""
        return f"{self.path}op[{op_index}]:{op_type}"

    def child(self, op_index: int, op_type: str, arg_name: str) -> GenEnv:
        """Environment for the sub-net held in argument ``arg_name`` of op ``op_index``.

        Raises:
            LimitExceededError: the nesting depth would exceed ``limits.max_depth``.
        """
        path = f"{self.op_path(op_index, op_type)}/{arg_name}/"
        if self.depth + 1 > self.limits.max_depth:
            raise LimitExceededError.at(
                f"sub-nets are nested deeper than the limit of {self.limits.max_depth}",
                op_index=op_index,
                op_type=op_type,
                path=path.rstrip("/"),
                code="nesting_too_deep",
            )
        return GenEnv(
            self.limits,
            self.diagnostics,
            path,
            self.depth + 1,
            self.counters,
            recompute=self.recompute,
            densify=self.densify,
            memo=self.memo,
        )

    def warn(
        self,
        code: str,
        message: str,
        *,
        op_index: int | None = None,
        op_type: str | None = None,
        blobs: Iterable[str] = (),
        severity: str = "warning",
    ) -> None:
        """Record a diagnostic located at op ``op_index`` of the current net."""
        path = self.op_path(op_index, op_type or "") if op_index is not None else self.path
        self.diagnostics.append(
            Diagnostic(severity, code, message, op_index, op_type, path or None, tuple(blobs))
        )

    def count_ops(self, n: int) -> None:
        """Add ``n`` forward ops to the request's total (shared with child environments).

        Raises:
            LimitExceededError: code ``too_many_ops`` when the total passes ``max_ops``.
        """
        total = self.counters.get("\0ops", 0) + n
        self.counters["\0ops"] = total
        if total > self.limits.max_ops:
            raise LimitExceededError(
                f"the request holds more than {self.limits.max_ops} ops (sub-nets included)",
                [Diagnostic("error", "too_many_ops",
                            f"more than {self.limits.max_ops} ops to differentiate")],
            )

    def unique_net_name(self, base: str) -> str:
        """``base`` the first time, then ``base_1``, ``base_2``... (Caffe2 ``Net`` naming)."""
        n = self.counters.get(base, 0)
        self.counters[base] = n + 1
        return base if n == 0 else f"{base}_{n}"
