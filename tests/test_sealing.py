"""The sealed approval state of the 2026-07-28 revision (spec/modern.md, R-MRTR-*), one test or a
few per rule, named after it. The verdict order is also checked by CrossHair
(tests/test_crosshair.py)."""

from __future__ import annotations

import base64
import hmac
import json
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from askgate.core import messages, sealing
from askgate.core.codec import Request, decode
from askgate.core.sealing import (
    DENY_DETAIL,
    MAX_TOKEN_CHARS,
    Key,
    Keyring,
    Verdict,
    arguments_digest,
    open_sealed,
    rotate,
    seal,
)

ROOT = Path(__file__).resolve().parent.parent

K1 = Key("k1", b"1" * 32)
K2 = Key("k2", b"2" * 32)
TTL = 60_000
RING = Keyring(K1, TTL)
NONCE = bytes(range(16))
T0 = 1_700_000_000_000  # a wall-clock millisecond
ARGS: dict[str, Any] = {"path": "/tmp/x", "recursive": True, "n": 1}
DIGEST = arguments_digest(ARGS)


def sealed(ring: Keyring = RING, principal: str = "alice", tool: str = "rm") -> str:
    return seal(ring, principal, tool, DIGEST, NONCE, T0)


def opened(
    token: object,
    ring: Keyring = RING,
    principal: str = "alice",
    tool: str = "rm",
    digest: str = DIGEST,
    now: int = T0 + 1,
) -> Verdict:
    return open_sealed(ring, token, principal, tool, digest, now).verdict


def raw(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


# -- R-MRTR-1: sealed, not secret ----------------------------------------------------------------


def test_R_MRTR_1_a_sealed_state_opens_valid_with_its_nonce_expiry_and_key() -> None:
    token = sealed()
    result = open_sealed(RING, token, "alice", "rm", DIGEST, T0 + 1)
    assert result == sealing.Opened("valid", NONCE, T0 + TTL, "k1")
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token)  # base64url, no padding


def test_R_MRTR_1_the_token_is_versioned_and_names_no_bound_value() -> None:
    principal, tool = "alice@example.com", "delete_everything"
    token = seal(RING, principal, tool, DIGEST, NONCE, T0)
    data = raw(token)
    assert data[0] == 1  # the version byte
    assert data[1:4] == b"\x02k1"  # the key id, public
    assert data[4:20] == NONCE
    assert int.from_bytes(data[20:28], "big") == T0 + TTL
    assert len(data) == 2 + 2 + 16 + 8 + 3 * 16 + 32
    for value in (principal, tool, DIGEST):
        assert value.encode() not in data
        assert value.encode() not in token.encode()
    assert bytes.fromhex(DIGEST) not in data
    assert b"1" * 32 not in data  # nor the secret


@settings(max_examples=400)
@given(st.data())
def test_R_MRTR_1_changing_any_byte_of_the_token_is_never_valid(data: st.DataObject) -> None:
    token = sealed()
    original = raw(token)
    at = data.draw(st.integers(0, len(original) - 1), label="byte")
    flip = data.draw(st.integers(1, 255), label="xor")
    changed = bytearray(original)
    changed[at] ^= flip
    verdict = opened(b64(bytes(changed)))
    assert verdict != "valid"
    if at >= 4:  # past the version byte and the key id: only the MAC can tell
        assert verdict == "tampered"


@settings(max_examples=400)
@given(st.data())
def test_R_MRTR_1_changing_any_character_of_the_token_is_never_valid(data: st.DataObject) -> None:
    token = sealed()
    at = data.draw(st.integers(0, len(token) - 1), label="at")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=+/ é\0"
    new = data.draw(st.sampled_from(alphabet).filter(lambda c: c != token[at]), label="char")
    assert opened(token[:at] + new + token[at + 1 :]) != "valid"


@given(st.integers(0, 200), st.text(max_size=40))
def test_R_MRTR_1_a_cut_or_extended_token_is_never_valid(keep: int, tail: str) -> None:
    token = sealed()
    if keep < len(token):
        assert opened(token[:keep]) != "valid"
    if tail:
        assert opened(token + tail) != "valid"


def test_R_MRTR_1_another_secret_under_the_same_key_id_is_tampered() -> None:
    forged = seal(Keyring(Key("k1", b"x" * 32), TTL), "alice", "rm", DIGEST, NONCE, T0)
    assert opened(forged) == "tampered"


# -- R-MRTR-2: what a state binds -----------------------------------------------------------------


