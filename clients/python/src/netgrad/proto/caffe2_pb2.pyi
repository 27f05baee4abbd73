from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeviceTypeProto(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTO_CPU: _ClassVar[DeviceTypeProto]
    PROTO_CUDA: _ClassVar[DeviceTypeProto]
    PROTO_MKLDNN: _ClassVar[DeviceTypeProto]
    PROTO_OPENGL: _ClassVar[DeviceTypeProto]
    PROTO_OPENCL: _ClassVar[DeviceTypeProto]
    PROTO_IDEEP: _ClassVar[DeviceTypeProto]
    PROTO_HIP: _ClassVar[DeviceTypeProto]
    PROTO_FPGA: _ClassVar[DeviceTypeProto]
    PROTO_MSNPU: _ClassVar[DeviceTypeProto]
    PROTO_XLA: _ClassVar[DeviceTypeProto]
    PROTO_MLC: _ClassVar[DeviceTypeProto]
    PROTO_COMPILE_TIME_MAX_DEVICE_TYPES: _ClassVar[DeviceTypeProto]
PROTO_CPU: DeviceTypeProto
PROTO_CUDA: DeviceTypeProto
PROTO_MKLDNN: DeviceTypeProto
PROTO_OPENGL: DeviceTypeProto
PROTO_OPENCL: DeviceTypeProto
PROTO_IDEEP: DeviceTypeProto
PROTO_HIP: DeviceTypeProto
PROTO_FPGA: DeviceTypeProto
PROTO_MSNPU: DeviceTypeProto
PROTO_XLA: DeviceTypeProto
PROTO_MLC: DeviceTypeProto
PROTO_COMPILE_TIME_MAX_DEVICE_TYPES: DeviceTypeProto

class TensorProto(_message.Message):
    __slots__ = ("dims", "data_type", "data_format", "float_data", "int32_data", "byte_data", "string_data", "double_data", "int64_data", "raw_data", "name", "device_detail", "segment")
    class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNDEFINED: _ClassVar[TensorProto.DataType]
        FLOAT: _ClassVar[TensorProto.DataType]
        INT32: _ClassVar[TensorProto.DataType]
        BYTE: _ClassVar[TensorProto.DataType]
        STRING: _ClassVar[TensorProto.DataType]
        BOOL: _ClassVar[TensorProto.DataType]
        UINT8: _ClassVar[TensorProto.DataType]
        INT8: _ClassVar[TensorProto.DataType]
        UINT16: _ClassVar[TensorProto.DataType]
        INT16: _ClassVar[TensorProto.DataType]
        INT64: _ClassVar[TensorProto.DataType]
        FLOAT16: _ClassVar[TensorProto.DataType]
        DOUBLE: _ClassVar[TensorProto.DataType]
        ZERO_COLLISION_HASH: _ClassVar[TensorProto.DataType]
        REBATCHING_BUFFER: _ClassVar[TensorProto.DataType]
    UNDEFINED: TensorProto.DataType
    FLOAT: TensorProto.DataType
    INT32: TensorProto.DataType
    BYTE: TensorProto.DataType
    STRING: TensorProto.DataType
    BOOL: TensorProto.DataType
    UINT8: TensorProto.DataType
    INT8: TensorProto.DataType
    UINT16: TensorProto.DataType
    INT16: TensorProto.DataType
    INT64: TensorProto.DataType
    FLOAT16: TensorProto.DataType
    DOUBLE: TensorProto.DataType
    ZERO_COLLISION_HASH: TensorProto.DataType
    REBATCHING_BUFFER: TensorProto.DataType
    class SerializationFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FMT_PROTOBUF: _ClassVar[TensorProto.SerializationFormat]
        FMT_BFLOAT16: _ClassVar[TensorProto.SerializationFormat]
    FMT_PROTOBUF: TensorProto.SerializationFormat
    FMT_BFLOAT16: TensorProto.SerializationFormat
    class Segment(_message.Message):
        __slots__ = ("begin", "end")
        BEGIN_FIELD_NUMBER: _ClassVar[int]
        END_FIELD_NUMBER: _ClassVar[int]
        begin: int
        end: int
        def __init__(self, begin: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...
    DIMS_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FORMAT_FIELD_NUMBER: _ClassVar[int]
    FLOAT_DATA_FIELD_NUMBER: _ClassVar[int]
    INT32_DATA_FIELD_NUMBER: _ClassVar[int]
    BYTE_DATA_FIELD_NUMBER: _ClassVar[int]
    STRING_DATA_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_DATA_FIELD_NUMBER: _ClassVar[int]
    INT64_DATA_FIELD_NUMBER: _ClassVar[int]
    RAW_DATA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_DETAIL_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    dims: _containers.RepeatedScalarFieldContainer[int]
    data_type: TensorProto.DataType
    data_format: int
    float_data: _containers.RepeatedScalarFieldContainer[float]
    int32_data: _containers.RepeatedScalarFieldContainer[int]
    byte_data: bytes
    string_data: _containers.RepeatedScalarFieldContainer[bytes]
    double_data: _containers.RepeatedScalarFieldContainer[float]
    int64_data: _containers.RepeatedScalarFieldContainer[int]
    raw_data: bytes
    name: str
    device_detail: DeviceOption
    segment: TensorProto.Segment
    def __init__(self, dims: _Optional[_Iterable[int]] = ..., data_type: _Optional[_Union[TensorProto.DataType, str]] = ..., data_format: _Optional[int] = ..., float_data: _Optional[_Iterable[float]] = ..., int32_data: _Optional[_Iterable[int]] = ..., byte_data: _Optional[bytes] = ..., string_data: _Optional[_Iterable[bytes]] = ..., double_data: _Optional[_Iterable[float]] = ..., int64_data: _Optional[_Iterable[int]] = ..., raw_data: _Optional[bytes] = ..., name: _Optional[str] = ..., device_detail: _Optional[_Union[DeviceOption, _Mapping]] = ..., segment: _Optional[_Union[TensorProto.Segment, _Mapping]] = ...) -> None: ...

class QTensorProto(_message.Message):
    __slots__ = ("dims", "precision", "scale", "bias", "is_signed", "data", "name", "data_type", "scales", "biases", "axis", "is_multiparam")
    DIMS_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    BIAS_FIELD_NUMBER: _ClassVar[int]
    IS_SIGNED_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    SCALES_FIELD_NUMBER: _ClassVar[int]
    BIASES_FIELD_NUMBER: _ClassVar[int]
    AXIS_FIELD_NUMBER: _ClassVar[int]
    IS_MULTIPARAM_FIELD_NUMBER: _ClassVar[int]
    dims: _containers.RepeatedScalarFieldContainer[int]
    precision: int
    scale: float
    bias: float
    is_signed: bool
    data: _containers.RepeatedScalarFieldContainer[int]
    name: str
    data_type: TensorProto.DataType
    scales: _containers.RepeatedScalarFieldContainer[float]
    biases: _containers.RepeatedScalarFieldContainer[float]
    axis: int
    is_multiparam: bool
    def __init__(self, dims: _Optional[_Iterable[int]] = ..., precision: _Optional[int] = ..., scale: _Optional[float] = ..., bias: _Optional[float] = ..., is_signed: _Optional[bool] = ..., data: _Optional[_Iterable[int]] = ..., name: _Optional[str] = ..., data_type: _Optional[_Union[TensorProto.DataType, str]] = ..., scales: _Optional[_Iterable[float]] = ..., biases: _Optional[_Iterable[float]] = ..., axis: _Optional[int] = ..., is_multiparam: _Optional[bool] = ...) -> None: ...

class TensorProtos(_message.Message):
    __slots__ = ("protos",)
    PROTOS_FIELD_NUMBER: _ClassVar[int]
    protos: _containers.RepeatedCompositeFieldContainer[TensorProto]
    def __init__(self, protos: _Optional[_Iterable[_Union[TensorProto, _Mapping]]] = ...) -> None: ...

class TensorShape(_message.Message):
    __slots__ = ("dims", "data_type", "unknown_dims", "unknown_shape", "name")
    DIMS_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_DIMS_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_SHAPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    dims: _containers.RepeatedScalarFieldContainer[int]
    data_type: TensorProto.DataType
    unknown_dims: _containers.RepeatedScalarFieldContainer[int]
    unknown_shape: bool
    name: str
    def __init__(self, dims: _Optional[_Iterable[int]] = ..., data_type: _Optional[_Union[TensorProto.DataType, str]] = ..., unknown_dims: _Optional[_Iterable[int]] = ..., unknown_shape: _Optional[bool] = ..., name: _Optional[str] = ...) -> None: ...

class TensorShapes(_message.Message):
    __slots__ = ("shapes",)
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    shapes: _containers.RepeatedCompositeFieldContainer[TensorShape]
    def __init__(self, shapes: _Optional[_Iterable[_Union[TensorShape, _Mapping]]] = ...) -> None: ...

class TensorBoundShape(_message.Message):
    __slots__ = ("shape", "dim_type", "name", "shape_is_final")
    class DimType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[TensorBoundShape.DimType]
        CONSTANT: _ClassVar[TensorBoundShape.DimType]
        BATCH: _ClassVar[TensorBoundShape.DimType]
        BATCH_OF_FEATURE_MAX: _ClassVar[TensorBoundShape.DimType]
        BATCH_OF_FEATURE_MAX_DEFAULT: _ClassVar[TensorBoundShape.DimType]
        FEATURE_MAX: _ClassVar[TensorBoundShape.DimType]
        FEATURE_MAX_DEFAULT: _ClassVar[TensorBoundShape.DimType]
    UNKNOWN: TensorBoundShape.DimType
    CONSTANT: TensorBoundShape.DimType
    BATCH: TensorBoundShape.DimType
    BATCH_OF_FEATURE_MAX: TensorBoundShape.DimType
    BATCH_OF_FEATURE_MAX_DEFAULT: TensorBoundShape.DimType
    FEATURE_MAX: TensorBoundShape.DimType
    FEATURE_MAX_DEFAULT: TensorBoundShape.DimType
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DIM_TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHAPE_IS_FINAL_FIELD_NUMBER: _ClassVar[int]
    shape: TensorShape
    dim_type: _containers.RepeatedScalarFieldContainer[TensorBoundShape.DimType]
    name: str
    shape_is_final: bool
    def __init__(self, shape: _Optional[_Union[TensorShape, _Mapping]] = ..., dim_type: _Optional[_Iterable[_Union[TensorBoundShape.DimType, str]]] = ..., name: _Optional[str] = ..., shape_is_final: _Optional[bool] = ...) -> None: ...

class TensorBoundShapes(_message.Message):
    __slots__ = ("shapes", "max_batch_size", "max_feature_len")
    SHAPES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_FEATURE_LEN_FIELD_NUMBER: _ClassVar[int]
    shapes: _containers.RepeatedCompositeFieldContainer[TensorBoundShape]
    max_batch_size: int
    max_feature_len: int
    def __init__(self, shapes: _Optional[_Iterable[_Union[TensorBoundShape, _Mapping]]] = ..., max_batch_size: _Optional[int] = ..., max_feature_len: _Optional[int] = ...) -> None: ...

class AOTConfig(_message.Message):
    __slots__ = ("max_batch_size", "max_seq_size", "in_batch_broadcast", "onnxifi_blacklist_ops", "onnxifi_min_ops")
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQ_SIZE_FIELD_NUMBER: _ClassVar[int]
    IN_BATCH_BROADCAST_FIELD_NUMBER: _ClassVar[int]
    ONNXIFI_BLACKLIST_OPS_FIELD_NUMBER: _ClassVar[int]
    ONNXIFI_MIN_OPS_FIELD_NUMBER: _ClassVar[int]
    max_batch_size: int
    max_seq_size: int
    in_batch_broadcast: bool
    onnxifi_blacklist_ops: str
    onnxifi_min_ops: int
    def __init__(self, max_batch_size: _Optional[int] = ..., max_seq_size: _Optional[int] = ..., in_batch_broadcast: _Optional[bool] = ..., onnxifi_blacklist_ops: _Optional[str] = ..., onnxifi_min_ops: _Optional[int] = ...) -> None: ...

class Argument(_message.Message):
    __slots__ = ("name", "f", "i", "s", "t", "n", "floats", "ints", "strings", "tensors", "nets", "qtensors")
    NAME_FIELD_NUMBER: _ClassVar[int]
    F_FIELD_NUMBER: _ClassVar[int]
    I_FIELD_NUMBER: _ClassVar[int]
    S_FIELD_NUMBER: _ClassVar[int]
    T_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    FLOATS_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    STRINGS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    NETS_FIELD_NUMBER: _ClassVar[int]
    QTENSORS_FIELD_NUMBER: _ClassVar[int]
    name: str
    f: float
    i: int
    s: bytes
    t: TensorProto
    n: NetDef
    floats: _containers.RepeatedScalarFieldContainer[float]
    ints: _containers.RepeatedScalarFieldContainer[int]
    strings: _containers.RepeatedScalarFieldContainer[bytes]
    tensors: _containers.RepeatedCompositeFieldContainer[TensorProto]
    nets: _containers.RepeatedCompositeFieldContainer[NetDef]
    qtensors: _containers.RepeatedCompositeFieldContainer[QTensorProto]
    def __init__(self, name: _Optional[str] = ..., f: _Optional[float] = ..., i: _Optional[int] = ..., s: _Optional[bytes] = ..., t: _Optional[_Union[TensorProto, _Mapping]] = ..., n: _Optional[_Union[NetDef, _Mapping]] = ..., floats: _Optional[_Iterable[float]] = ..., ints: _Optional[_Iterable[int]] = ..., strings: _Optional[_Iterable[bytes]] = ..., tensors: _Optional[_Iterable[_Union[TensorProto, _Mapping]]] = ..., nets: _Optional[_Iterable[_Union[NetDef, _Mapping]]] = ..., qtensors: _Optional[_Iterable[_Union[QTensorProto, _Mapping]]] = ...) -> None: ...

class DeviceOption(_message.Message):
    __slots__ = ("device_type", "device_id", "random_seed", "node_name", "numa_node_id", "extra_info")
    DEVICE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    RANDOM_SEED_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    NUMA_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    EXTRA_INFO_FIELD_NUMBER: _ClassVar[int]
    device_type: int
    device_id: int
    random_seed: int
    node_name: str
    numa_node_id: int
    extra_info: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, device_type: _Optional[int] = ..., device_id: _Optional[int] = ..., random_seed: _Optional[int] = ..., node_name: _Optional[str] = ..., numa_node_id: _Optional[int] = ..., extra_info: _Optional[_Iterable[str]] = ...) -> None: ...

class OperatorDef(_message.Message):
    __slots__ = ("input", "output", "name", "type", "arg", "device_option", "engine", "control_input", "is_gradient_op", "debug_info", "domain", "op_version")
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ARG_FIELD_NUMBER: _ClassVar[int]
    DEVICE_OPTION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    CONTROL_INPUT_FIELD_NUMBER: _ClassVar[int]
    IS_GRADIENT_OP_FIELD_NUMBER: _ClassVar[int]
    DEBUG_INFO_FIELD_NUMBER: _ClassVar[int]
    DOMAIN_FIELD_NUMBER: _ClassVar[int]
    OP_VERSION_FIELD_NUMBER: _ClassVar[int]
    input: _containers.RepeatedScalarFieldContainer[str]
    output: _containers.RepeatedScalarFieldContainer[str]
    name: str
    type: str
    arg: _containers.RepeatedCompositeFieldContainer[Argument]
    device_option: DeviceOption
    engine: str
    control_input: _containers.RepeatedScalarFieldContainer[str]
    is_gradient_op: bool
    debug_info: str
    domain: str
    op_version: int
    def __init__(self, input: _Optional[_Iterable[str]] = ..., output: _Optional[_Iterable[str]] = ..., name: _Optional[str] = ..., type: _Optional[str] = ..., arg: _Optional[_Iterable[_Union[Argument, _Mapping]]] = ..., device_option: _Optional[_Union[DeviceOption, _Mapping]] = ..., engine: _Optional[str] = ..., control_input: _Optional[_Iterable[str]] = ..., is_gradient_op: _Optional[bool] = ..., debug_info: _Optional[str] = ..., domain: _Optional[str] = ..., op_version: _Optional[int] = ...) -> None: ...

class MapFieldEntry(_message.Message):
    __slots__ = ("key", "val")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VAL_FIELD_NUMBER: _ClassVar[int]
    key: str
    val: str
    def __init__(self, key: _Optional[str] = ..., val: _Optional[str] = ...) -> None: ...

class BackendOptions(_message.Message):
    __slots__ = ("backend_name", "option")
    BACKEND_NAME_FIELD_NUMBER: _ClassVar[int]
    OPTION_FIELD_NUMBER: _ClassVar[int]
    backend_name: str
    option: _containers.RepeatedCompositeFieldContainer[MapFieldEntry]
    def __init__(self, backend_name: _Optional[str] = ..., option: _Optional[_Iterable[_Union[MapFieldEntry, _Mapping]]] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("name", "device_id", "extra_info", "backend_options")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    EXTRA_INFO_FIELD_NUMBER: _ClassVar[int]
    BACKEND_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    device_id: _containers.RepeatedScalarFieldContainer[int]
    extra_info: str
    backend_options: _containers.RepeatedCompositeFieldContainer[BackendOptions]
    def __init__(self, name: _Optional[str] = ..., device_id: _Optional[_Iterable[int]] = ..., extra_info: _Optional[str] = ..., backend_options: _Optional[_Iterable[_Union[BackendOptions, _Mapping]]] = ...) -> None: ...

class NetDef(_message.Message):
    __slots__ = ("name", "op", "type", "num_workers", "device_option", "arg", "external_input", "external_output", "partition_info")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NUM_WORKERS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_OPTION_FIELD_NUMBER: _ClassVar[int]
    ARG_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_INPUT_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_INFO_FIELD_NUMBER: _ClassVar[int]
    name: str
    op: _containers.RepeatedCompositeFieldContainer[OperatorDef]
    type: str
    num_workers: int
    device_option: DeviceOption
    arg: _containers.RepeatedCompositeFieldContainer[Argument]
    external_input: _containers.RepeatedScalarFieldContainer[str]
    external_output: _containers.RepeatedScalarFieldContainer[str]
    partition_info: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    def __init__(self, name: _Optional[str] = ..., op: _Optional[_Iterable[_Union[OperatorDef, _Mapping]]] = ..., type: _Optional[str] = ..., num_workers: _Optional[int] = ..., device_option: _Optional[_Union[DeviceOption, _Mapping]] = ..., arg: _Optional[_Iterable[_Union[Argument, _Mapping]]] = ..., external_input: _Optional[_Iterable[str]] = ..., external_output: _Optional[_Iterable[str]] = ..., partition_info: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ...) -> None: ...

class ExecutionStep(_message.Message):
    __slots__ = ("name", "substep", "network", "num_iter", "criteria_network", "report_net", "report_interval", "run_every_ms", "concurrent_substeps", "should_stop_blob", "only_once", "create_workspace", "num_concurrent_instances")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SUBSTEP_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    NUM_ITER_FIELD_NUMBER: _ClassVar[int]
    CRITERIA_NETWORK_FIELD_NUMBER: _ClassVar[int]
    REPORT_NET_FIELD_NUMBER: _ClassVar[int]
    REPORT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    RUN_EVERY_MS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENT_SUBSTEPS_FIELD_NUMBER: _ClassVar[int]
    SHOULD_STOP_BLOB_FIELD_NUMBER: _ClassVar[int]
    ONLY_ONCE_FIELD_NUMBER: _ClassVar[int]
    CREATE_WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    NUM_CONCURRENT_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    substep: _containers.RepeatedCompositeFieldContainer[ExecutionStep]
    network: _containers.RepeatedScalarFieldContainer[str]
    num_iter: int
    criteria_network: str
    report_net: str
    report_interval: int
    run_every_ms: int
    concurrent_substeps: bool
    should_stop_blob: str
    only_once: bool
    create_workspace: bool
    num_concurrent_instances: int
    def __init__(self, name: _Optional[str] = ..., substep: _Optional[_Iterable[_Union[ExecutionStep, _Mapping]]] = ..., network: _Optional[_Iterable[str]] = ..., num_iter: _Optional[int] = ..., criteria_network: _Optional[str] = ..., report_net: _Optional[str] = ..., report_interval: _Optional[int] = ..., run_every_ms: _Optional[int] = ..., concurrent_substeps: _Optional[bool] = ..., should_stop_blob: _Optional[str] = ..., only_once: _Optional[bool] = ..., create_workspace: _Optional[bool] = ..., num_concurrent_instances: _Optional[int] = ...) -> None: ...

class PlanDef(_message.Message):
    __slots__ = ("name", "network", "execution_step")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_STEP_FIELD_NUMBER: _ClassVar[int]
    name: str
    network: _containers.RepeatedCompositeFieldContainer[NetDef]
    execution_step: _containers.RepeatedCompositeFieldContainer[ExecutionStep]
    def __init__(self, name: _Optional[str] = ..., network: _Optional[_Iterable[_Union[NetDef, _Mapping]]] = ..., execution_step: _Optional[_Iterable[_Union[ExecutionStep, _Mapping]]] = ...) -> None: ...

class BlobProto(_message.Message):
    __slots__ = ("name", "type", "tensor", "content", "qtensor", "content_num_chunks", "content_chunk_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    QTENSOR_FIELD_NUMBER: _ClassVar[int]
    CONTENT_NUM_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    tensor: TensorProto
    content: bytes
    qtensor: QTensorProto
    content_num_chunks: int
    content_chunk_id: int
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., tensor: _Optional[_Union[TensorProto, _Mapping]] = ..., content: _Optional[bytes] = ..., qtensor: _Optional[_Union[QTensorProto, _Mapping]] = ..., content_num_chunks: _Optional[int] = ..., content_chunk_id: _Optional[int] = ...) -> None: ...

class DBReaderProto(_message.Message):
    __slots__ = ("name", "source", "db_type", "key")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DB_TYPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: str
    db_type: str
    key: str
    def __init__(self, name: _Optional[str] = ..., source: _Optional[str] = ..., db_type: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class BlobSerializationOptions(_message.Message):
    __slots__ = ("blob_name_regex", "chunk_size", "float_format")
    class FloatFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        FLOAT_DEFAULT: _ClassVar[BlobSerializationOptions.FloatFormat]
        FLOAT_PROTOBUF: _ClassVar[BlobSerializationOptions.FloatFormat]
        FLOAT_BFLOAT16: _ClassVar[BlobSerializationOptions.FloatFormat]
    FLOAT_DEFAULT: BlobSerializationOptions.FloatFormat
    FLOAT_PROTOBUF: BlobSerializationOptions.FloatFormat
    FLOAT_BFLOAT16: BlobSerializationOptions.FloatFormat
    BLOB_NAME_REGEX_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    FLOAT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    blob_name_regex: str
    chunk_size: int
    float_format: BlobSerializationOptions.FloatFormat
    def __init__(self, blob_name_regex: _Optional[str] = ..., chunk_size: _Optional[int] = ..., float_format: _Optional[_Union[BlobSerializationOptions.FloatFormat, str]] = ...) -> None: ...

class SerializationOptions(_message.Message):
    __slots__ = ("options",)
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    options: _containers.RepeatedCompositeFieldContainer[BlobSerializationOptions]
    def __init__(self, options: _Optional[_Iterable[_Union[BlobSerializationOptions, _Mapping]]] = ...) -> None: ...
