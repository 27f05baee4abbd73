"""Pydantic request/response models of the JSON API, and JSON Schemas of the Caffe2 messages.

The JSON API carries the same fields as the binary messages of ``netgrad.proto``. Caffe2
messages (``OperatorDef``, ``NetDef``) travel as protobuf JSON (proto field names; lowerCamelCase
accepted on input) with one deviation: ``Argument.s`` and ``Argument.strings`` are UTF-8 text,
not base64. Their JSON Schemas are derived from the ``caffe2.proto`` descriptors by
:func:`caffe2_json_schemas`, so the OpenAPI document always matches the wire schema.

Unknown fields are refused everywhere (``extra="forbid"`` here, ``ignore_unknown_fields=False``
in the protobuf JSON parser).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from google.protobuf import descriptor
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from api_schemas import caffe2_pb2

SCHEMA_PREFIX = "#/components/schemas/"
#: Placeholder key for a reference to a Caffe2 message schema; :func:`openapi_schema` turns it
#: into a ``$ref`` (pydantic only resolves references to its own models).
CAFFE2_REF = "x-caffe2-message"

OperatorDefJson = Annotated[
    dict[str, Any],
    WithJsonSchema({CAFFE2_REF: "caffe2.OperatorDef"}),
]
NetDefJson = Annotated[
    dict[str, Any],
    WithJsonSchema({CAFFE2_REF: "caffe2.NetDef"}),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class GradientSliceModel(_Strict):
    """A sparse gradient: rows ``indices`` of the blob receive ``values`` (both blob names)."""

    indices: str
    values: str


#: One gradient entry: ``null`` (no gradient), a dense blob name, or a GradientSlice.
GradEntry = Annotated[
    str | GradientSliceModel | None,
    Field(description="null = no gradient; a string = dense gradient blob; or a GradientSlice"),
]


class DiagnosticModel(_Strict):
    """One finding: severity, stable code, message and where (op index, type, sub-net path)."""

    severity: Literal["error", "warning", "info"] | str
    code: str
    message: str
    op_index: int | None = None
    op_type: str | None = None
    path: str | None = Field(None, description="e.g. op[3]:If/then_net/op[0]:Do/net/op[1]:Add")
    blobs: list[str] = Field(default_factory=list)


class TensorModel(_Strict):
    """An explicit input tensor: ``shape``, ``dtype`` and row-major ``data``."""

    shape: list[int]
    dtype: Literal["float32", "float64", "int32", "int64", "bool"] = "float64"
    data: list[float | bool]


class RandomSpecModel(_Strict):
    """A random input tensor, reproducible from its seed.

    ``uniform``: [low, high), default [-1, 1); ``normal``: standard normal, clipped to
    [low, high] when given; ``positive``: uniform in [low, high), default [0.5, 2);
    ``away_from_zero``: magnitude in [low, high), default [0.2, 1.5), random sign.
    """

    shape: list[int]
    dtype: Literal["float32", "float64", "int32", "int64", "bool"] = "float64"
    distribution: Literal["uniform", "normal", "positive", "away_from_zero"] = "normal"
    seed: int | None = Field(None, description="default: derived from the request seed")
    low: float | None = None
    high: float | None = None


class InputSpecModel(_Strict):
    """One fed blob: either ``tensor`` or ``random``."""

    blob: str
    tensor: TensorModel | None = None
    random: RandomSpecModel | None = None


class TolerancesModel(_Strict):
    """Finite-difference step and tolerances: pass when ``|a - n| <= atol + rtol * |n|``.

    Defaults: step 1e-6 (1e-3 when an output is not float64), atol 1e-5, rtol 1e-3.
    """

    step: float | None = None
    atol: float | None = None
    rtol: float | None = None


class VerifyOptionsModel(_Strict):
    """How to check gradients numerically (central differences in float64)."""

    inputs: list[InputSpecModel] = Field(default_factory=list)
    mode: Literal["fast", "full"] = "fast"
    tolerances: TolerancesModel | None = None
    check: list[str] = Field(
        default_factory=list, description="blobs to check; empty = every fed float input"
    )
    passes: int | None = Field(None, description="fast mode: random directions per input (3)")
    seed: int | None = Field(None, description="seed of output weights and directions (0)")


class OpGradientRequest(_Strict):
    """``GetGradientForOp`` as a service: one forward op and one gradient per output."""

    op: OperatorDefJson
    g_output: list[GradEntry] = Field(description="one entry per op.output")


class OpGradientResponse(_Strict):
    """Gradient ops (execution order) and one gradient entry per forward input."""

    grad_ops: list[OperatorDefJson]
    g_input: list[GradEntry]
    diagnostics: list[DiagnosticModel]


class NetGradientRequest(_Strict):
    """``AddGradientOperators`` as a service."""

    net: NetDefJson
    ys: list[str] | dict[str, GradEntry] = Field(
        description="blobs to seed with ones (auto <y>_autogen_grad), or a map blob -> "
        "gradient blob (null = auto seed)"
    )
    skip: int = Field(0, ge=0, description="ignore the first `skip` ops")
    return_net: bool = Field(False, description="also return forward + gradient ops as one net")
    recompute: bool = Field(
        False,
        description="re-run producers of forward values that a later in-place write "
        "overwrote, instead of failing with a version error (Caffe2 raises)",
    )
    verify: VerifyOptionsModel | None = Field(
        None, description="also check the generated gradients numerically"
    )


#: A float in a report; non-finite values are spelled as in protobuf's JSON mapping.
ReportFloat = float | Literal["NaN", "Infinity", "-Infinity"] | None


class BlobReportModel(_Strict):
    """Per-input verdict of a numeric gradient check."""

    blob: str
    passed: bool
    max_abs_error: ReportFloat = None
    max_rel_error: ReportFloat = None
    worst_index: list[int] = Field(
        default_factory=list, description="element with the largest error (full mode)"
    )
    analytic: ReportFloat = Field(
        None, description="value at the worst element (full) or worst direction (fast)"
    )
    numeric: ReportFloat = None
    gradient: str | None = Field(None, description="gradient blob; null = none generated")
    checked: int | None = Field(None, description="elements (full) or directions (fast)")
    nondifferentiable: bool | None = Field(
        None, description="the forward run met a kink (Relu at 0, MaxPool tie)"
    )
    note: str | None = None


class VerifyReportModel(_Strict):
    """Outcome of a numeric gradient check (``step``/``atol``/``rtol`` as used)."""

    passed: bool
    mode: str
    step: ReportFloat = None
    atol: ReportFloat = None
    rtol: ReportFloat = None
    blobs: list[BlobReportModel]
    diagnostics: list[DiagnosticModel] = Field(default_factory=list)


class NetGradientResponse(_Strict):
    """Gradient ops, blob -> gradient map (forward first-appearance order) and diagnostics."""

    grad_ops: list[OperatorDefJson]
    grad_map: dict[str, GradEntry]
    diagnostics: list[DiagnosticModel]
    net: NetDefJson | None = None
    verify_report: VerifyReportModel | None = None


class VerifyRequest(_Strict):
    """Generate (or take) gradient ops of a net and check them against finite differences."""

    net: NetDefJson
    ys: list[str] | dict[str, GradEntry]
    skip: int = Field(0, ge=0)
    inputs: list[InputSpecModel] = Field(default_factory=list)
    mode: Literal["fast", "full"] = "fast"
    tolerances: TolerancesModel | None = None
    check: list[str] = Field(default_factory=list)
    passes: int | None = None
    seed: int | None = None
    grad_ops: list[OperatorDefJson] | None = Field(
        None,
        description="check these gradient ops instead of generated ones (e.g. the grad_ops "
        "of /v1/gradients/net, whose leading all-ones seed ops are taken as the seeds)",
    )
    recompute: bool = Field(
        False, description="as for /v1/gradients/net: re-run producers of overwritten values"
    )


class VerifyResponse(_Strict):
    """The verification report plus the gradient ops it checked."""

    report: VerifyReportModel
    grad_ops: list[OperatorDefJson]
    grad_map: dict[str, GradEntry]
    diagnostics: list[DiagnosticModel]


class RunRequest(_Strict):
    """Run a net (plus its generated gradient ops when ``ys`` is given) and fetch blobs."""

    net: NetDefJson
    inputs: list[InputSpecModel] = Field(
        default_factory=list, description="fed blobs, as for /v1/verify (dtypes kept)"
    )
    fetch: list[str] = Field(description="blobs to return, in this order")
    ys: list[str] | dict[str, GradEntry] | None = Field(
        None,
        description="as for /v1/gradients/net: append the gradient ops of these outputs "
        "(auto seeds are all-ones) before running; null or empty = forward only",
    )
    skip: int = Field(0, ge=0, description="with ys: ignore the first `skip` ops (they run)")
    recompute: bool = Field(False, description="with ys: as for /v1/gradients/net")


#: A tensor element in a response: a number, or a non-finite float spelled as in protobuf's
#: JSON mapping. Integer and bool tensors give integers (bool as 0/1).
ValueElement = float | int | Literal["NaN", "Infinity", "-Infinity"]


class TensorValueModel(_Strict):
    """A fetched tensor: ``shape``, NumPy ``dtype`` name and row-major ``data``."""

    shape: list[int]
    dtype: str
    data: list[ValueElement]


class RunResponse(_Strict):
    """Fetched blobs (fetch order); with ``ys`` also the appended gradient ops and grad map."""

    outputs: dict[str, TensorValueModel]
    grad_ops: list[OperatorDefJson] | None = None
    grad_map: dict[str, GradEntry] | None = None
    diagnostics: list[DiagnosticModel]


class ProblemItem(BaseModel):
    """One offending item of a problem (typically one op)."""

    code: str
    message: str
    op_index: int | None = None
    op_type: str | None = None
    path: str | None = None
    blobs: list[str] = Field(default_factory=list)


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``) with every problem at once."""

    type: str = Field(description="urn:netgrad:problem:<code>")
    title: str
    status: int
    detail: str
    errors: list[ProblemItem]