def test_R_MRTR_2_a_state_binds_principal_tool_arguments_and_expiry() -> None:
    token = sealed()
    assert opened(token) == "valid"
    assert opened(token, principal="bob") == "foreign principal"
    assert opened(token, principal="alice ") == "foreign principal"
    assert opened(token, tool="rmdir") == "other tool"
    assert opened(token, digest=arguments_digest({**ARGS, "path": "/"})) == "changed arguments"
    assert opened(token, now=T0 + TTL) == "expired"
    assert open_sealed(RING, token, "alice", "rm", DIGEST, T0).expiry == T0 + TTL


def test_R_MRTR_2_the_nonce_is_carried_as_given_and_is_sixteen_bytes() -> None:
    other = bytes(16)
    token = seal(RING, "alice", "rm", DIGEST, other, T0)
    assert open_sealed(RING, token, "alice", "rm", DIGEST, T0).nonce == other
    assert token != sealed()
    for bad in (b"", bytes(15), bytes(17)):
        with pytest.raises(ValueError, match="16 bytes"):
            seal(RING, "alice", "rm", DIGEST, bad, T0)
    with pytest.raises(ValueError, match="now"):
        seal(RING, "alice", "rm", DIGEST, NONCE, -1)


def test_R_MRTR_2_nothing_is_read_back_before_the_mac_verifies() -> None:
    """An inauthentic token yields no nonce, expiry or key id; an authentic one with a wrong
    binding yields them (the reducer may log which parked call a foreign state names)."""
    changed = bytearray(raw(sealed()))
    changed[-1] ^= 1
    assert open_sealed(RING, b64(bytes(changed)), "alice", "rm", DIGEST, T0) == sealing.Opened(
        "tampered"
    )
    foreign = open_sealed(RING, sealed(), "bob", "rm", DIGEST, T0)
    assert foreign == sealing.Opened("foreign principal", NONCE, T0 + TTL, "k1")


# -- R-MRTR-3: the arguments digest ---------------------------------------------------------------

KEYS = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def _reordered(value: object) -> object:
    """The same JSON value with every object's keys in reverse insertion order."""
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


@given(st.dictionaries(KEYS, JSON, max_size=6))
def test_R_MRTR_3_the_digest_does_not_depend_on_key_order(arguments: dict[str, Any]) -> None:
    assert arguments_digest(_reordered(arguments)) == arguments_digest(arguments)


def test_R_MRTR_3_the_digest_does_not_depend_on_spacing_or_key_order_on_the_wire() -> None:
    a = decode(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"b":[true,"x"]}}')
    b = decode(
        b'{ "params" : { "b" : [ true , "x" ] ,\n "a" : 1 } , "id":2, "method":"m","jsonrpc":"2.0"}'
    )
    assert isinstance(a, Request)
    assert isinstance(b, Request)
    assert arguments_digest(a.params) == arguments_digest(b.params)
    assert re.fullmatch(r"[0-9a-f]{64}", arguments_digest(a.params))


@given(st.dictionaries(KEYS, JSON, min_size=1, max_size=6), st.data())
def test_R_MRTR_3_the_digest_changes_with_any_value(
    arguments: dict[str, Any], data: st.DataObject
) -> None:
    key = data.draw(st.sampled_from(sorted(arguments)), label="key")
    old = json.dumps(arguments[key], sort_keys=True)  # the standard library's JSON, to compare
    new = data.draw(JSON.filter(lambda v: json.dumps(v, sort_keys=True) != old), label="new")
    changed = {**arguments, key: new}
    assert arguments_digest(changed) != arguments_digest(arguments)
    renamed = {k + "\x00" if k == key else k: v for k, v in arguments.items()}
    assert arguments_digest(renamed) != arguments_digest(arguments)


def test_R_MRTR_3_an_integer_and_a_float_differ_spellings_of_a_float_agree() -> None:
    def digest_of(text: bytes) -> str:
        message = decode(b'{"jsonrpc":"2.0","id":1,"method":"m","params":' + text + b"}")
        assert isinstance(message, Request)
        return arguments_digest(message.params)

    assert digest_of(b'{"n":1}') != digest_of(b'{"n":1.0}')
    assert digest_of(b'{"n":1e2}') == digest_of(b'{"n":100.0}') == digest_of(b'{"n":1.00E+2}')
    assert digest_of(b'{"n":-0.0}') != digest_of(b'{"n":0.0}')
    assert digest_of(b'{"s":"\\u00e9"}') == digest_of('{"s":"é"}'.encode())
    assert digest_of('{"s":"é"}'.encode()) != digest_of('{"s":"e\u0301"}'.encode())
    assert arguments_digest({}) != arguments_digest(None) != arguments_digest([])


