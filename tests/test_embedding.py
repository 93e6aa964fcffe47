"""The JSON encoding of events and effects and the ``askgate core`` sidecar (spec/embedding.md)."""

from __future__ import annotations

import dataclasses
import enum
import importlib.util
import io
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import types
import typing
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from immutables import Map

from askgate import core, jsonwire, sidecar
from askgate.core import codec, effects, events
from askgate.core.state import Stage
from askgate.jsonwire import WireError
from askgate.models.machine import ReducerMachine

ROOT = Path(__file__).resolve().parent.parent
ASKGATE = [sys.executable, "-m", "askgate"]

# -- strategies derived from the classes' field types ------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
_hashables = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(tuple), st.frozensets(inner, max_size=3)
    ),
    max_leaves=6,
)


def _nested_values(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
        st.dictionaries(st.sampled_from(["$", "$schema", "v"]), inner, max_size=3),
        st.dictionaries(_hashables, inner, max_size=3),
        st.dictionaries(_hashables, inner, max_size=3).map(Map),
        st.frozensets(_hashables, max_size=3),
        st.sampled_from(Stage),
        *(st.builds(cls, **_field_strategies(cls, inner)) for cls in jsonwire.VALUES),
    )


_values = st.deferred(lambda: st.recursive(_scalars, _nested_values, max_leaves=8))


