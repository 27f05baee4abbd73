"""Wire schemas: Caffe2's ``caffe2.proto``, netgrad's ``netgrad.proto`` and generated files.

Regenerate the ``*_pb2.py`` files and ``openapi_schemas.py`` after editing a ``.proto`` with::

    python -m api_schemas.generate

``tests/test_generated_protos.py`` fails when the committed files are stale.
"""

#: The one deviation of the JSON form from protobuf's JSON mapping inside Caffe2 messages:
#: these ``bytes`` fields are UTF-8 text, not base64, because they hold blob names and
#: strings such as ``"NCHW"`` (base64 would silently turn a name like ``data`` into junk
#: bytes). Read by the JSON codec (``core.proto.jsonmap``) and the schema generator.
TEXT_BYTES_FIELDS = frozenset({("caffe2.Argument", "s"), ("caffe2.Argument", "strings")})
