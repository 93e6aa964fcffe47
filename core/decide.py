"""The reducer's pure decision functions, small enough to state and check by contract.

Each takes plain values and returns plain values; the ``pre:``/``post:`` lines are checked by
CrossHair (``make crosshair``) and the functions are exercised by the reducer's tests.
"""

from __future__ import annotations

from typing import Literal

from . import messages as m

BusyScope = Literal["", "server", "connection"]
ParkVerdict = Literal["park", "evict", "deny_connection", "deny_server"]


def busy_scope(total: int, max_total: int, conn_count: int, share: int) -> BusyScope:
    """Which in-flight bound refuses a new worker, or "" when it may start (R-ADM-5).

    The server-wide bound is checked first.

    pre: 0 <= total <= max_total and 0 <= conn_count <= share and share <= max_total
    post: (__return__ == "") == (total < max_total and conn_count < share)
    post: (__return__ == "server") == (total >= max_total)
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

    ``top`` is the most parked calls any connection holds (R-PARK-1 .. R-PARK-3).

    pre: 1 <= per_connection_cap <= total_cap
    pre: 0 <= asker_count <= per_connection_cap and asker_count <= top <= per_connection_cap
    pre: 0 <= total <= total_cap and top <= total and asker_count <= total
    post: __return__ != "park" or (asker_count < per_connection_cap and total < total_cap)
    post: __return__ != "evict" or (total == total_cap and asker_count < top)
    post: __return__ != "deny_server" or (total == total_cap and asker_count >= top)
    post: (__return__ == "deny_connection") == (asker_count >= per_connection_cap)
    """
    if asker_count >= per_connection_cap:
        return "deny_connection"
    if total < total_cap:
        return "park"
    if asker_count < top:
        return "evict"
    return "deny_server"


def can_elicit(capabilities: object) -> bool:
    """Whether a client's ``initialize`` capabilities let us send a form elicitation (R-CAP-4).

    ``"elicitation": {}`` means form only; ``{"form": {}}`` form; ``{"url": {}}`` alone is not
    enough: we only ask with forms.

    post: isinstance(capabilities, dict) or not __return__
    post: not __return__ or isinstance(capabilities["elicitation"], dict)
    post: not __return__ or not capabilities["elicitation"] or "form" in capabilities["elicitation"]
    post: __return__ or not isinstance(capabilities, dict) or capabilities.get("elicitation") != {}
    """
    if not isinstance(capabilities, dict):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    return not elicitation or isinstance(elicitation.get("form"), dict)


def is_approval(result: object) -> bool:
    """Exactly: ``action == "accept"`` and ``content.approve`` is the JSON boolean true (R-CLOSE-1).

    post: not __return__ or (isinstance(result, dict) and result["action"] == "accept")
    post: not __return__ or result["content"]["approve"] is True
    """
    if not isinstance(result, dict) or result.get("action") != "accept":
        return False
    content = result.get("content")
    return isinstance(content, dict) and content.get("approve") is True


def refusal_detail(result: object) -> str:
    """The deny ``detail`` of an answer that is not an approval (R-CLOSE-2).

    post: __return__ in ("declined", "cancelled", "not approved")
    """
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
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))
