"""The fast JSON path gives json_format's own answer, or none (``core.proto.jsonfast``).

Differential: random Caffe2 messages, and random near-misses of their JSON form (wrong
types, edge numbers, nulls, lowerCamelCase and unknown keys, both spellings of a key), go
through :mod:`core.proto.jsonfast` and through ``json_format`` (the reference of
:mod:`core.proto.jsonmap`). Whenever the fast path answers, the reference must answer the
same: an equal message when reading, the same dict (keys, order, types) when printing.
Where the reference refuses, the fast path must have given up. Seeds are fixed
(``derandomize``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api_schemas import caffe2_pb2
from core.errors import DecodeError
from core.proto import codec, jsonfast, jsonmap

_FD = descriptor.FieldDescriptor
REALNETS = Path(__file__).resolve().parents[3] / "shared" / "realnets"
SETTINGS = settings(max_examples=400, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_INTS = {
    _FD.CPPTYPE_INT32: (-(2**31), 2**31 - 1), _FD.CPPTYPE_UINT32: (0, 2**32 - 1),
    _FD.CPPTYPE_INT64: (-(2**63), 2**63 - 1), _FD.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_EDGE_FLOATS = [0.0, -0.0, 1.0, 0.1, 1e-45, 1.5e-39, 3.4028234663852886e38, 1e300, -2.5,
                float("inf"), float("-inf"), float("nan")]
#: Values a client might put anywhere (the near-misses).
_ODD_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 7, 2**31, 2**32, 2**63, -(2**63) - 1, 2**64, 10**400,
    1.0, 1.5, -0.0, 3.5e38, 1e39, float("nan"), float("inf"), "7", "-7", "007", "7_0", " 7",
    "+7", "1e3", "7.0", "0x7", "NaN", "Infinity", "-Infinity", "nan", "1.5", "", "abc", "é",
    "\ud800", "\u0661", "NCHW", "true", [], {}, [None], [1, "a"], ["7", 8], [True], [1.5],
    [1, 2], ["a", "b"], [{}], [[]], {"x": 1}, {"name": "x"}, [{"name": "a", "i": 1}],
]


def _scalar(f: Any, draw: Any) -> Any:
    cpp = f.cpp_type
    if cpp in _INTS:
        lo, hi = _INTS[cpp]
        return draw(st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0])))
    if cpp == _FD.CPPTYPE_FLOAT:
        return draw(st.one_of(st.floats(width=32), st.sampled_from(_EDGE_FLOATS[:6])))
    if cpp == _FD.CPPTYPE_DOUBLE:
        return draw(st.one_of(st.floats(), st.sampled_from(_EDGE_FLOATS)))
    if cpp == _FD.CPPTYPE_BOOL:
        return draw(st.booleans())
    if cpp == _FD.CPPTYPE_ENUM:
        return draw(st.sampled_from([v.number for v in f.enum_type.values]))
    if f.type == _FD.TYPE_BYTES:
        if f.name in ("s", "strings"):  # text fields: blob names (UTF-8)
            return draw(st.text(max_size=6)).encode("utf-8", "surrogatepass") if draw(
                st.booleans()) else draw(st.sampled_from([b"NCHW", b"", "é".encode()]))
        return draw(st.binary(max_size=6))
    return draw(st.text(max_size=6).filter(lambda t: not any(
        0xD800 <= ord(c) <= 0xDFFF for c in t)))


def _fill(msg: Any, draw: Any, depth: int) -> None:
    for f in msg.DESCRIPTOR.fields:
        if not draw(st.booleans()):
            continue
        if f.cpp_type == _FD.CPPTYPE_MESSAGE:
            if depth >= 3 and f.message_type.full_name in ("caffe2.NetDef", "caffe2.OperatorDef",
                                                           "caffe2.Argument"):
                continue
            if depth >= 5:
                continue
            if f.is_repeated:
                for _ in range(draw(st.integers(0, 2))):
                    _fill(getattr(msg, f.name).add(), draw, depth + 1)
            else:
                _fill(getattr(msg, f.name), draw, depth + 1)
                getattr(msg, f.name).SetInParent()
        elif f.is_repeated:
            getattr(msg, f.name).extend(_scalar(f, draw) for _ in range(draw(st.integers(0, 3))))
        else:
            setattr(msg, f.name, _scalar(f, draw))


_TYPES = [caffe2_pb2.NetDef, caffe2_pb2.OperatorDef, caffe2_pb2.Argument,
          caffe2_pb2.DeviceOption, caffe2_pb2.TensorProto]


@st.composite
def messages(draw: Any) -> Any:
    msg = draw(st.sampled_from(_TYPES))()
    _fill(msg, draw, 0)
    return msg


def _reference_print(msg: Any) -> Any:
    try:
        return jsonmap.reference_to_json(msg)
    except DecodeError:
        return DecodeError


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)  # key order and int/float types matter


def _check_print(msg: Any) -> None:
    ref = _reference_print(msg)
    try:
        fast = jsonfast.to_json(msg)
    except jsonfast.Fallback:
        return
    assert ref is not DecodeError, "fast printer answered where json_format's path refuses"
    assert _dump(fast) == _dump(ref)
    assert _dump(jsonfast.to_json(msg, {})) == _dump(ref)  # shared argument dicts: same text


def _same(a: Any, b: Any) -> bool:
    return bool(a.SerializePartialToString(deterministic=True)
                == b.SerializePartialToString(deterministic=True))


def _check_read(obj: Any, cls: Any) -> None:
    try:
        fast = jsonfast.from_json(obj, cls)
    except jsonfast.Fallback:
        fast = None
    try:
        ref = jsonmap.reference_from_json(obj, cls)
    except DecodeError as exc:
        assert fast is None, f"fast reader accepted what json_format refuses: {exc.message}"
        return
    if fast is not None:
        assert _same(fast, ref), (fast, ref)
    # The public entry point answers like the reference either way.
    assert _same(jsonmap.from_json(obj, cls), ref)


@SETTINGS
@given(messages())
def test_printing_matches_json_format(msg: Any) -> None:
    _check_print(msg)


@SETTINGS
@given(messages(), st.booleans())
def test_reading_printed_messages_matches_json_format(msg: Any, camel: bool) -> None:
    ref = _reference_print(msg)
    if ref is DecodeError:
        return
    obj = _camel(ref, msg.DESCRIPTOR) if camel else ref
    _check_read(obj, type(msg))


def _camel(obj: Any, desc: Any) -> Any:
    if not isinstance(obj, dict):
        return obj
    out = {}
    for key, value in obj.items():
        f = desc.fields_by_name[key]
        sub = f.message_type
        if sub is not None:
            value = [_camel(v, sub) for v in value] if f.is_repeated else _camel(value, sub)
        out[f.json_name] = value
    return out


def _paths(obj: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*here, k))
    elif isinstance(obj, list):
        for k, v in enumerate(obj):
            out += _paths(v, (*here, k))
    return out


def _replace(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        out = dict(obj)
    else:
        out = list(obj)
    out[head] = _replace(obj[head], rest, value)
    return out


@SETTINGS
@given(messages(), st.data())
def test_near_miss_json_is_read_as_json_format_reads_it(msg: Any, data: Any) -> None:
    ref = _reference_print(msg)
    if ref is DecodeError:
        return
    obj: Any = ref
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(obj)))
        how = data.draw(st.sampled_from(["value", "value", "camel", "unknown", "alias"]))
        target = obj
        for step in path:
            target = target[step]
        if how == "value" or not isinstance(target, dict) or not target:
            obj = _replace(obj, path, data.draw(st.sampled_from(_ODD_VALUES)))
            continue
        key = data.draw(st.sampled_from(sorted(target)))
        twin = dict(target)
        if how == "unknown":
            twin["no_such_field"] = 1
        else:
            camel = "".join(p if i == 0 else p[:1].upper() + p[1:]
                            for i, p in enumerate(key.split("_")))
            if how == "camel":
                twin[camel] = twin.pop(key)
            else:
                twin[camel if camel != key else key.upper()] = twin[key]
        obj = _replace(obj, path, twin)
    _check_read(obj, type(msg))


def test_the_fast_paths_answer_the_common_net() -> None:
    """A typical net is read and printed without json_format (else there is no speed-up)."""
    net = caffe2_pb2.NetDef(name="n", external_input=["x", "w"], external_output=["y"])
    op = net.op.add(type="Conv", input=["x", "w"], output=["y"], name="", engine="")
    op.arg.add(name="kernel", i=3)
    op.arg.add(name="order", s=b"NCHW")
    op.arg.add(name="scale", f=0.5)
    op.arg.add(name="shape", ints=[1, 2])
    op.device_option.SetInParent()
    printed = jsonfast.to_json(net)  # no Fallback
    assert printed["op"][0]["arg"][0] == {"name": "kernel", "i": "3"}
    assert printed == jsonmap.reference_to_json(net)
    back = jsonfast.from_json(printed, caffe2_pb2.NetDef)
    assert _same(back, net)
    loose = json.loads(json.dumps(printed).replace('"3"', "3").replace("external_input",
                                                                        "externalInput"))
    assert _same(jsonfast.from_json(loose, caffe2_pb2.NetDef), net)


@pytest.mark.parametrize("value", [True, 3.0, "3 ", "3_0", "+3", "1e3", float("nan")])
def test_doubtful_integers_go_to_json_format(value: Any) -> None:
    obj = {"name": "k", "i": value}
    with pytest.raises(jsonfast.Fallback):
        jsonfast.from_json(obj, caffe2_pb2.Argument)
    _check_read(obj, caffe2_pb2.Argument)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e39, "0.5", "NaN", None])
def test_doubtful_floats_go_to_json_format(value: Any) -> None:
    obj = {"name": "k", "floats": [0.5, value]}
    with pytest.raises(jsonfast.Fallback):
        jsonfast.from_json(obj, caffe2_pb2.Argument)
    _check_read(obj, caffe2_pb2.Argument)


@pytest.mark.skipif(not REALNETS.is_dir(), reason="../shared/realnets is absent")
@pytest.mark.parametrize("name", sorted(p.name for p in REALNETS.glob("*.pb*"))
                         if REALNETS.is_dir() else [])
def test_real_nets_read_and_print_as_json_format_does(name: str) -> None:
    path = REALNETS / name
    if path.suffix == ".pb":
        net = codec.from_binary(path.read_bytes(), caffe2_pb2.NetDef)
    else:
        net = codec.from_text(path.read_text(), caffe2_pb2.NetDef)
    ref = jsonmap.reference_to_json(net)
    assert _dump(jsonmap.to_json(net, {})) == _dump(ref)
    assert _same(jsonmap.from_json(json.loads(_dump(ref)), caffe2_pb2.NetDef),
                 jsonmap.reference_from_json(json.loads(_dump(ref)), caffe2_pb2.NetDef))


def _reachable(desc: Any, seen: dict[str, Any]) -> dict[str, Any]:
    if desc.full_name not in seen:
        seen[desc.full_name] = desc
        for f in desc.fields:
            if f.message_type is not None:
                _reachable(f.message_type, seen)
    return seen


def test_every_field_with_every_odd_value_is_read_as_json_format_reads_it() -> None:
    """Exhaustive: each field of each message a NetDef can hold, given each odd value (alone,
    in an array, under its lowerCamelCase name), read as json_format reads it."""
    from google.protobuf import message_factory

    checked = 0
    for desc in _reachable(caffe2_pb2.NetDef.DESCRIPTOR, {}).values():
        cls = message_factory.GetMessageClass(desc)
        for f in desc.fields:
            for value in _ODD_VALUES:
                for key in {f.name, f.json_name}:
                    for obj in ({key: value}, {key: [value]}, {key: [value, value]}):
                        _check_read(obj, cls)
                        checked += 1
    assert checked > 5000


def test_both_spellings_of_a_field_are_read_as_json_format_reads_them() -> None:
    """``external_input`` and ``externalInput`` in one object, in both orders and with
    different values: json_format's rules (the later wins; messages merge)."""
    from google.protobuf import message_factory

    pairs = 0
    for desc in _reachable(caffe2_pb2.NetDef.DESCRIPTOR, {}).values():
        cls = message_factory.GetMessageClass(desc)
        for f in desc.fields:
            if f.json_name == f.name:
                continue
            for a, b in ((1, 2), ("a", "b"), ([1], [2]), (["a"], ["b"]), (True, False),
                         ({}, {"name": "x"}), ([{}], [{"name": "x"}])):
                _check_read({f.name: a, f.json_name: b}, cls)
                _check_read({f.json_name: a, f.name: b}, cls)
                pairs += 1
    assert pairs > 50
