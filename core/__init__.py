"""askgate.core: the pure, synchronous reducer that makes every decision.

``step(state, event) -> (state, effects)``. No I/O, no clock, no randomness, no threads: time
comes in on events, timers go out as effects, and the shell performs effects and reports what
happened as new events. The rules are in spec/rules.md; :data:`CALL_TRANSITIONS` and
:data:`EVENT_TRANSITIONS` are rendered into spec/transitions.md.
"""

from typing import TYPE_CHECKING, Any

from .decisions import Allow, Ask, Decision, Deny, Failure, NeedsInput, Raised
from .effects import (
    RECORDS,
    CancelTimer,
    Effect,
    Emit,
    KillWorker,
    Push,
    Reply,
    Resolve,
    StartTimer,
    StartWorker,
)
from .events import (
    CallerExited,
    CancelRequested,
    CatalogChanged,
    ClientInitialized,
    ClientReady,
    ElicitationAnswered,
    Event,
    LogEmitted,
    MessageReceived,
    PingReceived,
    ReadRequested,
    ResourceUpdated,
    ServerStopping,
    SubscriberAttached,
    SubscriberDetached,
    TimerFired,
    ToolCallReceived,
    ToolLogged,
    ToolProgressed,
    ToolRegistered,
    ToolRequested,
    ToolUnregistered,
    WorkerFailed,
    WorkerFinished,
)
from .jobs import (
    Authorize,
    AuthorizeRead,
    FilterTools,
    Job,
    Round,
    RunRead,
    RunTool,
    UnknownToolReply,
)
from .options import OptionError, Options
from .reducer import (
    CALL_TRANSITIONS,
    CLIENT_REQUEST_TIMER,
    ELICITATION_TIMER,
    EVENT_TRANSITIONS,
    PARKED_TRANSITIONS,
    WORKER_TIMER,
    mint_elicitation_id,
    step,
)
from .state import Stage, State, initial_state
from .tools import ToolInfo

if TYPE_CHECKING:
    from .invariants import InvariantError, check_invariants, live_timers

__all__ = [
    "CALL_TRANSITIONS",
    "CLIENT_REQUEST_TIMER",
    "ELICITATION_TIMER",
    "EVENT_TRANSITIONS",
    "PARKED_TRANSITIONS",
    "RECORDS",
    "WORKER_TIMER",
    "Allow",
    "Ask",
    "Authorize",
    "AuthorizeRead",
    "CallerExited",
    "CancelRequested",
    "CancelTimer",
    "CatalogChanged",
    "ClientInitialized",
    "ClientReady",
    "Decision",
    "Deny",
    "Effect",
    "ElicitationAnswered",
    "Emit",
    "Event",
    "Failure",
    "FilterTools",
    "InvariantError",
    "Job",
    "KillWorker",
    "LogEmitted",
    "MessageReceived",
    "NeedsInput",
    "OptionError",
    "Options",
    "PingReceived",
    "Push",
    "Raised",
    "ReadRequested",
    "Reply",
    "Resolve",
    "ResourceUpdated",
    "Round",
    "RunRead",
    "RunTool",
    "ServerStopping",
    "Stage",
    "StartTimer",
    "StartWorker",
    "State",
    "SubscriberAttached",
    "SubscriberDetached",
    "TimerFired",
    "ToolCallReceived",
    "ToolInfo",
    "ToolLogged",
    "ToolProgressed",
    "ToolRegistered",
    "ToolRequested",
    "ToolUnregistered",
    "UnknownToolReply",
    "WorkerFailed",
    "WorkerFinished",
    "check_invariants",
    "initial_state",
    "live_timers",
    "mint_elicitation_id",
    "step",
]


def __getattr__(name: str) -> Any:
    """The invariant checker (:mod:`askgate.core.invariants`), imported when first named: a
    server checks invariants in debug mode only."""
    if name in ("InvariantError", "check_invariants", "live_timers"):
        from . import invariants  # noqa: PLC0415

        return getattr(invariants, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