@pytest.mark.parametrize(
    "value",
    [float("nan"), {"x": float("inf")}, b"bytes", {1: "non-string key"}, "\ud800", {"x": {1}}],
)
def test_R_MRTR_3_a_value_json_cannot_carry_raises(value: object) -> None:
    with pytest.raises(ValueError, match="not a JSON value"):
        arguments_digest(value)


# -- R-MRTR-4: every verdict, in order ------------------------------------------------------------


def test_R_MRTR_4_each_verdict() -> None:
    token = sealed()
    header = bytearray(raw(token))
    header[0] = 2  # another version
    cases: dict[Verdict, list[str]] = {
        "valid": [opened(token)],
        "malformed": [
            opened(None),
            opened(42),
            opened(""),
            opened(token + "="),  # padded
            opened(b64(bytes(header))),
            opened("AQ"),  # a version byte and nothing else
        ],
        "unknown key": [opened(seal(Keyring(K2, TTL), "alice", "rm", DIGEST, NONCE, T0))],
        "tampered": [opened(b64(raw(token)[:-1] + bytes([raw(token)[-1] ^ 0x80])))],
        "foreign principal": [opened(token, principal="mallory")],
        "other tool": [opened(token, tool="cat")],
        "changed arguments": [opened(token, digest=arguments_digest({**ARGS, "n": 2}))],
        "expired": [opened(token, now=T0 + TTL + 1)],
    }
    assert set(cases) == set(get_args(Verdict))
    for expected, found in cases.items():
        assert found == [expected] * len(found), expected


def test_R_MRTR_4_the_first_failing_check_decides() -> None:
    """A tampered token for another principal, tool and arguments, opened late, is "tampered";
    an authentic one failing every binding is "foreign principal"; and so on down the order."""
    token = sealed()
    cut = raw(token)
    forged = b64(cut[:-1] + bytes([cut[-1] ^ 1]))
    late = T0 + 10 * TTL
    other = arguments_digest([])
    assert opened(forged, principal="bob", tool="x", digest=other, now=late) == "tampered"
    assert opened(token, principal="bob", tool="x", digest=other, now=late) == "foreign principal"
    assert opened(token, tool="x", digest=other, now=late) == "other tool"
    assert opened(token, digest=other, now=late) == "changed arguments"
    assert opened(token, now=late) == "expired"
    assert opened(token) == "valid"


@settings(max_examples=300)
@given(
    st.none()
    | st.integers()
    | st.binary(max_size=300)
    | st.text(max_size=300)
    | st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", max_size=300)
    | st.lists(st.text(max_size=3), max_size=3)
)
def test_R_MRTR_4_opening_is_total_and_a_made_up_token_is_never_valid(token: object) -> None:
    assert opened(token) in get_args(Verdict)
    assert opened(token) != "valid"


