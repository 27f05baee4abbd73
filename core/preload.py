"""Import every module of some packages now, not when a request first needs one.

Many modules are imported inside functions (error paths, hints, optional routes). The
README's second command reinstalls netgrad under a running first server; a module first
imported after that comes from another copy of netgrad or, when pip had removed the old copy,
fails to import, and the request was answered 500. The server (``app.main``) and each
execution worker (:mod:`core.executor.pool`) call :func:`import_packages` when they start.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable


def import_packages(packages: Iterable[str]) -> list[str]:
    """Import every module of ``packages`` (dotted names), sub-packages included (a name
    that is a plain module is imported alone).

    A module that needs an optional extra that is not installed (``ImportError``) is left
    out.

    Returns:
        The names of the modules left out, sorted.

    Raises:
        ImportError: a package itself cannot be imported.
    """
    missing: list[str] = []
    for pkg in packages:
        root = importlib.import_module(pkg)
        for info in pkgutil.walk_packages(getattr(root, "__path__", []), pkg + "."):
            try:
                importlib.import_module(info.name)
            except ImportError:
                missing.append(info.name)
    return sorted(missing)
