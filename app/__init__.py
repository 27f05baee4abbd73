"""netgrad's HTTP service (FastAPI) and command line; the engine lives in :mod:`core`."""

__version__ = "0.1.0"
