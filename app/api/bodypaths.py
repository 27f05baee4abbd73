"""Field paths for problems found before a JSON body is a tree: duplicate keys, bad UTF-8.

The JSON decoder reports a duplicated key without saying in which object, and the UTF-8
decoder reports a byte offset. A user fixes a body faster from ``net.op[3].input[0]`` than
from "byte 1234", so the error path (and only the error path) spends one more look at the
body to name the field. Both helpers are bounded: they never cost more than a C-speed
re-parse of a body the server already accepted in size, or a scan of at most
:data:`MAX_SCAN_CHARS` characters.

Paths are written as the other request problems write them: JSON keys as sent, joined
with ``.``, list positions as ``[i]`` (``net.op[0].arg[1].name``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from google.protobuf import message

from core.proto.jsonmap import op_on_path
from core.proto.textproblems import text_place
from core.types import Diagnostic

#: A body prefix longer than this is not scanned for the path of a bad byte (the problem
#: then names the byte offset only); keeps the refusal of a hostile body cheap.
MAX_SCAN_CHARS = 1 << 17
#: A prefix of more tokens than this names no path either: a body of tiny tokens
#: (``{},{},...``) costs about 1 µs a token to walk (review, stop 32: 115 ms at the bound).
MAX_SCAN_TOKENS = 1 << 15
#: A prefix nested deeper than this names no path (no request nests that deep).
MAX_SCAN_DEPTH = 256
#: Of the text after a bad byte, this much is read for the ``type`` of the op it is in.
MAX_LOOKAHEAD_CHARS = 1 << 14
#: At most this many duplicated keys are listed one by one; the rest are counted.
MAX_LISTED = 50
#: The duplicate-key walk looks at most this many JSON values (a body of a million numbers
#: is not walked to its end; the keys found by then are named).
MAX_VISITS = 200_000


class _Pairs(list[tuple[str, Any]]):
    """A JSON object that gives some key more than once, kept as its key/value pairs."""


def _keep_duplicates(pairs: list[tuple[str, Any]]) -> Any:
    obj = dict(pairs)
    return obj if len(obj) == len(pairs) else _Pairs(pairs)


def duplicate_key_problems(text: str) -> list[Diagnostic]:
    """One problem per key that a JSON object of ``text`` gives twice, in body order.

    Args:
        text: a JSON body that ``json.loads`` parses but whose objects repeat a key.

    Returns:
        Diagnostics with code ``duplicate_key`` and ``path`` the repeated field
        (``net.op[0].type``; a repeated top-level key is its own path, ``ys``), at most
        :data:`MAX_LISTED` of them and then one counting the rest; empty when ``text`` does
        not parse.
    """
    try:
        tree = json.loads(text, object_pairs_hook=_keep_duplicates)
    except (ValueError, RecursionError):
        return []
    found: list[tuple[str, str]] = []
    budget = MAX_VISITS
    # Depth first, in body order: a repeated key is listed where its second copy stands.
    stack: list[Any] = [iter([(tree, "", False)])]
    while stack:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            continue
        node, path, repeated = step
        if repeated is not False:
            found.append((path, repeated))
        if isinstance(node, dict | _Pairs):
            pairs = list(node.items() if isinstance(node, dict) else node)[:budget]
            seen: set[str] = set()
            children = []
            for k, v in pairs:
                children.append((v, f"{path}.{k}" if path else k, k if k in seen else False))
                seen.add(k)
        elif isinstance(node, list):
            children = [(v, f"{path}[{i}]", False) for i, v in enumerate(node[:budget])]
        else:
            continue
        budget -= len(children)
        if budget <= 0:
            break
        stack.append(iter(children))
    paths = list(dict.fromkeys(found))
    out = [
        Diagnostic("error", "duplicate_key",
                   f"{p}: the body gives the key {key!r} twice in one JSON object (a JSON "
                   "parser would keep one value and drop the other); give each field once",
                   path=p)
        for p, key in paths[:MAX_LISTED]
    ]
    if len(paths) > MAX_LISTED:
        out.append(Diagnostic("error", "duplicate_key",
                              f"and {len(paths) - MAX_LISTED} more keys given twice"))
    return out


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*("?)|[{}\[\],:]', re.DOTALL)


def _key(tok: str) -> str:
    """The key a whole JSON string token spells; its raw text where that does not decode,
    or holds a lone surrogate (``"\\ud800"``: no path or field name can hold one)."""
    try:
        key = json.loads(tok)
        key.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return str(tok[1:-1])
    return str(key)


def json_path_at(prefix: str) -> str | None:
    """The field path of the JSON value being read where ``prefix`` ends.

    Args:
        prefix: the start of a JSON body, up to (not including) a byte that is not UTF-8.

    Returns:
        e.g. ``net.op[0].type``; ``None`` when the prefix is longer than
        :data:`MAX_SCAN_CHARS` characters or :data:`MAX_SCAN_TOKENS` tokens, nests deeper
        than :data:`MAX_SCAN_DEPTH` or is not the start of a JSON object (no path to name).
        A bad byte inside a key names the object that holds the key.
    """
    return json_place(prefix)[0]


def json_place(prefix: str, suffix: str = "") -> tuple[str | None, Any]:
    """:func:`json_path_at` of ``prefix``, and a skeleton of the objects and arrays open
    where it ends: each object holds the key on the path and the ``type`` string it gave
    (arrays hold ``None`` before the element on the path), so that
    :func:`core.proto.jsonmap.with_ops` names the op (index, type) that the path is in.
    ``(None, None)`` where :func:`json_path_at` gives ``None``.

    ``suffix``: text read after that point (a bad byte's chunk after the byte; at most
    :data:`MAX_LOOKAHEAD_CHARS` of it is read), where an open object's ``type`` may still come:
    ``{"input": ["x\xff"], "type": "Relu"}`` names its op ``Relu``.
    """
    if len(prefix) > MAX_SCAN_CHARS or not prefix.lstrip().startswith("{"):
        return None, None
    # Each frame: [is_object, key or index, expecting a key, the "type" string of the object
    # (of an array: of its element that has just closed)]
    stack: list[list[Any]] = []
    in_key = False
    in_string = False
    for count, m in enumerate(_TOKEN.finditer(prefix)):
        if count >= MAX_SCAN_TOKENS:
            return None, None
        tok = m.group(0)
        in_string = tok[0] == '"' and not m.group(1)
        if tok[0] == '"':
            top = stack[-1] if stack else None
            if top is not None and top[0] and top[2]:
                if not m.group(1):  # the prefix ends inside this key
                    in_key = True
                    break
                top[1] = _key(tok)
                top[2] = False
            elif top is not None and top[0] and top[1] == "type" and m.group(1):
                try:
                    top[3] = json.loads(tok)
                except ValueError:
                    pass
        elif tok == "{" or tok == "[":
            if len(stack) >= MAX_SCAN_DEPTH:
                return None, None
            stack.append([True, None, True, None] if tok == "{" else [False, 0, False, None])
        elif tok in "}]":
            if stack:
                closed = stack.pop()
                if stack and not stack[-1][0]:  # (an array keeps its element's "type")
                    stack[-1][3] = closed[3] if closed[0] else None
        elif tok == ",":
            if stack:
                top = stack[-1]
                if top[0]:
                    top[1], top[2] = None, True
                else:
                    top[1] += 1
                    top[3] = None
    if suffix:
        _types_after(stack, suffix[:MAX_LOOKAHEAD_CHARS], in_string or in_key, in_key)
    parts: list[str] = []
    for k, (is_obj, at, _, _) in enumerate(stack):
        if is_obj:
            if at is None or (in_key and k == len(stack) - 1):
                stack = stack[:k + 1]
                break
            parts.append(f".{at}" if parts else str(at))
        else:
            parts.append(f"[{at}]")
    path = "".join(parts)
    if not path:
        return None, None
    node: Any = None
    for is_obj, at, _, op_type in reversed(stack):
        if is_obj:
            obj: dict[str, Any] = {} if op_type is None else {"type": op_type}
            if at is not None:
                obj[at] = node
            node = obj
        else:  # (the path ends at an element already closed: the type it gave)
            if node is None and op_type is not None:
                node = {"type": op_type}
            node = [None] * at + [node]
    return path, node


_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


#: Where a problem stands: ``(field path, op index, op type)``, each ``None`` when not known.
Place = tuple[str | None, int | None, str | None]
_NOWHERE: Place = (None, None, None)


def _op_place(path: str | None, skeleton: Any, cls: type[message.Message] | None) -> Place:
    """``path`` with the op that :func:`json_place`'s ``skeleton`` shows it is in."""
    if path is None:
        return _NOWHERE
    found = op_on_path(path, skeleton, cls) if cls is not None else None
    return (path, *found) if found is not None else (path, None, None)