class OperatorInfo(_Strict):
    """A registered op type and its gradient status."""

    type: str
    gradient: str = Field(
        description="gradient | no_gradient | should_not_differentiate | not_implemented | "
        "gradient_op"
    )
    has_kernel: bool
    doc: str = ""


class OperatorList(_Strict):
    """Every registered op type, sorted by name."""

    operators: list[OperatorInfo]


class Health(_Strict):
    """Liveness answer."""

    status: Literal["ok"]
    version: str
    workers: int = Field(description="size of the execution worker pool (0 = none)")


#: Models whose JSON Schemas go into the OpenAPI components.
API_MODELS: tuple[type[BaseModel], ...] = (
    OpGradientRequest,
    OpGradientResponse,
    NetGradientRequest,
    NetGradientResponse,
    VerifyRequest,
    VerifyResponse,
    RunRequest,
    RunResponse,
    Problem,
    OperatorList,
    Health,
)


def openapi_schema(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """JSON Schemas of ``model`` and the models it uses, keyed by name, for OpenAPI components.

    References to Caffe2 messages point at the schemas of :func:`caffe2_json_schemas`.
    """
    js = model.model_json_schema(ref_template=SCHEMA_PREFIX + "{model}")
    out: dict[str, dict[str, Any]] = dict(js.pop("$defs", {}))
    out[model.__name__] = js
    return {name: _resolve_caffe2_refs(s) for name, s in out.items()}


def _resolve_caffe2_refs(node: Any) -> Any:
    if isinstance(node, dict):
        if CAFFE2_REF in node:
            rest = {k: v for k, v in node.items() if k != CAFFE2_REF}
            ref = {"$ref": SCHEMA_PREFIX + node[CAFFE2_REF]}
            return {"allOf": [ref], **rest} if rest else ref
        return {k: _resolve_caffe2_refs(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_caffe2_refs(v) for v in node]
    return node


# -- JSON Schemas of caffe2.proto messages ------------------------------------------------------

_FD = descriptor.FieldDescriptor
_INT64 = {_FD.TYPE_INT64, _FD.TYPE_UINT64, _FD.TYPE_SINT64, _FD.TYPE_FIXED64, _FD.TYPE_SFIXED64}
_FLOAT = {_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE}
_UTF8_BYTES = {("caffe2.Argument", "s"), ("caffe2.Argument", "strings")}


def _field_schema(msg: descriptor.Descriptor, f: descriptor.FieldDescriptor) -> dict[str, Any]:
    s: dict[str, Any]
    if f.message_type is not None:
        s = {"$ref": SCHEMA_PREFIX + f.message_type.full_name}
    elif f.enum_type is not None:
        s = {"anyOf": [{"enum": [v.name for v in f.enum_type.values]}, {"type": "integer"}]}
    elif f.type == _FD.TYPE_BOOL:
        s = {"type": "boolean"}
    elif f.type in _INT64:
        s = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    elif f.type in _FLOAT:
        s = {"anyOf": [{"type": "number"}, {"enum": ["NaN", "Infinity", "-Infinity"]}]}
    elif f.type == _FD.TYPE_BYTES:
        if (msg.full_name, f.name) in _UTF8_BYTES:
            s = {"type": "string", "description": "UTF-8 text (not base64)"}
        else:
            s = {"type": "string", "format": "byte", "description": "base64"}
    elif f.type == _FD.TYPE_STRING:
        s = {"type": "string"}
    else:
        s = {"type": "integer"}
    if f.is_repeated:
        return {"type": "array", "items": s}
    return s


def caffe2_json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schemas, keyed ``caffe2.<Message>``, of NetDef and every message it reaches.

    Properties use proto field names; ``Argument.s``/``strings`` are documented as UTF-8 text.
    """
    out: dict[str, dict[str, Any]] = {}
    todo = [caffe2_pb2.NetDef.DESCRIPTOR]
    while todo:
        msg = todo.pop()
        if msg.full_name in out:
            continue
        props = {f.name: _field_schema(msg, f) for f in msg.fields}
        out[msg.full_name] = {
            "type": "object",
            "title": msg.full_name,
            "properties": props,
            "additionalProperties": False,
        }
        todo.extend(f.message_type for f in msg.fields if f.message_type is not None)
    out["caffe2.Argument"]["description"] = (
        "A named argument. In JSON, `s` and `strings` are UTF-8 text (blob names, 'NCHW'...), "
        "not base64 as in the canonical protobuf JSON mapping."
    )
    return dict(sorted(out.items()))
