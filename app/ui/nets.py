"""Nets kept for drawing: a small in-memory cache keyed by content hash.

Netron opens a model by URL, so the page stores the net it wants drawn (``POST /ui/nets``)
and hands Netron ``/ui/nets/<id>/predict_net.pb``. The id is the first 16 hex digits of the
SHA-256 of the net's deterministic serialization: the same net always gets the same id.
At most :data:`MAX_NETS` nets and :data:`MAX_TOTAL_BYTES` bytes are kept, least recently
used first out; the cache lives in the serving process only.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from api_schemas import caffe2_pb2
from core.proto import codec

MAX_NETS = 64
MAX_NET_BYTES = 16 * 1024 * 1024
MAX_TOTAL_BYTES = 64 * 1024 * 1024

_lock = threading.Lock()
_nets: OrderedDict[str, bytes] = OrderedDict()


def store(net: caffe2_pb2.NetDef) -> str:
    """Keep ``net``; return its id."""
    data = codec.to_binary(net)
    key = hashlib.sha256(data).hexdigest()[:16]
    with _lock:
        _nets[key] = data
        _nets.move_to_end(key)
        while len(_nets) > MAX_NETS or sum(len(v) for v in _nets.values()) > MAX_TOTAL_BYTES:
            _nets.popitem(last=False)
    return key


def load(key: str) -> bytes | None:
    """The serialized net kept under ``key``, or ``None``."""
    with _lock:
        data = _nets.get(key)
        if data is not None:
            _nets.move_to_end(key)
        return data
