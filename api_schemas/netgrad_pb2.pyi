from api_schemas import caffe2_pb2 as _caffe2_pb2
from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
JSON_FIELD_NUMBER: _ClassVar[int]
json: _descriptor.FieldDescriptor
JSON_BARE_ONEOF_FIELD_NUMBER: _ClassVar[int]
json_bare_oneof: _descriptor.FieldDescriptor

class JsonField(_message.Message):
    __slots__ = ("required", "object", "or_keys", "inline", "omit_unset")
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    OR_KEYS_FIELD_NUMBER: _ClassVar[int]
    INLINE_FIELD_NUMBER: _ClassVar[int]
    OMIT_UNSET_FIELD_NUMBER: _ClassVar[int]
    required: bool
    object: bool
    or_keys: bool
    inline: bool
    omit_unset: bool
    def __init__(self, required: _Optional[bool] = ..., object: _Optional[bool] = ..., or_keys: _Optional[bool] = ..., inline: _Optional[bool] = ..., omit_unset: _Optional[bool] = ...) -> None: ...

class GradientSlice(_message.Message):
    __slots__ = ("indices", "values")
    INDICES_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    indices: str
    values: str
    def __init__(self, indices: _Optional[str] = ..., values: _Optional[str] = ...) -> None: ...

class Gradient(_message.Message):
    __slots__ = ("dense", "slice")
    DENSE_FIELD_NUMBER: _ClassVar[int]
    SLICE_FIELD_NUMBER: _ClassVar[int]
    dense: str
    slice: GradientSlice
    def __init__(self, dense: _Optional[str] = ..., slice: _Optional[_Union[GradientSlice, _Mapping]] = ...) -> None: ...

class GradientMapEntry(_message.Message):
    __slots__ = ("blob", "gradient")
    BLOB_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_FIELD_NUMBER: _ClassVar[int]
    blob: str
    gradient: Gradient
    def __init__(self, blob: _Optional[str] = ..., gradient: _Optional[_Union[Gradient, _Mapping]] = ...) -> None: ...

class Diagnostic(_message.Message):
    __slots__ = ("severity", "code", "message", "op_index", "op_type", "path", "blobs")
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OP_INDEX_FIELD_NUMBER: _ClassVar[int]
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    severity: str
    code: str
    message: str
    op_index: int
    op_type: str
    path: str
    blobs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, severity: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., op_index: _Optional[int] = ..., op_type: _Optional[str] = ..., path: _Optional[str] = ..., blobs: _Optional[_Iterable[str]] = ...) -> None: ...

class OpGradientRequest(_message.Message):
    __slots__ = ("op", "g_output")
    OP_FIELD_NUMBER: _ClassVar[int]
    G_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    op: _caffe2_pb2.OperatorDef
    g_output: _containers.RepeatedCompositeFieldContainer[Gradient]
    def __init__(self, op: _Optional[_Union[_caffe2_pb2.OperatorDef, _Mapping]] = ..., g_output: _Optional[_Iterable[_Union[Gradient, _Mapping]]] = ...) -> None: ...

class OpGradientResponse(_message.Message):
    __slots__ = ("grad_ops", "g_input", "diagnostics")
    GRAD_OPS_FIELD_NUMBER: _ClassVar[int]
    G_INPUT_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    grad_ops: _containers.RepeatedCompositeFieldContainer[_caffe2_pb2.OperatorDef]
    g_input: _containers.RepeatedCompositeFieldContainer[Gradient]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    def __init__(self, grad_ops: _Optional[_Iterable[_Union[_caffe2_pb2.OperatorDef, _Mapping]]] = ..., g_input: _Optional[_Iterable[_Union[Gradient, _Mapping]]] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("shape", "dtype", "data")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    data: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., data: _Optional[_Iterable[float]] = ...) -> None: ...

class RandomSpec(_message.Message):
    __slots__ = ("shape", "dtype", "distribution", "seed", "low", "high")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    DISTRIBUTION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LOW_FIELD_NUMBER: _ClassVar[int]
    HIGH_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    distribution: str
    seed: int
    low: float
    high: float
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., distribution: _Optional[str] = ..., seed: _Optional[int] = ..., low: _Optional[float] = ..., high: _Optional[float] = ...) -> None: ...

class InputSpec(_message.Message):
    __slots__ = ("blob", "tensor", "random")
    BLOB_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    RANDOM_FIELD_NUMBER: _ClassVar[int]
    blob: str
    tensor: Tensor
    random: RandomSpec
    def __init__(self, blob: _Optional[str] = ..., tensor: _Optional[_Union[Tensor, _Mapping]] = ..., random: _Optional[_Union[RandomSpec, _Mapping]] = ...) -> None: ...

