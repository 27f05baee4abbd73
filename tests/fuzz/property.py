"""The differential property: netgrad's answer for a forward net is a clean 4xx or right numbers.

:func:`check_outcome` is the reusable check (the fuzzer and regression tests call it). For a
forward net, ``ys`` and fed inputs, gradient generation must give exactly one of:

1. **a clean 4xx**: :func:`core.api.gradient_for_net` raises a
   :class:`core.errors.NetgradError` whose every problem names where it happened (``op_index``
   or ``path`` set). Any other exception type is a **500**;
2. **a 200 with right numbers**: the generated gradient net runs in the NumPy executor (an
   executor error is an **unrunnable 200**) and, for every checked input, the gradient agrees
   with float64 central differences element by element (``mode="full"`` of
   :func:`core.verify.verify_net`, the product's checker: loss ``L = Σ_y <v_y, y>``, an
   absent gradient counts as zero, so an input whose numeric gradient is zero must get a
   zero or absent gradient). On top, an independent cross-check runs the forward and
   gradient nets itself with other loss weights and compares random directional
   derivatives, so a checker defect cannot hide a wrong gradient.

Every failure raises :class:`OutcomeFailure` (an ``AssertionError``) whose message ends with
a ready-to-paste ``curl`` command: the request body of ``POST /v1/verify`` reproducing the
case (:func:`verify_request`).
"""

from __future__ import annotations

import json
import math
import traceback
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from api_schemas import caffe2_pb2
from core.api import gradient_for_net
from core.errors import NetgradError
from core.executor.executor import execute
from core.proto.codec import to_json_obj
from core.types import GradientSlice, GradValue
from core.verify import (
    BlobReport,
    InputSpec,
    TensorSpec,
    VerifyOptions,
    materialize_inputs,
    verify_net,
)
from core.verify.checker import seed_names

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef

#: Tolerances of both checks: pass when ``|analytic - numeric| <= ATOL + RTOL * |numeric|``.
ATOL, RTOL = 1e-5, 1e-3
#: Central-difference step of the independent cross-check (float64).
STEP = 1e-6
#: Random directions per checked input in the independent cross-check.
DIRECTIONS = 2

#: Outcome labels returned by :func:`check_outcome`.
CLEAN_4XX, RIGHT_200 = "4xx", "200"


class OutcomeFailure(AssertionError):
    """The property does not hold for a case.

    Attributes:
        kind: ``"500"``, ``"unlocated 4xx"``, ``"unrunnable 200"``, ``"wrong gradient"``,
            ``"checker disagrees"`` (the cross-check failed where the checker passed) or
            ``"bad case"`` (the forward net itself does not run: a fuzzer defect).
        blobs: the inputs whose gradient is wrong (``"wrong gradient"`` and
            ``"checker disagrees"``), else empty.
        reports: the checker's failed :class:`~core.verify.BlobReport` entries
            (``"wrong gradient"``), else empty.
        details: one line per finding.
        request: the ``POST /v1/verify`` body reproducing the case.
    """

    def __init__(self, kind: str, details: Sequence[str], request: dict[str, Any],
                 blobs: Sequence[str] = (), reports: Sequence[BlobReport] = ()) -> None:
        self.kind = kind
        self.blobs = list(blobs)
        self.reports = list(reports)
        self.details = list(details)
        self.request = request
        body = json.dumps(request, separators=(",", ":"))
        super().__init__(
            f"{kind}:\n  " + "\n  ".join(self.details) + "\n\nreproduce with:\n"
            "curl -s -X POST http://127.0.0.1:8000/v1/verify "
            "-H 'Content-Type: application/json' --data @- <<'JSON'\n" + body + "\nJSON\n"
        )


