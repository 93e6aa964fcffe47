"""``askgate explain``: the path each ``tools/call`` of a trace took, step by step, with the
time of each step and the rule ids that decided it (spec/audit.md, R-AUD-7). The rule ids come
from :mod:`askgate.ruleids`.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from askgate.core import Effect, Emit, Push, Reply, StartWorker, State
from askgate.core import messages as m
from askgate.core.jobs import Authorize, RunTool, UnknownToolReply
from askgate.core.state import Stage
from askgate.ruleids import STEP_RULES, ended_rules
from askgate.trace import Walker, decode
from askgate.transports.calllog import conn_text

__all__ = ["explain", "render"]


# -- explain --------------------------------------------------------------------------------------


def _key_text(key: tuple[Hashable, Hashable]) -> str:
    return f"{conn_text(key[0])}/{key[1]}"


def _admission(call_worker: int, effects: Sequence[Effect], had_authorizer: bool) -> str:
    for effect in effects:
        if isinstance(effect, StartWorker) and effect.ref == call_worker:
            if isinstance(effect.job, Authorize):
                return "admitted, authorizer asked"
            if isinstance(effect.job, UnknownToolReply):
                return "admitted, unknown tool"
            if isinstance(effect.job, RunTool):
                return (
                    "admitted, no authorizer" if not had_authorizer else "admitted, approved retry"
                )
    return "admitted"


def explain(
    head: dict[str, Any],
    steps: list[dict[str, Any]],
    *,
    call: str | None = None,
    keys: Mapping[str, bytes] | None = None,
) -> list[dict[str, Any]]:
    """For each ``tools/call`` of the trace (or only those whose request id is ``call``), its
    path: ``{"call", "conn", "request_id", "tool", "steps": [{"step", "now", "what", "rules",
    ...}]}``, in the order the calls were admitted. Built from the recorded effects; the states
    between steps come from re-running the reducer (R-AUD-7), with the run's ``keys`` or stand-ins
    for them (R-AUD-12)."""
    walker = Walker(head, keys=keys)
    paths: dict[tuple[Hashable, Hashable], dict[str, Any]] = {}
    retried: dict[tuple[Hashable, Hashable], tuple[object, int]] = {}

    def path(key: tuple[Hashable, Hashable], tool: object) -> dict[str, Any]:
        found = paths.get(key)
        if found is None:
            found = paths[key] = {
                "call": _key_text(key),
                "conn": conn_text(key[0]),
                "request_id": key[1],
                "tool": tool,
                "steps": [],
            }
        return found

    for number, record in enumerate(steps, 1):
        n = int(record.get("n", number))
        recorded = [decode(e) for e in record["effects"]]
        before, event, _, _ = walker.step(record, n)
        state = walker.state
        now = getattr(event, "now", None)

        def add(
            key: tuple[Hashable, Hashable],
            tool: object,
            what: str,
            n: int = n,
            now: object = now,
            **extra: Any,
        ) -> None:
            rules = extra.pop("rules", None) or STEP_RULES[what.split(" (", maxsplit=1)[0]]
            entry = {"step": n, "now": now, "what": what, "rules": list(rules), **extra}
            path(key, tool)["steps"].append(entry)

        for key, after in state.calls.items():
            if not after.is_tool:
                continue
            was = before.calls.get(key)
            if was is None:
                what = _admission(after.worker, recorded, before.options.has_authorizer)
                add(key, after.name, what)
            elif was.stage is not after.stage:
                if after.stage is Stage.RUNNING and was.stage is Stage.AUTHORIZING:
                    add(key, after.name, "authorized: allow")
                elif after.stage is Stage.RUNNING and was.stage is Stage.PARKED:
                    add(key, after.name, "answered: approved")
        for effect in recorded:
            if not isinstance(effect, Emit):
                continue
            fields = effect.fields
            key = (fields.get("conn"), fields.get("request_id"))
            if effect.name == "call_parked":
                eid = fields.get("elicitation_id")
                add(key, fields.get("tool"), f"parked ({eid})", approval=eid)
            elif effect.name == "call_ended":
                _ended(before, key, fields, recorded, add)
                if fields.get("elicitation_id") is not None:
                    retried[key] = (fields["elicitation_id"], n)
    _link_retries(paths, retried)
    found = list(paths.values())
    if call is not None:
        found = [p for p in found if str(p["request_id"]) == call or p["call"] == call]
    return found


RETRY_RULES = ("R-MRTR-12", "R-MRTR-13")
"""The rules of a 2026-07-28 approval's retry: the approval parked a nonce and answered with a
state (R-MRTR-12); the retry carrying it runs the tool once, only when approved (R-MRTR-13)."""


def _link_retries(
    paths: dict[tuple[Hashable, Hashable], dict[str, Any]],
    retried: dict[tuple[Hashable, Hashable], tuple[object, int]],
) -> None:
    """Links each call that ended under an approval another call parked (a 2026-07-28 retry,
    R-AUD-7) to that call: the retry's admission says whose approval it carried, and the
    parked call gains a step ``retried as call ...`` at the retry's admission."""
    parked_by = {
        entry["approval"]: key
        for key, found in paths.items()
        for entry in found["steps"]
        if "approval" in entry
    }
    for key, (approval, _) in retried.items():
        origin = parked_by.get(approval)
        if origin is None or origin == key:
            continue  # the call's own approval (the 2025 flow), or one before the trace
        retry, first = paths[key], paths[origin]
        retry["retry_of"] = first["call"]
        first.setdefault("retried_by", []).append(retry["call"])
        admitted = next(s for s in retry["steps"] if s["what"].startswith("admitted"))
        admitted["what"] = f"admitted, retry of call {first['call']} (approval {approval})"
        admitted["rules"] = list(dict.fromkeys([*admitted["rules"], *RETRY_RULES]))
        admitted["approval"] = approval
        first["steps"].append(
            {
                "step": admitted["step"],
                "now": admitted["now"],
                "what": f"retried as call {retry['call']}",
                "rules": list(RETRY_RULES),
            }
        )