class Tolerances(_message.Message):
    __slots__ = ("step", "atol", "rtol")
    STEP_FIELD_NUMBER: _ClassVar[int]
    ATOL_FIELD_NUMBER: _ClassVar[int]
    RTOL_FIELD_NUMBER: _ClassVar[int]
    step: float
    atol: float
    rtol: float
    def __init__(self, step: _Optional[float] = ..., atol: _Optional[float] = ..., rtol: _Optional[float] = ...) -> None: ...

class VerifyOptions(_message.Message):
    __slots__ = ("inputs", "mode", "tolerances", "check", "passes", "seed")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    TOLERANCES_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    PASSES_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[InputSpec]
    mode: str
    tolerances: Tolerances
    check: _containers.RepeatedScalarFieldContainer[str]
    passes: int
    seed: int
    def __init__(self, inputs: _Optional[_Iterable[_Union[InputSpec, _Mapping]]] = ..., mode: _Optional[str] = ..., tolerances: _Optional[_Union[Tolerances, _Mapping]] = ..., check: _Optional[_Iterable[str]] = ..., passes: _Optional[int] = ..., seed: _Optional[int] = ...) -> None: ...

class BlobReport(_message.Message):
    __slots__ = ("blob", "passed", "max_abs_error", "max_rel_error", "worst_index", "analytic", "numeric", "gradient", "note", "checked", "nondifferentiable")
    BLOB_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    MAX_ABS_ERROR_FIELD_NUMBER: _ClassVar[int]
    MAX_REL_ERROR_FIELD_NUMBER: _ClassVar[int]
    WORST_INDEX_FIELD_NUMBER: _ClassVar[int]
    ANALYTIC_FIELD_NUMBER: _ClassVar[int]
    NUMERIC_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    NONDIFFERENTIABLE_FIELD_NUMBER: _ClassVar[int]
    blob: str
    passed: bool
    max_abs_error: float
    max_rel_error: float
    worst_index: _containers.RepeatedScalarFieldContainer[int]
    analytic: float
    numeric: float
    gradient: str
    note: str
    checked: int
    nondifferentiable: bool
    def __init__(self, blob: _Optional[str] = ..., passed: _Optional[bool] = ..., max_abs_error: _Optional[float] = ..., max_rel_error: _Optional[float] = ..., worst_index: _Optional[_Iterable[int]] = ..., analytic: _Optional[float] = ..., numeric: _Optional[float] = ..., gradient: _Optional[str] = ..., note: _Optional[str] = ..., checked: _Optional[int] = ..., nondifferentiable: _Optional[bool] = ...) -> None: ...

class VerifyReport(_message.Message):
    __slots__ = ("passed", "mode", "blobs", "diagnostics", "step", "atol", "rtol")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ATOL_FIELD_NUMBER: _ClassVar[int]
    RTOL_FIELD_NUMBER: _ClassVar[int]
    passed: bool
    mode: str
    blobs: _containers.RepeatedCompositeFieldContainer[BlobReport]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    step: float
    atol: float
    rtol: float
    def __init__(self, passed: _Optional[bool] = ..., mode: _Optional[str] = ..., blobs: _Optional[_Iterable[_Union[BlobReport, _Mapping]]] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ..., step: _Optional[float] = ..., atol: _Optional[float] = ..., rtol: _Optional[float] = ...) -> None: ...

class NetGradientRequest(_message.Message):
    __slots__ = ("net", "ys", "skip", "return_net", "verify", "recompute", "densify")
    NET_FIELD_NUMBER: _ClassVar[int]
    YS_FIELD_NUMBER: _ClassVar[int]
    SKIP_FIELD_NUMBER: _ClassVar[int]
    RETURN_NET_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    DENSIFY_FIELD_NUMBER: _ClassVar[int]
    net: _caffe2_pb2.NetDef
    ys: _containers.RepeatedCompositeFieldContainer[GradientMapEntry]
    skip: int
    return_net: bool
    verify: VerifyOptions
    recompute: bool
    densify: bool
    def __init__(self, net: _Optional[_Union[_caffe2_pb2.NetDef, _Mapping]] = ..., ys: _Optional[_Iterable[_Union[GradientMapEntry, _Mapping]]] = ..., skip: _Optional[int] = ..., return_net: _Optional[bool] = ..., verify: _Optional[_Union[VerifyOptions, _Mapping]] = ..., recompute: _Optional[bool] = ..., densify: _Optional[bool] = ...) -> None: ...