def _for_type(hint: object, anything: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A strategy for values of the type ``hint``; raises for a type it does not know, so that a
    field of a new type fails the round-trip test until the encoding covers it."""
    if hint is object or hint is Any:
        return anything
    if hint is Hashable:
        return _hashables
    if hint is type(None):
        return st.none()
    simple: dict[object, st.SearchStrategy[Any]] = {
        int: st.one_of(st.integers(-(2**60), 2**60), st.integers()),
        str: st.text(max_size=8),
        bool: st.booleans(),
        bytes: st.binary(max_size=16),
    }
    if hint in simple:
        return simple[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_for_type(a, anything) for a in args))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(_for_type(args[0], anything), max_size=3).map(tuple)
        return st.tuples(*(_for_type(a, _hashables) for a in args))
    if origin is dict:
        return st.dictionaries(_for_type(args[0], _hashables), _for_type(args[1], anything))
    if isinstance(hint, type) and attrs.has(hint):
        return st.builds(hint, **_field_strategies(hint, anything))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(hint)
    raise TypeError(f"no strategy for {hint!r}: the encoding does not cover it yet")


def _field_strategies(cls: type[Any], anything: st.SearchStrategy[Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: _for_type(hints[f.name], anything) for f in attrs.fields(cls)}


def strategy_for(cls: type[Any]) -> st.SearchStrategy[Any]:
    return st.builds(cls, **_field_strategies(cls, _values))


def _same(a: object, b: object) -> bool:
    """Equal, with NaN equal to itself (``==`` says NaN is not)."""
    return jsonwire.dumps(jsonwire.encode_value(a)) == jsonwire.dumps(jsonwire.encode_value(b))


def _roundtrip(item: object) -> object:
    return jsonwire.decode(jsonwire.loads(jsonwire.dumps(jsonwire.encode(item))))


KINDS = sorted(jsonwire.KINDS)

# -- the encoding --------------------------------------------------------------------------------


def test_R_EMB_1_every_envelope_carries_its_version_and_others_are_refused() -> None:
    envelope = jsonwire.encode(core.ServerStopping(7))
    assert envelope == {"v": 1, "kind": "ServerStopping", "fields": {"now": 7}}
    for version in (None, 2, "1", 1.0, True):
        bad = dict(envelope, v=version)
        with pytest.raises(WireError, match=r"speaks: \[1\]"):
            jsonwire.decode(bad)
    with pytest.raises(WireError, match="speaks"):
        jsonwire.decode({"kind": "ServerStopping", "fields": {"now": 7}})
    with pytest.raises(WireError, match="JSON object"):
        jsonwire.decode([1, "ServerStopping"])
    assert jsonwire.decode(dict(envelope, extra=1, inspect=True)) == core.ServerStopping(7)


def _defined_in(module: types.ModuleType) -> set[type[Any]]:
    return {
        cls
        for cls in vars(module).values()
        if isinstance(cls, type) and attrs.has(cls) and cls.__module__ == module.__name__
    }


def test_R_EMB_2_every_event_and_effect_class_has_a_kind_the_spec_lists() -> None:
    assert set(jsonwire.EVENTS) == _defined_in(events), "an event class outside the Event union"
    assert set(jsonwire.EFFECTS) == _defined_in(effects), "an effect class outside the union"
    text = (ROOT / "spec" / "embedding.md").read_text(encoding="utf-8")
    rule = text[text.index("### R-EMB-2") : text.index("### R-EMB-3")]
    listed = set(re.findall(r"`([A-Z][A-Za-z]+)`", rule))
    assert listed == set(jsonwire.KINDS), "spec/embedding.md R-EMB-2 lists other kinds"
    # Fields left out take their defaults; a required one left out, or an unknown kind, is refused.
    ev = jsonwire.decode({"v": 1, "kind": "SubscriberAttached", "fields": {"conn": "a"}})
    assert ev == core.SubscriberAttached("a", 0)
    with pytest.raises(WireError, match=r"needs field\(s\) \['conn'\]"):
        jsonwire.decode({"v": 1, "kind": "SubscriberAttached", "fields": {}})
    for kind in ("State", "Allow", "subscriberattached", None):
        with pytest.raises(WireError, match="no event or effect"):
            jsonwire.decode({"v": 1, "kind": kind, "fields": {}})
    with pytest.raises(WireError, match="neither an event nor an effect"):
        jsonwire.encode(core.Allow())
    full = jsonwire.encode(core.SubscriberAttached("a"))
    assert set(full["fields"]) == {"conn", "now", "principal", "per_request"}


def test_R_EMB_3_plain_json_where_exact_and_a_tag_for_everything_else() -> None:
    enc = jsonwire.encode_value
    assert enc({"a": [1, "x", None, True], "$schema": "s"}) == {
        "a": [1, "x", None, True],
        "$schema": "s",
    }
    assert enc((1, "a")) == {"$": "tuple", "v": [1, "a"]}
    assert enc(b"\x00\xff") == {"$": "bytes", "b64": "AP8="}
    assert enc(Map({"k": 1})) == {"$": "map", "v": [["k", 1]]}
    assert enc(core.Deny("no")) == {"$": "Deny", "fields": {"reason": "no"}}
    assert enc(Stage.PARKED) == {"$": "Stage", "value": "parked"}
    assert jsonwire.decode_value({"$": "bytes", "utf8": "hé"}) == "hé".encode()
    with pytest.raises(WireError, match=r"value\.args\[1\]: a set has no JSON encoding"):
        enc({"args": [1, {2}]})
    with pytest.raises(WireError, match="unknown tag 'set'"):
        jsonwire.decode_value({"$": "set", "v": []})
    with pytest.raises(WireError, match=r"unknown member\(s\) \['x'\]"):
        jsonwire.decode_value({"$": "tuple", "v": [], "x": 1})
    with pytest.raises(WireError, match="not base64"):
        jsonwire.decode_value({"$": "bytes", "b64": "!!"})


def test_R_EMB_4_numbers_keep_their_type_and_value() -> None:
    enc, dec = jsonwire.encode_value, jsonwire.decode_value
    top = 2**53 - 1
    assert enc(top) == top
    assert enc(-top) == -top
    assert enc(top + 1) == {"$": "int", "v": str(top + 1)}
    assert dec(enc(-(2**70))) == -(2**70)
    with pytest.raises(WireError, match="53-bit"):
        dec(top + 1)
    with pytest.raises(WireError, match="write it plain"):
        dec({"$": "int", "v": "5"})
    assert jsonwire.dumps(enc(1.0)) == "1.0"
    back = jsonwire.loads(jsonwire.dumps(enc(1.0)))
    assert type(dec(back)) is float
    assert jsonwire.dumps(enc(1e16)) == "1e+16"
    assert enc(math.inf) == {"$": "float", "v": "inf"}
    assert dec(enc(-math.inf)) == -math.inf
    assert math.isnan(dec(enc(math.nan)))
    with pytest.raises(WireError, match="nan, inf or -inf"):
        dec({"$": "float", "v": "1.5"})


def test_R_EMB_5_dicts_maps_and_sets_keep_their_keys_and_one_order() -> None:
    enc, dec = jsonwire.encode_value, jsonwire.decode_value
    keyed = {("a", 1): "parked", 2: "x"}
    assert enc(keyed) == {"$": "dict", "v": [[{"$": "tuple", "v": ["a", 1]}, "parked"], [2, "x"]]}
    assert dec(enc(keyed)) == keyed
    assert enc({"$": 1}) == {"$": "dict", "v": [["$", 1]]}
    assert dec(enc({"$": 1})) == {"$": 1}
    one, other = frozenset(["b", 1, ("c",)]), frozenset([("c",), 1, "b"])
    assert jsonwire.dumps(enc(one)) == jsonwire.dumps(enc(other))
    with pytest.raises(WireError, match="hashable"):
        dec({"$": "dict", "v": [[[1], 2]]})
    with pytest.raises(WireError, match="hashable"):
        dec({"$": "frozenset", "v": [{"a": 1}]})
    with pytest.raises(WireError, match="pair"):
        dec({"$": "map", "v": [[1]]})


def test_R_EMB_6_jobs_decisions_failures_messages_and_stages_nest() -> None:
    cases = [
        core.WorkerFinished(1, core.Ask("ok?"), 5),
        core.WorkerFinished(2, core.Failure(-32602, "bad", {"why": (1, 2)}), 5),
        core.WorkerFinished(3, {"a": core.Raised("ValueError")}, 5),
        core.StartWorker(4, "c", core.FilterTools(("x", "y"))),
        core.MessageReceived("c", codec.Request(1, "ping", None), 0),
        core.Resolve(5, ("tok", 1), core.Failure(-1, "gone")),
        core.Emit("x", {"stage": Stage.RUNNING, "options": core.Options()}),
    ]
    for item in cases:
        assert _roundtrip(item) == item
    nested = jsonwire.encode(cases[3])["fields"]["job"]
    assert nested == {"$": "FilterTools", "fields": {"names": {"$": "tuple", "v": ["x", "y"]}}}


@pytest.mark.parametrize("kind", KINDS)
def test_R_EMB_7_decode_of_encode_is_the_value_for_every_kind(kind: str) -> None:
    cls = jsonwire.KINDS[kind]

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy_for(cls))
    def roundtrip(item: Any) -> None:
        text = jsonwire.dumps(jsonwire.encode(item))
        back = jsonwire.decode(jsonwire.loads(text))
        assert type(back) is cls
        if '{"$":"float","v":"nan"}' not in text:  # NaN is not equal to itself
            assert back == item
        for f in attrs.fields(cls):  # eq=False fields (related, definition) too
            assert _same(getattr(back, f.name), getattr(item, f.name)), f.name
        assert jsonwire.dumps(jsonwire.encode(back)) == text

    roundtrip()


def test_R_EMB_8_trusted_fields_of_the_wrong_type_are_refused_by_name() -> None:
    def fields(kind: str, **values: object) -> dict[str, Any]:
        return {"v": 1, "kind": kind, "fields": values}

    refused = [
        (fields("TimerFired", key=["worker", 1], now=1), r"fields\.key: must be tuple"),
        (fields("TimerFired", key={"$": "tuple", "v": ["w", 1]}, now="1"), r"fields\.now"),
        (fields("TimerFired", key={"$": "tuple", "v": ["w", 1]}, now=True), r"fields\.now"),
        (fields("SubscriberAttached", conn=["a"]), r"fields\.conn"),
        (fields("CallerExited", caller={"p": 1}, now=1), r"fields\.caller"),
        (fields("WorkerFailed", ref=1.5, now=1), r"fields\.ref"),
        (fields("PingReceived", conn="a", request_id=1, mode="reply"), r"no field\(s\) \['mode'\]"),
        (
            fields(
                "ToolCallReceived", conn="a", request_id=1, tool="t", arguments={}, now=0, mode="x"
            ),
            r"fields\.mode",
        ),
    ]
    for envelope, says in refused:
        with pytest.raises(WireError, match=says):
            jsonwire.decode(envelope)
    # what a peer controls is taken as it comes
    odd = fields("ToolCallReceived", conn="a", request_id=[1], tool="t", arguments=7, now=0)
    assert jsonwire.decode(odd).request_id == [1]
    assert jsonwire.decode(fields("CallerExited", caller=None, now=1)) == core.CallerExited(None, 1)


def test_R_EMB_9_one_line_of_strict_ascii_json() -> None:
    line = jsonwire.dumps(jsonwire.encode(core.LogEmitted("info", "h\u00e9\n\ud800", 1)))
    assert line.isascii()
    assert "\n" not in line
    assert ", " not in line
    assert '": ' not in line
    assert jsonwire.loads(line)["fields"]["data"] == "h\u00e9\n\ud800"
    for bad in (b"NaN", b'{"a":Infinity}', b'{"a":1,"a":2}', b"\xff", b"{} {}", b"", b"[1e400]"):
        with pytest.raises(WireError):
            jsonwire.decode_value(jsonwire.loads(bad))


# -- the sidecar ---------------------------------------------------------------------------------

GUARDED = {"v": 1, "kind": "init", "options": {"has_authorizer": True}, "tools": [["rm", True]]}


def _line(kind: str, **fields: object) -> str:
    return json.dumps({"v": 1, "kind": kind, "fields": fields})


def _call(conn: str = "a", rid: object = 1, now: int = 0) -> str:
    return _line("ToolCallReceived", conn=conn, request_id=rid, tool="rm", arguments={}, now=now)


def _reply(session: sidecar.Session, line: str) -> dict[str, Any]:
    text = session.handle(line)
    assert text is not None
    return typing.cast(dict[str, Any], json.loads(text))


def _run(args: list[str], lines: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ASKGATE, "core", *args],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kw,
    )


def test_R_EMB_10_one_reply_per_line_in_order_on_stdio_and_a_session_per_socket_connection(
    tmp_path: Path,
) -> None:
    lines = [json.dumps(GUARDED), _line("SubscriberAttached", conn="a"), "", "nope", _call()]
    done = _run([], lines)
    assert done.returncode == 0, done.stderr
    replies = [json.loads(r) for r in done.stdout.splitlines()]
    assert [r["kind"] for r in replies] == ["ready", "effects", "error", "effects"]
    assert replies[2]["line"] == 3  # the blank line is skipped, not counted
    assert replies[3]["effects"][0]["kind"] == "StartWorker"

    path = str(tmp_path / "gate.sock")
    proc = subprocess.Popen([*ASKGATE, "core", "--socket", path], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().strip() == f"askgate core: listening on {path}"
        first, second = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
        first.connect(path)
        second.connect(path)
        with first, second:
            f1, f2 = first.makefile("rwb"), second.makefile("rwb")
            for f, line in ((f1, json.dumps(GUARDED)), (f2, _line("ServerStopping", now=1))):
                f.write(line.encode() + b"\n")
                f.flush()
            assert json.loads(f1.readline()) == {"v": 1, "kind": "ready", "state": 1}
            assert json.loads(f2.readline())["state"] == 1  # its own session's numbers
            f1.write(_call().encode() + b"\n")
            f1.flush()
            assert json.loads(f1.readline())["effects"][0]["kind"] == "StartWorker"
        refused = _run(["--socket", path], [])
        assert refused.returncode == 2
        assert "exists" in refused.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_R_EMB_11_the_initial_state_comes_from_init_flags_or_defaults(tmp_path: Path) -> None:
    session = sidecar.Session()
    # defaults: no tools, no authorizer
    effects = _reply(session, _call())["effects"]
    assert effects[0]["kind"] == "Reply"
    assert "unknown_tool" in json.dumps(effects[1])
    assert _reply(session, json.dumps(GUARDED)) == {"v": 1, "kind": "ready", "state": 2}
    assert _reply(session, _call())["effects"][0]["fields"]["job"]["$"] == "Authorize"
    bad_inits: list[tuple[dict[str, Any], str]] = [
        ({"options": {"max_in_flight": 0}}, "max_in_flight"),
        ({"options": {"nope": 1}}, r"no such option\(s\) \['nope'\]"),
        ({"tools": [["rm", True]]}, "authorizer"),
        ({"tools": ["rm"]}, r"\[name, sensitive\]"),
        ({"extra": 1}, "unknown member"),
        ({"id_key": "abc"}, "id_key: must be bytes"),
        ({"keep": 0}, "keep: must be an integer"),
    ]
    for extra, says in bad_inits:
        reply = _reply(session, json.dumps({"v": 1, "kind": "init", **extra}))
        assert reply["kind"] == "error", reply
        assert re.search(says, reply["error"]), reply
    key = {"$": "bytes", "b64": "a2V5LWtleS1rZXkta2V5LWtleS1rZXk="}
    _reply(session, json.dumps({**GUARDED, "id_key": key}))
    assert session.states[session.current].id_key == b"key-key-key-key-key-key"
    (tmp_path / "init.json").write_text(json.dumps(GUARDED))
    done = _run(["--init", f"@{tmp_path / 'init.json'}"], [_call()])
    assert json.loads(done.stdout)["effects"][0]["fields"]["job"]["$"] == "Authorize"
    refused = _run(["--init", '{"tools": [["rm", true]]}'], [])
    assert refused.returncode == 2
    assert "authorizer" in refused.stderr
    assert refused.stdout == ""


def test_R_EMB_12_a_step_names_its_state_and_kept_states_can_be_stepped_from() -> None:
    session = sidecar.Session(init=GUARDED)
    start = session.current
    first = _reply(session, _call(rid=1))
    again = _reply(session, json.dumps({**json.loads(_call(rid=1)), "from": start}))
    assert again["effects"] == first["effects"]  # the same state, the same event
    assert first["effects"][0]["kind"] == "StartWorker"
    assert again["state"] == first["state"] + 1 == session.current
    # stepped from the current state instead, the same id is refused as already open
    reused = _reply(session, _call(rid=1))
    assert reused["effects"][0]["kind"] == "Reply"
    for _ in range(sidecar.KEEP):
        _reply(session, _line("ServerStopping", now=1))
    gone = _reply(session, json.dumps({**json.loads(_call(rid=2)), "from": start}))
    assert gone["kind"] == "error"
    assert "no state" in gone["error"]
    keeping = sidecar.Session(init={**GUARDED, "keep": 2})
    first_kept = keeping.current
    for _ in range(2):
        _reply(keeping, _line("ServerStopping", now=1))
    assert sorted(keeping.states) == [first_kept + 1, first_kept + 2]
    effect = _reply(session, json.dumps(jsonwire.encode(core.KillWorker(1))))
    assert effect["kind"] == "error"
    assert "is an effect" in effect["error"]


def test_R_EMB_13_a_bad_line_is_an_error_that_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = sidecar.Session(init=GUARDED)
    witness = sidecar.Session(init=GUARDED)
    current = session.current

    class Raising:
        def step(self, state: Any, event: Any) -> Any:
            raise RuntimeError(f"planted {type(state).__name__} {type(event).__name__}")

    bad = [
        "not json",
        "[1]",
        '{"v":1,"kind":"Nope"}',
        '{"v":9,"kind":"ServerStopping","fields":{"now":1}}',
        _line("TimerFired", key=[1], now=1),
        '{"v":1,"kind":"observe","state":999}',
        '{"a":1,"a":1}',
        "\xff".encode("latin-1").decode("latin-1"),
    ]
    for number, line in enumerate(bad, start=1):
        reply = _reply(session, line)
        assert reply["kind"] == "error", reply
        assert reply["line"] == number, reply
        assert session.current == current
    good = _reply(session, _call())
    assert good["effects"] == _reply(witness, _call())["effects"]
    reducer = session.reducer
    session.reducer = Raising()
    raised = _reply(session, _call(rid=2))
    assert "the reducer raised RuntimeError: planted State ToolCallReceived" in raised["error"]
    session.reducer = reducer
    assert _reply(session, _call(rid=2))["effects"] == _reply(witness, _call(rid=2))["effects"]

    monkeypatch.setattr(sidecar, "MAX_LINE", 64)
    out = io.BytesIO()
    stream = b"x" * 200 + b"\n" + _line("ServerStopping", now=1).encode() + b"\n"
    sidecar.serve_lines(sidecar.Session(), io.BytesIO(stream), out)
    first, second = (json.loads(r) for r in out.getvalue().splitlines())
    assert first["kind"] == "error"
    assert "longer than 64 bytes" in first["error"]
    assert second["kind"] == "effects"


def test_R_EMB_14_the_checking_requests_answer_what_the_models_compare() -> None:
    session = sidecar.Session(init=GUARDED)
    _reply(session, _line("SubscriberAttached", conn="a"))
    inspected = _reply(session, json.dumps({**json.loads(_call()), "inspect": True}))
    state = session.states[session.current]
    obs = ReducerMachine.observe_fn(typing.cast(Any, None), state)
    fields = _reply(session, '{"v":1,"kind":"observe"}')["fields"]
    assert fields == inspected["inspection"]["observe"]["fields"]
    decoded = {k: jsonwire.decode_value(v) for k, v in fields.items()}
    assert decoded == {f.name: getattr(obs, f.name) for f in dataclasses.fields(obs)}
    assert decoded["open"] == {("a", 1): ("authorizing", False)}
    checked = _reply(session, '{"v":1,"kind":"check"}')
    assert checked == {"v": 1, "kind": "checked", "ok": True, "problem": None}
    timers = _reply(session, '{"v":1,"kind":"timers"}')["timers"]
    assert {jsonwire.decode_value(t) for t in timers} == core.live_timers(state) == {("worker", 1)}

    class Broken(sidecar.CoreReducer):
        def check_invariants(self, state: Any) -> None:
            raise core.InvariantError(f"planted in a {type(state).__name__}")

    broken = sidecar.Session(Broken(), GUARDED)
    assert _reply(broken, '{"v":1,"kind":"check"}') == {
        "v": 1,
        "kind": "checked",
        "ok": False,
        "problem": "planted in a State",
    }


def _load_example() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_your_reducer", ROOT / "examples" / "check_your_reducer.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_your_reducer"] = module
    spec.loader.exec_module(module)
    return module


_COPY_GATE = """
import os

import attrs

import buggycore as theirs
import buggycore.jsonwire
from askgate import jsonwire as ours


class Copy:
    '''The copy of the reducer, converting askgate's events to its own classes and back.'''

    def initial_state(self, options, tools, id_key=None):
        opts = theirs.Options(**attrs.asdict(options))
        infos = tuple(theirs.ToolInfo(n, s, False) for n, s in tools)
        key = os.urandom(32) if id_key is None else id_key
        return theirs.initial_state(opts, id_key=key, tools=infos)

    def step(self, state, event):
        state, effects = theirs.step(state, theirs.jsonwire.decode(ours.encode(event)))
        return state, [ours.decode(theirs.jsonwire.encode(e)) for e in effects]

    def check_invariants(self, state):
        theirs.check_invariants(state)

    def live_timers(self, state):
        return theirs.live_timers(state)


reducer = Copy()
"""


def test_R_EMB_15_the_model_based_suite_checks_a_sidecar_and_catches_a_planted_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _load_example()
    command = f"{sys.executable} -m askgate core"
    assert example.main(["--command", command, "--examples", "3"]) == 0
    assert "agreed with the reference model on" in capsys.readouterr().out

    served = _copy_with_bug(
        tmp_path, "decide.py", "    if total >= max_total:", "    if total > max_total:"
    )
    status = example.main(["--command", served, "--examples", "200", "--no-shrink"])
    err = capsys.readouterr().err
    assert status == 1
    assert "disagreed with the reference model" in err
    assert "state.start(" in err
    assert "state.teardown()" in err
    assert "server_busy" in err  # the cap the planted bug lets through


def _copy_with_bug(tmp_path: Path, module: str, old: str, new: str) -> str:
    """A copy of core/ as ``buggycore`` with ``old`` replaced by ``new`` once in ``module``,
    beside a copy of askgate's JSON encoding (askgate/jsonwire.py) that encodes the copy's
    classes, and the command that serves it through ``askgate core --reducer``."""
    shutil.copytree(
        ROOT / "core", tmp_path / "buggycore", ignore=shutil.ignore_patterns("__pycache__")
    )
    wire = (ROOT / "askgate" / "jsonwire.py").read_text(encoding="utf-8")
    (tmp_path / "buggycore" / "jsonwire.py").write_text(
        wire.replace("from askgate.core", "from buggycore"), encoding="utf-8"
    )
    path = tmp_path / "buggycore" / module
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(text.replace(old, new), encoding="utf-8")
    (tmp_path / "copy_gate.py").write_text(_COPY_GATE)
    return f"{sys.executable} -m askgate core --reducer {tmp_path / 'copy_gate.py'}:reducer"


def test_R_EMB_15_the_explorer_steps_a_sidecar_in_lockstep_with_askgate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _load_example()
    command = f"{sys.executable} -m askgate core"
    assert example.main(["--command", command, "--explore", "1", "--config", "tight"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"tight: \d+ states, \d+ transitions in lockstep", out)
    assert re.search(r"agreed with askgate's reducer on [1-9]\d* steps", out)

    served = _copy_with_bug(
        tmp_path, "messages.py", 'f"Tool not found: {tool}"', 'f"No tool: {tool}"'
    )
    assert example.main(["--command", served, "--explore", "1", "--config", "tight"]) == 1
    err = capsys.readouterr().err
    assert "'message': 'No tool: nope'" in err  # theirs
    assert "'message': 'Tool not found: nope'" in err  # askgate's
    assert "after:\n  ToolCallReceived(conn='a', request_id=3, tool='nope'" in err  # the path
    assert example.main(["--explore", "1"]) == 2


def test_R_EMB_16_a_node_host_drives_one_guarded_tool_end_to_end() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the Node host (examples/node_host) cannot run here")
    done = subprocess.run(
        [node, str(ROOT / "examples" / "node_host" / "host.js"), "--selftest"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "ASKGATE": " ".join(ASKGATE)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    cases = [line["case"] for line in lines]
    assert cases == [
        "listed",
        "elicited",
        "approved",
        "elicited",
        "declined",
        "elicited",
        "timed out",
        "stopped",
    ]
    by_case = {line["case"]: line for line in lines}
    assert by_case["listed"]["tools"] == ["remove_file"]
    assert by_case["elicited"]["message"] == "Run remove_file on /tmp/x?"
    approved = by_case["approved"]["reply"]
    assert approved == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"content": [{"type": "text", "text": "removed /tmp/x"}]},
    }
    for case, detail in (("declined", "declined"), ("timed out", "elicitation timed out")):
        refused = by_case[case]["reply"]["result"]
        assert refused["isError"] is True
        assert refused["structuredContent"]["error"] == "authorization_required"
        assert refused["structuredContent"]["detail"] == detail
    assert by_case["stopped"]["status"] == 0


# -- Packaging: what a server imports (docs/performance.md) -------------------------------------

STDIO_NEVER = (
    "askgate.core.http",
    "askgate.core.sse_legacy",
    "askgate.jsonwire",
    "askgate.transports.http",
    "askgate.transports.http_server",
    "askgate.transports.asgi",
    "askgate.transports.auth",
    "askgate.transports.sse_legacy",
    "askgate.transports.sync",
    "askgate.audit",
    "askgate.trace",
    "askgate.explain",
    "askgate.policy_analysis",
    "askgate.adapters",
    "askgate.sidecar",
    "askgate.models",
    "uvicorn",
    "h11",
    "httptools",
    "hypercorn",
    "jsonschema",
    "hypothesis",
)
"""Modules (and packages, with everything under them) a stdio server never imports."""

_SERVE_AND_LIST = """\
import sys
{serve}
print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""

_INITIALIZE_AND_CALL = "".join(
    json.dumps(message) + "\n"
    for message in (
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}},
        },
    )
)


