"""netgrad engine: Caffe2 gradient-net generation, execution and verification.

Nothing in this package imports FastAPI; ``app/`` is the only HTTP layer.
"""

try:  # upb caps nesting at 100 message levels, below what 64 levels of Do/If/While need.
    # Lift it for the process; client bytes are depth-checked instead (core.proto.limits,
    # core.proto.twin), against the configurable sub-net depth limit.
    from google._upb import _message as _upb_message

    _upb_message.SetAllowOversizeProtos(True)
except ImportError:  # pragma: no cover - other protobuf backends keep their own caps
    pass
