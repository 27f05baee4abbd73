"""The ``netgrad.v1`` and ``caffe2`` message classes (generated; copied from the server's
``api_schemas`` by ``python -m api_schemas.generate``, do not edit)."""
