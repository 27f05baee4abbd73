"""Count ops, sub-net depth and containers of a JSON request *while it streams in*.

A JSON body is decoded by ``json.loads`` only once it has been read whole, and Python objects
cost ten to fifty times the bytes they come from. :class:`JsonScan` looks at the bytes as
they arrive (chunk by chunk, without building anything) and refuses a body as soon as it
holds

* more ops than ``max_ops`` (413 ``too_many_ops``): an op is an object in an ``"op"`` array
  (``NetDef.op``, sub-nets included) or the value of an ``"op"`` key
  (``OpGradientRequest.op``) - the same count as :class:`core.ir.env.GenLimits.max_ops`;
* more sub-nets than ``max_ops`` (413 ``too_many_subnets``), as
  :class:`core.proto.limits.OpBudget` counts them;
* sub-nets nested deeper than ``max_depth`` (422 ``nesting_too_deep``, with the sub-net path
  as far as it has been read, e.g. ``op[3]:If/then_net/op[0]:Do/net``): a sub-net is the
  object of an ``"n"`` key or an element of a ``"nets"`` array (``Argument.n`` /
  ``Argument.nets``, :mod:`core.proto.limits`);
* objects and arrays nested more than :data:`MAX_NESTING` deep (422 ``nesting_too_deep``);
* more JSON objects and arrays than ``max_containers`` (413 ``too_many_values``): junk that
  is no net at all is refused before it is materialised.

It only tokenises (strings, braces, brackets, colons); whether the JSON is valid is left to
the parser. Structural characters are ASCII, so UTF-8 bytes are scanned as they come.

The service feeds the body to :class:`BoundedScan`, which runs :class:`JsonScan` only once
byte counts (done in C) show that a limit could be crossed: a body far below every limit,
as real nets are, costs a few ``bytes.count`` calls per chunk instead of a Python scan of
its tokens (``bench/README.md`` §5j).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.errors import LimitExceededError
from core.proto.limits import too_many_ops, too_many_subnets

_STR = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'
_STRING = re.compile(_STR)
_PLAIN = rb'[^\[\]{}"]*+'  # bytes outside strings that are no bracket or brace
_FLAT = _PLAIN + rb'(?:' + _STR + _PLAIN + rb')*+'  # what a flat array / object holds
_FLAT_ANY = rb'\[' + _FLAT + rb'\]|\{' + _FLAT + rb'\}'
_TWO = _PLAIN + rb'(?:(?:' + _STR + rb'|' + _FLAT_ANY + rb')' + _PLAIN + rb')*+'
_TWO_ANY = rb'\[' + _TWO + rb'\]|\{' + _TWO + rb'\}'
_THREE = _PLAIN + rb'(?:(?:' + _STR + rb'|' + _TWO_ANY + rb')' + _PLAIN + rb')*+'
_JUNK = rb'[^"{}\[\]:]*+'  # bytes no token starts with (commas, numbers, spaces, letters)
_VALUE = _STR + rb'(?![ \t\n\r]*+:)'  # a string that is no key
_KEY = _STR[:1] + rb'(' + _STR[1:-1] + rb')"[ \t\n\r]*+:'  # a key and its colon
_PAIR = _KEY + _JUNK + rb'(' + _VALUE + rb')' + _JUNK  # a key, its string value
_REST = (rb'(?:' + _PAIR + rb'){2,}+'  # key-value pairs (groups 1, 2: the last pair)
         + rb'|' + _KEY + rb'(?:' + _JUNK + _KEY + rb')*+'  # keys (no string value between)
         + rb'|' + _VALUE + rb'(?:' + _JUNK + rb'(' + _VALUE + rb'))++'  # strings, no key
         + rb'|' + _STR + rb'|"'
         + rb'|:(?:' + _JUNK + rb':)*+'  # colons
         + rb'|[{\[]|[}\]](?:' + _JUNK + rb'[}\]])*+')  # an opening; closings
# Tokens, the first that matches: an object whose arrays and objects nest at most two levels
# inside it (an op without sub-nets, read as one token where none of its keys matters), an
# array that holds no array or object, a run of key-value pairs whose values are strings, a
# run of keys with their colons (scalar values between them), a run of strings that are no
# keys, a complete string, a lone quote (a string that runs past the chunk), a run of
# colons, an opening bracket or brace, a run of closing ones (commas are not needed: a key
# is always the string just before a colon). Runs keep a hostile body of tiny tokens (64 MiB
# of ``]`` or of ``"",``) from costing a Python step per byte. Possessive quantifiers: a
# failed match is never retried inside, so every byte is looked at a bounded number of times.
_TOKEN = re.compile(rb'\{' + _THREE + rb'\}|\[' + _FLAT + rb'\]|' + _REST)
#: The last ``"type": "..."`` / ``"name": "..."`` pair of a run of pairs (its value: group 1).
_LAST_PAIR_OF = {
    name: re.compile(rb'(?s:.*)"' + name + rb'"[ \t\n\r]*+:' + _JUNK + rb'(' + _VALUE + rb')'
                     ).match
    for name in (b"type", b"name")
}
# Within such an object: flat arrays and objects, keys, strings, structural bytes.
_INNER = re.compile(_FLAT_ANY + rb'|' + _REST)
#: Keys that make an object's inside matter (ops, sub-nets; raw bytes, as the scan reads keys).
_KEYS_THAT_COUNT = (b'"op"', b'"n"', b'"nets"')
# The rest of a string that started in an earlier chunk, up to its closing quote.
_STRING_END = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"')
#: Bytes of a string kept as a possible key or op type / argument name.
_KEEP = 256
#: Deepest nesting of JSON objects and arrays scanned (each open one holds a frame): far
#: above what sub-nets at the decoders' depth limit take (about six per level), and far
#: below what would make the scan's own memory matter.
MAX_NESTING = 5_000


@dataclass
class _Frame:
    """One open container: ``{`` or ``[``, the key it is the value of, and path data."""

    is_object: bool
    key: bytes
    depth: int
    op_index: int = -1  # for an op object: its index in the op array
    op_type: str = ""
    arg_name: str = ""
    children: int = 0  # elements of an array so far
    path: str = ""  # sub-net path of this container's net (for errors)
    last_key: bytes = b""
    expect_value: bool = False
    candidate: bytes | None = None  # a string in value position (of ``candidate_key``)
    candidate_key: bytes = b""


class JsonScan:
    """Incremental scanner of a JSON request body (see the module doc).

    Args:
        max_ops: most ops (all nets together).
        max_depth: deepest sub-net level (top level = 0).
        max_containers: most JSON objects + arrays.

    Raises (from :meth:`feed`):
        LimitExceededError: ``too_many_ops`` / ``too_many_subnets`` / ``too_many_values``
            (413 in the service),
            ``nesting_too_deep`` (422).
    """

    def __init__(self, max_ops: int, max_depth: int, max_containers: int) -> None:
        self.max_ops = max_ops
        self.max_depth = max_depth
        self.max_containers = max_containers
        self.ops = 0
        self.subnets = 0
        self.containers = 0
        self._stack: list[_Frame] = []
        self._partial: bytes | None = None  # start of a string still open (first _KEEP bytes)
        self._escaped = False  # the previous chunk ended inside a string on a backslash
        self._last_string: bytes | None = None

    def feed(self, chunk: bytes) -> None:
        """Scan the next bytes of the body."""
        pos = 0
        if self._partial is not None:
            pos = self._finish_string(chunk)
            if pos < 0:
                return
        self._tokens(chunk, pos, _TOKEN)

    def _tokens(self, chunk: bytes, pos: int, regex: re.Pattern[bytes]) -> None:
        for m in regex.finditer(chunk, pos):
            tok = m.group()
            c = tok[0]
            if c == 0x22:  # '"'
                if m.group(1) is not None:  # key-value pairs
                    self._pairs(tok[:m.start(1) - 1 - m.start()], m.group(1), m.group(2))
                    continue
                if tok[-1] == 0x3A:  # keys: each but the last is overridden by the next
                    self._key(m.group(4) if m.group(4) is not None else m.group(3))
                    continue
                last = m.group(5)
                if last is not None:  # strings that are no keys
                    self._strings(tok, last)
                    continue
                if len(tok) == 1:  # (the regex never ends a string on an escaped quote)
                    self._start_partial(chunk, m.start())
                    return
                self._string(tok[1:-1])
            elif c == 0x3A:  # ':' (a second one leaves what any further one would)
                self._colon()
                if len(tok) > 1 and tok.count(b":") > 1:
                    self._colon()
            elif c in (0x7B, 0x5B):  # '{' '['
                if len(tok) == 1:
                    self._open(c == 0x7B)
                elif c == 0x5B or regex is _INNER:
                    self._flat(c == 0x7B)
                else:
                    self._object(tok)
            else:  # closings: as many frames as there are, at most
                stack = self._stack
                closes = 1 if len(tok) == 1 else tok.count(b"}") + tok.count(b"]")
                for _ in range(min(closes, len(stack))):
                    self._commit(stack.pop())
                self._last_string = None

    # -- strings ----------------------------------------------------------------------------
    def _start_partial(self, chunk: bytes, start: int) -> None:
        rest = chunk[start + 1:]
        self._partial = rest[:_KEEP]
        self._escaped = _odd_trailing_backslashes(rest)

    def _finish_string(self, chunk: bytes) -> int:
        """Continue an open string; the position after it, or -1 if it is still open."""
        start = 1 if self._escaped else 0
        if start > len(chunk):
            return -1
        m = _STRING_END.match(chunk, start)
        partial = self._partial or b""
        if m is None:
            if len(partial) < _KEEP:
                partial += chunk[: _KEEP - len(partial)]
            self._partial = partial
            self._escaped = _odd_trailing_backslashes(chunk[start:]) if chunk[start:] else (
                self._escaped and not chunk)
            return -1
        self._partial = None
        self._escaped = False
        self._string((partial + chunk[: m.end() - 1])[:_KEEP])
        return m.end()

    def _string(self, value: bytes) -> None:
        # Whether a string is a key shows only at the next token (a colon follows a key), so
        # a string in value position is kept as a candidate and committed at the next
        # string, bracket or brace (a non-string value before it leaves no token).
        top = self._stack[-1] if self._stack else None
        if top is not None:
            self._commit(top)
            if top.is_object and top.expect_value:
                top.candidate = value
                top.candidate_key = top.last_key
                top.expect_value = False
        self._last_string = value

    def _commit(self, top: _Frame) -> None:
        if top.candidate is None:
            return
        if top.op_index >= 0 and top.candidate_key == b"type":
            top.op_type = top.candidate.decode("utf-8", "replace")
        elif top.candidate_key == b"name":
            top.arg_name = top.candidate.decode("utf-8", "replace")
        top.candidate = None

    def _strings(self, tok: bytes, last: bytes) -> None:
        """Two or more strings, none a key: in an array (or outside any container) a string
        changes nothing but the last string seen; in an object the first may be a value
        (:meth:`_string`), the second commits it, and the rest change nothing."""
        top = self._stack[-1] if self._stack else None
        if top is not None and top.is_object:
            first = _STRING.match(tok)
            if first is not None:  # (always: the token starts with a string)
                self._string(first.group()[1:-1])
                self._commit(top)
        self._last_string = last[1:-1]

    def _pairs(self, head: bytes, key: bytes, value: bytes) -> None:
        """Two or more ``"key": "value"`` pairs; ``head``: all but the last, ``key``,
        ``value``: the last. Each pair's value is committed by the next pair's key, and a
        commit matters only under the key ``type`` (of an op) or ``name``
        (:meth:`_commit`): the last such pair of ``head`` (each found by one regex match
        from the end) and then the last pair leave what all of them would."""
        top = self._stack[-1] if self._stack else None
        if top is not None and top.is_object and (b'"type"' in head or b'"name"' in head):
            self._commit(top)  # (what was pending before the pairs)
            for name, last_of in _LAST_PAIR_OF.items():
                found = last_of(head)
                if found is not None:
                    top.candidate, top.candidate_key = found.group(1)[1:-1], name
                    self._commit(top)
        self._key(key)
        self._string(value[1:-1])

    def _key(self, value: bytes) -> None:
        """A string and the colon after it (:meth:`_string` then :meth:`_colon`)."""
        top = self._stack[-1] if self._stack else None
        if top is not None:
            self._commit(top)
            if top.is_object:
                top.candidate = None
                top.last_key = value
                top.expect_value = True
        self._last_string = None

    def _colon(self) -> None:
        top = self._stack[-1] if self._stack else None
        if top is not None and top.is_object:
            top.candidate = None  # the string before the colon was a key
            top.last_key = self._last_string or b""
            top.expect_value = True
        self._last_string = None

    # -- containers -------------------------------------------------------------------------
    def _open(self, is_object: bool) -> None:
        if len(self._stack) >= MAX_NESTING:  # one frame per open bracket: bound them
            raise LimitExceededError.at(
                f"the JSON body nests objects and arrays more than {MAX_NESTING} levels deep",
                code="nesting_too_deep",
            )
        self.containers += 1
        if self.containers > self.max_containers:
            raise LimitExceededError.at(
                f"the body holds more than {self.max_containers} JSON objects and arrays "
                "(NETGRAD_MAX_JSON_CONTAINERS)",
                code="too_many_values",
            )
        parent = self._stack[-1] if self._stack else None
        key = b""
        depth = 0
        path = ""
        op_index = -1
        if parent is not None:
            self._commit(parent)
            depth, path = parent.depth, parent.path
            if parent.is_object:
                key = parent.last_key
                parent.expect_value = False
            else:
                key = parent.key
                parent.children += 1
        self._last_string = None
        frame = _Frame(is_object, key, depth, path=path)
        if is_object and parent is not None:
            if key == b"op":
                op_index = parent.children - 1 if not parent.is_object else 0
                frame.op_index = op_index
                self.ops += 1
                if self.ops > self.max_ops:
                    raise too_many_ops(self.max_ops)
            elif key in (b"n", b"nets"):
                self.subnets += 1  # (bounded by max_ops too, as core.proto.limits.OpBudget)
                if self.subnets > self.max_ops:
                    raise too_many_subnets(self.max_ops)
                frame.depth = depth + 1
                frame.path = self._subnet_path(key, parent)
                if frame.depth > self.max_depth:
                    op = self._op_frame()
                    raise LimitExceededError.at(
                        f"sub-nets are nested deeper than the limit of {self.max_depth} levels "
                        f"at {frame.path}",
                        op_index=op.op_index if op else None,
                        op_type=op.op_type if op else None,
                        path=frame.path,
                        code="nesting_too_deep",
                    )
        self._stack.append(frame)

    def _flat(self, is_object: bool) -> None:
        """An array or object that holds no array or object: :meth:`_open` and its close
        at once (no frame kept; where it is a sub-net, by :meth:`_open` itself)."""
        stack = self._stack
        parent = stack[-1] if stack else None
        if parent is None or len(stack) >= MAX_NESTING or self.containers >= self.max_containers:
            self._open(is_object)
            stack.pop()
            self._last_string = None
            return
        self._commit(parent)
        if parent.is_object:
            key = parent.last_key
        else:
            key = parent.key
        if is_object and key in (b"n", b"nets"):
            self._open(is_object)
            stack.pop()
            self._last_string = None
            return
        self.containers += 1
        if parent.is_object:
            parent.expect_value = False
        else:
            parent.children += 1
        self._last_string = None
        if is_object and key == b"op":
            self.ops += 1
            if self.ops > self.max_ops:
                raise too_many_ops(self.max_ops)

    def _object(self, tok: bytes) -> None:
        """A whole object whose arrays and objects nest at most two levels inside it: one
        container for every ``{`` / ``[`` outside its strings; read token by token where a
        key in it (or its own) makes an op or a sub-net, or where a limit is near."""
        bare = _STRING.sub(b"", tok)
        inner = bare.count(b"{") + bare.count(b"[") - 1
        if inner == 0:
            self._flat(True)
            return
        stack = self._stack
        parent = stack[-1] if stack else None
        if (parent is None or len(stack) + 3 > MAX_NESTING
                or self.containers + 1 + inner > self.max_containers
                or (parent.last_key if parent.is_object else parent.key) in (b"n", b"nets")
                or any(k in tok for k in _KEYS_THAT_COUNT)):
            self._tokens(tok, 0, _INNER)
            return
        self._flat(True)  # the object itself (an op, maybe)
        self.containers += inner

    def _op_frame(self) -> _Frame | None:
        for f in reversed(self._stack):
            if f.op_index >= 0:
                return f
        return None

    def _subnet_path(self, key: bytes, parent: _Frame) -> str:
        """``<net path>/op[i]:Type/<arg name>`` (``[k]`` for ``nets``) of a new sub-net."""
        arg = next((f for f in reversed(self._stack) if f.is_object and f.arg_name), None)
        op = self._op_frame()
        prefix = f"{op.path}/" if op is not None and op.path else ""
        op_part = f"op[{op.op_index}]:{op.op_type}" if op is not None else "op[?]"
        name = arg.arg_name if arg is not None else "?"
        if key == b"nets":
            return f"{prefix}{op_part}/{name}[{parent.children - 1}]"
        return f"{prefix}{op_part}/{name}"


class BoundedScan:
    """:class:`JsonScan` run only where a count made in C says a limit could be crossed.

    Each chunk's ``{`` and ``[`` bytes and its ``"n"`` / ``"nets"`` substrings are counted
    (``bytes.count``; those in strings too, so every count is at least what
    :class:`JsonScan` would count):

    * JSON objects + arrays <= the ``{`` and ``[`` bytes;
    * ops, and sub-nets, <= the ``{`` bytes less one: each is an object inside another object
      (the one holding the ``"op"`` / ``"n"`` / ``"nets"`` key);
    * sub-net depth <= the ``"n"`` / ``"nets"`` keys (one per level).

    While every bound stays within its limit no limit can be crossed, and the chunks are
    only kept (referenced, not copied). Once one is crossed, a :class:`JsonScan` reads the
    kept chunks and every later one: it refuses the body at the same byte as a scan from the
    first chunk would, with the same problem. What is not bounded while no scan runs is
    bracket nesting (:data:`MAX_NESTING`, the scan's own memory): with no scan there are no
    frames, and ``json.loads`` refuses a body nested deeper than the interpreter's recursion
    limit (5,000, :mod:`core.proto.codec`) itself.

    Args / Raises: as :class:`JsonScan`.
    """

    def __init__(self, max_ops: int, max_depth: int, max_containers: int) -> None:
        self.max_ops = max_ops
        self.max_depth = max_depth
        self.max_containers = max_containers
        self.scan: JsonScan | None = None
        self._kept: list[bytes] = []
        self._objects = 0
        self._containers = 0
        self._subnet_keys = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        """Count the next bytes of the body; scan them (and those kept) once a bound is
        crossed."""
        if self.scan is not None:
            self.scan.feed(chunk)
            return
        objects = chunk.count(b"{")
        self._objects += objects
        self._containers += objects + chunk.count(b"[")
        # (a key cut by the chunk boundary is counted in the joint; one wholly on either side
        # of it may be counted twice: still a bound)
        joint = self._tail + chunk[:5]
        self._subnet_keys += (chunk.count(b'"n"') + chunk.count(b'"nets"')
                              + joint.count(b'"n"') + joint.count(b'"nets"'))
        self._tail = (self._tail + chunk[-5:])[-5:]
        self._kept.append(chunk)
        if (self._objects - 1 > self.max_ops or self._containers > self.max_containers
                or self._subnet_keys > self.max_depth):
            self.scan = JsonScan(self.max_ops, self.max_depth, self.max_containers)
            kept, self._kept = self._kept, []
            for c in kept:
                self.scan.feed(c)

    def close(self) -> None:
        """The body has ended: drop the kept chunks."""
        self._kept = []


def _odd_trailing_backslashes(data: bytes) -> bool:
    n = len(data) - len(data.rstrip(b"\\"))
    return n % 2 == 1