def bad_byte_place(before: str, exc: UnicodeDecodeError, cls: type[message.Message] | None,
                   text_format: bool = False) -> Place:
    """Where a byte that is not UTF-8 stands in a JSON (or, ``text_format``, a protobuf
    text-format) body of message ``cls``: its field path and op.

    Args:
        before: the body's text decoded before ``exc.object`` (earlier chunks).
        exc: the decoder's error; ``exc.object[exc.start]`` is the bad byte, and up to
            ``4 * MAX_LOOKAHEAD_CHARS`` bytes after it are read for the op's ``type``.
        cls: the request message (``None``: the path only, of JSON).

    Returns:
        :data:`Place`; all ``None`` past :data:`MAX_SCAN_CHARS` characters (a hostile body
        stays cheap to refuse), or where no field holds the byte.
    """
    if len(before) + exc.start > MAX_SCAN_CHARS:
        return _NOWHERE
    head = before + bytes(exc.object[:exc.start]).decode("utf-8", "replace")
    tail = bytes(exc.object[exc.end:exc.end + 4 * MAX_LOOKAHEAD_CHARS]).decode("utf-8", "replace")
    if text_format:
        place = text_place(head, tail, cls) if cls is not None else _NOWHERE
        return place if place[0] is not None else _NOWHERE
    return _op_place(*json_place(head, tail), cls)


