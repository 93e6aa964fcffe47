"""What differs between protocol revisions: how an approval and a running tool's own requests
look on the wire (spec/revisions.md, R-REV-*).

Parking, caps, eviction and timeouts decide *that* an approval is asked (the call, the prompt,
the minted approval id, the deadline), *that* it is withdrawn, and what an answer means; the
connection's :class:`Revision`, chosen once from its negotiated protocol version by
:func:`revision_for`, renders those decisions as messages. The answer comes back through the
door (:mod:`askgate.core.door`) as an ``ElicitationAnswered`` naming the approval id. No handler
compares version strings: a new revision is a new :class:`Revision` value and its table entries.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from . import messages as m

JsonObject = dict[str, Any]


@attrs.frozen(slots=True)
class Revision:
    """How one family of protocol versions carries approvals and a tool's requests.

    ``form_mode``: an ``elicitation/create`` names its mode (``"mode": "form"``, R-REV-2).
    """

    name: str
    form_mode: bool

    def ask(self, approval_id: str, tool: str, prompt: str) -> JsonObject:
        """The request that asks the owner to approve the parked call (R-REV-2)."""
        request = m.elicitation_request(approval_id, tool, prompt)
        if not self.form_mode:
            del request["params"]["mode"]
        return request

    def withdraw(self, approval_id: str, reason: str) -> JsonObject:
        """Tells the owner that the approval (or a tool's request) no longer matters (R-REV-3)."""
        return m.elicitation_cancelled(approval_id, reason)

    def request_params(self, method: object, params: object) -> JsonObject | None:
        """The params a running tool's request carries on the wire, or ``None`` when they are
        malformed or the method is not one a tool may send (R-CTX-4, R-REV-4)."""
        if not isinstance(params, dict):
            return None
        if method == "elicitation/create":
            message, schema = params.get("message"), params.get("requestedSchema")
            if not isinstance(message, str) or not isinstance(schema, dict):
                return None
            sent: JsonObject = {"message": message, "requestedSchema": schema}
            return {"mode": "form", **sent} if self.form_mode else sent
        if method == "sampling/createMessage":
            tokens = params.get("maxTokens")
            if not isinstance(params.get("messages"), list) or not (
                isinstance(tokens, int) and not isinstance(tokens, bool)
            ):
                return None
            return dict(params)
        return None

    def tool_request(self, request_id: str, method: str, params: JsonObject) -> JsonObject:
        """A running tool's request to its client, with params from :meth:`request_params`
        (R-REV-4)."""
        return m.client_request(request_id, method, params)


ELICITATION_FORM: Final = Revision("2025-11-25", form_mode=True)
"""2025-11-25: elicitation requests name their mode."""

ELICITATION_PLAIN: Final = Revision("2025 (before 2025-11-25)", form_mode=False)
"""2024-11-05, 2025-03-26 and 2025-06-18: elicitation requests carry no mode."""

REVISIONS: Final[dict[str, Revision]] = {
    "2025-11-25": ELICITATION_FORM,
    "2025-06-18": ELICITATION_PLAIN,
    "2025-03-26": ELICITATION_PLAIN,
    "2024-11-05": ELICITATION_PLAIN,
}
"""Each negotiable protocol version and the revision that renders it (R-REV-1)."""

DEFAULT: Final = ELICITATION_FORM
"""The revision of a connection that negotiated no version (an embedder's connection that never
sent ``initialize``): the latest (R-REV-1)."""


def revision_for(version: str) -> Revision:
    """R-REV-1: the revision of a connection that negotiated ``version`` ("" for none)."""
    return REVISIONS.get(version, DEFAULT)