def _modules_of_a_stdio_server(serve: str) -> set[str]:
    """The modules loaded by a process that runs ``serve`` on stdin/stdout (an initialize and
    an echo call, then end of input), once it has served."""
    done = subprocess.run(
        [sys.executable, "-c", _SERVE_AND_LIST.format(serve=serve)],
        input=_INITIALIZE_AND_CALL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [reply["id"] for reply in replies] == [1, 2], done.stdout
    assert replies[1]["result"]["content"] == [{"type": "text", "text": "hi"}]
    return set(done.stderr.splitlines()[-1].split())


def _imported_never(modules: set[str]) -> list[str]:
    return sorted(
        name
        for name in modules
        if any(name == never or name.startswith(never + ".") for never in STDIO_NEVER)
    )


def _modules_of_own_and_demo_stdio_servers(tmp_path: Path) -> tuple[set[str], set[str]]:
    """The modules of a user's own stdio server (one text tool) and of the demo's, each after
    it served."""
    (tmp_path / "own_server.py").write_text(
        "from askgate import Server\n\n"
        "server = Server('own')\n\n\n"
        "@server.tool()\n"
        "async def echo(text: str) -> str:\n"
        "    return text\n",
        encoding="utf-8",
    )
    own = _modules_of_a_stdio_server(
        f"sys.path.insert(0, {str(tmp_path)!r})\nfrom own_server import server\nserver.run_stdio()"
    )
    demo = _modules_of_a_stdio_server(
        "from askgate.__main__ import main\nmain(['serve', '--stdio', '--demo'])"
    )
    return own, demo


def test_a_stdio_server_imports_no_http_stack(tmp_path: Path) -> None:
    own, demo = _modules_of_own_and_demo_stdio_servers(tmp_path)
    for served in (own, demo):
        assert "askgate.transports.stdio" in served  # what served it
        assert _imported_never(served) == []
    # the check sees these modules where they are imported
    assert _imported_never({"askgate.transports.http", "uvicorn.main", "jsonschema_rs"}) == [
        "askgate.transports.http",
        "uvicorn.main",
    ]


STDIO_NOT_AT_START = ("shutil", "bz2", "lzma", "json")
"""Standard modules a stdio server does not import to start and run a tool that returns text."""


def test_a_stdio_server_imports_neither_shutil_nor_json_to_start(
    tmp_path: Path,
) -> None:
    own, demo = _modules_of_own_and_demo_stdio_servers(tmp_path)
    for served in (own, demo):
        assert "askgate.transports.stdio" in served
        assert sorted(name for name in served if name.split(".")[0] in STDIO_NOT_AT_START) == [], (
            served
        )


def test_the_help_is_as_wide_as_shutil_says() -> None:
    """The command's formatter takes the width shutil.get_terminal_size gives (less 2, as
    argparse's own does), from COLUMNS or, without it, 80 off a terminal."""
    script = (
        "import shutil, sys\n"
        "from askgate.__main__ import _formatter\n"
        "print(_formatter('askgate')._width, shutil.get_terminal_size().columns - 2)\n"
    )
    for columns in ("57", "200", None):
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        if columns is not None:
            env["COLUMNS"] = columns
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=True,
        )
        mine, theirs = done.stdout.split()
        assert mine == theirs == str(int(columns or "80") - 2)


def test_a_stdio_server_of_plain_schemas_loads_no_jsonschema_rs() -> None:
    served = _modules_of_a_stdio_server(
        "from askgate.__main__ import main\nmain(['serve', '--stdio', '--demo'])"
    )
    assert "askgate.core.plain_schema" in served  # what checked the echo call's arguments
    assert not {name for name in served if name.split(".")[0] == "jsonschema_rs"}
