"""Problems of text-format (``.pbtxt``) bodies, located and listed as JSON bodies' are.

``text_format.Parse`` stops at its first error and names only its ``line:column``. Here that
error gets the field path, op index and op type where it stands, and when it is an unknown
field, every other unknown field of the text is listed beside it (as a JSON body's are):
one walk over protobuf's own tokens (:class:`text_format.Tokenizer`) follows the message
types by their descriptors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import message, text_format

from core.errors import DecodeError
from core.proto import jsonmap, jsonwalk
from core.types import Diagnostic

#: Longest parser message a text-format problem repeats (the parser quotes whole tokens:
#: a 64 MiB line came back twice in a 147 MB answer; walkthrough, stop 21).
MAX_TEXT_ERROR_CHARS = 300
_NO_FIELD = re.compile(r'Message type "?(?P<type>[\w.]+)"? has no field named "?(?P<name>\w+)"?')

#: Most tokens the walk reads, then it gives up (about 0.2-0.6 s of CPU here: the error
#: path costs at most about what parsing the text did). Problems past it keep their
#: ``line:column`` only; unknown fields past it are not listed.
MAX_LOCATE_TOKENS = 100_000

_OP = "caffe2.OperatorDef"

#: Most messages open at once the walk follows, then it gives up (the text parser itself
#: refuses about 1,000 levels; a body not yet parsed, one with a bad byte, may nest deeper).
MAX_LOCATE_DEPTH = 1_000


def text_problem(exc: text_format.ParseError, cls: type[message.Message],
                 source: str = "") -> DecodeError:
    """A text-format parse error as short problems: the parser's ``line:column`` and reason
    (cut to :data:`MAX_TEXT_ERROR_CHARS`), code ``unknown_field`` for an unknown name, and
    the field path, op index and op type where it is. An unknown field comes with every
    other unknown field of ``source`` after it (up to :data:`core.proto.jsonwalk.MAX_LISTED`
    in all); ``source`` empty: the parser's problem alone, not located.

    Source: protobuf's text format of the §1 schema (the wire forms of spec §8), its
    problems named as a JSON body's are (README, Encodings).
    """
    line, column = exc.GetLine(), exc.GetColumn()
    text = _short_quote(str(exc), source, line, column)
    if len(text) > MAX_TEXT_ERROR_CHARS:
        text = text[:MAX_TEXT_ERROR_CHARS] + f"... ({len(text):,} characters in all)"
    found = _NO_FIELD.search(text)
    walk = (_walk(source, cls, (line, column), collect=found is not None)
            if source and line and column else None)
    path, op_index, op_type = walk.place() if walk is not None else (None, None, None)
    msg = f"invalid text-format {cls.DESCRIPTOR.name}: {text}"
    if found:
        msg += _unknown_advice(cls, found["type"], found["name"], path)
        rest = _rest_at(source, line, column)
        if rest is not None and rest.startswith(found["name"]) and not re.sub(
                r"#[^\n]*", "", rest[len(found["name"]):]).strip():
            msg += "; the text ends with this name (was it cut off?)"
        if path is not None:  # (the path names the unknown key, as JSON's does)
            path = f"{path}.{found['name']}" if path else found["name"]
    elif text.endswith('Expected "{".') and path is not None and line and column:
        field_name, example = _scalar_for_message(source, cls, line, column, top=not path)
        if field_name is not None:
            msg = (msg.rstrip(".") + f"; {field_name} holds a message, not a bare value: "
                   f"write {example}")
            path = f"{path}.{field_name}" if path else field_name
    elif source and line and column:
        advice = _syntax_advice(str(exc), source, line, column)
        # (a string that does not decode: the parser names the token after it)
        inner = (None if walk is None else walk.before if _AFTER_STRING.search(text)
                 else walk.scalar)
        if advice == _ESCAPE_ADVICE and path is not None and inner:
            # (the problem stays at its message, as before; its words name the string)
            advice = (f"; the string is {path + '.' if path else ''}{inner}"
                      + ("; the bytes its escapes give are not UTF-8 (names are UTF-8 text)"
                         if _NOT_UTF8.search(text) else "") + advice)
        if advice == _CUT_OFF:
            if path is None and walk is not None and not walk.exhausted:  # (its last place)
                path, op_index, op_type = text_place(source.rstrip(), "", cls)
            if not path:  # (no message open: a field's value is missing)
                advice = "; the text ends before its last field has its value (was it cut off?)"
        msg = msg.rstrip(".") + advice if advice else msg
    first = Diagnostic("error", "unknown_field" if found else "invalid_field", msg,
                       op_index=op_index, op_type=op_type, path=path or None)
    problems = [first]
    if found and walk is not None:
        for u in walk.unknown:
            if (u.line, u.column) <= (line, column):
                continue  # (the parser's own problem, or one it read past: not unknown)
            where = f"{u.path}.{u.name}" if u.path else u.name
            problems.append(Diagnostic(
                "error", "unknown_field",
                f"invalid text-format {cls.DESCRIPTOR.name}: {u.line}:{u.column} : Message "
                f'type "{u.type_name}" has no field named "{u.name}".'
                + _unknown_advice(cls, u.type_name, u.name, u.path),
                op_index=u.op[3] if u.op else None, op_type=u.op[4] if u.op else None,
                path=where))
    return jsonwalk.refusal(problems)


def text_place(prefix: str, suffix: str, cls: type[message.Message]
               ) -> tuple[str | None, int | None, str | None]:
    """``(path, op index, op type)`` in a text-format ``cls`` where ``prefix`` ends: the
    message being read there (``net.op[1]``) and its innermost op, whose ``type`` may come
    in ``suffix``, the text after that point. All ``None`` where the walk does not get there
    (a token the tokenizer refuses first, or more than :data:`MAX_LOCATE_TOKENS` tokens).

    For problems found before the text is parsed, such as a byte that is not UTF-8 (names
    are UTF-8 strings, spec §1): a replacement character stands for it, so
    ``prefix + "\ufffd" + suffix`` is walked.
    """
    line = prefix.count("\n") + 1
    column = len(prefix) - (prefix.rfind("\n") + 1) + 1
    path, op_index, op_type = _walk(prefix + "\ufffd" + suffix, cls, (line, column),
                                    collect=False).place()
    if op_type is not None and "\ufffd" in op_type:  # (the bad byte is in the type itself)
        op_type = None
    return path or None, op_index, op_type


#: The parser's words for a string whose backslash escapes do not decode (Python's codecs).
_BAD_ESCAPE = re.compile(
    r"(?:Couldn't parse string: )?(?:'(?:raw)?unicodeescape' codec can't decode"
    r"|'latin-1' codec can't encode character|'utf-8' codec can't (?:de|en)code "
    r"(?:byte|character)|Invalid escape|truncated \\[xuU])")
_CUT_OFF = "; the text ends before its last message is closed (was it cut off?)"
_ESCAPE_ADVICE = ("; a backslash in a text-format string starts an escape (\\n, \\t, \\\", "
                  "\\\\, \\xHH, \\NNN, \\uXXXX), and the bytes escapes give must be "
                  "UTF-8: write a backslash itself as \\\\")
_NOT_UTF8 = re.compile(r"'utf-8' codec can't decode byte")
_AFTER_STRING = re.compile(r"': Couldn't parse string: ")

#: Characters of the line the parser quotes kept before and after the token it names.
QUOTE_BEFORE, QUOTE_AFTER = 40, 60


def _short_quote(text: str, source: str, line: int | None, column: int | None) -> str:
    """The parser's message ``text`` with the line it quotes (the whole line: a one-line
    body of megabytes came back in full, and its reason was cut off) cut to the part around
    ``column``, so the reason after it always stays."""
    rest = _rest_at(source, line, 1)
    if rest is None or not column:
        return text
    whole = rest.split("\n", 1)[0]
    quoted = f"{line}:{column} : '{whole}': "
    if len(whole) <= QUOTE_BEFORE + QUOTE_AFTER or not text.startswith(quoted):
        return text
    start, end = max(0, column - 1 - QUOTE_BEFORE), column - 1 + QUOTE_AFTER
    excerpt = (("..." if start else "") + whole[start:end]
               + ("..." if end < len(whole) else ""))
    return f"{line}:{column} : '{excerpt}': {text[len(quoted):]}"


def _syntax_advice(text: str, source: str, line: int, column: int) -> str:
    """Advice for a text-format syntax error ``text`` at ``line:column`` (1-based) of
    ``source``: a backslash escape that does not decode, or text that ends early."""
    if source.startswith("\ufeff"):
        return "; the body starts with a byte-order mark (U+FEFF): send the text without it"
    # (the parser's own words come after the line it quotes: not the user's text)
    quoted = re.match(r"\d+:\d+ : '", text)
    reason = text[text.rfind("': ") + 3:] if quoted else text
    if _BAD_ESCAPE.match(reason):  # (the parser's words first, then what it quotes)
        return _ESCAPE_ADVICE
    rest = _rest_at(source, line, column)
    if rest is None:
        return ""
    if reason.startswith("String missing ending quote") and "\n" not in rest.rstrip():
        return "; the text ends inside a string (was it cut off?): a string ends with \""
    # (the parser names the end of the text, or the last token before it: "Expected "}"")
    if not rest.strip() or (text.endswith(('Expected "}".', 'Expected ">".'))
                            and _LAST_TOKEN.fullmatch(rest)):
        return _CUT_OFF
    return ""


def _rest_at(source: str, line: int | None, column: int | None) -> str | None:
    """``source`` from 1-based ``line:column`` on; ``None`` when it has no such line."""
    if not source or not line or not column:
        return None
    start = 0
    for _ in range(line - 1):
        start = source.find("\n", start) + 1
        if start == 0:
            return None
    return source[start + column - 1:]


_LAST_TOKEN = re.compile(
    r"""\s*(?:"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|[\w.+-]+|\S)(?:\s|#[^\n]*)*""")