class NetGradientResponse(_message.Message):
    __slots__ = ("grad_ops", "grad_map", "diagnostics", "net", "verify_report")
    GRAD_OPS_FIELD_NUMBER: _ClassVar[int]
    GRAD_MAP_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    NET_FIELD_NUMBER: _ClassVar[int]
    VERIFY_REPORT_FIELD_NUMBER: _ClassVar[int]
    grad_ops: _containers.RepeatedCompositeFieldContainer[_caffe2_pb2.OperatorDef]
    grad_map: _containers.RepeatedCompositeFieldContainer[GradientMapEntry]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    net: _caffe2_pb2.NetDef
    verify_report: VerifyReport
    def __init__(self, grad_ops: _Optional[_Iterable[_Union[_caffe2_pb2.OperatorDef, _Mapping]]] = ..., grad_map: _Optional[_Iterable[_Union[GradientMapEntry, _Mapping]]] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ..., net: _Optional[_Union[_caffe2_pb2.NetDef, _Mapping]] = ..., verify_report: _Optional[_Union[VerifyReport, _Mapping]] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("net", "ys", "skip", "verify", "grad_ops", "recompute", "densify", "init_net")
    NET_FIELD_NUMBER: _ClassVar[int]
    YS_FIELD_NUMBER: _ClassVar[int]
    SKIP_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    GRAD_OPS_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    DENSIFY_FIELD_NUMBER: _ClassVar[int]
    INIT_NET_FIELD_NUMBER: _ClassVar[int]
    net: _caffe2_pb2.NetDef
    ys: _containers.RepeatedCompositeFieldContainer[GradientMapEntry]
    skip: int
    verify: VerifyOptions
    grad_ops: _containers.RepeatedCompositeFieldContainer[_caffe2_pb2.OperatorDef]
    recompute: bool
    densify: bool
    init_net: _caffe2_pb2.NetDef
    def __init__(self, net: _Optional[_Union[_caffe2_pb2.NetDef, _Mapping]] = ..., ys: _Optional[_Iterable[_Union[GradientMapEntry, _Mapping]]] = ..., skip: _Optional[int] = ..., verify: _Optional[_Union[VerifyOptions, _Mapping]] = ..., grad_ops: _Optional[_Iterable[_Union[_caffe2_pb2.OperatorDef, _Mapping]]] = ..., recompute: _Optional[bool] = ..., densify: _Optional[bool] = ..., init_net: _Optional[_Union[_caffe2_pb2.NetDef, _Mapping]] = ...) -> None: ...

class VerifyResponse(_message.Message):
    __slots__ = ("report", "grad_ops", "grad_map", "diagnostics")
    REPORT_FIELD_NUMBER: _ClassVar[int]
    GRAD_OPS_FIELD_NUMBER: _ClassVar[int]
    GRAD_MAP_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    report: VerifyReport
    grad_ops: _containers.RepeatedCompositeFieldContainer[_caffe2_pb2.OperatorDef]
    grad_map: _containers.RepeatedCompositeFieldContainer[GradientMapEntry]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    def __init__(self, report: _Optional[_Union[VerifyReport, _Mapping]] = ..., grad_ops: _Optional[_Iterable[_Union[_caffe2_pb2.OperatorDef, _Mapping]]] = ..., grad_map: _Optional[_Iterable[_Union[GradientMapEntry, _Mapping]]] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("net", "inputs", "fetch", "ys", "skip", "recompute", "densify", "init_net")
    NET_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    FETCH_FIELD_NUMBER: _ClassVar[int]
    YS_FIELD_NUMBER: _ClassVar[int]
    SKIP_FIELD_NUMBER: _ClassVar[int]
    RECOMPUTE_FIELD_NUMBER: _ClassVar[int]
    DENSIFY_FIELD_NUMBER: _ClassVar[int]
    INIT_NET_FIELD_NUMBER: _ClassVar[int]
    net: _caffe2_pb2.NetDef
    inputs: _containers.RepeatedCompositeFieldContainer[InputSpec]
    fetch: _containers.RepeatedScalarFieldContainer[str]
    ys: _containers.RepeatedCompositeFieldContainer[GradientMapEntry]
    skip: int
    recompute: bool
    densify: bool
    init_net: _caffe2_pb2.NetDef
    def __init__(self, net: _Optional[_Union[_caffe2_pb2.NetDef, _Mapping]] = ..., inputs: _Optional[_Iterable[_Union[InputSpec, _Mapping]]] = ..., fetch: _Optional[_Iterable[str]] = ..., ys: _Optional[_Iterable[_Union[GradientMapEntry, _Mapping]]] = ..., skip: _Optional[int] = ..., recompute: _Optional[bool] = ..., densify: _Optional[bool] = ..., init_net: _Optional[_Union[_caffe2_pb2.NetDef, _Mapping]] = ...) -> None: ...

class BlobValue(_message.Message):
    __slots__ = ("blob", "tensor")
    BLOB_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    blob: str
    tensor: Tensor
    def __init__(self, blob: _Optional[str] = ..., tensor: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("outputs", "grad_ops", "grad_map", "diagnostics")
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    GRAD_OPS_FIELD_NUMBER: _ClassVar[int]
    GRAD_MAP_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    outputs: _containers.RepeatedCompositeFieldContainer[BlobValue]
    grad_ops: _containers.RepeatedCompositeFieldContainer[_caffe2_pb2.OperatorDef]
    grad_map: _containers.RepeatedCompositeFieldContainer[GradientMapEntry]
    diagnostics: _containers.RepeatedCompositeFieldContainer[Diagnostic]
    def __init__(self, outputs: _Optional[_Iterable[_Union[BlobValue, _Mapping]]] = ..., grad_ops: _Optional[_Iterable[_Union[_caffe2_pb2.OperatorDef, _Mapping]]] = ..., grad_map: _Optional[_Iterable[_Union[GradientMapEntry, _Mapping]]] = ..., diagnostics: _Optional[_Iterable[_Union[Diagnostic, _Mapping]]] = ...) -> None: ...

class ProblemItem(_message.Message):
    __slots__ = ("code", "message", "op_index", "op_type", "path", "blobs")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OP_INDEX_FIELD_NUMBER: _ClassVar[int]
    OP_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    op_index: int
    op_type: str
    path: str
    blobs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., op_index: _Optional[int] = ..., op_type: _Optional[str] = ..., path: _Optional[str] = ..., blobs: _Optional[_Iterable[str]] = ...) -> None: ...

class Problem(_message.Message):
    __slots__ = ("type", "title", "status", "detail", "errors", "instance")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    type: str
    title: str
    status: int
    detail: str
    errors: _containers.RepeatedCompositeFieldContainer[ProblemItem]
    instance: str
    def __init__(self, type: _Optional[str] = ..., title: _Optional[str] = ..., status: _Optional[int] = ..., detail: _Optional[str] = ..., errors: _Optional[_Iterable[_Union[ProblemItem, _Mapping]]] = ..., instance: _Optional[str] = ...) -> None: ...

class OperatorInfo(_message.Message):
    __slots__ = ("type", "gradient", "has_kernel", "doc")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_FIELD_NUMBER: _ClassVar[int]
    HAS_KERNEL_FIELD_NUMBER: _ClassVar[int]
    DOC_FIELD_NUMBER: _ClassVar[int]
    type: str
    gradient: str
    has_kernel: bool
    doc: str
    def __init__(self, type: _Optional[str] = ..., gradient: _Optional[str] = ..., has_kernel: _Optional[bool] = ..., doc: _Optional[str] = ...) -> None: ...

class OperatorList(_message.Message):
    __slots__ = ("operators",)
    OPERATORS_FIELD_NUMBER: _ClassVar[int]
    operators: _containers.RepeatedCompositeFieldContainer[OperatorInfo]
    def __init__(self, operators: _Optional[_Iterable[_Union[OperatorInfo, _Mapping]]] = ...) -> None: ...

class Health(_message.Message):
    __slots__ = ("status", "version", "workers")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    status: str
    version: str
    workers: int
    def __init__(self, status: _Optional[str] = ..., version: _Optional[str] = ..., workers: _Optional[int] = ...) -> None: ...

class JobRequest(_message.Message):
    __slots__ = ("verify", "run")
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    verify: VerifyRequest
    run: RunRequest
    def __init__(self, verify: _Optional[_Union[VerifyRequest, _Mapping]] = ..., run: _Optional[_Union[RunRequest, _Mapping]] = ...) -> None: ...

class JobProgress(_message.Message):
    __slots__ = ("done", "total")
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    done: int
    total: int
    def __init__(self, done: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("id", "status", "kind", "progress", "verify", "run", "error", "ttl_s")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: str
    kind: str
    progress: JobProgress
    verify: VerifyResponse
    run: RunResponse
    error: Problem
    ttl_s: float
    def __init__(self, id: _Optional[str] = ..., status: _Optional[str] = ..., kind: _Optional[str] = ..., progress: _Optional[_Union[JobProgress, _Mapping]] = ..., verify: _Optional[_Union[VerifyResponse, _Mapping]] = ..., run: _Optional[_Union[RunResponse, _Mapping]] = ..., error: _Optional[_Union[Problem, _Mapping]] = ..., ttl_s: _Optional[float] = ...) -> None: ...