def test_R_MRTR_4_macs_and_tags_are_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every MAC and tag comparison goes through hmac.compare_digest: four for a valid token."""
    real = hmac.compare_digest
    calls: list[int] = []

    def counted(a: bytes, b: bytes) -> bool:
        calls.append(len(a))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counted)  # what sealing calls
    assert opened(sealed()) == "valid"
    assert sorted(calls) == [16, 16, 16, 32]


# -- R-MRTR-5: the expiry is exact ---------------------------------------------------------------


@pytest.mark.parametrize("ttl", [1, 2, 60_000])
def test_R_MRTR_5_valid_until_one_ms_before_expiry_expired_at_it(ttl: int) -> None:
    ring = Keyring(K1, ttl)
    token = seal(ring, "alice", "rm", DIGEST, NONCE, T0)
    assert opened(token, ring=ring, now=T0) == "valid"
    assert opened(token, ring=ring, now=T0 + ttl - 1) == "valid"
    assert opened(token, ring=ring, now=T0 + ttl) == "expired"
    assert opened(token, ring=ring, now=T0 + ttl + 1) == "expired"


# -- R-MRTR-6: keys and rotation ------------------------------------------------------------------


def test_R_MRTR_6_the_old_key_opens_for_one_ttl_after_rotation_then_is_unknown() -> None:
    rotated_at = T0 + 5
    ring = rotate(RING, K2, rotated_at)
    assert ring.current == K2
    assert ring.previous == K1
    # A state sealed just before the rotation stays good until its own expiry.
    before = seal(RING, "alice", "rm", DIGEST, NONCE, rotated_at - 1)
    assert opened(before, ring=ring, now=rotated_at) == "valid"
    assert opened(before, ring=ring, now=rotated_at - 1 + TTL - 1) == "valid"
    assert opened(before, ring=ring, now=rotated_at - 1 + TTL) == "expired"
    # The key's own window, seen with a state that outlives it (sealed under a longer ttl).
    long_lived = seal(Keyring(K1, 10 * TTL), "alice", "rm", DIGEST, NONCE, rotated_at - 1)
    assert opened(long_lived, ring=ring, now=rotated_at + TTL - 1) == "valid"
    assert opened(long_lived, ring=ring, now=rotated_at + TTL) == "unknown key"
    assert opened(long_lived, ring=ring, now=rotated_at + 2 * TTL) == "unknown key"


def test_R_MRTR_6_only_the_current_key_seals_and_a_second_rotation_drops_the_oldest() -> None:
    ring = rotate(RING, K2, T0)
    assert open_sealed(ring, sealed(ring), "alice", "rm", DIGEST, T0).key_id == "k2"
    k3 = Key("k3", b"3" * 32)
    again = rotate(ring, k3, T0 + 1)
    assert again.previous == K2
    assert opened(sealed(RING), ring=again, now=T0 + 2) == "unknown key"
    assert opened(sealed(ring), ring=again, now=T0 + 2) == "valid"


def test_R_MRTR_6_keys_and_rings_refuse_what_they_cannot_use() -> None:
    for key_id in ("", "k" * 17, "k 1", "ké", "k/1"):
        with pytest.raises(ValueError, match="key id"):
            Key(key_id, b"s" * 32)
    with pytest.raises(ValueError, match="32 bytes"):
        Key("k", b"s" * 31)
    with pytest.raises(ValueError, match="32 bytes"):
        Key("k", "s" * 32)  # type: ignore[arg-type]
    assert "s" * 8 not in repr(Key("k", b"s" * 32))
    for ttl in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="ttl"):
            Keyring(K1, ttl)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rotated out"):
        Keyring(K2, TTL, previous=K1)
    with pytest.raises(ValueError, match="rotated out"):
        Keyring(K2, TTL, rotated_at=T0)
    with pytest.raises(ValueError, match="current key's id"):
        Keyring(K1, TTL, previous=Key("k1", b"9" * 32), rotated_at=T0)
    assert Key("a.B_9-z" * 2 + "xx", b"s" * 32).key_id == "a.B_9-za.B_9-zxx"


# -- R-MRTR-7: a huge token is malformed cheaply --------------------------------------------------


def test_R_MRTR_7_a_token_over_the_bound_is_malformed_before_any_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(*_: object) -> bytes:
        raise AssertionError("decoded or MAC'd")

    token = sealed()
    monkeypatch.setattr(base64, "urlsafe_b64decode", never)  # what sealing calls
    monkeypatch.setattr(sealing, "_mac", never)
    huge = "A" * 10_000_000
    assert opened(huge) == "malformed"
    assert opened("A" * (MAX_TOKEN_CHARS + 1)) == "malformed"
    assert opened(token + "A" * (MAX_TOKEN_CHARS - len(token) + 1)) == "malformed"


def test_R_MRTR_7_the_longest_sealed_token_fits_the_bound() -> None:
    ring = Keyring(Key("k" * 16, b"s" * 32), TTL)
    token = seal(ring, "p" * 1000, "t" * 1000, DIGEST, NONCE, 2**62)
    assert len(token) == 163 <= MAX_TOKEN_CHARS
    assert opened(token, ring=ring, principal="p" * 1000, tool="t" * 1000, now=2**62) == "valid"


# -- R-MRTR-8: each verdict has its deny detail ---------------------------------------------------


def test_R_MRTR_8_every_verdict_but_valid_has_its_own_detail_as_the_spec_says() -> None:
    verdicts = set(get_args(Verdict)) - {"valid"}
    assert set(DENY_DETAIL) == verdicts
    details = list(DENY_DETAIL.values())
    assert len(set(details)) == len(details)
    close_2 = {
        messages.DECLINED,
        messages.CANCELLED,
        messages.NOT_APPROVED,
        messages.ELICITATION_FAILED,
        messages.TIMED_OUT,
        messages.TOO_MANY_ON_SERVER,
        messages.TOO_MANY_PENDING,
    }
    assert not close_2 & set(details)
    spec = (ROOT / "spec" / "modern.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| `([a-z ]+)` \| `([a-z ]+)` \|$", spec, re.MULTILINE))
    assert table == DENY_DETAIL


def test_R_MRTR_8_the_deny_is_the_authorization_required_result_with_decision_ask() -> None:
    verdict = opened(sealed(), principal="bob")
    why = "its approval's request state belongs to another principal"
    reply = messages.authorization_required(7, "rm", "ask", DENY_DETAIL[verdict], why)
    result = reply["result"]
    assert result["isError"] is True
    assert result["structuredContent"] == {
        "error": "authorization_required",
        "tool": "rm",
        "decision": "ask",
        "detail": "request state of another principal",
        "message": f"rm was not run: {why}",
    }


# -- R-MRTR-21: a round's state --------------------------------------------------------------

STATE = b'{"name":"Ada","step":2}'


def round_sealed(approved: bool = True, state: bytes = STATE) -> str:
    return sealing.seal_round(RING, "alice", "rm", DIGEST, NONCE, T0, approved, state)


def test_R_MRTR_21_a_round_state_opens_with_its_flag_and_state() -> None:
    for approved in (True, False):
        token = round_sealed(approved)
        assert sealing.token_version(token) == sealing.ROUND_VERSION
        assert sealing.token_version(sealed()) == sealing.TOKEN_VERSION
        found = sealing.open_round(RING, token, "alice", "rm", DIGEST, T0 + 1)
        assert found == sealing.RoundOpened("valid", NONCE, T0 + TTL, "k1", approved, STATE)
        assert sealing.state_value(found.state) == {"step": 2, "name": "Ada"}
        assert sealing.state_bytes({"step": 2, "name": "Ada"}) == STATE  # canonical
        # Each kind of state opens only as itself: an approval's opener refuses a round's.
        assert opened(token) == "malformed"
        assert sealing.open_round(RING, sealed(), "alice", "rm", DIGEST, T0 + 1).verdict == (
            "malformed"
        )
    assert sealing.state_value(b"") is None


def test_R_MRTR_21_a_round_state_has_the_approval_s_verdicts_in_order() -> None:
    token = round_sealed()

    def verdict(**kw: Any) -> str:
        args: dict[str, Any] = {"principal": "alice", "tool": "rm", "digest": DIGEST, "now": T0}
        args.update(kw)
        found = sealing.open_round(RING, token, **args)
        return found.verdict

    assert verdict(principal="bob") == "foreign principal"
    assert verdict(tool="ls") == "other tool"
    assert verdict(digest=arguments_digest({})) == "changed arguments"
    assert verdict(now=T0 + TTL - 1) == "valid"
    assert verdict(now=T0 + TTL) == "expired"
    other = sealing.open_round(Keyring(K2, TTL), token, "alice", "rm", DIGEST, T0)
    assert other.verdict == "unknown key"
    assert other.state == b""  # nothing it carries is read before its MAC verifies


@settings(max_examples=300)
@given(st.data())
def test_R_MRTR_21_changing_any_byte_of_a_round_state_is_never_valid(data: st.DataObject) -> None:
    original = raw(round_sealed())
    at = data.draw(st.integers(0, len(original) - 1), label="byte")
    changed = bytearray(original)
    changed[at] ^= data.draw(st.integers(1, 255), label="xor")
    found = sealing.open_round(RING, b64(bytes(changed)), "alice", "rm", DIGEST, T0 + 1)
    assert found.verdict != "valid"
    assert (found.approved, found.state) == (False, b"")


def test_R_MRTR_21_a_round_state_is_bounded() -> None:
    assert sealing.state_bytes("x" * 1022) is not None  # 1024 bytes with its quotes
    assert sealing.state_bytes("x" * 1023) is None
    assert sealing.state_bytes(float("nan")) is None
    assert sealing.state_bytes({1: 2}) is None
    longest = sealing.seal_round(
        Keyring(Key("k" * 16, b"1" * 32), TTL), "a", "t", DIGEST, NONCE, T0, True, b"x" * 1024
    )
    assert len(longest) <= sealing.MAX_ROUND_TOKEN_CHARS
    with pytest.raises(ValueError, match="at most"):
        sealing.seal_round(RING, "a", "t", DIGEST, NONCE, T0, True, b"x" * 1025)
    huge = "A" * (sealing.MAX_ROUND_TOKEN_CHARS + 1)
    assert sealing.token_version(huge) is None
    assert sealing.open_round(RING, huge, "a", "t", DIGEST, T0).verdict == "malformed"
    assert sealing.token_version(7) is None
    assert sealing.token_version("A!!!") is None
