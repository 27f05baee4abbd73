"""netgrad-client: typed client of the netgrad service. See :mod:`netgrad.client`."""

__version__ = "0.1.0"
