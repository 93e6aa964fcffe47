"""The reducer's pure decision functions, small enough to state and check by contract.

Each takes plain values and returns plain values. The ``pre:``/``post:`` lines are checked by
CrossHair (``make crosshair``, and ``tests/test_crosshair.py`` in ``make test``) and the functions
are exercised by the reducer's tests. Where a rule of ``spec/rules.md`` decides the answer for
every input, the postconditions are equalities (``__return__ == ...``, or one ``==`` per possible
answer) that restate the rule, so any version that answers differently for some input is a
counterexample.
"""

from __future__ import annotations

from typing import Literal

from . import messages as m

BusyScope = Literal["", "server", "connection"]
ParkVerdict = Literal["park", "evict", "deny_connection", "deny_server"]
FullServerVerdict = Literal["evict", "deny_server"]


def busy_scope(total: int, max_total: int, conn_count: int, share: int) -> BusyScope:
    """Which in-flight bound refuses a new worker, or "" when it may start (R-ADM-5).

    The server-wide bound is checked first.

    pre: 0 <= total <= max_total and 0 <= conn_count <= share and share <= max_total
    post: (__return__ == "server") == (total >= max_total)
    post: (__return__ == "connection") == (total < max_total and conn_count >= share)
    post: (__return__ == "") == (total < max_total and conn_count < share)
    """
    if total >= max_total:
        return "server"
    if conn_count >= share:
        return "connection"
    return ""


def park_verdict(
    asker_count: int, per_connection_cap: int, total: int, total_cap: int, top: int
) -> ParkVerdict:
    """What an ASK from an askable connection holding ``asker_count`` parked calls gets.

    ``top`` is the most parked calls any connection holds. The per-connection cap is checked
    first (R-PARK-1); a full server is decided by :func:`full_server_verdict` (R-PARK-3).

    pre: 1 <= per_connection_cap <= total_cap
    pre: 0 <= asker_count <= per_connection_cap and asker_count <= top <= per_connection_cap
    pre: 0 <= total <= total_cap and top <= total and asker_count <= total
    post: (__return__ == "deny_connection") == (asker_count >= per_connection_cap)
    post: (__return__ == "park") == (asker_count < per_connection_cap and total < total_cap)
    post: (__return__ == "evict") == (total == total_cap and asker_count < top)
    post: (__return__ == "deny_server") == (total == total_cap and top <= asker_count < per_connection_cap)
    """  # noqa: E501
    if asker_count >= per_connection_cap:
        return "deny_connection"
    if total < total_cap:
        return "park"
    return full_server_verdict(asker_count, top)


def full_server_verdict(asker_count: int, top: int) -> FullServerVerdict:
    """Who yields when an ASK finds every parked slot of the server taken (R-PARK-3).

    The asker, below its per-connection cap, evicts iff it holds fewer parked calls than the
    connection holding the most (``top``); otherwise it is refused. So the asker is never the
    victim (R-PARK-4), and a connection can only push out one that holds more than it does.

    pre: 0 <= asker_count <= top
    post: (__return__ == "evict") == (asker_count < top)
    post: (__return__ == "deny_server") == (asker_count >= top)
    """
    if asker_count < top:
        return "evict"
    return "deny_server"


def can_elicit(capabilities: object) -> bool:
    """Whether a client's ``initialize`` capabilities let us send a form elicitation (R-CAP-4).

    Exactly when ``capabilities.elicitation`` is an object that is empty (form only) or has a
    ``form`` object; ``{"url": {}}`` alone is not enough: we only ask with forms.

    post: __return__ == (isinstance(capabilities, dict) and isinstance(capabilities.get("elicitation"), dict) and (len(capabilities["elicitation"]) == 0 or isinstance(capabilities["elicitation"].get("form"), dict)))
    """  # noqa: E501
    if not isinstance(capabilities, dict):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    return not elicitation or isinstance(elicitation.get("form"), dict)


def is_approval(result: object) -> bool:
    """Exactly: ``action == "accept"`` and ``content`` is ``{"approve": true}`` (R-CLOSE-1).

    ``"ACCEPT"``, ``"accepted"`` or a missing action do not accept; the content is
    :func:`approves`'s to judge (its own function so that CrossHair, slow to search nested
    values, finds an approving answer within a small budget: a never-approving version is then
    refuted in seconds).

    post: __return__ == (isinstance(result, dict) and result.get("action") == "accept" and approves(result.get("content")))
    """  # noqa: E501
    if not isinstance(result, dict) or result.get("action") != "accept":
        return False
    return approves(result.get("content"))


def approves(content: object) -> bool:
    """Whether an accepted answer's ``content`` approves: it is exactly ``{"approve": true}``,
    ``approve`` the JSON boolean true and no other key.

    ``"true"``, ``1``, ``1.0``, a missing field or a field the schema does not have is not
    consent (R-CLOSE-1); a missing or malformed content is no approval.

    post: __return__ == (isinstance(content, dict) and set(content) == {"approve"} and isinstance(content["approve"], bool) and content["approve"])
    """  # noqa: E501
    return isinstance(content, dict) and len(content) == 1 and content.get("approve") is True


def refusal_detail(result: object) -> str:
    """The deny ``detail`` of an answer that is not an approval (R-CLOSE-2).

    ``declined`` exactly for action ``decline``, ``cancelled`` exactly for action ``cancel``,
    ``not approved`` for anything else (an accept without approval, another or a missing
    action, a result that is not an object).

    post: (__return__ == "declined") == (isinstance(result, dict) and result.get("action") == "decline")
    post: (__return__ == "cancelled") == (isinstance(result, dict) and result.get("action") == "cancel")
    post: __return__ in ("declined", "cancelled", "not approved")
    """  # noqa: E501
    action = result.get("action") if isinstance(result, dict) else None
    if action == "decline":
        return m.DECLINED
    if action == "cancel":
        return m.CANCELLED
    return m.NOT_APPROVED


def is_request_id(value: object) -> bool:
    """MCP request ids are strings or integers; never a bool, a float or null (R-ADM-0).

    post: __return__ == (isinstance(value, (str, int)) and not isinstance(value, bool))
    """
    kind = type(value)  # a str or an int itself, asked first: every request asks
    if kind is str or kind is int:
        return True
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
