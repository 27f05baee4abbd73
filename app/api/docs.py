"""OpenAPI helpers: request-body documentation for JSON + protobuf and worked examples.

The routes read their bodies themselves (JSON or binary protobuf), so each route declares
its request and answer here, by the name of its ``netgrad.v1`` message: the schemas
themselves are generated from ``api_schemas/netgrad.proto`` into ``api_schemas/openapi_schemas.py``
(:func:`component_schemas`). The worked examples below are what "Try it out" in ``/docs``
sends; ``tests/api/test_openapi_schemas.py`` decodes each through the schema.
"""

from __future__ import annotations

import copy
from typing import Any

from api_schemas.openapi_schemas import SCHEMAS

SCHEMA_PREFIX = "#/components/schemas/"


def component_schemas() -> dict[str, dict[str, Any]]:
    """The generated OpenAPI component schemas of every API message (a fresh copy)."""
    return copy.deepcopy(SCHEMAS)

#: control-flow-cases §2 (Caffe2 ``do_op_test.test_operator``): Add inside Do, workspace W.
DO_OP: dict[str, Any] = {
    "type": "Do",
    "input": ["outer_X", "outer_Y", "W"],
    "output": ["outer_Z", "W"],
    "arg": [
        {
            "name": "net",
            "n": {"name": "subnet", "op": [{"type": "Add", "input": ["X", "Y"], "output": ["Z"]}]},
        },
        {"name": "inner_blobs", "strings": ["X", "Y", "Z"]},
        {"name": "outer_blobs_idx", "ints": [0, 1, 2]},
    ],
}

DO_REQUEST: dict[str, Any] = {"op": DO_OP, "g_output": ["outer_Z_grad", None]}

#: A small classifier: FC -> Relu (in place) -> Softmax.
MLP_NET: dict[str, Any] = {
    "name": "mlp",
    "op": [
        {"type": "FC", "input": ["data", "fc_w", "fc_b"], "output": ["fc"]},
        {"type": "Relu", "input": ["fc"], "output": ["fc"]},
        {"type": "Softmax", "input": ["fc"], "output": ["prob"]},
    ],
    "external_input": ["data", "fc_w", "fc_b"],
    "external_output": ["prob"],
}

NET_REQUEST: dict[str, Any] = {"net": MLP_NET, "ys": ["prob"], "skip": 0, "return_net": False}

VERIFY_REQUEST: dict[str, Any] = {
    "net": MLP_NET,
    "ys": ["prob"],
    "inputs": [
        {"blob": "data", "random": {"shape": [2, 4], "dtype": "float64", "seed": 1}},
        {
            "blob": "fc_w",
            "random": {"shape": [3, 4], "dtype": "float64", "distribution": "normal", "seed": 2},
        },
        {"blob": "fc_b", "tensor": {"shape": [3], "dtype": "float64", "data": [0.1, -0.2, 0.3]}},
    ],
    "mode": "full",
    "tolerances": {"step": 1e-6, "atol": 1e-6, "rtol": 1e-4},
}

def _const(blob: str, value: float) -> dict[str, Any]:
    """``ConstantFill`` of a float32 tensor of shape [1] (dtype 1 = FLOAT)."""
    return {
        "type": "ConstantFill",
        "output": [blob],
        "arg": [
            {"name": "shape", "ints": [1]},
            {"name": "value", "f": value},
            {"name": "dtype", "i": 1},
        ],
    }


def _branch(name: str, exponent: float) -> dict[str, Any]:
    """One branch of the If tutorial: ``Pow(y -> z)`` inside a ``Do`` on its own workspace."""
    ws = f"tutorial_if/workspace_if_{name}"
    pow_net = {
        "name": name,
        "op": [
            {
                "type": "Pow",
                "input": ["y"],
                "output": ["z"],
                "arg": [{"name": "exponent", "f": exponent}],
            }
        ],
    }
    return {
        "name": f"do_{name}_net",
        "op": [
            {
                "type": "Do",
                "input": ["y", ws],
                "output": ["z", ws],
                "arg": [
                    {"name": "net", "n": pow_net},
                    {"name": "inner_blobs", "strings": ["y", "z"]},
                    {"name": "outer_blobs_idx", "ints": [0, 1]},
                ],
            }
        ],
        "external_output": ["z", ws],
    }


