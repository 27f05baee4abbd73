"""Wire schemas: Caffe2's ``caffe2.proto``, netgrad's ``netgrad.proto`` and their generated code.

Regenerate the ``*_pb2.py`` files after editing a ``.proto`` with::

    python -m api_schemas.generate

``tests/test_generated_protos.py`` fails when the committed code is stale.
"""