def syntax_place(text: str, exc: json.JSONDecodeError, cls: type[message.Message]
                 ) -> tuple[Place, str]:
    """Where a JSON syntax error stands in a body of message ``cls``, and what to do about it.

    Args:
        text: the body ``json.loads`` refused.
        exc: its error (``exc.pos``: the character it stopped at).

    Returns:
        ``(place, advice)``: the :data:`Place` of :func:`json_place` of the text before
        ``exc.pos`` (the text after it read for the op's ``type``; all ``None`` past
        :data:`MAX_SCAN_CHARS`, or outside any field), and advice for the common slips
        (``""`` when there is none to give, or past the bound): a raw control character in
        a string, a backslash that starts no escape, single quotes, a trailing comma
        (placed at the comma: the item it promises does not exist), Python's
        ``True``/``None``, a byte-order mark, a cut-off body, a file name.
    """
    pos = exc.pos
    if pos > MAX_SCAN_CHARS:
        return _NOWHERE, ""
    advice = _syntax_advice(text, exc)
    if advice.startswith("; remove the comma"):
        pos = text.rindex(",", 0, pos)
    path, skeleton = json_place(text[:pos], text[pos:pos + MAX_LOOKAHEAD_CHARS])
    return _op_place(path, skeleton, cls), advice


