"""The wire codec, one test (or a few) per rule of spec/codec.md, named after the rule."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from askgate.core import messages
from askgate.core.codec import (
    MAX_BYTES,
    MAX_DEPTH,
    Decoded,
    EncodeError,
    ErrorResponse,
    Invalid,
    Notification,
    Request,
    Response,
    decode,
    encode,
)
from askgate.core.messages import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR

TOOLS_CALL = (
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call",'
    b'"params":{"name":"delete_file","arguments":{"path":"/tmp/a"}}}'
)


def wire(value: object) -> bytes:
    """JSON text of ``value`` as a peer would send it (stdlib, compact)."""
    return json.dumps(value, separators=(",", ":")).encode()


def request_with(**members: object) -> bytes:
    return wire({"jsonrpc": "2.0", **members})


def assert_error(decoded: Decoded, code: int, request_id: object) -> None:
    """``decoded`` is an Invalid whose reply is the error ``code`` for exactly ``request_id``."""
    assert isinstance(decoded, Invalid)
    reply = decoded.reply
    assert reply is not None
    assert set(reply) == {"jsonrpc", "id", "error"}
    assert reply["jsonrpc"] == "2.0"
    assert reply["error"]["code"] == code
    assert isinstance(reply["error"]["message"], str)
    assert reply["id"] == request_id
    assert type(reply["id"]) is type(request_id)  # 99 stays 99, never 99.0 or "99"


def assert_dropped(decoded: Decoded) -> None:
    assert isinstance(decoded, Invalid)
    assert decoded.reply is None
    assert decoded.reason


def nested(depth: int) -> bytes:
    """A request whose whole message nests exactly ``depth`` deep (the message is depth 1)."""
    assert depth >= 3
    inner = depth - 2  # the message and params take two levels
    chain = b"[" * (inner // 2) + b'{"k":' * (inner - inner // 2) + b"0"
    chain += b"}" * (inner - inner // 2) + b"]" * (inner // 2)
    return b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":' + chain + b"}}"


# --- R-WIRE-1 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            TOOLS_CALL,
            Request(7, "tools/call", {"name": "delete_file", "arguments": {"path": "/tmp/a"}}),
        ),
        (b'{"jsonrpc":"2.0","id":"a-1","method":"ping"}', Request("a-1", "ping", None)),
        (b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{}}', Request(3, "ping", {})),
        (
            b'{"method":"notifications/initialized","jsonrpc":"2.0"}',
            Notification("notifications/initialized", None),
        ),
        (
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":0}}',
            Notification("notifications/cancelled", {"requestId": 0}),
        ),
        (
            b'{"jsonrpc":"2.0","id":"askgate-elicit-x","result":{"action":"accept"}}',
            Response("askgate-elicit-x", {"action": "accept"}),
        ),
        (b'{"jsonrpc":"2.0","id":5,"result":null}', Response(5, None)),
        (
            b'{"jsonrpc":"2.0","id":"e","error":{"code":-32602,"message":"no"}}',
            ErrorResponse("e", {"code": -32602, "message": "no"}),
        ),
        # members the protocol does not name are ignored
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","x-trace":[1]}', Request(1, "ping", None)),
        # whitespace around the value, and a CR left by a CRLF line, are allowed
        (b' \t{"jsonrpc":"2.0","id":1,"method":"ping"} \r', Request(1, "ping", None)),
        # non-ASCII, raw and escaped, decodes to the same text
        (
            '{"jsonrpc":"2.0","id":1,"method":"m","params":{"t":"é😀\\u00e9\\ud83d\\ude00"}}'.encode(),
            Request(1, "m", {"t": "é😀é😀"}),
        ),
    ],
)
def test_R_WIRE_1_well_formed_messages_decode_to_one_of_four_shapes(
    data: bytes, expected: Decoded
) -> None:
    assert decode(data) == expected


def test_R_WIRE_1_an_id_keeps_its_type() -> None:
    as_int = decode(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    as_str = decode(b'{"jsonrpc":"2.0","id":"1","method":"ping"}')
    assert isinstance(as_int, Request)
    assert isinstance(as_str, Request)
    assert type(as_int.id) is int
    assert type(as_str.id) is str
    assert as_int != as_str


# --- R-WIRE-2 -----------------------------------------------------------------------------------


def padded_to(size: int) -> bytes:
    """A valid tools/call message of exactly ``size`` bytes (the padding is in a string)."""
    head = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","pad":"'
    tail = b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


@pytest.mark.parametrize("cap", [200, MAX_BYTES])
def test_R_WIRE_2_exactly_the_cap_is_parsed_one_byte_more_is_refused(cap: int) -> None:
    at_cap = padded_to(cap)
    assert len(at_cap) == cap
    assert isinstance(decode(at_cap, max_bytes=cap), Request)
    over = padded_to(cap + 1)
    result = decode(over, max_bytes=cap)
    assert_error(result, PARSE_ERROR, None)
    assert isinstance(result, Invalid)
    assert result.reason == "message over the byte cap"


def test_R_WIRE_2_the_default_cap_is_4_MiB() -> None:
    assert MAX_BYTES == 4 * 1024 * 1024
    assert isinstance(decode(padded_to(MAX_BYTES)), Request)
    assert_error(decode(padded_to(MAX_BYTES + 1)), PARSE_ERROR, None)


def test_R_WIRE_2_the_cap_is_checked_before_parsing() -> None:
    # Garbage and a depth bomb over the cap are refused for their size, not for their content.
    for data in (b"\xff" * 101, b"[" * 101, b" " * 101, b"x" * 10_000_000):
        result = decode(data, max_bytes=100)
        assert_error(result, PARSE_ERROR, None)
        assert isinstance(result, Invalid)
        assert result.reason == "message over the byte cap"


# --- R-WIRE-3 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"hello",
        b"",
        b"   ",
        b"\r",
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"\xff"}}',  # invalid UTF-8
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"\xed\xa0\x80"}}',  # encoded surrogate
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"\xc0\x80"}}',  # overlong NUL
        b"\xef\xbb\xbf" + TOOLS_CALL,  # a BOM
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"a\x01b"}}',  # raw control character
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"a\x00b"}}',  # raw NUL
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"a\nb"}}',  # raw newline in a string
        TOOLS_CALL + TOOLS_CALL,  # two objects on one line
        TOOLS_CALL + b"x",
        TOOLS_CALL + b"\x00garbage",  # rapidjson stops reading at a NUL: the rest must not hide
        TOOLS_CALL + b"\x00",
        b'{"jsonrpc":"2.0","id":1,"method":"ping"} // comment',
        b'{"jsonrpc":"2.0","id":1,"method":"ping",}',  # trailing comma
        b"{'jsonrpc':'2.0','id':1,'method':'ping'}",
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"\\ud800"}}',  # escaped lone surrogate
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"\\x41"}}',  # not a JSON escape
        TOOLS_CALL[:-1],  # truncated
    ],
)
def test_R_WIRE_3_anything_but_one_strict_json_text_is_a_parse_error(data: bytes) -> None:
    assert_error(decode(data), PARSE_ERROR, None)


def test_R_WIRE_3_the_next_message_is_unaffected_by_a_bad_one() -> None:
    assert_error(decode(b'{"a":"\xff"}'), PARSE_ERROR, None)
    assert isinstance(decode(TOOLS_CALL), Request)


# --- R-WIRE-4 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999999", b"-1e400"])
def test_R_WIRE_4_nan_infinity_and_overflow_are_parse_errors(number: bytes) -> None:
    data = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":' + number + b"}}"
    assert_error(decode(data), PARSE_ERROR, None)


def test_R_WIRE_4_a_5000_digit_integer_is_refused_without_raising() -> None:
    digits = b"9" * 5000
    as_id = b'{"jsonrpc":"2.0","id":' + digits + b',"method":"ping"}'
    in_arguments = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"a":' + digits + b"}}"
    assert_error(decode(as_id), PARSE_ERROR, None)
    assert_error(decode(in_arguments), PARSE_ERROR, None)


def test_R_WIRE_4_large_integers_are_kept_exact() -> None:
    for big in (2**64 + 1, -(2**70), 10**4299):
        result = decode(b'{"jsonrpc":"2.0","id":' + str(big).encode() + b',"method":"ping"}')
        assert result == Request(big, "ping", None)


def test_R_WIRE_4_a_tiny_float_underflows_to_zero_and_is_not_an_error() -> None:
    result = decode(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":1e-400,"y":-0.0}}')
    assert isinstance(result, Request)
    assert result.params == {"x": 0.0, "y": 0.0}


# --- R-WIRE-5 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}',
        b'{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        b'"params":{"name":"rm","arguments":{"path":"/tmp/a","path":"/"}}}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":[{"b":[{"c":1,"c":1}]}]}}',
        b'{"jsonrpc":"2.0","id":"e","result":{"action":"decline","action":"accept"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","\\u0069d":2}',  # "id" spelled with an escape
    ],
)
def test_R_WIRE_5_a_duplicate_key_at_any_depth_is_a_parse_error(data: bytes) -> None:
    result = decode(data)
    assert_error(result, PARSE_ERROR, None)
    assert isinstance(result, Invalid)
    assert result.reason == "duplicate key"


def test_R_WIRE_5_the_same_key_in_sibling_objects_is_not_a_duplicate() -> None:
    data = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":{"k":1},"b":{"k":2},"c":[{"k":3}]}}'
    assert decode(data) == Request(1, "m", {"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 3}]})


@pytest.mark.parametrize(
    "data",
    [
        # colons inside strings, beside a repeated key
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":"x:y","a":1}}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"u":"http://h:1/","a":1,"a":2}}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"a":"\\u003a"}}',
        # spaces around the colons, and a repeat in an array at the top
        b'{"jsonrpc" : "2.0", "id" : 1, "id" : 1, "method" : "m"}',
        b'[{"a":1,"a":2}]',
        # over the size parsed without a callback per object: the strict decoder alone
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"pad":"'
        + b"x" * 9000
        + b'","a":1,"a":2}}',
    ],
)
def test_R_WIRE_5_a_duplicate_key_is_found_whatever_surrounds_it(data: bytes) -> None:
    result = decode(data)
    assert isinstance(result, Invalid)
    assert result.reason == "duplicate key"


# A JSON text written by hand from a tree of (decoded, spelled) pieces, so that whether some object
# repeats a key is known without asking the codec: keys and strings that hold colons, escapes that
# spell the same key twice, whitespace around the separators.
_KEYS = st.sampled_from(
    [("a", '"a"'), ("a", '"\\u0061"'), ("b", '"b"'), (":", '":"'), ("a:b", '"a:b"'), ("", '""')]
)
_STRINGS = st.sampled_from(
    [("x", '"x"'), ("x:y", '"x:y"'), (":", '"\\u003a"'), ('"', '"\\""'), ("{", '"{"')]
)
_SCALARS = st.one_of(st.integers(-5, 5).map(lambda n: (n, str(n))), _STRINGS)
_SEPARATORS = st.sampled_from([":", " : ", ":\t", "\r\n:"])


@st.composite
def _objects(draw: st.DrawFn, depth: int = 3) -> tuple[dict[str, Any], str, bool]:
    """(value as parsed, JSON text, whether some object in it repeats a key)."""
    colon = draw(_SEPARATORS)
    value: dict[str, Any] = {}
    parts: list[str] = []
    repeated = False
    for _ in range(draw(st.integers(0, 4))):
        (key, spelled) = draw(_KEYS)
        kind = draw(st.integers(0, 2)) if depth else 0
        member: Any
        text: str
        if kind == 1:
            member, text, inner = draw(_objects(depth - 1))
        elif kind == 2:
            items = draw(st.lists(st.one_of(_SCALARS, _objects(depth - 1)), max_size=3))
            member = [item[0] for item in items]
            text = "[" + ",".join(item[1] for item in items) + "]"
            inner = any(len(item) == 3 and item[2] for item in items)
        else:
            member, text = draw(_SCALARS)
            inner = False
        repeated = repeated or inner or key in value
        value[key] = member
        parts.append(spelled + colon + text)
    return value, "{" + ", ".join(parts) + "}", repeated


@settings(max_examples=500)
@given(_objects(), st.booleans())
def test_R_WIRE_5_a_repeated_key_is_found_exactly_in_generated_texts(
    tree: tuple[dict[str, Any], str, bool], big: bool
) -> None:
    params, text, repeated = tree
    pad = ',"zz":"' + "p" * 9000 + '"' if big else ""  # past the size parsed without callbacks
    data = ('{"jsonrpc":"2.0","id":1,"method":"m","params":' + text + pad + "}").encode()
    result = decode(data)
    if repeated:
        assert isinstance(result, Invalid)
        assert result.reason == "duplicate key"
    else:
        assert result == Request(1, "m", params)


# --- R-WIRE-6 -----------------------------------------------------------------------------------


def test_R_WIRE_6_depth_64_is_accepted_and_65_refused() -> None:
    assert MAX_DEPTH == 64
    assert isinstance(decode(nested(64)), Request)
    result = decode(nested(65))
    assert_error(result, PARSE_ERROR, None)
    assert isinstance(result, Invalid)
    assert result.reason == "nesting deeper than 64"


def test_R_WIRE_6_only_arrays_or_only_objects_count_the_same() -> None:
    head = b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":'
    for depth, accepted in ((64, True), (65, False)):
        arrays = head + b"[" * (depth - 2) + b"]" * (depth - 2) + b"}}"
        objects = head + b'{"k":' * (depth - 2) + b"0" + b"}" * (depth - 2) + b"}}"
        for data in (arrays, objects):
            assert isinstance(decode(data), Request) is accepted


def test_R_WIRE_6_brackets_inside_strings_do_not_count() -> None:
    tricky = '[[[{{{ \\" [[[ \\\\" + "\\\\\\"[[[["'  # escaped quotes and backslashes
    params = {"text": "[" * 1000 + "{" * 1000, "tricky": tricky, "list": [tricky] * 50}
    data = wire({"jsonrpc": "2.0", "id": 1, "method": "m", "params": params})
    assert decode(data) == Request(1, "m", params)


def test_R_WIRE_6_depth_bombs_are_parse_errors() -> None:
    balanced = b"[" * 100_000 + b"]" * 100_000
    unbalanced = b"[" * 100_000
    objects = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    for data in (balanced, unbalanced, objects, b'{"params":' + balanced + b"}"):
        assert_error(decode(data), PARSE_ERROR, None)


# --- R-WIRE-7 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]',
        b"[]",
        b"42",
        b'"tools/call"',
        b"true",
        b"null",
    ],
)
def test_R_WIRE_7_json_that_is_not_an_object_is_an_invalid_request(data: bytes) -> None:
    assert_error(decode(data), INVALID_REQUEST, None)


# --- R-WIRE-8 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", [None, True, False, 1.0, 1.5, -0.0, [1], {"a": 1}])
def test_R_WIRE_8_an_id_that_is_not_a_string_or_integer_is_refused_with_id_null(
    bad_id: object,
) -> None:
    result = decode(request_with(id=bad_id, method="tools/call", params={"name": "t"}))
    assert_error(result, INVALID_REQUEST, None)
    assert isinstance(result, Invalid)
    assert result.reply == messages.invalid_id()


def test_R_WIRE_8_a_bad_id_wins_over_every_other_fault() -> None:
    result = decode(wire({"jsonrpc": "1.0", "id": True, "method": 5, "params": []}))
    assert_error(result, INVALID_REQUEST, None)


@pytest.mark.parametrize("good_id", [0, "", -1, "0", 2**63])
def test_R_WIRE_8_zero_and_the_empty_string_are_valid_ids(good_id: str | int) -> None:
    assert decode(request_with(id=good_id, method="ping")) == Request(good_id, "ping", None)


# --- R-WIRE-9 -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "members",
    [
        {"jsonrpc": "1.0", "method": "ping"},
        {"method": "ping"},  # no jsonrpc
        {"jsonrpc": 2.0, "method": "ping"},
        {"jsonrpc": "2.0", "method": None},
        {"jsonrpc": "2.0", "method": 5},
        {"jsonrpc": "2.0", "method": ["ping"]},
        {"jsonrpc": "2.0"},  # no method, no result, no error
        {"jsonrpc": "2.0", "method": "ping", "result": {}},
        {"jsonrpc": "2.0", "method": "ping", "error": {"code": 1, "message": "x"}},
    ],
)
def test_R_WIRE_9_a_malformed_request_is_answered_with_its_id_and_a_notification_dropped(
    members: dict[str, Any],
) -> None:
    for request_id in (99, "r-99", 0, ""):
        assert_error(decode(wire({**members, "id": request_id})), INVALID_REQUEST, request_id)
    assert_dropped(decode(wire(members)))


def test_R_WIRE_9_an_empty_object_is_dropped() -> None:
    assert_dropped(decode(b"{}"))


# --- R-WIRE-10 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [[], ["delete_file"], "x", 3, True, 1.5])
def test_R_WIRE_10_params_that_are_not_an_object_are_invalid_params(params: object) -> None:
    # The method is never looked at: a known one and an unknown one get the same answer.
    for method in ("tools/call", "no/such/method"):
        result = decode(request_with(id=4, method=method, params=params))
        assert_error(result, INVALID_PARAMS, 4)
    assert_dropped(decode(request_with(method="notifications/x", params=params)))


def test_R_WIRE_10_null_params_count_as_absent() -> None:
    assert decode(request_with(id=1, method="ping", params=None)) == Request(1, "ping", None)
    assert decode(request_with(method="n", params=None)) == Notification("n", None)


def test_R_WIRE_10_an_invalid_request_is_reported_before_its_params() -> None:
    assert_error(decode(wire({"jsonrpc": "1.0", "id": 4, "params": []})), INVALID_REQUEST, 4)


# --- R-WIRE-11 ----------------------------------------------------------------------------------


def test_R_WIRE_11_a_response_with_both_result_and_error_is_an_invalid_request() -> None:
    both = {"jsonrpc": "2.0", "id": "e", "result": {}, "error": {"code": 1, "message": "x"}}
    assert_error(decode(wire(both)), INVALID_REQUEST, None)
    assert_error(decode(wire({**both, "error": None})), INVALID_REQUEST, None)


@pytest.mark.parametrize(
    "response",
    [
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
        {"jsonrpc": "2.0", "id": None, "result": {}},
        {"jsonrpc": "2.0", "result": {}},  # no id
        {"jsonrpc": "2.0", "id": True, "result": {}},
        {"jsonrpc": "2.0", "id": 1.0, "result": {}},
        {"jsonrpc": "1.0", "id": 5, "result": {}},
        {"id": 5, "error": {"code": 1, "message": "x"}},  # no jsonrpc
        {"jsonrpc": "2.0", "id": 5, "error": None},
        {"jsonrpc": "2.0", "id": 5, "error": "failed"},
    ],
)
def test_R_WIRE_11_any_other_malformed_response_is_dropped(response: dict[str, Any]) -> None:
    assert_dropped(decode(wire(response)))


def test_R_WIRE_11_our_own_error_replies_are_dropped_when_they_come_back() -> None:
    for data in (b"hello", b"[]", b'{"jsonrpc":"2.0","id":true,"method":"m"}'):
        reply = decode(data)
        assert isinstance(reply, Invalid)
        assert reply.reply is not None
        assert_dropped(decode(encode(reply.reply)))


# --- R-WIRE-12 ----------------------------------------------------------------------------------

CODES = {PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS}


def check_decoded(result: Decoded) -> None:
    """What every decode result satisfies, whatever the input."""
    assert isinstance(result, Request | Notification | Response | ErrorResponse | Invalid)
    if isinstance(result, Invalid) and result.reply is not None:
        reply = result.reply
        assert set(reply) == {"jsonrpc", "id", "error"}
        assert reply["error"]["code"] in CODES
        assert reply["id"] is None or type(reply["id"]) in (str, int)
        assert encode(reply)  # every reply can be sent


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=512))
def test_R_WIRE_12_decode_never_raises_on_arbitrary_bytes(data: bytes) -> None:
    check_decoded(decode(data))
    check_decoded(decode(data, max_bytes=8))


MUTATIONS = st.lists(st.tuples(st.integers(0, len(TOOLS_CALL) - 1), st.binary(max_size=3)))


@settings(max_examples=500)
@given(MUTATIONS)
def test_R_WIRE_12_decode_never_raises_on_a_mangled_tools_call(
    edits: list[tuple[int, bytes]],
) -> None:
    data = bytearray(TOOLS_CALL)
    for at, replacement in edits:
        data[at : at + 1] = replacement
    check_decoded(decode(bytes(data)))


@pytest.mark.parametrize("data", ["a str", None, 5, memoryview(b"{}"), [b"{}"]])
def test_R_WIRE_12_decode_never_raises_on_what_is_not_bytes(data: Any) -> None:
    assert_error(decode(data), PARSE_ERROR, None)


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=16,
)
ENVELOPES = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0"]) | VALUES,
        "id": st.integers(-3, 3) | st.text(max_size=3) | VALUES,
        "method": st.sampled_from(["ping", "tools/call"]) | VALUES,
        "params": st.dictionaries(st.text(max_size=6), VALUES, max_size=3) | VALUES,
        "result": VALUES,
        "error": st.fixed_dictionaries({"code": st.integers(), "message": st.text()}) | VALUES,
    },
)


def has_non_finite(value: object) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(has_non_finite(v) for v in value)
    return False


def is_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def expected_kind(msg: object) -> tuple[str, int | None, object]:
    """The rules of spec/codec.md as a table: (shape, error code or None, reply id)."""
    if has_non_finite(msg):
        return ("reply", PARSE_ERROR, None)  # R-WIRE-4
    if not isinstance(msg, dict):
        return ("reply", INVALID_REQUEST, None)  # R-WIRE-7
    if "method" not in msg and ("result" in msg or "error" in msg):  # R-WIRE-11
        if "result" in msg and "error" in msg:
            return ("reply", INVALID_REQUEST, None)
        if msg.get("jsonrpc") != "2.0" or not is_id(msg.get("id")):
            return ("dropped", None, None)
        if "result" in msg:
            return ("response", None, msg["id"])
        if not isinstance(msg["error"], dict):
            return ("dropped", None, None)
        return ("error_response", None, msg["id"])
    if "id" in msg and not is_id(msg["id"]):
        return ("reply", INVALID_REQUEST, None)  # R-WIRE-8
    request_id = msg.get("id")
    malformed = (
        not isinstance(msg.get("method"), str)
        or msg.get("jsonrpc") != "2.0"
        or "result" in msg
        or "error" in msg
    )
    params = msg.get("params")
    if malformed or (params is not None and not isinstance(params, dict)):  # R-WIRE-9, 10
        if "id" not in msg:
            return ("dropped", None, None)
        return ("reply", INVALID_REQUEST if malformed else INVALID_PARAMS, request_id)
    if "id" not in msg:
        return ("notification", None, None)
    return ("request", None, request_id)


def kind_of(result: Decoded) -> tuple[str, int | None, object]:
    if isinstance(result, Invalid):
        if result.reply is None:
            return ("dropped", None, None)
        return ("reply", result.reply["error"]["code"], result.reply["id"])
    if isinstance(result, Request):
        return ("request", None, result.id)
    if isinstance(result, Notification):
        return ("notification", None, None)
    if isinstance(result, Response):
        return ("response", None, result.id)
    return ("error_response", None, result.id)


@settings(max_examples=1000)
@given(st.one_of(ENVELOPES, VALUES), st.booleans())
def test_R_WIRE_12_decode_never_raises_on_json_ish_values_and_follows_the_rules(
    msg: object, ascii_only: bool
) -> None:
    data = json.dumps(msg, ensure_ascii=ascii_only).encode()  # may write NaN and Infinity
    result = decode(data)
    check_decoded(result)
    assert kind_of(result) == expected_kind(msg)


# --- R-WIRE-13 ----------------------------------------------------------------------------------


def test_R_WIRE_13_encode_is_compact_utf8_without_a_newline() -> None:
    reply = messages.result(1, {"text": "é 😀 line\nbreak", "n": [1, 2.5, True, None]})
    data = encode(reply)
    assert (
        data
        == (
            '{"jsonrpc":"2.0","id":1,"result":{"text":"é 😀 line\\nbreak","n":[1,2.5,true,null]}}'
        ).encode()
    )
    assert not data.endswith(b"\n")


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        "\ud800",
        "a\udfffb",
        b"bytes",
        {1: "int key"},
        {1, 2},
        object(),
    ],
)
def test_R_WIRE_13_encode_refuses_what_strict_json_cannot_carry(value: object) -> None:
    with pytest.raises(EncodeError):
        encode(messages.result(1, {"value": value}))


def test_R_WIRE_13_encode_refuses_a_cycle() -> None:
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(EncodeError):
        encode(messages.result(1, loop))


def test_R_WIRE_13_every_message_builder_round_trips() -> None:
    built = [
        messages.authorization_required(
            7, "delete_file", "ask", messages.TIMED_OUT, messages.nobody_approved(60_000)
        ),
        messages.read_denied("r", "resources/read", messages.READ_ASK),
        messages.elicitation_request("askgate-elicit-abcdefghijklmnop", "rm", "Delete? «x»"),
        messages.elicitation_cancelled("askgate-elicit-abcdefghijklmnop", "timeout"),
        messages.tool_failure(0, "server_busy", scope="server"),
    ]
    for message in built:
        assert json.loads(encode(message)) == message
    assert decode(encode(built[2])) == Request(
        "askgate-elicit-abcdefghijklmnop", "elicitation/create", built[2]["params"]
    )
    assert decode(encode(built[0])) == Response(7, built[0]["result"])


FINITE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
IDS = st.integers() | st.text()
PARAMS = st.none() | st.dictionaries(st.text(), FINITE, max_size=4)


@settings(max_examples=500)
@given(
    st.one_of(
        st.builds(Request, IDS, st.text(), PARAMS),
        st.builds(Notification, st.text(), PARAMS),
        st.builds(Response, IDS, FINITE),
        st.builds(ErrorResponse, IDS, st.dictionaries(st.text(), FINITE, max_size=4)),
    )
)
def test_R_WIRE_13_encode_then_decode_gives_back_the_message(
    shape: Request | Notification | Response | ErrorResponse,
) -> None:
    message: dict[str, Any] = {"jsonrpc": "2.0"}
    if isinstance(shape, Request | Response | ErrorResponse):
        message["id"] = shape.id
    if isinstance(shape, Request | Notification):
        message["method"] = shape.method
        if shape.params is not None:
            message["params"] = shape.params
    elif isinstance(shape, Response):
        message["result"] = shape.result
    else:
        message["error"] = shape.error
    data = encode(message)
    assert b"\n" not in data
    assert data.decode("utf-8")  # valid UTF-8
    assert decode(data) == shape