#: control-flow-cases §9 (Caffe2 Control_Ops tutorial): y = 4; z = y**2 if x > 0 else y**3,
#: lowered the way ``add_if_op`` does it (If around one Do per branch). ``x`` is fed.
IF_TUTORIAL_NET: dict[str, Any] = {
    "name": "tutorial_if",
    "op": [
        _const("zero", 0.0),
        _const("one", 1.0),
        _const("y", 4.0),
        _const("z", 0.0),
        {"type": "GT", "input": ["x", "zero"], "output": ["x_gt_zero"]},
        {"type": "CreateScope", "output": ["tutorial_if/workspace_if_then"]},
        {"type": "CreateScope", "output": ["tutorial_if/workspace_if_else"]},
        {
            "type": "If",
            "input": [
                "x_gt_zero",
                "y",
                "tutorial_if/workspace_if_then",
                "tutorial_if/workspace_if_else",
            ],
            "output": ["z", "tutorial_if/workspace_if_then", "tutorial_if/workspace_if_else"],
            "arg": [
                {"name": "then_net", "n": _branch("then", 2.0)},
                {"name": "else_net", "n": _branch("else", 3.0)},
            ],
        },
    ],
    "external_output": ["z", "tutorial_if/workspace_if_then", "tutorial_if/workspace_if_else"],
}

#: Run the If tutorial with x = 0.5 and its gradient w.r.t. z: z = 16, y_grad = 2·y = 8.
RUN_REQUEST: dict[str, Any] = {
    "net": IF_TUTORIAL_NET,
    "inputs": [{"blob": "x", "tensor": {"shape": [], "dtype": "float32", "data": [0.5]}}],
    "fetch": ["z", "y_grad"],
    "ys": ["z"],
}


PROTOBUF_NOTE = (
    "Binary bodies are netgrad.v1 messages of api_schemas/netgrad.proto "
    "(Content-Type application/protobuf or application/x-protobuf)."
)


def request_body(
    model: str, examples: dict[str, dict[str, Any]], pb_message: str
) -> dict[str, Any]:
    """``openapi_extra`` for a route that takes ``model`` as JSON or ``pb_message`` as protobuf."""
    binary = {
        "schema": {"type": "string", "format": "binary"},
    }
    return {
        "requestBody": {
            "required": True,
            "description": f"JSON `{model}`, or binary `netgrad.v1.{pb_message}`. "
            + PROTOBUF_NOTE,
            "content": {
                "application/json": {
                    "schema": {"$ref": SCHEMA_PREFIX + model},
                    "examples": {
                        name: {"summary": name, "value": value} for name, value in examples.items()
                    },
                },
                "application/protobuf": binary,
                "application/x-protobuf": binary,
            },
        }
    }


def problem_response(description: str) -> dict[str, Any]:
    """An OpenAPI response whose body is a problem document."""
    return _problem(description)


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": {"$ref": SCHEMA_PREFIX + "Problem"}}},
    }


def responses(model: str, pb_message: str | None = None, body: bool = True,
              probe: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` of a route answering ``model`` (JSON) or protobuf.

    ``body=False``: a ``GET`` (no request-body problems; a 406 unless ``probe``, whose
    answer falls back to JSON).
    """
    content: dict[str, Any] = {"application/json": {"schema": {"$ref": SCHEMA_PREFIX + model}}}
    if pb_message is not None:
        binary = {"schema": {"type": "string", "format": "binary"}}
        content["application/protobuf"] = binary
        content["application/x-protobuf"] = binary
        content["text/x-protobuf"] = {"schema": {
            "type": "string", "description": f"`netgrad.v1.{pb_message}` in protobuf text "
            "format (`Accept: text/x-protobuf`), UTF-8"}}
    out: dict[int | str, dict[str, Any]] = {
        200: {"description": "Success", "content": content},
    }
    if pb_message is not None and not body:
        if not probe:
            out[406] = _problem("Accept allows neither JSON nor protobuf")
        return out
    if pb_message is not None:
        out[400] = _problem("Undecodable body, unknown field, bad UTF-8, inconsistent request")
        out[406] = _problem("Accept allows neither JSON nor protobuf")
        out[413] = _problem("Body larger than NETGRAD_MAX_BODY_BYTES")
        out[415] = _problem("Unsupported Content-Type")
        out[422] = _problem(
            "Net cannot be differentiated as asked (every offending op listed), or nested too deep"
        )
        out.update(overload_responses())
    return out


_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def overload_responses() -> dict[int | str, dict[str, Any]]:
    """408 / 429 / 503 of every POST route (issue 14: admission control and timeouts)."""
    return {
        408: _problem("The body did not arrive within NETGRAD_BODY_TIMEOUT_S"),
        429: {**_problem("This client has more than NETGRAD_MAX_CLIENT_INFLIGHT requests in "
                         "progress"), "headers": _RETRY_AFTER},
        503: {**_problem("Server at capacity (generation or large-body bound), job queue full "
                         "or workers busy (workers_busy), an execution worker died under the "
                         "job (worker_lost), or no workers configured; retry after "
                         "Retry-After seconds"), "headers": _RETRY_AFTER},
    }