def _syntax_advice(text: str, exc: json.JSONDecodeError) -> str:
    pos = exc.pos
    ch = text[pos] if pos < len(text) else ""
    before = text[max(0, pos - 64):pos].rstrip()
    if exc.msg.startswith("Unexpected UTF-8 BOM"):
        return "; the body starts with a byte-order mark (U+FEFF): send the JSON without it"
    if exc.msg.startswith("Invalid control character"):
        if ch in ("\n", "\r"):
            return ('; a line break stands inside a string: is the string before it missing '
                    f'its closing "? (JSON writes a line break in a name as {_ESCAPES[ch]})')
        escaped = _ESCAPES.get(ch, f"\\u{ord(ch):04x}") if ch else ""
        return (f"; a raw control character (U+{ord(ch):04X}) stands inside a string: JSON "
                f"writes it as the escape {escaped}" if ch else "")
    if exc.msg.startswith("Invalid \\uXXXX"):
        return "; \\u takes exactly four hex digits (\\u00e9)"
    if exc.msg.startswith("Invalid \\escape"):
        return ("; a backslash in a JSON string starts an escape (\\\", \\\\, \\/, \\n, \\t, "
                "\\uXXXX): write a backslash itself as \\\\")
    if exc.msg.startswith("Unterminated string"):  # (json stops there only at the end)
        return ('; the body ends inside a string (was it cut off?): a string ends with "')
    if not text[pos:].strip():
        return "; the body ends before its last object or array is closed (was it cut off?)"
    if ch == "'":
        return "; JSON strings and keys take double quotes (\"), not single ones"
    if text[pos:pos + 2] in ("//", "/*"):
        return "; JSON has no comments: remove the /* ... */ or // ... text"
    if pos == len(text) - len(text.lstrip()) and (
            (ch in "/@." and "\n" not in text.strip()) or _FILE_NAME.fullmatch(text)):
        return ("; the body looks like a file name: to send a file's contents, use curl "
                "--data-binary @FILE")
    if before.endswith(",") and ch and ch in "]}":
        return f"; remove the comma before {ch!r}: JSON allows none after the last item"
    if exc.msg.startswith("Expecting property name") and (ch.isalpha() or ch == "_"):
        key = re.match(r"\w+", text[pos:pos + 64])
        return f'; JSON keys take double quotes: "{key[0] if key else ch}"'
    if exc.msg.startswith("Expecting ',' delimiter") and ch == '"':
        return "; a comma is missing before this string"
    if exc.msg.startswith("Expecting ':' delimiter"):
        return "; a colon is missing after the key: \"key\": value"
    word = re.match(r"[A-Za-z_]\w*", text[pos:pos + 16])
    if word and word[0] in ("True", "False", "None"):
        return f"; JSON writes {word[0]} as {_JSON_WORDS[word[0]]}"
    return ""


#: A body that is one file name, such as ``do.json`` or ``C:\\nets\\x.pbtxt``.
_FILE_NAME = re.compile(r"\s*[\w.~/\\:@-]+\.(?:json|pbtxt|prototxt|txt|pb)\s*", re.IGNORECASE)
_JSON_WORDS = {"True": "true", "False": "false", "None": "null"}


_STRING_END = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)


def _types_after(stack: list[list[Any]], suffix: str, in_string: bool,
                 in_key: bool = False) -> None:
    """Fill the ``type`` of each open object of ``stack`` (:func:`json_place`'s frames)
    that gives ``"type": "<string>"`` in ``suffix``, the text after the prefix (``in_string``:
    the prefix ends inside a string; ``in_key``: that string is a key, whose value comes
    next). Objects and arrays opened in ``suffix`` are skipped whole; the scan ends when the
    outermost frame closes or the text does."""
    if not stack:  # (no object open: no type to find)
        return
    pos = 0
    if in_string:
        m = _STRING_END.match(suffix)
        if m is None:
            return
        pos = m.end()
    level = len(stack)  # frames of stack still open
    inner = 0  # containers opened in suffix and not yet closed
    # The last key of the open frame, while its value is awaited (a key cut by the bad byte
    # is no "type" key, but its value is a value).
    key: str | None = "" if in_key else None
    after_colon = False
    for m in _TOKEN.finditer(suffix, pos):
        tok = m.group(0)
        if inner:
            if tok == "{" or tok == "[":
                inner += 1
            elif tok == "}" or tok == "]":
                inner -= 1
            continue
        if tok == "{" or tok == "[":
            inner, key, after_colon = 1, None, False
        elif tok == "}" or tok == "]":
            level -= 1
            key, after_colon = None, False
            if level == 0:
                return
        elif tok == ":":
            after_colon = key is not None
        elif tok == ",":
            key, after_colon = None, False
        elif m.group(1):  # a whole string: a key, or the value after one
            frame = stack[level - 1]
            if after_colon:
                if key == "type" and frame[0] and frame[3] is None:
                    try:
                        frame[3] = json.loads(tok)
                    except ValueError:
                        pass
                key, after_colon = None, False
            elif frame[0]:
                key = _key(tok)
        else:  # (the text ends inside a string)
            return