def verify_request(
    net: NetDef,
    ys: Sequence[str],
    inputs: Sequence[InputSpec],
    recompute: bool = False,
    *,
    constants: Collection[str] = (),
    seed: int = 0,
    grad_ops: Sequence[OperatorDef] | None = None,
    densify: bool = False,
) -> dict[str, Any]:
    """The ``POST /v1/verify`` JSON body of a case (``mode`` full, the checked inputs named).

    Inputs are given as explicit tensors (``{"blob", "tensor": {"shape", "dtype", "data"}}``),
    so the body is self-contained; ``check`` lists every fed float input but ``constants``.
    """
    feeds = materialize_inputs(list(inputs))
    body: dict[str, Any] = {
        "net": to_json_obj(net),
        "ys": list(ys),
        "inputs": [
            {
                "blob": name,
                "tensor": {
                    "shape": list(arr.shape),
                    "dtype": str(arr.dtype),
                    "data": [v.item() for v in arr.reshape(-1)],
                },
            }
            for name, arr in feeds.items()
        ],
        "mode": "full",
        "check": _checked(feeds, constants),
        "seed": seed,
        "recompute": recompute,
    }
    if densify:
        body["densify"] = True
    if grad_ops is not None:
        body["grad_ops"] = [to_json_obj(op) for op in grad_ops]
    return body