def _unknown_advice(cls: type[message.Message], type_name: str, name: str,
                    path: str | None) -> str:
    """What to do about the unknown field ``name`` of ``type_name``: the field meant, or
    the level it belongs at (:func:`_misplaced_hint`)."""
    out = f" (a field of {type_name} is misspelt, or the client's schema differs)"
    close, _ = jsonmap.nearest_field(cls, type_name, name)
    if close is not None:
        return out + f"; did you mean {close!r}?"
    return out + _misplaced_hint(cls, type_name, name, path)


def _misplaced_hint(cls: type[message.Message], type_name: str, name: str,
                    path: str | None) -> str:
    """``; ...`` for a text-format field written one level off: a field of a singular
    message field of ``type_name`` (top-level ``inputs`` of a VerifyRequest belongs in
    ``verify { }``), or a top-level field of ``cls`` written inside one of its messages
    (``verify { ys: ... }``); ``""`` when ``name`` is neither. ``path``: where the unknown key
    sits (``""`` at the top level)."""
    try:
        desc = cls.DESCRIPTOR.file.pool.FindMessageTypeByName(type_name)
    except KeyError:
        return ""
    for f in desc.fields:
        if (f.message_type is not None and not f.is_repeated
                and name in f.message_type.fields_by_name):
            inner = f.message_type.fields_by_name[name]
            value = "{ ... }" if inner.message_type is not None else ": ..."
            return (f"; {name} is a field of {f.message_type.name}: in text format and binary "
                    f"it sits inside {f.name} {{ }}, e.g. {f.name} {{ {name} {value} }}")
    top = cls.DESCRIPTOR
    if path and "." not in path and "[" not in path and name in top.fields_by_name:
        return (f"; {name} is a field of {top.name} itself: move it out of {path} {{ }} to the "
                "top level")
    return ""


