"""What a caller may seed the backward pass with: the ``ys`` map and its names.

Source: Caffe2 ``GradientRegistry.GetBackwardPass`` / ``Net.AddGradientOperators`` take
``ys`` as a list (all-ones seeds) or a map blob -> seed gradient (spec §2.5). netgrad also
refuses ``ys`` that no op writes (upstream silently seeded version 0) and seed names that
generation would overwrite (upstream accepted them and answered wrong gradients).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from core.errors import InvalidRequestError
from core.types import Diagnostic, GradientSlice, GradValue, grad_names


def seed_map(ys: Sequence[str] | Mapping[str, GradValue]) -> dict[str, GradValue]:
    """``ys`` as a map blob -> seed gradient (a list of blobs means auto seeds, ``None``).

    Raises:
        InvalidRequestError: ``ys`` is neither a sequence of names nor a mapping.
    """
    if isinstance(ys, Mapping):
        return dict(ys)
    if isinstance(ys, str | bytes) or not isinstance(ys, Sequence):
        raise InvalidRequestError("ys should either be a list or a dict.")
    return {str(y): None for y in ys}


def check_ys_written(seeds: Mapping[str, GradValue], written: Callable[[str], bool],
                     net_ops: Sequence[Any] = (), skip: int = 0) -> None:
    """Raise InvalidRequestError when a ``ys`` blob is an output of none of the ops.

    ``written(name)`` tells whether some op writes blob ``name``; with the whole net's ops
    (``net_ops``, before ``skip`` is applied) each problem says why and what to do (a
    skipped writer, a net input, a near name).
    """
    missing = [y for y in seeds if not written(y)]
    if missing:
        explain = explain_unwritten(net_ops, skip) if net_ops else None
        why = explain(missing[0]) if explain and len(missing) == 1 else ""
        shown = ", ".join(repr(y) for y in missing[:_EXPLAINED]) + (
            f" and {len(missing) - _EXPLAINED} more" if len(missing) > _EXPLAINED else "")
        raise InvalidRequestError(
            f"ys names blobs that no op writes: {shown}{why}",
            [
                Diagnostic("error", "unknown_ys_blob",
                           f"no op writes blob '{y}'"
                           + (explain(y) if explain and k < _EXPLAINED else ""),
                           path="ys", blobs=(y,))
                for k, y in enumerate(missing)
            ],
        )


#: Most missing ``ys`` blobs whose problem says why (each reads the op list and compares
#: names); the others are named only.
_EXPLAINED = 10


def explain_unwritten(net_ops: Sequence[Any], skip: int) -> Callable[[str], str]:
    """``explain`` for :func:`check_ys_written`: why ``name`` has no writer among
    ``net_ops[skip:]`` (the whole net's ops, before ``skip`` is applied) and what to do."""

    written = list(dict.fromkeys(o for op in net_ops[skip:] for o in op.output))
    read = {i for op in net_ops[skip:] for i in op.input}

    def explain(name: str) -> str:
        skipped = next((i for i in range(min(skip, len(net_ops)))
                        if name in net_ops[i].output), None)
        if skipped is not None:
            return (f" among the ops differentiated: op[{skipped}]:{net_ops[skipped].type} "
                    f"writes it, and skip={skip} leaves out the first {skip} op(s); lower skip")
        if name in read:
            return (" (it is an input the ops read); ys names outputs, the blobs whose "
                    "gradient seeds the backward pass, e.g. the loss")
        close = difflib.get_close_matches(name, written, n=1)
        if close:
            return f"; did you mean '{close[0]}'?"
        shown = ", ".join(f"'{w}'" for w in written[-5:])
        return f"; the net's last outputs are {shown}" if shown else ""

    return explain


def _gradient_of(seed: str, sparse: bool) -> str | None:
    """The blob whose gradient netgrad names ``seed`` (``<x>_grad``; for the halves of a
    sparse seed also ``<x>_grad_indices`` / ``<x>_grad_values``, the sparse makers' names)."""
    for suffix in ("_grad", "_grad_indices", "_grad_values") if sparse else ("_grad",):
        if seed.endswith(suffix) and len(seed) > len(suffix):
            return seed[: -len(suffix)]
    return None


def check_seed_names(seeds: Mapping[str, GradValue], names: Container[str]) -> None:
    """Refuse caller-chosen seed names that generation would overwrite or confuse.

    A seed named like a forward blob (one of ``names``, every blob an op reads or writes),
    or like the gradient netgrad gives another blob (``<x>_grad``), would be overwritten by a
    forward or gradient op before it is read, and the answer would be silently wrong
    (upstream accepted such names).

    A seed with an empty name is refused too: Caffe2 reads an empty gradient name as no
    gradient at all, so the seed would be lost.

    Raises:
        InvalidRequestError: listing every offending seed (codes ``seed_name_collision``,
            ``empty_seed_name``).
    """
    problems = []
    auto = {f"{y}_autogen_grad": y for y, g in seeds.items() if g is None}
    for y, g in seeds.items():
        if g is not None and not all(grad_names(g)):  # Caffe2 reads "" as no gradient
            problems.append(Diagnostic(
                "error", "empty_seed_name",
                f"the seed gradient given for '{y}' has an empty blob name; give its blob "
                "name, or null to let netgrad seed it with ones", path="ys", blobs=(y,),
            ))
            continue
        sparse = isinstance(g, GradientSlice)
        for seed in grad_names(g):
            other = _gradient_of(seed, sparse)
            if seed in names:
                why = "is also a forward blob"
            elif seed in auto:
                why = f"is the all-ones seed netgrad generates for '{auto[seed]}'"
            elif other is not None and (other != y or sparse) and other in names:
                # (a dense seed '<y>_grad' is safe: the pass sums into it; a slice's halves
                # are read after the gradient ops, which may write '<y>_grad' over them)
                why = f"is the name netgrad gives the gradient of blob '{other}'"
            else:
                continue
            fix = (f"'{y}_seed_indices' / '{y}_seed_values'" if sparse else f"'{y}_grad'")
            problems.append(
                Diagnostic(
                    "error",
                    "seed_name_collision",
                    f"the seed gradient '{seed}' given for '{y}' {why}; choose another name "
                    f"(e.g. {fix}) or let netgrad seed it (null)",
                    path="ys",
                    blobs=(y, seed),
                )
            )
    if problems:
        raise InvalidRequestError(problems[0].message, problems)
