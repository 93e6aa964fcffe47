"""The records of calls (spec/rules.md, "Records", R-LOG-1 .. R-LOG-4) and the deny's sentence
(R-DLV-4), on the reducer alone."""

from __future__ import annotations

import json

import pytest

from askgate.core import (
    Allow,
    Ask,
    CallerExited,
    CancelRequested,
    Deny,
    Emit,
    ReadRequested,
    Reply,
    SubscriberDetached,
    TimerFired,
    ToolInfo,
    ToolRegistered,
    WorkerFailed,
)
from tests.harness import (
    APPROVE,
    Harness,
    deny_payload,
    elicitation_id,
    ended,
    only_reply,
    records,
)

DECLINE = {"action": "decline"}


def test_R_DLV_4_every_deny_carries_a_sentence_saying_what_happened() -> None:
    h = Harness(has_authorizer=True, elicitation_timeout_ms=90_000)
    h.connect("a")
    h.call("a", 1, "delete_file")
    h.finish(h.worker(), Deny("forbidden by policy"))
    message = only_reply(h.effects)
    payload = deny_payload(message)
    assert payload["message"] == (
        "delete_file was not run: the server's policy denies it (forbidden by policy)"
    )
    assert json.loads(message["result"]["content"][0]["text"]) == payload  # the text block too
    h.call("a", 2)
    h.feed(WorkerFailed(h.worker(), 0))
    assert deny_payload(only_reply(h.effects))["message"] == (
        "echo was not run: the server's policy failed to decide on it"
    )
    eid = h.park("a", 3)
    h.answer("a", eid, DECLINE)
    assert deny_payload(only_reply(h.effects))["message"] == (
        "echo was not run: the approval was declined"
    )
    eid = h.park("a", 4)
    h.feed(TimerFired(("elicitation", eid), 90_000))
    assert deny_payload(only_reply(h.effects))["message"] == (
        "echo was not run: no one approved it within 90 s"
    )
    odd = Harness(has_authorizer=True, elicitation_timeout_ms=1_500)
    odd.connect("a")
    eid = odd.park("a", 1)
    odd.feed(TimerFired(("elicitation", eid), 1_500))
    assert deny_payload(only_reply(odd.effects))["message"].endswith("within 1500 ms")
    unguarded = Harness()
    unguarded.feed(ToolRegistered("wipe", sensitive=True))
    unguarded.call("a", 1, "wipe")
    assert deny_payload(only_reply(unguarded.effects))["message"] == (
        "wipe was not run: it is marked sensitive and the server has no policy to allow it"
    )


def test_R_DLV_4_a_deny_quoting_the_arguments_is_kept_by_nothing_after_its_reply() -> None:
    from askgate.core import messages  # noqa: PLC0415 (the deny texts' cache)

    h = Harness(has_authorizer=True)
    h.connect("a")
    h.connect("mute", {})  # declares no elicitation: an Ask is denied with its prompt
    held = messages._deny_text.cache_info().currsize
    for i in range(3):
        h.call("a", i, "delete_file", {"path": f"/secret/{i}"})
        h.finish(h.worker(), Deny(f"no deleting /secret/{i}"))
        assert "/secret/" in deny_payload(only_reply(h.effects))["message"]
        h.call("mute", i, "delete_file", {"path": f"/secret/{i}"})
        h.finish(h.worker(), Ask(f"Delete /secret/{i}?"))
        assert deny_payload(only_reply(h.effects))["detail"] == f"Delete /secret/{i}?"
    assert messages._deny_text.cache_info().currsize == held
    # A canned deny is what the cache is for: the same text, encoded once.
    hits = messages._deny_text.cache_info().hits
    for i in (10, 11):
        h.call("a", i)
        h.feed(WorkerFailed(h.worker(), 0))
        assert deny_payload(only_reply(h.effects))["detail"] == "authorizer failed"
    assert messages._deny_text.cache_info().hits > hits


def test_R_LOG_1_exactly_one_call_ended_per_tools_call_after_its_answer() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    assert records(h.call("a", 1)) == []  # still open: authorizing
    ref = h.worker()
    assert records(h.finish(ref, Ask("ok?"))) == []  # parked
    eid = elicitation_id(h.effects)
    effects = h.answer("a", eid, APPROVE)
    assert records(effects) == []  # approved, running
    effects = h.finish(h.worker(), {"content": []})
    assert [type(e) for e in effects][-2:] == [Reply, Emit]  # the record after the answer
    assert len(records(effects)) == 1
    assert records(h.call("a", 2, "nope")) == [  # answered at once: unknown tool
        ended("a", 2, "unknown_tool", "nope").fields
    ]
    assert records(h.call("a", None)) == []  # R-ADM-0: not a usable id
    h.call("a", 3)
    assert records(h.call("a", 3)) == []  # R-ADM-1: the reused id; the open call goes on
    assert records(h.feed(ReadRequested("a", 4, "tools/list", {}, 0))) == []  # a read