def case_from_request(body: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of :func:`check_outcome` rebuilt from a :func:`verify_request` body.

    A failure message's JSON pasted into a regression test gives the case back:
    ``check_outcome(**case_from_request(json.loads(text)))``.
    """
    from core.proto.codec import from_json_obj

    inputs = [
        InputSpec(i["blob"], tensor=TensorSpec(list(i["tensor"]["shape"]),
                                               i["tensor"].get("dtype", "float64"),
                                               list(i["tensor"]["data"])))
        for i in body.get("inputs", [])
    ]
    check = body.get("check") or [i.blob for i in inputs]
    grad_ops = body.get("grad_ops")
    return {
        "net": from_json_obj(body["net"], NetDef),
        "ys": list(body["ys"]),
        "inputs": inputs,
        "recompute": bool(body.get("recompute", False)),
        "constants": [i.blob for i in inputs if i.blob not in check],
        "seed": int(body.get("seed") or 0),
        "grad_ops": None if grad_ops is None
        else [from_json_obj(op, OperatorDef) for op in grad_ops],
        "densify": bool(body.get("densify", False)),
    }


def written_before_read(net: NetDef, names: Collection[str]) -> list[str]:
    """Those of ``names`` that the top-level net surely overwrites before anything reads them.

    A control op reads its declared inputs, and also every output it may leave unchanged: an
    ``If`` output that is not written on both branches, a ``While`` output (zero trips), a
    ``Do`` output that its sub-net writes only under such an ``If`` or ``While``. A fed value
    under such a name reaches no op, so it has no gradient to check.
    """
    state: dict[str, bool] = {}
    for op in net.op:
        sure = _sure_writes(op)
        for name in [*op.input, *(o for o in op.output if o not in sure)]:
            state.setdefault(name, False)
        for name in sure:
            state.setdefault(name, True)
    return [n for n in names if state.get(n, False)]


def _sure_writes(op: OperatorDef) -> set[str]:
    """Outputs of ``op`` written on every run (names in the op's own workspace)."""
    if op.type == "While":
        return set()
    subnets = {a.name: a.n for a in op.arg if a.HasField("n")}
    if op.type == "If":
        then = _net_sure_writes(subnets["then_net"]) if "then_net" in subnets else set()
        other = _net_sure_writes(subnets["else_net"]) if "else_net" in subnets else set()
        return then & other & set(op.output)
    if op.type == "Do" and "net" in subnets:
        inner = [s.decode() for a in op.arg if a.name == "inner_blobs" for s in a.strings]
        idx = [int(i) for a in op.arg if a.name == "outer_blobs_idx" for i in a.ints]
        outer = [*op.input[:-1], *op.output[:-1]]
        bound = {n: outer[k] for n, k in zip(inner, idx, strict=False) if 0 <= k < len(outer)}
        written = _net_sure_writes(subnets["net"])
        return {bound[n] for n in written if n in bound} & set(op.output[:-1])
    return set(op.output)


def _net_sure_writes(net: NetDef) -> set[str]:
    out: set[str] = set()
    for op in net.op:
        out |= _sure_writes(op)
    return out


def _checked(feeds: dict[str, np.ndarray], constants: Collection[str]) -> list[str]:
    return [k for k, v in feeds.items() if v.dtype.kind == "f" and k not in constants]


def _unlocated(err: NetgradError) -> list[str]:
    """The problems of ``err`` that do not say where they happened."""
    return [
        f"{p.code}: {p.message}"
        for p in err.problems
        if p.op_index is None and not p.path
    ]


def check_outcome(
    net: NetDef,
    ys: Sequence[str],
    inputs: Sequence[InputSpec],
    recompute: bool = False,
    *,
    constants: Collection[str] = (),
    seed: int = 0,
    grad_ops: Sequence[OperatorDef] | None = None,
    densify: bool = False,
) -> str:
    """Check that netgrad answers ``net`` with a clean 4xx or with gradients that are right.

    Args:
        net: forward NetDef; it must run on ``inputs`` (else the case itself is bad).
        ys: outputs of the loss ``L = Σ_y <v_y, y>`` (random weights ``v_y`` from ``seed``).
        inputs: fed blobs (explicit or random tensors), each read by the net before written.
        recompute: generate with ``recompute=True``.
        constants: fed blobs that are not checked (loop counters, limits, conditions).
            Every other fed float input is checked, whether or not it reaches ``ys``.
        seed: seed of the loss weights (the checker's ``seed`` option).
        grad_ops: check these gradient ops instead of the generated ones (to test the test:
            a planted wrong gradient must fail); generation must still succeed.
        densify: generate with ``densify=True`` (sparse and dense gradients summed).

    Returns:
        ``"4xx"`` (a clean, located generation error) or ``"200"`` (gradients verified).

    Raises:
        OutcomeFailure: a 500, an unlocated 4xx, an unrunnable 200, a wrong gradient, a
            disagreement between the checker and the cross-check, or a forward net that does
            not run. The message ends with the ``curl`` command reproducing the case.
    """
    __tracebackhide__ = True  # pytest: show the failure message, not this function's source

    def fail(kind: str, details: Sequence[str], blobs: Sequence[str] = (),
             reports: Sequence[BlobReport] = ()) -> OutcomeFailure:
        request = verify_request(net, ys, inputs, recompute, constants=constants, seed=seed,
                                 grad_ops=grad_ops, densify=densify)
        return OutcomeFailure(kind, details, request, blobs, reports)

    feeds = {
        k: v.astype(np.float64) if v.dtype.kind == "f" else v
        for k, v in materialize_inputs(list(inputs)).items()
    }
    check = _checked(feeds, constants)
    try:
        base = execute(net, feeds)
    except NetgradError as exc:
        raise fail("bad case", [f"the forward net does not run: {exc.message}"]) from exc
    missing = [y for y in ys if y not in base or not np.all(np.isfinite(base[y]))]
    if missing:
        raise fail("bad case", [f"outputs missing or not finite: {missing}"])

    early = written_before_read(net, check)
    if early:
        raise fail("bad case", [f"checked inputs {early} are written by the net before it "
                                "reads them: the fed value has no gradient to check"])

    # 1. Generation, exactly as the checker asks for it (explicit seed name per y).
    seeds = seed_names(net, list(ys), list(feeds))
    try:
        gradient_for_net(net, dict(seeds), recompute=recompute, densify=densify)
    except NetgradError as exc:
        unlocated = _unlocated(exc)
        if unlocated:
            raise fail("unlocated 4xx", [f"{type(exc).__name__} with problems naming no op:",
                                         *unlocated]) from exc
        return CLEAN_4XX
    except Exception as exc:  # any other exception type is an internal error
        raise fail("500", ["gradient generation raised " + _exc_text(exc)]) from exc

    # 2. The product's checker, full mode: every element of every checked input.
    options = VerifyOptions(inputs=list(inputs), mode="full", atol=ATOL, rtol=RTOL,
                            check=check, seed=seed)
    try:
        result = verify_net(net, list(ys), options, recompute=recompute, grad_ops=grad_ops,
                            densify=densify)
    except NetgradError as exc:
        raise fail("unrunnable 200", [f"{type(exc).__name__}: {exc.message}"]) from exc
    except Exception as exc:
        raise fail("500", ["verification raised " + _exc_text(exc)]) from exc
    wrong = [b for b in result.report.blobs if not b.passed]
    if wrong:
        raise fail(
            "wrong gradient",
            [
                f"{b.blob}: gradient {b.gradient!r} analytic {b.analytic} vs numeric "
                f"{b.numeric} at {b.worst_index} (max abs error {b.max_abs_error:.3g})"
                + (f"; {b.note}" if b.note else "")
                for b in wrong
            ],
            [b.blob for b in wrong],
            wrong,
        )
    checked_blobs = {b.blob for b in result.report.blobs}
    if checked_blobs != set(check):
        raise fail("checker disagrees", [f"the checker checked {sorted(checked_blobs)}, "
                                         f"not {sorted(check)}"])

    # 3. Independent cross-check with other weights and random directions.
    problems, blobs = cross_check(net, list(ys), feeds, base, result.grad_ops, result.grad_map,
                                  check, seed)
    if problems:
        raise fail("checker disagrees", problems, blobs)
    return RIGHT_200


def cross_check(
    net: NetDef,
    ys: Sequence[str],
    feeds: dict[str, np.ndarray],
    base: dict[str, np.ndarray],
    grad_ops: Sequence[OperatorDef],
    grad_map: dict[str, GradValue],
    check: Sequence[str],
    seed: int,
) -> tuple[list[str], list[str]]:
    """Directional derivatives of ``L' = Σ_y <w_y, y>`` (fresh weights) vs central differences.

    Runs the forward net plus ``grad_ops`` with the seeds ``w_y`` fed under the gradient
    names the checker uses, reads the gradient of each checked input through ``grad_map``
    (absent = zero) and compares ``<∇x L', u>`` with ``(L'(x + h·u) − L'(x − h·u)) / 2h`` for
    :data:`DIRECTIONS` random unit directions ``u``.

    Returns:
        One message per disagreement, and the blobs concerned.
    """
    rng = np.random.default_rng([seed, 20240611])
    weights = {y: rng.standard_normal(np.shape(base[y])) for y in ys}
    seeds = seed_names(net, list(ys), list(feeds))
    full = NetDef()
    full.CopyFrom(net)
    full.op.extend(grad_ops)
    problems: list[str] = []
    blobs: list[str] = []
    try:
        ws = execute(full, {**feeds, **{seeds[y]: w for y, w in weights.items()}})
    except NetgradError as exc:
        return [f"forward + gradient ops do not run: {exc.message}"], []

    def loss(fed: dict[str, np.ndarray]) -> float:
        out = execute(net, fed, fetch=list(ys))
        return float(sum(np.sum(w * out[y]) for y, w in weights.items()))

    for x in check:
        g = grad_map.get(x)
        if g is None:
            a = np.zeros(feeds[x].shape)
        elif isinstance(g, GradientSlice):
            a = np.zeros(feeds[x].shape)
            rows = np.asarray(ws[g.indices]).astype(np.int64).reshape(-1)
            # index blobs of any rank: one value block per index, as Caffe2's sparse
            # optimizers read them (block size = values size / indices size)
            np.add.at(a, rows, np.asarray(ws[g.values], dtype=np.float64).reshape(
                (rows.size, *feeds[x].shape[1:])))
        elif g not in ws or np.shape(ws[g]) != feeds[x].shape:
            problems.append(f"{x}: gradient blob {g!r} missing or misshapen")
            blobs.append(x)
            continue
        else:
            a = np.asarray(ws[g], dtype=np.float64)
        for _ in range(DIRECTIONS):
            u = rng.standard_normal(feeds[x].shape)
            u /= max(float(np.linalg.norm(u)), 1e-300)
            plus = loss({**feeds, x: feeds[x] + STEP * u})
            minus = loss({**feeds, x: feeds[x] - STEP * u})
            numeric = (plus - minus) / (2 * STEP)
            analytic = float(np.sum(a * u))
            if not math.isfinite(analytic) or abs(analytic - numeric) > ATOL + RTOL * abs(numeric):
                problems.append(f"{x}: directional derivative {analytic} vs numeric {numeric} "
                                f"(gradient {g!r})")
                blobs.append(x)
                break
    return problems, blobs


def _exc_text(exc: BaseException) -> str:
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3))
    return f"{type(exc).__name__}: {exc}\n{tb}"