#: A ``\\u`` escape of a UTF-16 surrogate: the only way a lone surrogate gets into a body
#: that decoded as UTF-8 (a pair spells one character and is fine).
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def lone_surrogate_problems(tree: Any) -> list[Diagnostic]:
    """One problem per string value of a parsed JSON body that holds a lone UTF-16
    surrogate, such as ``"\\ud800"``: no protobuf string can hold it. (Keys are not
    looked at: no field is named so, and the field check names an unknown key.)

    Only called when the body's text matches :data:`SURROGATE_ESCAPE` (a C-speed search),
    so a body without such an escape is not walked.

    Returns:
        Diagnostics with code ``invalid_utf8`` and the field path (``net.op[0].input[0]``),
        in body order, at most :data:`MAX_LISTED`.
    """
    out: list[Diagnostic] = []
    stack: list[Any] = [iter([(tree, "")])]
    while stack and len(out) < MAX_LISTED:
        step = next(stack[-1], None)
        if step is None:
            stack.pop()
            continue
        node, path = step
        if isinstance(node, str):
            if not _encodes(node):
                out.append(_surrogate(path, node))
        elif isinstance(node, dict):
            children = []
            for k, v in node.items():  # (a key is a field name: an unknown one is named
                children.append((v, f"{path}.{k}" if path else k))  # as unknown, later)
            stack.append(iter(children))
        elif isinstance(node, list):
            stack.append(iter([(v, f"{path}[{i}]") for i, v in enumerate(node)]))
    return out


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate(path: str, text: str) -> Diagnostic:
    at = next(i for i, ch in enumerate(text) if 0xD800 <= ord(ch) <= 0xDFFF)
    return Diagnostic(
        "error", "invalid_utf8",
        f"{path}: the string holds a lone UTF-16 surrogate (\\u{ord(text[at]):04x} at "
        f"character {at}), which is not text; a \\u escape of a surrogate must be one of a "
        "pair that spells one character (\\ud83d\\ude00), or send the character as UTF-8",
        path=path)


def undecodable_text_paths(msg: Any) -> list[str]:
    """Paths of the ``Argument.s`` / ``strings`` values in ``msg`` that are not UTF-8.

    Proto field names, ``[i]`` for list positions (``grad_ops[0].arg[1].s``,
    ``net.op[2].arg[0].strings[1]``), in field order; on the error path only.
    """
    from api_schemas import TEXT_BYTES_FIELDS

    out: list[str] = []
    stack: list[tuple[Any, str]] = [(msg, "")]
    while stack:
        node, path = stack.pop()
        found: list[tuple[Any, str]] = []
        for field, value in node.ListFields():
            here = f"{path}.{field.name}" if path else field.name
            repeated = field.is_repeated
            if (node.DESCRIPTOR.full_name, field.name) in TEXT_BYTES_FIELDS:
                for i, b in enumerate(value if repeated else [value]):
                    try:
                        b.decode("utf-8")
                    except UnicodeDecodeError:
                        out.append(f"{here}[{i}]" if repeated else here)
            elif field.message_type is not None and not field.message_type.GetOptions(
                    ).map_entry:
                items = list(enumerate(value)) if repeated else [(None, value)]
                found.extend((v, here if i is None else f"{here}[{i}]") for i, v in items)
        stack.extend(reversed(found))
    return out