def test_R_LOG_2_call_ended_says_who_what_and_how_it_ended() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.now = 100
    eid = h.park("a", 1, prompt="Delete /etc/passwd?")
    h.now = 2_400
    effects = h.answer("a", eid, APPROVE)
    effects = h.finish(h.worker(), {"content": [], "isError": True})
    assert records(effects) == [
        ended(
            "a",
            1,
            "tool_error",
            decision="ask",
            approved=True,
            elicitation_id=eid,
            started=100,
            duration=2_300,
        ).fields
    ]
    ref = h.allow("a", 2)
    assert records(h.finish(ref, {"content": []}))[0]["decision"] == "allow"
    ref = h.allow("a", 2)
    assert records(h.feed(WorkerFailed(ref, 0)))[0]["outcome"] == "failed"
    ref = h.allow("a", 2)
    assert records(h.feed(TimerFired(("worker", ref), 0)))[0]["outcome"] == "timed_out"
    h.call("a", 3)
    h.finish(h.worker(), Deny("no"))
    assert records(h.effects)[0]["outcome"] == "denied"
    assert records(h.effects)[0]["detail"] == "no"
    assert records(h.effects)[0]["approved"] is None
    # a deny-on-ASK: the wire detail is the prompt; the record does not repeat it
    mute = Harness(has_authorizer=True)
    mute.connect("a", {})
    mute.call("a", 1)
    mute.finish(mute.worker(), Ask("Delete /etc/passwd?"))
    assert deny_payload(only_reply(mute.effects))["detail"] == "Delete /etc/passwd?"
    fields = records(mute.effects)[0]
    assert fields["detail"] == "client cannot be asked"
    assert (fields["decision"], fields["approved"]) == ("ask", False)
    assert "Delete" not in repr(fields)
    # drops, by why
    h.park("a", 4, caller="k")
    h.call("a", 5)
    h.call("a", 6)
    assert records(h.feed(CancelRequested("a", 5, 2_400)))[0]["detail"] == "cancelled"
    assert records(h.feed(CallerExited("k", 2_400)))[0]["detail"] == "caller gone"
    gone = records(h.feed(SubscriberDetached("a", 2_400)))
    assert [(r["request_id"], r["outcome"], r["detail"]) for r in gone] == [
        (6, "dropped", "connection gone")
    ]
    # busy: the scope is the detail
    busy = Harness(has_authorizer=True, max_in_flight=1)
    busy.call("a", 1)
    assert records(busy.call("b", 1)) == [ended("b", 1, "busy", detail="server").fields]


def test_R_LOG_2_an_evicted_call_names_its_evictor() -> None:
    h = Harness(has_authorizer=True, max_parked_elicitations=2, max_parked_elicitations_total=2)
    for conn in ("a", "b"):
        h.connect(conn)
    victim = h.park("a", 1)
    h.park("a", 2)
    h.call("b", 7)
    effects = h.finish(h.worker(), Ask("ok?"))
    [record] = records(effects)
    assert (
        record
        == ended(
            "a",
            1,
            "denied",
            decision="ask",
            approved=False,
            detail="evicted to make room on this server",
            elicitation_id=victim,
            evicted_by="b",
        ).fields
    )


def test_R_LOG_3_a_park_is_recorded_after_its_prompt() -> None:
    h = Harness(has_authorizer=True)
    h.connect("a")
    h.call("a", 1, mode="push")
    effects = h.finish(h.worker(), Ask("ok?"))
    eid = elicitation_id(effects)
    assert effects[-2:] == [
        Reply("a", 1, None),
        Emit("call_parked", {"conn": "a", "request_id": 1, "tool": "echo", "elicitation_id": eid}),
    ]
    assert records(effects) == []


@pytest.mark.parametrize(
    ("decision", "detail"),
    [(Deny("no"), "no"), (Ask("may I?"), "interactive approval unsupported")],
)
def test_R_LOG_4_a_read_deny_is_recorded(decision: object, detail: str) -> None:
    h = Harness((ToolInfo("echo", False, False),), has_authorizer=True, has_read_authorizer=True)
    h.feed(ReadRequested("a", 1, "resources/read", {"uri": "x://y"}, 0))
    effects = h.finish(h.worker(), decision)
    assert only_reply(effects)["error"]["code"] == -32090
    assert effects[-1] == Emit(
        "read_denied", {"conn": "a", "request_id": 1, "method": "resources/read", "detail": detail}
    )
    assert records(effects) == []
    h.feed(ReadRequested("a", 2, "resources/read", {"uri": "x://y"}, 0))
    h.finish(h.worker(), Allow())  # an allowed read is not recorded
    assert [e for e in h.effects if isinstance(e, Emit)] == []