def _ended(before: State, key: Any, fields: dict[str, Any], recorded: list[Any], add: Any) -> None:
    tool = fields.get("tool")
    was = before.calls.get(key)
    if was is None:
        add(key, tool, "admitted")  # answered in the step that admitted it
    outcome, detail = fields.get("outcome"), fields.get("detail")
    extra: dict[str, Any] = {"outcome": outcome, "detail": detail}
    if fields.get("evicted_by") is not None:
        extra["evicted_by"] = conn_text(fields["evicted_by"])
    if outcome in ("result", "tool_error", "failed", "timed_out", "stopped"):
        what = "ran" if outcome != "timed_out" else "ran (timed out)"
    elif outcome == "denied" and was is not None and was.stage is Stage.PARKED:
        what = f"answered ({detail})"
        if detail == m.EVICTED:
            what = "evicted"
        elif detail == m.TIMED_OUT:
            what = "timed out"
    else:
        what = f"ended ({outcome}: {detail})" if detail else f"ended ({outcome})"
    add(key, tool, what, rules=ended_rules(fields), **extra)
    pushed = any(isinstance(e, Push) and e.related == key[1] for e in recorded)
    replied = any(isinstance(e, Reply) and e.request_id == key[1] for e in recorded)
    if pushed and not replied:
        add(key, tool, "replied by push")
    else:
        add(key, tool, "replied")


def render(paths: list[dict[str, Any]], *, fmt: str = "text", runs: int = 1) -> str:
    """The paths as text (one block per call; with ``runs`` > 1, each run's calls under a line
    ``run N of M``, the paths' ``run``) or JSON."""
    if fmt == "json":
        return json.dumps(paths, indent=2, default=str)
    lines: list[str] = []
    run = None
    for p in paths:
        if runs > 1 and p.get("run") != run:
            run = p.get("run")
            lines += [*([""] if lines else []), f"run {run} of {runs}:"]
        lines.append(f"call {p['call']} {p['tool']}")
        for s in p["steps"]:
            now = "" if s["now"] is None else f"t={s['now']} ms "
            lines.append(f"  step {s['step']:>4} {now}{s['what']}  [{', '.join(s['rules'])}]")
    return "\n".join(lines)