#: How a top-level message field of a request is written in text format.
_TEXT_EXAMPLES = {
    "ys": 'ys { blob: "y" } for each y (an all-ones seed), or '
          'ys { blob: "y" gradient { dense: "y_grad" } }',
    "g_output": 'g_output { dense: "y_grad" } for each output of the op, in order '
                "(g_output { } for an output without a gradient)",
    "gradient": 'gradient { dense: "y_grad" } (or gradient { slice { indices: "i" values: '
                '"v" } })',
}


def _scalar_for_message(text: str, cls: type[message.Message], line: int, column: int,
                        top: bool = True) -> tuple[str | None, str]:
    """The message field given a bare value at ``line:column`` (the parser expected ``{``),
    e.g. ``ys: "y"``, and how to write it instead: a top-level field of ``cls`` (``top``), or
    deeper down one of :data:`_TEXT_EXAMPLES` (``ys { gradient: "g" }``)."""
    lines = text.split("\n")
    before = lines[line - 1][:column - 1] if 0 < line <= len(lines) else ""
    m = re.search(r"(\w+)\s*:?\s*\[?\s*\Z", before)  # (also the list form, ys: ["y"])
    if m is not None and not top:
        return (m[1], _TEXT_EXAMPLES[m[1]]) if m[1] in _TEXT_EXAMPLES else (None, "")
    f = cls.DESCRIPTOR.fields_by_name.get(m[1]) if m else None
    if f is None or f.message_type is None:
        return None, ""
    return f.name, _TEXT_EXAMPLES.get(f.name, f"{f.name} {{ ... }} ({f.message_type.name})")


