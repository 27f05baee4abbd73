"""Hypothesis strategies: random forward Caffe2 nets with ``Do``/``If``/``While``.

:func:`fuzz_cases` draws a :class:`FuzzCase`: a forward NetDef, the ``ys`` to differentiate,
the fed inputs (explicit float64 tensors, so that a failing case is self-contained) and the
fed constants that must not be checked (the counters' start value, trip limits, condition
inputs).

How the nets are built:

* Three tensor kinds: ``M`` (shape [2, 2]), ``V`` (shape [2]) and ``R`` (shape [3, 2], a
  batch of three rows: non-square, so a gradient that mixes up the two axes of a matrix
  has the wrong shape, not only the wrong values). Elementwise ops keep the kind, binary
  ops may broadcast ``M`` or ``R`` with ``V``; ``FC``/``MatMul`` take ``M`` or ``R`` rows
  and ``M`` weights and keep the kind of the rows (only a square ``M`` is transposed),
  ``Transpose``/``Softmax`` work on ``M``, ``ReduceSum``/``ReduceMean`` turn an ``M`` into
  a ``V`` (an ``R`` over its first axis); an optional ``AveragedLoss`` ends the net.
* Every blob has domain flags fixed when it is created (:class:`Val`): ``pos`` (positive, not
  tiny: safe for ``Sqrt``, ``Log``, ``Div`` and fractional ``Pow``), ``away`` (|v| >= 0.25:
  no ``Relu``/``Abs`` kink nearby), ``small`` (|v| <~ 2: safe for ``Exp``). A write into an
  existing blob must produce a value with at least the blob's flags, so a flag stays true
  for every version of the blob.
* Inputs of an op are existing blobs (several consumers: gradient accumulation) or fresh fed
  parameters. The output is a fresh blob, one of the op's inputs (in place, where the op's
  schema allows it), or another existing blob (an outer blob written without being read).
* ``Do``, ``If`` and ``While`` wrap random blocks, nested up to :data:`MAX_DEPTH` levels, and
  are lowered with :mod:`core.control.lowering` (``CreateScope``, ``Do`` wrappers, workspace
  blobs). A ``Do`` may also bind the blobs its body writes as inputs, the way the ``While``
  body wrapper does, so that a body that writes an outer blob without reading it still has
  that blob as an input.
* ``If`` conditions are ``GT(C_TRUE|C_FALSE, ZERO)`` on fed constants, or inside a loop
  ``GT(counter, H05|H15|H25)`` (the branch changes with the iteration). A ``While`` is a
  counting loop: ``counter = Copy(ZERO)``; body ``counter = Sum(counter, ONE)``; condition
  ``LT(counter, LIMITn)`` (or ``counter = Copy(MINUS_ONE)`` and the step first in the
  condition net, the Control_Ops tutorial's shape) with 0 to 3 trips, and the product of the
  trip counts of nested
  loops is at most :data:`TRIP_BUDGET`.
* A blob written inside a loop body but created outside it (a loop-carried blob) is only
  written by a squashing op (``Tanh``, ``Sigmoid``) or, in place, by ``Scale`` with
  |scale| <= 1 or ``Negative``, so values stay bounded however many times the loop runs.
* Sub-nets usually end by writing a blob of an enclosing net, so their work reaches the
  ``ys``; after a control op, a value it read may be overwritten in place (the control op's
  gradient must not read the new value, or ``recompute`` must restore the old one). The
  ``ys`` are blobs the top-level net writes, possibly a ``Sum`` of all of them of one kind
  and possibly through a final ``AveragedLoss``.
* Fed blobs are exactly the parameters and constants; each is read (by an op of the
  top-level net or of a sub-net) before anything writes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from hypothesis import strategies as st

from api_schemas import caffe2_pb2
from core.control.lowering import add_do_op, add_if_op, add_while_op, external_blob_names
from core.registry import make_arg, make_op
from core.verify import InputSpec, TensorSpec

NetDef = caffe2_pb2.NetDef
OperatorDef = caffe2_pb2.OperatorDef
Argument = caffe2_pb2.Argument

#: Shapes of the two tensor kinds.
SHAPES: dict[str, list[int]] = {"M": [2, 2], "V": [2], "R": [3, 2]}
#: Deepest nesting of control ops.
MAX_DEPTH = 4
#: Most trips of one loop.
MAX_TRIPS = 3
#: Largest product of the trip counts of nested loops (a zero-trip loop counts as one).
TRIP_BUDGET = 9
ZERO, ONE = "ZERO", "ONE"


@dataclass(frozen=True)
class Val:
    """What the generator knows about a float blob.

    Attributes:
        kind: ``"M"``, ``"V"`` or ``"R"`` (see :data:`SHAPES`).
        pos: every value is positive and not tiny.
        away: every value has magnitude >= 0.25.
        small: every value has magnitude below about 2.
        level: number of enclosing loops where the blob was created.
    """

    kind: str
    pos: bool = False
    away: bool = False
    small: bool = False
    level: int = 0

    def meets(self, need: str) -> bool:
        """Whether the value meets an input requirement: ``""``, ``pos``, ``away``, ``small``."""
        return need == "" or bool(getattr(self, need))

    def covers(self, other: Val) -> bool:
        """Whether a value with these flags may overwrite a blob with ``other``'s flags."""
        return (
            self.kind == other.kind
            and (self.pos or not other.pos)
            and (self.away or not other.away)
            and (self.small or not other.small)
        )


class FuzzCase:
    """One drawn example.

    Attributes:
        net: the forward NetDef.
        ys: blobs differentiated (the loss is a random weighted sum of them).
        inputs: fed blobs, explicit float64 tensors.
        constants: fed blobs that are constants, never checked.
        recompute: generate with ``recompute=True``.
        seed: seed of the checker's loss weights.
    """

    def __init__(self, net: NetDef, ys: list[str], inputs: list[InputSpec],
                 constants: list[str], recompute: bool, seed: int) -> None:
        self.net = net
        self.ys = ys
        self.inputs = inputs
        self.constants = constants
        self.recompute = recompute
        self.seed = seed

    @property
    def checked(self) -> list[str]:
        """The fed blobs whose gradients are checked: every fed blob but the constants."""
        return [s.blob for s in self.inputs if s.blob not in self.constants]

    def listing(self) -> str:
        """A readable listing of the net (see :func:`listing`)."""
        return listing(self.net)

    def __repr__(self) -> str:
        # hypothesis prints the drawn argument: keep it short (the note has the listing)
        return (f"FuzzCase(ys={self.ys}, recompute={self.recompute}, seed={self.seed}, "
                f"{len(self.net.op)} top-level ops, fed {[s.blob for s in self.inputs]})")


