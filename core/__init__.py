"""netgrad engine: Caffe2 gradient-net generation, execution and verification.

Nothing in this package imports FastAPI; ``app/`` is the only HTTP layer.
"""