@dataclass
class _Unknown:
    """A field name its message type does not have, at 1-based ``line:column``."""

    line: int
    column: int
    type_name: str
    name: str
    path: str  # of the message holding it ("" at the top level)
    op: list[Any] | None  # the innermost OperatorDef's frame (index at [3], type at [4])


@dataclass
class _Walk:
    """What :func:`_walk` found: where the problem stands, and the unknown fields."""

    path: str | None = None
    op: list[Any] | None = None
    reached: bool = False
    exhausted: bool = False  # (it read MAX_LOCATE_TOKENS tokens and gave up)
    scalar: str | None = None  # the scalar field whose value stands there (``input[1]``)
    before: str | None = None  # the scalar field of the value read last before it
    unknown: list[_Unknown] = field(default_factory=list)

    def place(self) -> tuple[str | None, int | None, str | None]:
        """``(path, op index, op type)`` of the problem; all ``None`` if not reached."""
        if not self.reached:
            return None, None, None
        if self.op is None:
            return self.path, None, None
        return self.path, self.op[3], self.op[4]


def _walk(text: str, cls: type[message.Message], at: tuple[int, int], collect: bool
          ) -> _Walk:
    """Read protobuf's tokens of a text-format ``cls``, keeping the open messages: for each,
    its field (the descriptor says whether it repeats) and, for an OperatorDef, its index and
    ``type``. Records the path and innermost op at ``at`` (1-based ``line:column``, as
    :class:`text_format.ParseError` gives it) and, with ``collect``, each unknown field name.

    The walk goes on past ``at`` while the op there has not given its ``type`` yet, and with
    ``collect`` to the end, up to :data:`MAX_LOCATE_TOKENS` tokens in all; it ends early at a
    token the tokenizer refuses (what was found before it stays).
    """
    # Frames: [descriptor (None inside an unknown field's message), its path segment
    # (``op[1]``; None: none of its own), counts of repeated fields seen, op index or None,
    # op type or None, the field of an open ``[...]`` list, the innermost op frame at or
    # above it]. (Segments, not whole paths: a deep text costs linear memory; review, stop 32)
    frames: list[list[Any]] = [[cls.DESCRIPTOR, None, {}, None, None, None, None]]
    out = _Walk()
    op_depth = 0  # where out.op stands in frames
    where = (at[0] - 1, at[1] - 1)
    tok = text_format.Tokenizer(text.split("\n"))  # (lines as text_format.Parse splits them)
    pending: Any = None  # the field named by the last identifier, awaiting its value
    last_ident = ""
    value_next = False  # the next token is a value (after ":"), not a field name
    last_value: str | None = None  # the field segment of the last value read (``input[0]``)
    try:
        for _ in range(MAX_LOCATE_TOKENS):
            if tok.AtEnd():
                break
            # (the tokenizer's position is private: a protobuf without it ends the walk)
            here = (tok._line, tok._column)  # type: ignore[attr-defined]
            if not out.reached and here >= where:
                out.reached = True
                out.path = _path(frames)
                out.op = frames[-1][6]
                op_depth = next((k for k in range(len(frames) - 1, -1, -1)
                                 if frames[k] is out.op), 0)
                value = pending if pending is not None else frames[-1][5]
                if (frames[-1][0] is not None and tok.token not in _PUNCTUATION
                        and (value_next or frames[-1][5] is not None)):
                    out.scalar = _segment(value, frames[-1][2])
                out.before = last_value
            if (out.reached and (not collect or len(out.unknown) >= jsonwalk.MAX_LISTED)
                    and (out.op is None or out.op[4] is not None
                         or op_depth >= len(frames) or frames[op_depth] is not out.op)):
                break
            t = tok.token
            desc, counts = frames[-1][0], frames[-1][2]
            in_list = frames[-1][5]
            fld = pending if pending is not None else in_list
            if fld is _UNKNOWN_LIST:
                fld = None
            if t in ("{", "<"):
                if len(frames) >= MAX_LOCATE_DEPTH:
                    return _Walk() if not out.reached else out
                if desc is not None and fld is not None and fld.message_type is not None:
                    name = fld.name
                    segment = name
                    index = None
                    if fld.is_repeated:
                        index = counts.get(name, 0)
                        counts[name] = index + 1
                        segment = f"{name}[{index}]"
                    is_op = fld.message_type.full_name == _OP
                    # (a single op, OpGradientRequest.op, is op 0, as the engine names it)
                    frame = [fld.message_type, segment, {},
                             (0 if index is None else index) if is_op else None,
                             None, None, frames[-1][6]]
                    if is_op:
                        frame[6] = frame
                    frames.append(frame)
                else:  # (the message of an unknown field: skipped whole)
                    frames.append([None, None, {}, None, None, None, frames[-1][6]])
                pending, value_next = None, False
            elif t in ("}", ">"):
                if len(frames) > 1:
                    frames.pop()
                pending, value_next = None, False
            elif t == ":":
                value_next = True
            elif t in (",", ";", "[", "]"):
                if t == "[":
                    frames[-1][5] = pending if pending is not None else _UNKNOWN_LIST
                elif t == "]":
                    frames[-1][5] = pending = None
                    value_next = False
                elif in_list is None:
                    value_next = False
            elif desc is None:
                pass
            elif t[:1] in ('"', "'"):
                last_value = _segment(fld, counts)
                if last_ident == "type" and desc.full_name == _OP and frames[-1][4] is None:
                    try:  # (a bad string: no type, but keep the location)
                        frames[-1][4] = text_format.Tokenizer([t]).ConsumeString()
                    except text_format.ParseError:
                        pass
                _count(fld, counts)
                if in_list is None:
                    pending, value_next = None, False
            elif value_next or in_list is not None:  # (an enum, bool or number value)
                last_value = _segment(fld, counts)
                _count(fld, counts)
                if in_list is None:
                    pending, value_next = None, False
            else:
                f = desc.fields_by_name.get(t)
                if f is not None:
                    pending, last_ident = f, t
                else:
                    pending, last_ident = None, ""
                    if collect and len(out.unknown) < jsonwalk.MAX_LISTED and t[:1].isalpha():
                        out.unknown.append(_Unknown(here[0] + 1, here[1] + 1, desc.full_name,
                                                    t, _path(frames), frames[-1][6]))
            tok.NextToken()
        else:
            out.exhausted = True
    except (text_format.ParseError, AttributeError, ValueError):
        pass
    return out


_PUNCTUATION = frozenset(("{", "<", "}", ">", ":", ",", ";", "[", "]"))


def _segment(fld: Any, counts: dict[str, int]) -> str | None:
    """The path segment of the next value of the scalar field ``fld`` (``input[2]``, or
    ``name``); ``None`` for no known scalar field."""
    if fld is None or fld is _UNKNOWN_LIST or fld.message_type is not None:
        return None
    return f"{fld.name}[{counts.get(fld.name, 0)}]" if fld.is_repeated else fld.name


def _count(fld: Any, counts: dict[str, int]) -> None:
    """Count one value of the repeated scalar field ``fld`` (its index in a field path)."""
    if fld is not None and fld.is_repeated and fld.message_type is None:
        counts[fld.name] = counts.get(fld.name, 0) + 1


def _path(frames: list[list[Any]]) -> str:
    """The field path of the innermost frame of :func:`_walk` (``""`` at the top level)."""
    return ".".join(f[1] for f in frames if f[1] is not None)


#: The open ``[...]`` list of an unknown field (its values are skipped).
_UNKNOWN_LIST = object()