@dataclass
class _Block:
    """A net being generated: the top-level net or a sub-net."""

    net: NetDef
    visible: dict[str, None]  # float blobs of this net and its enclosing nets
    control: list[str]  # counters in scope
    depth: int  # enclosing control ops
    loops: int  # enclosing While ops
    trips: int  # product of the enclosing loops' trip counts
    counter: str | None  # counter of the innermost loop
    written: dict[str, None] = field(default_factory=dict)  # float blobs written here
    outer: frozenset[str] = frozenset()  # float blobs of the enclosing nets


@dataclass
class _Draft:
    """An op before its output is chosen."""

    type: str
    inputs: list[str]
    out: Val
    args: list[Argument] = field(default_factory=list)
    inplace: tuple[int, ...] = ()  # input positions the output may alias
    squash: bool = False  # the output is bounded whatever the input (Tanh, Sigmoid)
    contractive: bool = False  # in place, |y| <= |x| (Scale with |s| <= 1, Negative)


def _hundredths(draw: st.DrawFn, lo: int, hi: int) -> float:
    """A value in [lo, hi] hundredths, shrinking towards ``lo``."""
    return draw(st.integers(lo, hi)) / 100.0


class _Gen:
    """Draws one net; ``draw`` is hypothesis' draw function."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.vals: dict[str, Val] = {}
        self.params: dict[str, tuple[str, list[float]]] = {}
        self.consts: dict[str, float] = {}
        self.count = 0

    # -- names ---------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, name: str, value: float) -> str:
        self.consts[name] = value
        return name

    def param(self, kind: str, need: str) -> str:
        """A fresh fed parameter meeting ``need``."""
        name = self.fresh("p")
        n = math.prod(SHAPES[kind])
        values: list[float] = []
        for _ in range(n):
            if need == "pos":
                values.append(_hundredths(self.draw, 50, 200))
            elif need == "away":
                mag = _hundredths(self.draw, 25, 150)
                values.append(-mag if self.draw(st.booleans()) else mag)
            else:
                values.append(self.draw(st.integers(-150, 150)) / 100.0)
        self.params[name] = (kind, values)
        self.vals[name] = Val(kind, pos=need == "pos", away=need in ("pos", "away"), small=True)
        return name

    def scope(self, b: _Block) -> list[str]:
        return list(dict.fromkeys([*b.visible, *self.params, *self.consts, *b.control]))

    def child(self, b: _Block, prefix: str, *, loop: bool = False, trips: int = 1,
              counter: str | None = None) -> _Block:
        net = NetDef()
        net.name = self.fresh(prefix)
        return _Block(
            net,
            dict(b.visible),
            [*b.control, *([counter] if counter else [])],
            b.depth + 1,
            b.loops + (1 if loop else 0),
            b.trips * max(trips, 1),
            counter if loop else b.counter,
            outer=frozenset(b.visible),
        )

    # -- inputs --------------------------------------------------------------------------
    def pick(self, b: _Block, kind: str, need: str = "") -> str:
        """An existing blob of ``kind`` meeting ``need``, or a fresh parameter."""
        names = dict.fromkeys([*reversed(b.visible), *reversed(self.params)])
        cands = [n for n in names if self.vals[n].kind == kind and self.vals[n].meets(need)]
        k = self.draw(st.integers(0, len(cands)))  # shrinks towards the newest blob
        return cands[k] if k < len(cands) else self.param(kind, need)

    # -- drafts --------------------------------------------------------------------------
    def unary(self, op_type: str, x: str, exponent: float = 2.0) -> _Draft | None:
        """A one-input op on ``x``, or ``None`` when ``x``'s domain does not suit it."""
        v = self.vals[x]
        k, small = v.kind, v.small
        if op_type == "Tanh":
            return _Draft("Tanh", [x], Val(k, small=True), inplace=(0,), squash=True)
        if op_type == "Sigmoid":
            return _Draft("Sigmoid", [x], Val(k, pos=small, small=True), inplace=(0,),
                          squash=True)
        if op_type == "Scale":
            s = self.draw(st.sampled_from([0.5, -0.5, 2.0, -1.5]))
            out = Val(k, pos=v.pos and s > 0, away=v.away and abs(s) >= 1,
                      small=small and abs(s) <= 1)
            return _Draft("Scale", [x], out, [make_arg("scale", s)], (0,),
                          contractive=abs(s) <= 1)
        if op_type == "Negative":
            return _Draft("Negative", [x], Val(k, away=v.away, small=small), inplace=(0,),
                          contractive=True)
        if op_type == "Copy":
            return _Draft("Copy", [x], Val(k, v.pos, v.away, small), inplace=(0,))
        if op_type == "Exp":
            return _Draft("Exp", [x], Val(k, pos=True), inplace=(0,)) if small else None
        if op_type == "Sqrt":
            if not v.pos:
                return None
            return _Draft("Sqrt", [x], Val(k, pos=True, small=small), inplace=(0,))
        if op_type == "Log":
            return _Draft("Log", [x], Val(k), inplace=(0,)) if v.pos else None
        if op_type == "Pow":
            e = exponent
            if e not in (2.0, 3.0) and not v.pos:
                return None
            out = Val(k, pos=v.pos or (e == 2.0 and v.away))
            # In place, Pow's gradient recovers X from Y = X^e: an odd exponent keeps the
            # sign, other exponents need X > 0, and an even one is refused (stop 21).
            inplace = (0,) if e == 3.0 or (v.pos and e != 2.0) else ()
            return _Draft("Pow", [x], out, [make_arg("exponent", e)], inplace)
        if op_type == "Relu":
            return _Draft("Relu", [x], Val(k, small=small)) if v.away else None
        if op_type == "LeakyRelu":
            if not v.away:
                return None
            # alpha < 0 (a negative X gives a positive Y): the gradient op reads X, and in
            # place it is refused (stop 21)
            alpha = self.draw(st.sampled_from([0.01, 0.3, -0.5]))
            return _Draft("LeakyRelu", [x], Val(k, small=small), [make_arg("alpha", alpha)],
                          (0,) if alpha >= 0 else ())
        if op_type == "Abs":
            return _Draft("Abs", [x], Val(k, pos=True, away=True, small=small)) if v.away else None
        if op_type == "Transpose" and k == "M":
            args = [make_arg("axes", [1, 0])] if self.draw(st.booleans()) else []
            return _Draft("Transpose", [x], Val(k, v.pos, v.away, small), args, (0,))
        if op_type == "Softmax" and k == "M":
            return _Draft("Softmax", [x], Val(k, pos=small, small=True))
        return None

    def draft(self, b: _Block) -> _Draft:
        """A random op reading blobs of ``b``."""
        family = self.draw(st.sampled_from([
            "unary", "binary", "unary", "sum", "broadcast", "unary", "fc", "matmul", "reduce",
        ]))
        if family == "unary":
            op_type = self.draw(st.sampled_from([
                "Tanh", "Scale", "Pow", "Sqrt", "Sigmoid", "Negative", "Copy", "Exp", "Log",
                "Pow", "Sqrt", "Relu", "Abs", "Transpose", "Softmax", "LeakyRelu",
            ]))
            need = {"Exp": "small", "Sqrt": "pos", "Log": "pos", "Relu": "away",
                    "Abs": "away", "LeakyRelu": "away"}.get(op_type, "")
            kind = "M" if op_type in ("Transpose", "Softmax") else self.kind()
            e = 2.0
            if op_type == "Pow":
                e = self.draw(st.sampled_from([2.0, 3.0, 0.5, -1.0, 1.5]))
                # fractional exponents need X > 0; so does an in-place Pow's gradient
                if e not in (2.0, 3.0) or self.draw(st.booleans()):
                    need = "pos"
            d = self.unary(op_type, self.pick(b, kind, need), e)
            if d is None:  # the requirement above makes this unreachable
                raise RuntimeError(f"generator bug: no {op_type} draft for the picked input")
            return d
        if family in ("binary", "broadcast"):
            op_type = self.draw(st.sampled_from(["Add", "Sub", "Mul", "Div"]))
            ka, kb = (self.rows(), "V") if family == "broadcast" else (self.kind(),) * 2
            a = self.pick(b, ka)
            c = self.pick(b, kb, "pos" if op_type == "Div" else "")
            va, vb = self.vals[a], self.vals[c]
            both_pos = va.pos and vb.pos
            out = Val(ka, pos=both_pos and op_type != "Sub")
            return _Draft(op_type, [a, c], out, inplace=(0,) if family == "broadcast" else (0, 1))
        if family == "sum":
            op_type = self.draw(st.sampled_from(["Sum", "Mean"]))
            kind = self.kind()
            n = self.draw(st.integers(2, 4))
            ins = [self.pick(b, kind) for _ in range(n)]
            vs = [self.vals[i] for i in ins]
            out = Val(kind, pos=all(v.pos for v in vs),
                      small=op_type == "Mean" and all(v.small for v in vs))
            return _Draft(op_type, ins, out, inplace=(0,))
        if family == "fc":  # [n, 2] rows times a [2, 2] weight: rows of the same kind
            kx = self.rows()
            x, w, bias = self.pick(b, kx), self.pick(b, "M"), self.pick(b, "V")
            return _Draft("FC", [x, w, bias], Val(kx))
        if family == "matmul":
            ka = self.rows()
            a, c = self.pick(b, ka), self.pick(b, "M")
            names = ("trans_a", "trans_b") if ka == "M" else ("trans_b",)
            args = [make_arg(n, 1) for n in names if self.draw(st.booleans())]
            return _Draft("MatMul", [a, c], Val(ka), args,
                          inplace=(0, 1) if ka == "M" else (0,))
        op_type = self.draw(st.sampled_from(["ReduceSum", "ReduceMean"]))
        kx = self.rows()
        x = self.pick(b, kx)
        v = self.vals[x]
        axis = self.draw(st.integers(0, 1)) if kx == "M" else 0  # (R: its [2] columns)
        args = [make_arg("axes", [axis]), make_arg("keepdims", 0)]
        out = Val("V", pos=v.pos, small=op_type == "ReduceMean" and v.small)
        return _Draft(op_type, [x], out, args)

    def kind(self) -> str:
        return self.draw(st.sampled_from(["M", "V", "R"]))

    def rows(self) -> str:
        """A matrix kind: ``M`` ([2, 2]) or ``R`` ([3, 2])."""
        return self.draw(st.sampled_from(["M", "R"]))

    # -- outputs -------------------------------------------------------------------------
    def writable(self, b: _Block, name: str, d: _Draft, in_place: bool) -> bool:
        """Whether ``d`` may write into the existing blob ``name``."""
        v = self.vals[name]
        if not d.out.covers(v):
            return False
        if v.level < b.loops:  # loop-carried: keep it bounded across iterations
            return d.squash or (in_place and d.contractive)
        return True

    def emit(self, b: _Block, d: _Draft, force_fresh: bool = False,
             outward: bool = False) -> str:
        """Choose the output of ``d`` (fresh, in place, or an existing blob) and append it.

        With ``outward``, the output is a blob of an enclosing net (or a parameter) when
        ``d`` may write one, so that the sub-net's work leaves it.
        """
        alias = [
            d.inputs[j] for j in d.inplace
            if all(k in d.inplace for k, n in enumerate(d.inputs) if n == d.inputs[j])
            and self.writable(b, d.inputs[j], d, True)
        ]
        names = dict.fromkeys([*b.visible, *self.params])
        over = [n for n in names if n not in d.inputs and self.writable(b, n, d, False)]
        if outward:
            alias = [n for n in alias if n in b.outer or n in self.params]
            over = [n for n in over if n in b.outer or n in self.params]
        choices = ["fresh", "fresh"] + (["alias"] if alias else []) + (["over"] if over else [])
        if outward and len(choices) > 2:
            choices = choices[2:]
        how = "fresh" if force_fresh else self.draw(st.sampled_from(choices))
        if how == "alias":
            out = self.draw(st.sampled_from(alias))
        elif how == "over":
            out = self.draw(st.sampled_from(over))
        else:
            out = self.fresh("v")
            if self.draw(st.integers(0, 24)) == 0:
                # now and then a name the gradient ops write: <blob>_grad of an earlier blob
                # (refused as gradient_name_collision, or harmless; stop 21)
                named = [n for n in self.vals if not n.endswith("_grad")]
                if named:
                    grad_like = self.draw(st.sampled_from(named)) + "_grad"
                    if grad_like not in self.vals:
                        out = grad_like
            self.vals[out] = replace(d.out, level=b.loops)
            b.visible[out] = None
        b.net.op.append(make_op(d.type, d.inputs, [out], d.args))
        b.written[out] = None
        return out

    # -- statements ----------------------------------------------------------------------
    def fill(self, b: _Block, n: int) -> None:
        for _ in range(n):
            self.statement(b)

    def statement(self, b: _Block) -> None:
        kinds = ["op", "op", "op"]
        if b.depth < MAX_DEPTH:
            kinds += ["do", "if", "while"]
        kind = self.draw(st.sampled_from(kinds))
        if kind == "op":
            self.emit(b, self.draft(b))
            return
        if kind == "do":
            self.do_statement(b)
        elif kind == "if":
            self.if_statement(b)
        else:
            self.while_statement(b)
        ctrl = b.net.op[-1]
        float_ins = [n for n in ctrl.input if n in self.vals]
        for n in ctrl.output:
            if n in self.vals:
                b.written[n] = None
        self.overwrite_after(b, float_ins)

    def overwrite_after(self, b: _Block, read: list[str]) -> None:
        """Maybe overwrite, in place, a value that the control op just appended read."""
        if not read or not self.draw(st.booleans()):
            return
        name = self.draw(st.sampled_from(read))
        op_type = self.draw(st.sampled_from(["Scale", "Tanh", "Sigmoid", "Negative"]))
        d = self.unary(op_type, name)
        if d is not None and self.writable(b, name, d, True):
            b.net.op.append(make_op(d.type, d.inputs, [name], d.args))
            b.written[name] = None

    def body(self, b: _Block) -> None:
        """Statements of a sub-net, usually ending with a write into an enclosing net's blob."""
        self.fill(b, self.draw(st.integers(1, 3)))
        if self.draw(st.integers(0, 3)):  # 3 times in 4
            if b.loops:  # loop-carried blobs are written by squashing ops only
                op_type = self.draw(st.sampled_from(["Tanh", "Sigmoid"]))
                d = self.unary(op_type, self.pick(b, self.kind()))
                if d is None:  # unreachable: Tanh and Sigmoid take any input
                    raise RuntimeError("generator bug: no squashing draft")
            else:
                d = self.draft(b)
            self.emit(b, d, outward=True)

    def do_statement(self, b: _Block) -> None:
        body = self.child(b, "do_body")
        self.body(body)
        if self.draw(st.booleans()):
            add_do_op(b.net, self.scope(b), body.net)
        else:
            add_do_op_binding_outputs(b.net, self.scope(b), body.net)

    def if_statement(self, b: _Block) -> None:
        cond = self.fresh("cond")
        if b.counter is not None and self.draw(st.booleans()):
            h = self.draw(st.sampled_from([0.5, 1.5, 2.5]))
            th = self.const(f"H{int(h * 10):02d}", h)
            b.net.op.append(make_op("GT", [b.counter, th], [cond]))
        else:
            taken = self.draw(st.booleans())
            c = self.const("C_TRUE" if taken else "C_FALSE", 1.0 if taken else -1.0)
            b.net.op.append(make_op("GT", [c, self.const(ZERO, 0.0)], [cond]))
        then = self.child(b, "then")
        self.body(then)
        else_net = None
        if self.draw(st.booleans()):
            other = self.child(b, "else")
            self.body(other)
            else_net = other.net
        add_if_op(b.net, cond, [*self.scope(b), cond], then.net, else_net)

    def while_statement(self, b: _Block) -> None:
        room = max(1, TRIP_BUDGET // b.trips)
        trips = self.draw(st.integers(0, min(MAX_TRIPS, room)))
        limit = self.const(f"LIMIT{trips}", float(trips))
        counter = self.fresh("cnt")
        # the counter steps in the body, or in the cond_net before each test (the
        # Control_Ops tutorial's shape; a cond_net step is passed through: stop 21)
        in_cond = self.draw(st.booleans())
        start = self.const("MINUS_ONE", -1.0) if in_cond else self.const(ZERO, 0.0)
        b.net.op.append(make_op("Copy", [start], [counter]))
        body = self.child(b, "loop_body", loop=True, trips=trips, counter=counter)
        step = make_op("Sum", [counter, self.const(ONE, 1.0)], [counter])
        if not in_cond:
            body.net.op.append(step)
        self.body(body)
        cond = self.fresh("wcond")
        cond_net = NetDef()
        cond_net.name = self.fresh("loop_cond")
        if in_cond:
            cond_net.op.append(step)
        cond_net.op.append(make_op("LT", [counter, limit], [cond]))
        add_while_op(b.net, cond, [*self.scope(b), counter], body.net, cond_net)
        if self.count % 3 == 0:
            # a body Do without copy_external_blobs (as hand-written nets may have it): its
            # gradient must still be right, or refused where it reads a value the loop
            # overwrites (adversarial review, stop 34). Chosen by the names drawn so far,
            # not by a draw of its own: the examples the fixed seed gives stay the same.
            loop_net = next(a.n for a in b.net.op[-1].arg if a.name == "loop_net")
            do_args = loop_net.op[0].arg
            for k in range(len(do_args) - 1, -1, -1):
                if do_args[k].name == "copy_external_blobs":
                    del do_args[k]

    # -- the case ------------------------------------------------------------------------
    def case(self) -> FuzzCase:
        top = _Block(NetDef(), {}, [], 0, 0, 1, None)
        top.net.name = "fuzz"
        self.fill(top, self.draw(st.integers(1, 6)))
        if not top.written:
            self.emit(top, self.draft(top), force_fresh=True)
        written = list(top.written)
        ys: list[str] = []
        for kind in ("M", "V", "R"):  # a sum of every written blob: all reaches the loss
            names = [n for n in written if self.vals[n].kind == kind]
            if len(names) >= 2 and self.draw(st.booleans()):
                total = self.fresh("all")
                top.net.op.append(make_op("Sum", names, [total]))
                ys.append(total)
        ys += self.draw(st.lists(st.sampled_from(written[::-1]), min_size=0 if ys else 1,
                                 max_size=2, unique=True))
        if self.draw(st.booleans()):
            loss = self.fresh("loss")
            top.net.op.append(make_op("AveragedLoss", [ys[0]], [loss]))
            ys = [loss, *ys[1:]]
        inputs = [
            InputSpec(name, tensor=TensorSpec(list(SHAPES[kind]), "float64", values))
            for name, (kind, values) in self.params.items()
        ]
        inputs += [
            InputSpec(name, tensor=TensorSpec([], "float64", [value]))
            for name, value in self.consts.items()
        ]
        return FuzzCase(
            top.net,
            ys,
            inputs,
            list(self.consts),
            self.draw(st.booleans()),
            self.draw(st.integers(0, 3)),
        )


def add_do_op_binding_outputs(net: NetDef, lexical_scope: list[str], body: NetDef) -> None:
    """Append ``CreateScope`` and a ``Do`` that binds the blobs ``body`` writes as inputs too.

    The bindings are those of the ``While`` body wrapper of ``add_while_op`` (inputs are the
    body's external inputs plus its external outputs), without ``copy_external_blobs``. A
    body that writes an outer blob without reading it then still has it as a ``Do`` input:
    the gradient of that input must be zero.
    """
    ins, outs = external_blob_names(body, lexical_scope)
    ins = list(dict.fromkeys(ins + outs))
    used = {n for op in net.op for n in (*op.input, *op.output)}
    ws, k = f"{net.name or 'net'}/workspace_do", 0
    while ws in used:
        ws, k = f"{net.name or 'net'}/workspace_do_auto_{k}", k + 1
    outer = ins + outs
    inner = list(dict.fromkeys(outer))
    args = [
        make_arg("net", body),
        make_arg("inner_blobs", inner),
        make_arg("outer_blobs_idx", [outer.index(n) for n in inner]),
    ]
    net.op.append(make_op("CreateScope", [], [ws]))
    net.op.append(make_op("Do", [*ins, ws], [*outs, ws], args))


@st.composite
def fuzz_cases(draw: st.DrawFn) -> FuzzCase:
    """Strategy of :class:`FuzzCase`: a random forward net with control flow, and its inputs."""
    return _Gen(draw).case()


# --- a readable listing of a net ---------------------------------------------------------
_SUBNET_ARGS = ("net", "then_net", "else_net", "loop_net", "cond_net")


def _arg_text(a: Argument) -> str:
    if a.HasField("f"):
        return f"{a.name}={a.f:g}"
    if a.HasField("i"):
        return f"{a.name}={a.i}"
    if len(a.ints):
        return f"{a.name}={list(a.ints)}"
    if len(a.strings):
        return f"{a.name}={[s.decode() for s in a.strings]}"
    return a.name


def listing(net: NetDef, indent: str = "") -> str:
    """The ops of ``net`` one per line, ``Type(inputs) -> outputs  args``, sub-nets indented."""
    lines: list[str] = []
    for op in net.op:
        args = [_arg_text(a) for a in op.arg if a.name not in _SUBNET_ARGS]
        line = f"{indent}{op.type}({', '.join(op.input)}) -> {', '.join(op.output)}"
        lines.append(line + (f"  [{'; '.join(args)}]" if args else ""))
        for a in op.arg:
            if a.name in _SUBNET_ARGS and a.HasField("n"):
                lines.append(f"{indent}  {a.name} '{a.n.name}':")
                lines.append(listing(a.n, indent + "    "))
    return "\n".join(line for line in lines if line)


# --- sparse and segment ops (issue 8a) -------------------------------------------------------
# Appended block: at the top level, about one op in seven is a sparse or segment op. Their
# tables are fresh kinds that no other op reads or writes: ``E`` ([3, 2] embedding tables,
# read by Gather and the SparseLengths* ops, whose gradients are GradientSlices; several
# readers of one table make netgrad concatenate slices) and ``S`` ([3] per-row weights of
# SparseLengthsWeightedSum with ``grad_on_weights``). A sparse gradient thus never meets a
# dense one (that is a 4xx unless ``densify``). Indices and lengths are fed int64 / int32
# constants; LengthsSum and BatchGather read ordinary ``M`` blobs (dense gradients). Now and
# then a Gather reads an index blob a Copy writes, which the end of the net may overwrite
# (stop 23: the GradientSlice names it; on the engine before the fix, 3 000 drawn cases
# found a wrong gradient).
SHAPES["E"] = [3, 2]
SHAPES["S"] = [3]
# Index blobs of other ranks (stop 26): a Gather's gradient keeps the index blob's shape
# (``[*idx.shape, *table.shape[1:]]`` values). ``T`` tables ([3, 2]) are read only through
# 0-d indices (a ``V`` row) and ``U`` tables ([3]) only through [2, 2] indices (an ``M``
# blob), so every reader of one table has indices of one rank: a sum of slices of two ranks
# does not run in Caffe2 either (``sparse_sum_index_shapes``, tested on its own).
SHAPES["T"] = [3, 2]
SHAPES["U"] = [3]
#: One draft in ``_SPARSE_ODDS + 1`` at the top level is sparse (shrinks towards none).
_SPARSE_ODDS = 6
_LENGTHS = ([1, 2], [2, 1], [0, 3], [3, 0])
_SEG_LENGTHS = ([1, 1], [2, 0], [0, 2])


def _int_const(gen: _Gen, prefix: str, values: list[int], dtype: str,
               shape: list[int] | None = None) -> str:
    """A fed integer constant (never checked) of ``shape`` (a vector by default), named after
    its values and shape."""
    consts: dict[str, tuple[str, list[int], list[int]]] = gen.__dict__.setdefault(
        "int_consts", {})
    dims = [len(values)] if shape is None else list(shape)
    tail = "" if shape is None else "_r" + "x".join(str(d) for d in dims)
    name = f"{prefix}_{'_'.join(str(v) for v in values)}{tail}"
    consts[name] = (dtype, list(values), dims)
    return name


def sparse_draft(gen: _Gen, b: _Block) -> _Draft:
    """A Gather / SparseLengths* / LengthsSum / BatchGather op writing an ``M`` blob."""
    op_type = gen.draw(st.sampled_from([
        "Gather", "SparseLengthsSum", "SparseLengthsMean", "SparseLengthsWeightedSum",
        "LengthsSum", "BatchGather", "Gather0d", "Gather2d",
    ]))
    if op_type == "Gather0d":  # a 0-d index: one row of a T table, a V blob
        row = _int_const(gen, "IDX", [gen.draw(st.integers(0, 2))], "int64", [])
        return _Draft("Gather", [gen.pick(b, "T"), row], Val("V"))
    if op_type == "Gather2d":  # [2, 2] indices into a U table: an M blob
        idx = [gen.draw(st.integers(0, 2)) for _ in range(4)]
        return _Draft("Gather", [gen.pick(b, "U"), _int_const(gen, "IDX", idx, "int64", [2, 2])],
                      Val("M"))
    if op_type == "Gather":
        idx = [gen.draw(st.integers(0, 2)) for _ in range(2)]
        index = _int_const(gen, "IDX", idx, "int64")
        if not gen.draw(st.integers(0, 2)):  # now and then an index blob an op writes ...
            written = gen.fresh("idxw")
            b.net.op.append(make_op("Copy", [index], [written]))
            if gen.draw(st.booleans()):  # ... and overwrites after the net (stop 23)
                other = _int_const(gen, "IDX", [gen.draw(st.integers(0, 2)) for _ in idx],
                                   "int64")
                gen.__dict__.setdefault("idx_overwrites", []).append(
                    make_op("Copy", [other], [written]))
            index = written
        return _Draft("Gather", [gen.pick(b, "E"), index], Val("M"))
    if op_type == "LengthsSum":
        ln = gen.draw(st.sampled_from(_SEG_LENGTHS))
        return _Draft("LengthsSum", [gen.pick(b, "M"), _int_const(gen, "LEN", ln, "int32")],
                      Val("M"))
    if op_type == "BatchGather":
        idx = [gen.draw(st.integers(0, 1)) for _ in range(2)]
        return _Draft("BatchGather", [gen.pick(b, "M"), _int_const(gen, "IDX", idx, "int64")],
                      Val("M"))
    idx = [gen.draw(st.integers(0, 2)) for _ in range(3)]
    ins = [gen.pick(b, "E")]
    args = []
    if op_type == "SparseLengthsWeightedSum":
        ins.append(gen.pick(b, "S"))
        args.append(make_arg("grad_on_weights", 1))
    ln = gen.draw(st.sampled_from(_LENGTHS))
    ins += [_int_const(gen, "IDX", idx, "int64"), _int_const(gen, "LEN", ln, "int32")]
    return _Draft(op_type, ins, Val("M"), args)


_dense_draft = _Gen.draft
_plain_case = _Gen.case


def _draft_with_sparse(self: _Gen, b: _Block) -> _Draft:
    if b.depth == 0 and self.draw(st.integers(0, _SPARSE_ODDS)) == _SPARSE_ODDS:
        return sparse_draft(self, b)
    return _dense_draft(self, b)


def _case_with_int_consts(self: _Gen) -> FuzzCase:
    case = _plain_case(self)
    # A Gather's index blob overwritten after everything read it: its GradientSlice names
    # the blob, read after the forward net (a version error, or rebuilt with recompute)
    case.net.op.extend(self.__dict__.get("idx_overwrites", []))
    for name, (dtype, values, dims) in self.__dict__.get("int_consts", {}).items():
        case.inputs.append(InputSpec(name, tensor=TensorSpec(dims, dtype, values)))
        case.constants.append(name)
    return case


_Gen.draft = _draft_with_sparse  # type: ignore[method-assign]
_Gen.case = _case_with_int_consts  # type: ignore[method-assign]

# --- issue 8b: smooth math ops in random nets ----------------------------------------------
# An isolated block (other branches edit the generator above): one op in eight becomes one of
# the unary math/activation ops or front/back reductions of issue 8b. Each entry gives the
# input requirement (see Val.meets) and how the output's flags follow from the input's;
# squashing ops (bounded whatever the input) may also write loop-carried blobs.
_I8B_UNARY: dict[str, tuple[str, bool]] = {
    # op: (input requirement, squash)
    "Sin": ("", True), "Cos": ("", True), "Atan": ("", True), "Erf": ("", True),
    "Softsign": ("", True), "Swish": ("", False), "Gelu": ("", False), "Mish": ("", False),
    "Softplus": ("", False), "Sqr": ("", False), "Cube": ("small", False),
    "Sinh": ("small", False), "Cosh": ("small", False), "Elu": ("away", False),
    "Selu": ("away", False), "Reciprocal": ("pos", False), "Rsqrt": ("pos", False),
}
_I8B_REDUCE = ("ReduceFrontSum", "ReduceBackSum", "ReduceFrontMean", "ReduceBackMean")


def _i8b_unary_out(op_type: str, v: Val) -> Val:
    """Flags of ``op_type``'s output given its input's flags."""
    k, small = v.kind, v.small
    if op_type in ("Sin", "Cos", "Atan", "Erf", "Softsign"):
        return Val(k, small=True)
    if op_type in ("Swish", "Gelu", "Mish"):  # |f(x)| <= |x| + small
        return Val(k, small=small)
    if op_type == "Softplus":  # in (0.12, 2.2) for |x| < 2
        return Val(k, pos=small)
    if op_type == "Sqr":
        return Val(k, pos=v.away)
    if op_type == "Cosh":
        return Val(k, pos=True, away=True)
    if op_type in ("Reciprocal", "Rsqrt"):  # x in (0.25, 2): 1/x, 1/sqrt(x) in (0.5, 4)
        return Val(k, pos=small, away=small)
    if op_type in ("Elu", "Selu"):
        return Val(k)
    return Val(k)  # Cube, Sinh


def _i8b_draft(self: _Gen, b: _Block) -> _Draft:
    """An issue-8b op reading blobs of ``b``."""
    if self.draw(st.integers(0, 3)) == 3:
        op_type = self.draw(st.sampled_from(_I8B_REDUCE))
        # (an R's front axis goes: its [2] columns are a V; its back axis would leave [3])
        x = self.pick(b, self.rows() if "Front" in op_type else "M")
        v = self.vals[x]
        out = Val("V", pos=v.pos, small=op_type.endswith("Mean") and v.small)
        return _Draft(op_type, [x], out)
    op_type = self.draw(st.sampled_from(sorted(_I8B_UNARY)))
    need, squash = _I8B_UNARY[op_type]
    x = self.pick(b, self.kind(), need)
    out = _i8b_unary_out(op_type, self.vals[x])
    # Softsign refuses to run in place (as in Caffe2)
    return _Draft(op_type, [x], out, inplace=() if op_type == "Softsign" else (0,),
                  squash=squash)


_i8b_base_draft = _Gen.draft


def _draft_with_i8b(self: _Gen, b: _Block) -> _Draft:
    # (7 -> an issue-8b op: shrinking towards 0 keeps the original generator's choice)
    if self.draw(st.integers(0, 7)) == 7:
        return _i8b_draft(self, b)
    return _i8b_base_draft(self, b)


_Gen.draft = _draft_with_i8b  # type: ignore[method-assign]

# --- issue 8c: BatchMatMul, LayerNorm and a sigmoid cross-entropy loss --------------------
# An isolated block (other helpers extend this module too): ``_Gen.draft`` and ``_Gen.emit``
# are wrapped. One draft in six is one of these ops, the rest come from the generator
# above (the choice shrinks towards it). LayerNorm normalises over all of an ``M``
# (axis 0) or its rows (axis 1) with a large epsilon (0.1), so its gradient stays well
# conditioned; its mean/std outputs are fresh blobs that nothing reads. The loss's targets
# come from a ``GivenTensorFill`` in the same net (fill ops get no gradient), so no fed
# blob lacks a gradient.
_OPS_8C = ("BatchMatMul", "LayerNorm", "SigmoidCrossEntropyWithLogits")
_base_draft_8c = _Gen.draft
_base_emit_8c = _Gen.emit


def _draft_8c(self: _Gen, b: _Block) -> _Draft:
    pick = self.draw(st.sampled_from(["base"] * 5 + ["8c"]))
    if pick == "base":
        return _base_draft_8c(self, b)
    op_type = self.draw(st.sampled_from(_OPS_8C))
    if op_type == "BatchMatMul":  # [n, 2] rows times a [2, 2] matrix, as MatMul
        ka = self.rows()
        a, c = self.pick(b, ka), self.pick(b, "M")
        names = ("trans_a", "trans_b") if ka == "M" else ("trans_b",)
        args = [make_arg(n, 1) for n in names if self.draw(st.booleans())]
        return _Draft("BatchMatMul", [a, c], Val(ka), args)
    if op_type == "LayerNorm":
        kx = self.rows()
        x = self.pick(b, kx)
        args = [make_arg("axis", self.draw(st.integers(0, 1))), make_arg("epsilon", 0.1)]
        return _Draft("LayerNorm", [x], Val(kx, small=True), args)
    logits = self.pick(b, "M")
    targets = self.fresh("tgt")
    values = [self.draw(st.sampled_from([0.0, 0.25, 1.0])) for _ in range(4)]
    b.net.op.append(make_op("GivenTensorFill", [], [targets],
                            [make_arg("shape", SHAPES["M"]), make_arg("values", values)]))
    args = [make_arg("log_D_trick", 1)] if self.draw(st.integers(0, 3)) == 0 else []
    return _Draft("SigmoidCrossEntropyWithLogits", [logits, targets], Val("V"), args)


def _emit_8c(self: _Gen, b: _Block, d: _Draft, force_fresh: bool = False,
             outward: bool = False) -> str:
    out = _base_emit_8c(self, b, d, force_fresh, outward)
    if d.type == "LayerNorm":
        b.net.op[-1].output.extend([self.fresh("ln_mean"), self.fresh("ln_std")])
    return out


_Gen.draft = _draft_8c  # type: ignore[method-assign]
_Gen.emit = _emit_8c  # type: ignore[method-assign]


# --- review f1 #1: an in-place op right before an in-place Sum (isolated block) ------------
# Sum gives one gradient blob to all its inputs; the gradient of an in-place op before it
# (Scale/Negative/Copy on the same name) used to write into that blob after the Sum's
# gradient, so the Sum's other inputs got this op's gradient applied (F7 counterexamples).
_base_statement_f1 = _Gen.statement


def _statement_f1(self: _Gen, b: _Block) -> None:
    if self.draw(st.integers(0, 7)):  # 7 times in 8: the usual statements
        _base_statement_f1(self, b)
        return
    kind = self.kind()
    op_type = self.draw(st.sampled_from(["Scale", "Negative", "Copy"]))
    x = self.pick(b, kind)  # (may be a fresh parameter: it is read below in any case)
    d = self.unary(op_type, x)
    if d is None:  # unreachable: these three take any input
        raise RuntimeError(f"generator bug: no {op_type} draft")
    if not self.writable(b, x, d, True):
        self.emit(b, d, force_fresh=True)
        return
    b.net.op.append(make_op(d.type, d.inputs, [x], d.args))
    b.written[x] = None
    others = [self.pick(b, kind) for _ in range(self.draw(st.integers(1, 2)))]
    vs = [self.vals[n] for n in [x, *others]]
    total = _Draft("Sum", [x, *others], Val(kind, pos=all(v.pos for v in vs)), inplace=(0,))
    if self.writable(b, x, total, True):
        b.net.op.append(make_op("Sum", total.inputs, [x]))
    else:
        self.emit(b, total, force_fresh=True)


_Gen.statement = _statement_f1  # type: ignore[method-assign]


# --- issue 9: small RecurrentNetwork ops (isolated block; rnn_fuzz_cases) -----------------
def _rnn_step(draw: st.DrawFn, n_states: int, cell: str, gate_if: bool,
              params: dict[str, list[int]], d: int) -> tuple[list[OperatorDef], list[str]]:
    """Step-net ops of :func:`rnn_fuzz_cases`: a random elementwise mix of ``x_t``, the
    previous states and FC projections, squashed into each new state (or an LSTM/GRU cell)."""
    ops: list[OperatorDef] = []
    blobs = ["r/x_t", *(f"r/s{i}_prev" for i in range(n_states))]

    def fresh(stem: str) -> str:
        return f"r/{stem}{len(ops)}"

    def param(name: str, shape: list[int]) -> str:
        params[name] = shape
        return name

    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["FC", "Add", "Mul", "Tanh", "Sigmoid", "Scale"]))
        a = draw(st.sampled_from(blobs))
        out = fresh(kind.lower())
        if kind == "FC":
            k = len(params)
            ops.append(make_op("FC", [a, param(f"W{k}", [d, d]), param(f"b{k}", [d])], [out],
                               [make_arg("axis", 2)]))
        elif kind in ("Add", "Mul"):
            ops.append(make_op(kind, [a, draw(st.sampled_from(blobs))], [out]))
        elif kind == "Scale":
            ops.append(make_op("Scale", [a], [out],
                               [make_arg("scale", draw(st.sampled_from([0.5, -1.0])))]))
        else:
            ops.append(make_op(kind, [a], [out]))
        blobs.append(out)
    news = [f"r/s{i}_t" for i in range(n_states)]
    if cell == "lstm":  # states 0 and 1 are the LSTM's hidden and cell state
        gx = make_op("FC", ["r/x_t", param("Wx4", [4 * d, d]), param("bx4", [4 * d])],
                     ["r/gx"], [make_arg("axis", 2)])
        gh = make_op("FC", ["r/s0_prev", param("Wh4", [4 * d, d]), param("bh4", [4 * d])],
                     ["r/gh"], [make_arg("axis", 2)])
        unit = make_op("LSTMUnit", ["r/s0_prev", "r/s1_prev", "r/gates", "lengths", "timestep"],
                       news[:2], [make_arg("drop_states", int(draw(st.booleans()))),
                                  make_arg("forget_bias", draw(st.sampled_from([0.0, 1.0])))])
        ops += [gx, gh, make_op("Add", ["r/gx", "r/gh"], ["r/gates"]), unit]
        rest = news[2:]
    elif cell == "gru":
        gx = make_op("FC", ["r/x_t", param("Wx3", [3 * d, d]), param("bx3", [3 * d])],
                     ["r/gates"], [make_arg("axis", 2)])
        ops += [gx, make_op("GRUUnit", ["r/s0_prev", "r/gates", "lengths", "timestep"],
                            news[:1], [make_arg("drop_states", int(draw(st.booleans())))])]
        rest = news[1:]
    else:
        rest = news
    for new in rest:
        src = draw(st.sampled_from(blobs))
        if gate_if and new == rest[0]:
            then_net, else_net = NetDef(name="then"), NetDef(name="else")
            if_in = ["flag", src]
            if draw(st.booleans()):  # a param read inside the branch
                if_in.append(param("p_if", [d]))
                then_net.op.append(make_op("Mul", [src, "p_if"], ["r/if_tmp"]))
                then_net.op.append(make_op("Tanh", ["r/if_tmp"], [new]))
            else:
                then_net.op.append(make_op("Tanh", [src], [new]))
            else_net.op.append(make_op("Sigmoid", [src], [new]))
            ops.append(make_op("If", if_in, [new], [make_arg("then_net", then_net),
                                                    make_arg("else_net", else_net)]))
        else:
            ops.append(make_op(draw(st.sampled_from(["Tanh", "Sigmoid"])), [src], [new]))
    return ops, news


