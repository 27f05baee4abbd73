"""Op families: each module registers, per op, its NumPy kernel and gradient maker side by side.

Call :func:`load_all` once before using the registry; it imports every module here plus the
control ops' runtime and gradient makers, which register themselves (native ops, makers,
renamers) in :mod:`core.registry`.
"""

from __future__ import annotations

import importlib
import pkgutil

_loaded = False


def load_all() -> None:
    """Import every op module (idempotent), so that all registrations are in place."""
    global _loaded
    if _loaded:
        return
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")
    # The runtime first: it registers the executor's native ops, which the executor needs
    # even where the gradient makers cannot be imported (see core.executor.executor).
    importlib.import_module("core.control.runtime")
    importlib.import_module("core.control.gradients")
    importlib.import_module("core.control.rnn_runtime")  # RecurrentNetwork (issue 9)
    importlib.import_module("core.control.rnn_maker")
    # Last: Caffe2's status of every op type, derived from the makers registered above.
    importlib.import_module("core.caffe2_statuses").apply_caffe2_statuses()
    _loaded = True
