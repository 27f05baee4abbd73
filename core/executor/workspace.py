"""Workspaces of named blobs, blob forwarding and the WorkspaceStack of the control ops.

Source: Caffe2 ``Workspace`` (forwarded blobs, ``AddBlobMapping``,
``CopyForwardedTensors``) and ``WorkspaceStack`` (spec §4.1, §4.2).

A blob value is a NumPy array, a :class:`WorkspaceStack` (held by the workspace blobs that
``CreateScope`` writes), or :data:`UNSET` - a blob that exists but holds nothing yet. Caffe2
creates an operator's output blobs when the operator is constructed; the executor mirrors
that for control ops (:meth:`Workspace.create`), so a ``Do`` can bind an outer output that
the inner net writes for the first time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from core.errors import ExecutionError


class _Unset:
    """Marker type of :data:`UNSET`."""

    def __repr__(self) -> str:
        return "UNSET"


#: Value of a blob that exists but was never written.
UNSET: Any = _Unset()


class Workspace:
    """Named blobs, some of them forwarded to a parent workspace.

    A forwarded name ``inner -> (parent, outer)`` reads and writes the parent's blob
    ``outer``, looked up lazily at each access, so later parent changes are visible
    (spec §4.1).

    Args:
        parent: parent workspace of ``bindings``.
        bindings: inner name -> outer name in ``parent`` (applied with
            :meth:`add_blob_mapping`, ``skip_defined=False``).

    Raises:
        ExecutionError: a binding names an outer blob missing from ``parent``.
    """

    def __init__(
        self, parent: Workspace | None = None, bindings: Mapping[str, str] | None = None
    ) -> None:
        self._blobs: dict[str, Any] = {}
        self._forwarded: dict[str, tuple[Workspace, str]] = {}
        if bindings:
            if parent is None:
                raise ExecutionError("blob bindings given without a parent workspace")
            self.add_blob_mapping(parent, bindings)

    # -- lookup ------------------------------------------------------------------
    def _resolve(self, name: str) -> tuple[Workspace, str]:
        ws, n = self, name
        while n in ws._forwarded:
            ws, n = ws._forwarded[n]
            if type(ws)._resolve is not Workspace._resolve:
                # a parent that resolves by its own rule (a RecurrentNetwork's step
                # workspace reads what it lacks from its shared parent): a Do in a step
                # net that binds an outer blob of the RNN finds it there
                return ws._resolve(n)
        return ws, n

    def has(self, name: str) -> bool:
        """Whether ``name`` exists here, locally or forwarded (Caffe2 ``HasBlob``)."""
        if name in self._blobs:
            return True
        if name in self._forwarded:
            ws, n = self._resolve(name)
            return n in ws._blobs
        return False

    def is_forwarded(self, name: str) -> bool:
        """Whether ``name`` is forwarded to a parent workspace."""
        return name in self._forwarded

    def get(self, name: str) -> Any:
        """The value of ``name`` (forwarded names read the parent's current value).

        Raises:
            ExecutionError: the blob does not exist or was never written.
        """
        ws, n = self._resolve(name)
        if n not in ws._blobs:
            where = f" (forwarded to outer blob '{n}')" if n != name else ""
            # a child workspace (a Do's) sees only its bindings and what its sub-net wrote
            why = ("; a Do's sub-net sees only the blobs bound through its inner_blobs / "
                   "outer_blobs_idx and those it wrote itself: bind it (add the outer blob to "
                   "the Do's inputs and the name to inner_blobs)"
                   if self._forwarded and n == name else "")
            raise ExecutionError(f"blob '{name}'{where} does not exist in the workspace{why}")
        value = ws._blobs[n]
        if value is UNSET:
            raise ExecutionError(f"blob '{name}' exists but was never written")
        return value

    def get_or_unset(self, name: str) -> Any:
        """The value of ``name``, :data:`UNSET` if it exists unwritten, ``None`` if absent."""
        ws, n = self._resolve(name)
        return ws._blobs.get(n)

    def set(self, name: str, value: Any) -> None:
        """Write ``name``; a forwarded name writes the parent's blob."""
        ws, n = self._resolve(name)
        ws._blobs[n] = value

    def create(self, name: str) -> None:
        """Make ``name`` exist (as :data:`UNSET`) unless it already does (Caffe2 ``CreateBlob``)."""
        if not self.has(name):
            self.set(name, UNSET)

    def remove_local(self, name: str) -> bool:
        """Delete a *local* blob ``name``; returns whether one was removed."""
        return self._blobs.pop(name, None) is not None

    def local_names(self) -> list[str]:
        """Names of local (not forwarded) blobs, in creation order."""
        return list(self._blobs)

    def forwarded_names(self) -> list[str]:
        """Names forwarded to a parent, in binding order."""
        return list(self._forwarded)

    def items(self) -> list[tuple[str, Any]]:
        """``(name, value)`` of every written local blob, in creation order."""
        return [(k, v) for k, v in self._blobs.items() if v is not UNSET]

    def release(self) -> None:
        """Drop every blob and binding, and those of the saved child workspaces.

        A child workspace forwards names to its parent, whose workspace blob holds the
        child: a reference cycle, freed only by the cyclic garbage collector. Until then a
        While's saved iterations kept their tensors alive in a worker after the job ended,
        and the next, smaller job ran out of memory (adversarial review, stop 21). Arrays
        already handed out (fetched results) stay valid.
        """
        todo: list[Workspace] = [self]
        while todo:
            ws = todo.pop()
            for value in ws._blobs.values():
                if isinstance(value, WorkspaceStack):
                    todo.extend(value.workspaces)
                    value.workspaces = []
                    value.top = -1
            ws._blobs = {}
            ws._forwarded = {}

    # -- forwarding ----------------------------------------------------------------
    def add_blob_mapping(
        self, parent: Workspace, bindings: Mapping[str, str], skip_defined: bool = False
    ) -> None:
        """Forward each ``inner`` name to ``parent``'s ``outer`` blob (Caffe2 ``AddBlobMapping``).

        Args:
            parent: the workspace holding the outer blobs.
            bindings: inner name -> outer name, applied in order.
            skip_defined: skip a binding whose inner name already exists here (the existing
                blob wins); used by ``pop_gradient_workspace`` so the forward snapshots made by
                ``copy_external_blobs`` take precedence.

        Raises:
            ExecutionError: an outer blob is missing from ``parent``; an inner name is already
                forwarded elsewhere, or already exists and ``skip_defined`` is false
                ("Redefinition of blob <name>").
        """
        for inner, outer in bindings.items():
            if not parent.has(outer):
                raise ExecutionError(f"Invalid parent workspace blob: {outer}")
            if inner in self._forwarded:
                ws, n = self._forwarded[inner]
                if ws is not parent or n != outer:
                    raise ExecutionError(f"Redefinition of blob {inner}")
                continue
            if self.has(inner):
                if skip_defined:
                    continue
                raise ExecutionError(f"Redefinition of blob {inner}")
            self._forwarded[inner] = (parent, outer)

    def copy_forwarded_tensors(self, names: Iterable[str]) -> None:
        """Replace each forwarded name in ``names`` by a local copy of the parent's tensor.

        Source: Caffe2 ``CopyForwardedTensors`` (used by ``Do`` with
        ``copy_external_blobs``, spec §4.4 step 4). Names that are not forwarded are skipped.

        Raises:
            ExecutionError: a forwarded blob does not hold a tensor.
        """
        for name in names:
            if name not in self._forwarded:
                continue
            value = self.get_or_unset(name)
            if not isinstance(value, np.ndarray):
                raise ExecutionError(f"Expected blob with tensor value: {name}")
            del self._forwarded[name]
            self._blobs[name] = np.array(value, copy=True)


class WorkspaceStack:
    """The value of a workspace blob: saved child workspaces of a ``Do`` op (spec §4.2).

    Popped workspaces are kept and re-used by later pushes.

    Attributes:
        workspaces: every child workspace ever created, in push order.
        top: index of the top workspace, ``-1`` when empty.
    """

    def __init__(self) -> None:
        self.workspaces: list[Workspace] = []
        self.top = -1

    def push_forward_workspace(self, parent: Workspace, bindings: Mapping[str, str]) -> Workspace:
        """Push a workspace for a forward ``Do`` and return it.

        A new child is created with ``bindings`` when every saved workspace is in use;
        otherwise the next saved one is re-used: its local blobs named by a binding (snapshots
        left by ``copy_external_blobs``) are removed and, if any were, the bindings re-added.

        Raises:
            ExecutionError: a binding is invalid (see :meth:`Workspace.add_blob_mapping`).
        """
        if self.top == len(self.workspaces) - 1:
            self.workspaces.append(Workspace(parent, bindings))
        else:
            ws = self.workspaces[self.top + 1]
            removed = False
            for inner in bindings:
                if inner in ws._blobs:
                    del ws._blobs[inner]
                    removed = True
            if removed:
                ws.add_blob_mapping(parent, bindings)
        self.top += 1
        return self.workspaces[self.top]

    def reuse_last_forward_workspace(
        self, parent: Workspace, bindings: Mapping[str, str]
    ) -> Workspace | None:
        """Add ``bindings`` to the top workspace and return it (``None`` when empty)."""
        if self.empty():
            return None
        ws = self.workspaces[self.top]
        ws.add_blob_mapping(parent, bindings)
        return ws

    def pop_gradient_workspace(
        self, parent: Workspace, grad_bindings: Mapping[str, str]
    ) -> Workspace | None:
        """Pop the most recent forward workspace for a gradient ``Do`` (``None`` when empty).

        The gradient bindings are added with ``skip_defined=True``: local blobs of the
        forward run (including ``copy_external_blobs`` snapshots) win over re-binding.
        """
        if self.empty():
            return None
        ws = self.workspaces[self.top]
        ws.add_blob_mapping(parent, grad_bindings, skip_defined=True)
        self.top -= 1
        return ws

    def clear(self) -> None:
        """Make the stack empty; the child workspaces are kept for re-use."""
        self.top = -1

    def empty(self) -> bool:
        """Whether no workspace is pushed."""
        return self.top < 0

    def __repr__(self) -> str:
        return f"WorkspaceStack(size={len(self.workspaces)}, top={self.top})"