@st.composite
def rnn_fuzz_cases(draw: st.DrawFn) -> FuzzCase:
    """Strategy of :class:`FuzzCase` holding one random ``RecurrentNetwork`` (issue 9).

    Up to three steps, batch 1-2, state size 2; one to two recurrent states with initial
    values ``[1, N, D]`` or ``[D]``; an optional LSTMUnit or GRUUnit cell with random
    ``seq_lengths``, ``drop_states`` and ``forget_bias``; an optional ``If`` on a fed flag
    in the step net; an optional ``recompute_blobs_on_backward``; the loss on a random set
    of the ``_all``/``_last`` outputs. The op carries a ``backward_step_net`` placeholder,
    as ``recurrent_net`` leaves one, so its forward run keeps the step workspaces.
    """
    t = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    d = 2
    cell = draw(st.sampled_from(["none", "none", "lstm", "gru"]))
    n_states = draw(st.integers(2 if cell == "lstm" else 1, 2))
    gate_if = draw(st.booleans()) and (cell == "none" or n_states > (2 if cell == "lstm" else 1))
    params: dict[str, list[int]] = {}
    ops, news = _rnn_step(draw, n_states, cell, gate_if, params, d)
    step = NetDef(name="rnn_step", type="simple")
    step.op.extend(ops)
    states = [f"r/s{i}_prev_states" for i in range(n_states)]
    inits = [f"init{i}" for i in range(n_states)]
    consts = ["lengths"] if cell != "none" else []
    if gate_if:
        consts.append("flag")
    inputs = ["x", *inits, *params, *consts]
    links = [(f"r/s{i}_prev", states[i], 0) for i in range(n_states)]
    links += [(news[i], states[i], 1) for i in range(n_states)]
    links.append(("r/x_t", "x", 0))
    outputs = [o for i in range(n_states) for o in (f"r/s{i}_all", f"r/s{i}_last")]
    args = [
        make_arg("step_net", step),
        make_arg("backward_step_net", NetDef(name="placeholder")),
        make_arg("recurrent_states", states),
        make_arg("initial_recurrent_state_ids", [1 + i for i in range(n_states)]),
        make_arg("link_internal", [lk[0] for lk in links]),
        make_arg("link_external", [lk[1] for lk in links]),
        make_arg("link_offset", [lk[2] for lk in links]),
        make_arg("alias_src", [s for s in states for _ in (0, 1)]),
        make_arg("alias_dst", outputs),
        make_arg("alias_offset", [1, -1] * n_states),
        make_arg("timestep", "timestep"),
    ]
    single = [o.output[0] for o in ops if len(o.output) == 1 and o.type != "If"
              and o.output[0] not in news]
    if single and draw(st.booleans()):
        args.append(make_arg("recompute_blobs_on_backward", [draw(st.sampled_from(single))]))
    net = NetDef(name="rnn_fuzz")
    net.op.append(make_op("RecurrentNetwork", inputs, [*outputs, "r/step_workspaces"], args))
    ys = draw(st.lists(st.sampled_from(outputs), min_size=1, max_size=3, unique=True))
    # other consumers of the sequence and of a param: their gradients are accumulated with
    # the RecurrentNetworkGradient's outputs (renamed outputs, <x>_grad.rename)
    for k, src in enumerate(draw(st.lists(st.sampled_from(["x", *params]), max_size=2,
                                          unique=True))):
        net.op.append(make_op("Tanh", [src], [f"r/extra{k}"]))
        ys.append(f"r/extra{k}")
    rng_seed = draw(st.integers(0, 2**16))
    import numpy as np  # (local: the rest of this module needs no NumPy)

    rng = np.random.default_rng(rng_seed)
    specs = [InputSpec.from_array("x", rng.uniform(-1, 1, (t, n, d)))]
    for name in inits:
        shape = (d,) if draw(st.booleans()) else (1, n, d)
        specs.append(InputSpec.from_array(name, rng.uniform(-1, 1, shape)))
    for name, shape in params.items():
        specs.append(InputSpec.from_array(name, rng.uniform(-0.8, 0.8, shape)))
    if "lengths" in consts:
        specs.append(InputSpec.from_array("lengths", rng.integers(0, t + 1, n).astype(np.int32)))
    if gate_if:
        specs.append(InputSpec.from_array("flag", np.array([draw(st.booleans())])))
    return FuzzCase(net, ys, specs, consts, False, draw(st.integers(0, 3)))
