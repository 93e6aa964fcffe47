"""Mutation testing of the reducer: evidence that the checks can fail.

    python bench/mutate.py [--jobs N] [--budget SECONDS] [--only NAME ...] [--full]
                           [--files TEST_FILE ...] [--model-suite] [--source worktree|head]
                           [--out PATH] [--keep] [--list]

Each mutant below is one hand-written, plausible bug: an exact edit (old text -> new text) of
one file under ``core/``; the old text must occur exactly once. For each mutant the repository
is copied to a temporary directory (the files ``git ls-files`` names, as they are in the working
tree, or as committed with ``--source head``), the edit is applied to the copy, and the test
files relevant to the edited file run against the copy, one ``pytest -x`` after another, fastest
killers first. The real working tree is never written to, except for the results file.

The copy's root is put first on ``PYTHONPATH``, and the copy gets the links the repository
has not (``askgate/core -> ../core`` and the like: ``bench/trees.py``, ``link_in_place``), so
that its packages import as the wheel lays them out and the copy's tests import the copy's
code, in the test process and in any subprocess it starts (CrossHair). A sanity run checks
that, and that the unmutated copy passes every file, before any mutant runs; and each mutant
checks that the module it imports holds the mutated text.

A mutant is *killed* when a test file fails, *timeout* when it runs past its budget (counted as
killed: the suite did not pass), *survived* when every file passes. Results go to
``bench/results/mutation.json`` (or ``--out``); the exit status is 1 when a mutant survived that
is not marked equivalent (see "Equivalent mutants" in spec/rules.md), or a mutant could not be
applied. A kill is credited to the first file that fails, in the order above, so the results
say what the whole suite kills, not what each checker kills alone.

``--model-suite`` measures the model-based suite alone: ``tests/test_explore.py`` (the exhaustive
explorer) and ``tests/test_model.py`` (the Hypothesis machine against the reference model), no
other test file, results in ``bench/results/mutation_model.json``. Mutants of what the model
leaves out by design (``outside_model``: the wire codec, the protocol layer, progress and logs,
the invariant checker itself) are not run; the report lists them with the reason.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # the sibling helpers
from trees import link_in_place

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "mutation.json"
MODEL_RESULTS = ROOT / "bench" / "results" / "mutation_model.json"

# Test files in the order they run for a mutant: the fastest, most pointed killers first.
# A file that does not exist in the copy (test_model.py before it lands) is skipped.
REDUCER_SUITE = (
    "tests/test_rules.py",
    "tests/test_records.py",
    "tests/test_context.py",
    "tests/test_protocol.py",
    "tests/test_door.py",
    "tests/test_revisions.py",
    "tests/test_modern.py",
    "tests/test_catalogue_life.py",
    "tests/test_totality.py",
    "tests/test_explore.py",
    "tests/test_model.py",
    "tests/test_mutation_kills.py",
)
# The model-based suite alone (``--model-suite``): the explorer first, it is the faster.
MODEL_SUITE = ("tests/test_explore.py", "tests/test_model.py")
SUITES: dict[str, tuple[str, ...]] = {
    # CrossHair checks the contracts of decide.py, options.py and protocol.py: it runs for
    # their mutants, last.
    "core/decide.py": (*REDUCER_SUITE, "tests/test_crosshair.py"),
    "core/options.py": (*REDUCER_SUITE, "tests/test_crosshair.py"),
    "core/protocol.py": (*REDUCER_SUITE, "tests/test_crosshair.py"),
    "core/codec.py": (
        "tests/test_codec.py",
        "tests/test_protocol.py",
        "tests/test_mutation_kills.py",
    ),
    # The sealed approval state of the 2026-07-28 revision: its own tests, then its contracts.
    "core/sealing.py": ("tests/test_sealing.py", "tests/test_crosshair.py"),
    # The approvals store: its contract suite first, then the reducer's.
    "core/store.py": ("tests/test_store.py", *REDUCER_SUITE),
    # Tasks (spec/tasks.md): their own tests, then the reducer's (the models among them).
    "core/tasks.py": ("tests/test_tasks.py", *REDUCER_SUITE),
}


@dataclass(frozen=True)
class Mutant:
    """One bug: replace ``old`` (which must occur exactly once) by ``new`` in ``path``."""

    name: str
    path: str
    old: str
    new: str
    rules: tuple[str, ...]
    what: str
    # Why the mutant cannot change behaviour, when it was judged equivalent (spec/rules.md).
    equivalent: str = ""
    # The same edit in another spelling of the code (the committed one, when the working tree
    # has moved on): used when ``old`` does not occur. Exactly one spelling must occur, once.
    or_old: str = ""
    or_new: str = ""
    # Why the model-based suite (the reference model and the explorer) cannot kill the mutant by
    # design, when it mutates what the model leaves out (``--model-suite`` skips it).
    outside_model: str = ""

    # The test files to run, when not those of SUITES (``--files``).
    files: tuple[str, ...] = ()

    def suite(self) -> tuple[str, ...]:
        return self.files or SUITES.get(self.path, REDUCER_SUITE)


REDUCER = "core/reducer.py"
OWNER_TESTS = "tests/test_catalogue_owner.py"  # R-SUB-3, R-PARK-5 .. R-PARK-7, R-ADM-6 first
DECIDE = "core/decide.py"
INVARIANTS = "core/invariants.py"
OPTIONS = "core/options.py"
CODEC = "core/codec.py"
PROTOCOL = "core/protocol.py"
DOOR = "core/door.py"
REVISIONS = "core/revisions.py"
SEALING = "core/sealing.py"
MESSAGES = "core/messages.py"
STORE = "core/store.py"
TASKS = "core/tasks.py"

# Why a mutant is outside what the model-based suite checks (models/reference.py, "The model
# covers ..."): ``--model-suite`` skips these and says so in its report.
_WIRE_CAPS = (
    "the codec's byte and depth caps: every client event the models draw also goes through the "
    "codec as its message, but those messages are far below both caps"
)
_WIRE_BOOL_ID = (
    "the codec's id check: past it, the reducer refuses a bool id itself (R-ADM-0), so through "
    "the whole entry the mutant changes nothing a model sees; test_codec checks the codec alone"
)
_PROTOCOL_LAYER = "list methods and pagination (spec/protocol.md) are not modelled"
_CHECKER = (
    "a mutant of check_invariants, not of the reducer: the reducer behaves the same, so no "
    "comparison of its effects or states with the model's can fail; only a test that feeds the "
    "checker a corrupted state can"
)
_NOT_DRAWN = (
    "progress and logs (R-CTX-2, R-CTX-3) depend on protocol state (a progressToken, "
    "logging/setLevel) the model does not keep: ToolProgressed and ToolLogged are not drawn"
)

_LISTEN = "subscriptions/listen (R-MRTR-19) is not modelled: the machines send no listen"
_LISTEN_TESTS = ("tests/test_catalogue_listen.py", "tests/test_modern.py")
"""What kills a listen-bound mutant (R-MRTR-25 .. 27): not in REDUCER_SUITE, a file of its own."""

_READ_ROUNDS = (
    "the retry of a modern prompts/get's or resources/read's round (R-MRTR-24) is not "
    "modelled: the machines send modern reads and the model asks their rounds, but no read "
    "round is retried; tests/test_modern.py covers them"
)

_TASKS = (
    "the 2025-11-25 era of tasks (R-TASK-12 .. R-TASK-15) is not in the reference model: the "
    "machines send no 2025 task request; tests/test_tasks.py covers it"
)
_STALE_WINDOW = (
    "tasks are in the reference model (TaskMachine), but a stale inline-window timer of an "
    "earlier call firing while a later call under the same request id has its window open is "
    "not drawn (the machine never reuses the id of a call in its window, a reducer gap pinned "
    "in tests/test_model.py); tests/test_tasks.py covers it"
)

_LIVE_TTL = (
    "tasks are in the reference model (TaskMachine), but a ttl timer naming a live task never "
    "fires in a shell's history (a ttl is armed only once a task is terminal, and task ids are "
    "never reused); tests/test_tasks.py covers it"
)

_SEALING_PRIMITIVE = (
    "the reference model seals and opens approval states with core/sealing.py itself, as a "
    "trusted primitive (tests/test_sealing.py checks it alone), so a mutant of it changes the "
    "reducer and the model alike"
)

_ROOM = """\
    if _reserve(d, call, owner, eid, False, now, out):
        _park(d, call, owner, eid, c.version, prompt, now, out, c.held is not None)
"""

MUTANTS: tuple[Mutant, ...] = (
    # --- caps: one too many -----------------------------------------------------------------
    Mutant(
        "park-conn-cap-plus-one",
        DECIDE,
        "    if asker_count >= per_connection_cap:\n",
        "    if asker_count > per_connection_cap:\n",
        ("R-PARK-1", "R-INV-1"),
        "a connection may park one call more than max_parked_elicitations",
    ),
    Mutant(
        "park-total-cap-plus-one",
        DECIDE,
        "    if total < total_cap:\n",
        "    if total <= total_cap:\n",
        ("R-PARK-3", "R-INV-1"),
        "one call more than max_parked_elicitations_total may park",
    ),
    Mutant(
        "in-flight-total-plus-one",
        DECIDE,
        "    if total >= max_total:\n",
        "    if total > max_total:\n",
        ("R-ADM-5", "R-INV-1"),
        "one worker more than max_in_flight may start",
    ),
    Mutant(
        "in-flight-share-plus-one",
        DECIDE,
        "    if conn_count >= share:\n",
        "    if conn_count > share:\n",
        ("R-ADM-5", "R-INV-1"),
        "a connection may start one worker more than its share",
    ),
    Mutant(
        "capabilities-cap-plus-one",
        REDUCER,
        "    if len(d.cap_unsubscribed) + len(d.cap_live) > limit:  # R-CAP-3\n",
        "    if len(d.cap_unsubscribed) + len(d.cap_live) > limit + 1:  # R-CAP-3\n",
        ("R-CAP-3", "R-INV-1"),
        "one capabilities entry more than max_client_capabilities is kept",
    ),
    Mutant(
        "page-size-plus-one",
        PROTOCOL,
        "ordered[offset : offset + page_size]",
        "ordered[offset : offset + page_size + 1]",
        ("R-PROTO-9",),
        "a page holds one entry more than page_size: the next page repeats it",
        outside_model=_PROTOCOL_LAYER,
    ),
    # --- caps: one too few ------------------------------------------------------------------
    Mutant(
        "park-conn-cap-minus-one",
        DECIDE,
        "    if asker_count >= per_connection_cap:\n",
        "    if asker_count >= per_connection_cap - 1:\n",
        ("R-PARK-1",),
        "a connection is refused its last parking place",
    ),
    Mutant(
        "park-total-cap-minus-one",
        DECIDE,
        "    if total < total_cap:\n",
        "    if total < total_cap - 1:\n",
        ("R-PARK-3",),
        "the server counts as full one call early",
    ),
    Mutant(
        "in-flight-total-minus-one",
        DECIDE,
        "    if total >= max_total:\n",
        "    if total >= max_total - 1:\n",
        ("R-ADM-5",),
        "busy one worker before max_in_flight",
    ),
    Mutant(
        "in-flight-share-minus-one",
        DECIDE,
        "    if conn_count >= share:\n",
        "    if conn_count >= share - 1:\n",
        ("R-ADM-5",),
        "busy one worker before the connection's share",
    ),
    Mutant(
        "capabilities-cap-minus-one",
        REDUCER,
        "    if len(d.cap_unsubscribed) + len(d.cap_live) > limit:  # R-CAP-3\n",
        "    if len(d.cap_unsubscribed) + len(d.cap_live) >= limit:  # R-CAP-3\n",
        ("R-CAP-3",),
        "an entry is evicted when the map is merely full",
    ),
    Mutant(
        "ctx-request-cap-minus-one",
        REDUCER,
        "    if len(outstanding) >= d.options.max_client_requests_per_call:\n",
        "    if len(outstanding) >= d.options.max_client_requests_per_call - 1:\n",
        ("R-CTX-4",),
        "a tool is refused its last outstanding request to the client",
    ),
    Mutant(
        "page-size-minus-one",
        PROTOCOL,
        "ordered[offset : offset + page_size]",
        "ordered[offset : offset + page_size - 1]",
        ("R-PROTO-9",),
        "a page holds one entry fewer than page_size: the last of each page is never listed",
        outside_model=_PROTOCOL_LAYER,
    ),
    Mutant(
        "share-default-rounds-up",
        OPTIONS,
        "        return max_in_flight // 2 or 1\n",
        "        return (max_in_flight + 1) // 2 or 1\n",
        ("R-OPT-1",),
        "the default per-connection share is half of max_in_flight rounded up",
    ),
    # --- the eviction victim ----------------------------------------------------------------
    Mutant(
        "evict-newest-parked-call",
        STORE,
        "        return holder, self.owners[holder].ids[0]\n",
        "        return holder, self.owners[holder].ids[-1]\n",
        ("R-PARK-4",),
        "the victim is the top holder's newest parked call, not its oldest",
    ),
    Mutant(
        "evict-newest-top-holder",
        STORE,
        "        holder = self.buckets[self.top].first()\n",
        "        holder = list(self.buckets[self.top])[-1]\n",
        ("R-PARK-4",),
        "among the top holders, the one that reached the top last yields",
    ),
    Mutant(
        "evict-from-smallest-holder",
        STORE,
        "        holder = self.buckets[self.top].first()\n",
        "        holder = self.buckets[min(self.buckets)].first()\n",
        ("R-PARK-4", "R-PARK-3"),
        "the victim is taken from the connection holding the fewest parked calls",
    ),
    Mutant(
        "evict-when-asker-equals-top",
        DECIDE,
        "    if asker_count < top:\n",
        "    if asker_count <= top:\n",
        ("R-PARK-3", "R-PARK-4"),
        "an asker holding as many as the top evicts instead of being denied",
    ),
    Mutant(
        "evict-after-park",
        REDUCER,
        _ROOM,
        "    mark = len(out)\n"
        "    if _reserve(d, call, owner, eid, False, now, out):\n"
        "        evicted = out[mark:]\n"
        "        del out[mark:]\n"
        "        _park(d, call, owner, eid, c.version, prompt, now, out, c.held is not None)\n"
        "        out.extend(evicted)\n",
        ("R-PARK-4",),
        "the new call parks before the eviction that makes room for it (effects out of order)",
    ),
    # --- parking owners (R-PARK-1, R-SUB-1) ----------------------------------------------------
    Mutant(
        "park-owner-is-the-connection",
        REDUCER,
        "    owner = call.owner  # R-PARK-1, R-PARK-5: fixed when the call was admitted\n",
        "    owner = call.conn  # R-PARK-1, R-PARK-5: fixed when the call was admitted\n",
        ("R-PARK-1", "R-PARK-3"),
        "a 2025 parked call counts against its connection, not its principal: a principal's "
        "sessions each get a cap, and fresh ones evict every other principal",
    ),
    Mutant(
        "attach-forgets-the-principal",
        REDUCER,
        "    c = attrs.evolve(c, subscribed=True, principal=principal, per_request=per_request)\n",
        "    c = attrs.evolve(c, subscribed=True, per_request=per_request)\n",
        ("R-SUB-1", "R-PARK-1"),
        "the principal a subscriber attached with is not kept: every connection is its own owner",
    ),
    Mutant(
        "owner-per-connection-in-both-eras",
        REDUCER,
        "        return (PRINCIPAL_OWNER, principal)\n",
        "        return (PRINCIPAL_OWNER, principal, conn)\n",
        ("R-PARK-1", "R-MRTR-12"),
        "a principal's connections are owners apart, in both eras: its 2025 sessions and its "
        "modern requests each get a cap of their own",
    ),
    # --- one owner per request (R-SUB-3, R-PARK-5 .. R-PARK-7, R-ADM-6; issue #28) -----------
    Mutant(
        "request-principal-from-the-event",
        REDUCER,
        "    principal = given if c.principal is None else c.principal\n",
        "    principal = given\n",
        ("R-SUB-3", "R-PARK-5"),
        "a request's principal is the one its event carries, not its connection's: a modern "
        "call posted on a legacy session (fed without one) is its connection's, and a "
        "principal's cap multiplies by its sessions",
        files=(OWNER_TESTS, *REDUCER_SUITE),
    ),
    Mutant(
        "per-request-connections-own-themselves",
        REDUCER,
        "    return ANONYMOUS_OWNER if c.per_request else conn\n",
        "    return conn\n",
        ("R-PARK-7", "R-SUB-4"),
        "a stateless request without credentials is an owner of its own: no per-owner cap or "
        "share ever holds a client that sends many",
        files=(OWNER_TESTS, *REDUCER_SUITE),
    ),
    Mutant(
        "in-flight-share-per-connection",
        REDUCER,
        "    held = d.owner_in_flight.get(owner, 0)\n",
        "    held = d.in_flight.get(conn, 0)\n",
        ("R-ADM-6",),
        "the worker share is counted per connection: a principal's stateless requests (each a "
        "connection) take every worker",
        files=(OWNER_TESTS, *REDUCER_SUITE),
    ),
    Mutant(
        "owner-full-deny-says-connection",
        REDUCER,
        "        why = m.OWNER_FULL[owner_scope(owner, call.conn)]\n",
        "        why = m.WHY[m.TOO_MANY_PENDING]\n",
        ("R-PARK-6",),
        "the per-owner deny always blames this connection, even when the principal's other "
        "sessions hold the cap",
        files=(OWNER_TESTS, *REDUCER_SUITE),
    ),
    Mutant(
        "unpark-frees-the-connections-place",
        REDUCER,
        "    d.parked = d.parked.set(eid, Parked(key, owner))\n",
        "    d.parked = d.parked.set(eid, Parked(key, call.conn))\n",
        ("R-PARK-1", "R-CLOSE-3", "R-STORE-5"),
        "a parked call is known by its connection, not by the owner whose place it holds",
    ),
    # --- timers, workers and drops ----------------------------------------------------------
    Mutant(
        "answer-keeps-timer",
        REDUCER,
        "\n    out.append(CancelTimer((ELICITATION_TIMER, eid)))\n    if ",
        "\n    if ",
        ("R-CLOSE-3", "R-INV-4"),
        "an answered elicitation's timer is not cancelled",
    ),
    Mutant(
        "drop-keeps-elicitation-timer",
        REDUCER,
        "        _unpark(d, call, now)\n"
        "        out.append(CancelTimer((ELICITATION_TIMER, eid)))\n"
        "        if notify and sent:\n",
        "        _unpark(d, call, now)\n        if notify and sent:\n",
        ("R-DROP-4", "R-CLOSE-3", "R-INV-4"),
        "a dropped parked call's timer is not cancelled",
    ),
    Mutant(
        "drop-keeps-worker-timer",
        REDUCER,
        "        out.append(CancelTimer((WORKER_TIMER, call.worker)))\n",
        "",
        ("R-DROP-4", "R-INV-4"),
        "a dropped running call's worker timer is not cancelled",
    ),
    Mutant(
        "drop-no-kill-worker",
        REDUCER,
        "        out.append(KillWorker(call.worker))\n",
        "",
        ("R-DROP-4",),
        "a dropped call's worker is not killed",
    ),
    Mutant(
        "drop-keeps-worker-slot",
        REDUCER,
        "        out.append(CancelTimer((WORKER_TIMER, call.worker)))\n"
        "        _release_worker(d, call)\n",
        "        out.append(CancelTimer((WORKER_TIMER, call.worker)))\n",
        ("R-DROP-4", "R-INV-2"),
        "a dropped call's worker slot is never freed",
    ),
    Mutant(
        "worker-timeout-no-kill",
        REDUCER,
        '    if kind == "TimerFired":\n'
        "        out.append(KillWorker(ref))  # R-WORK-2\n"
        "    else:\n"
        "        out.append(CancelTimer((WORKER_TIMER, ref)))\n",
        '    if kind != "TimerFired":\n        out.append(CancelTimer((WORKER_TIMER, ref)))\n',
        ("R-WORK-2",),
        "a worker past its deadline is answered for but left running",
    ),
    Mutant(
        "worker-finish-keeps-timer",
        REDUCER,
        "    else:\n        out.append(CancelTimer((WORKER_TIMER, ref)))\n",
        '    elif kind != "WorkerFinished":\n'
        "        out.append(CancelTimer((WORKER_TIMER, ref)))\n",
        ("R-WORK-3", "R-INV-4"),
        "a worker that finishes normally keeps its timer armed (only a failed one's is cancelled)",
    ),
    Mutant(
        "stale-worker-event-acted-on",
        REDUCER,
        "    except KeyError:\n        return  # R-WORK-4: a worker already ended or killed\n",
        "    except KeyError:\n        out.append(KillWorker(ref))\n        return\n",
        ("R-WORK-4",),
        "a stale worker event is not ignored: it kills the ref again",
    ),
    Mutant(
        "elicitation-deadline-not-from-now",
        REDUCER,
        "    deadline = now + d.options.elicitation_timeout_ms\n    key = call.key",
        "    deadline = d.options.elicitation_timeout_ms\n    key = call.key",
        ("R-PARK-2",),
        "the elicitation deadline ignores the event's clock",
    ),
    Mutant(
        "worker-deadline-not-from-now",
        REDUCER,
        "StartTimer((WORKER_TIMER, ref), now + opts.callback_timeout_ms))\n",
        "StartTimer((WORKER_TIMER, ref), opts.callback_timeout_ms))\n",
        ("R-WORK-1",),
        "the worker deadline ignores the event's clock",
    ),
    Mutant(
        "timeout-no-withdraw",
        REDUCER,
        "        withdrawn = _revision(d, call.conn).withdraw(eid, m.TIMED_OUT)\n"
        "        out.append(Push(call.conn, withdrawn, call.request_id))\n",
        "        pass\n",
        ("R-CLOSE-4",),
        "a timed-out prompt is not withdrawn",
    ),
    Mutant(
        "timeout-withdrawal-unrouted",
        REDUCER,
        "withdraw(eid, m.TIMED_OUT)\n"
        "        out.append(Push(call.conn, withdrawn, call.request_id))",
        "withdraw(eid, m.TIMED_OUT)\n        out.append(Push(call.conn, withdrawn))",
        ("R-DLV-1", "R-CLOSE-4"),
        "a timed-out prompt's withdrawal does not name its request (HTTP cannot route it)",
    ),
    Mutant(
        "eviction-no-withdraw",
        REDUCER,
        "    out.append(Push(victim.conn, withdrawn, victim.request_id))\n",
        "",
        ("R-CLOSE-4",),
        "an evicted prompt is not withdrawn",
    ),
    Mutant(
        "eviction-keeps-timer",
        REDUCER,
        "    out.append(CancelTimer((ELICITATION_TIMER, victim_eid)))\n",
        "",
        ("R-CLOSE-3", "R-INV-4"),
        "an evicted call's timer is not cancelled",
    ),
    Mutant(
        "caller-exit-no-withdraw",
        REDUCER,
        "        _drop(d, _the_call(d, key), ev.now, out, notify=True, why=CALLER_GONE)"
        "  # R-DROP-2\n",
        "        _drop(d, _the_call(d, key), ev.now, out, notify=False, why=CALLER_GONE)"
        "  # R-DROP-2\n",
        ("R-CLOSE-4", "R-DROP-2"),
        "a prompt whose caller exited is not withdrawn",
    ),
    Mutant(
        "detach-withdraws",
        REDUCER,
        "        _drop(d, _the_call(d, key), now, out, notify=False, why=CONNECTION_GONE)\n",
        "        _drop(d, _the_call(d, key), now, out, notify=True, why=CONNECTION_GONE)\n",
        ("R-DROP-3",),
        "a connection that went away is pushed withdrawals",
    ),
    Mutant(
        "drops-in-reverse-admission-order",
        REDUCER,
        "    return sorted(keys, key=lambda key: _the_call(d, key).seq)\n",
        "    return sorted(keys, key=lambda key: _the_call(d, key).seq, reverse=True)\n",
        ("R-DROP-2", "R-DROP-3"),
        "a drop of many calls answers the newest first",
    ),
    Mutant(
        "cancel-any-connections-request",
        REDUCER,
        "    call = _open_call(d, (conn, request_id))\n",
        "    call = next((c for k, c in [*d.working.items(), *d.waiting.items()]"
        " if k[1] == request_id), None)\n",
        ("R-DROP-1", "R-DLV-1"),
        "a cancel drops a request of that id on any connection",
    ),
    # --- answers and approval ---------------------------------------------------------------
    Mutant(
        "answer-from-another-connection",
        REDUCER,
        "    if p.stateless or p.key[0] != ",
        "    if p.stateless or False and p.key[0] != ",
        ("R-CLOSE-5",),
        "an answer is accepted from a connection that does not own the call",
    ),
    Mutant(
        "approve-truthy",
        DECIDE,
        'content.get("approve") is True',
        'bool(content.get("approve"))',
        ("R-CLOSE-1",),
        'approve: "true" (any truthy value) approves',
    ),
    Mutant(
        "approve-equals-true",
        DECIDE,
        'content.get("approve") is True',
        'content.get("approve") == True',
        ("R-CLOSE-1",),
        "approve: 1 approves (1 == True in Python)",
    ),
    Mutant(
        "accept-without-content-approves",
        DECIDE,
        "    return isinstance(content, dict) and len(content) == 1",
        "    return content is None or isinstance(content, dict) and len(content) == 1",
        ("R-CLOSE-1",),
        "an accept with no content approves",
    ),
    Mutant(
        "approve-with-extra-fields",
        DECIDE,
        'isinstance(content, dict) and len(content) == 1 and content.get("approve") is True',
        'isinstance(content, dict) and content.get("approve") is True',
        ("R-CLOSE-1",),
        "content with approve: true and fields the schema does not have approves",
    ),
    Mutant(
        "accept-case-insensitive",
        DECIDE,
        'result.get("action") != "accept"',
        'str(result.get("action")).lower() != "accept"',
        ("R-CLOSE-1",),
        'action "ACCEPT" approves',
    ),
    Mutant(
        "deny-detail-swapped",
        DECIDE,
        '    if action == "decline":\n        return m.DECLINED\n'
        '    if action == "cancel":\n        return m.CANCELLED\n',
        '    if action == "decline":\n        return m.CANCELLED\n'
        '    if action == "cancel":\n        return m.DECLINED\n',
        ("R-CLOSE-2",),
        "decline is answered 'cancelled' and cancel 'declined'",
    ),
    Mutant(
        "approval-wins-over-error",
        REDUCER,
        "    if error is not None:\n"
        '        _deny(d, call, "ask", m.ELICITATION_FAILED, now, out)\n'
        "    elif is_approval(result):\n"
        '        _run_tool(d, call, "approved", now, out)  # R-CLOSE-1\n',
        "    if is_approval(result):\n"
        '        _run_tool(d, call, "approved", now, out)  # R-CLOSE-1\n'
        "    elif error is not None:\n"
        '        _deny(d, call, "ask", m.ELICITATION_FAILED, now, out)\n',
        ("R-CLOSE-2",),
        "an error answer that also carries an approving result runs the tool",
    ),
    Mutant(
        "approval-skips-tool-lookup",
        REDUCER,
        "    if call.name not in d.tools:\n",
        "    if call.name not in d.tools and not call.elicitation_id:\n",
        ("R-TOOL-2",),
        "an approved call runs a tool unregistered while it was parked",
    ),
    Mutant(
        "approval-skips-busy-check",
        REDUCER,
        "    if scope:\n        busy = _busy(",
        "    if scope and call.stage is not Stage.PARKED:\n        busy = _busy(",
        ("R-ADM-5", "R-INV-1"),
        "an approved call starts its tool without checking the in-flight bounds",
    ),
    # --- delivery ---------------------------------------------------------------------------
    Mutant(
        "eviction-withdrawal-to-asker",
        REDUCER,
        "    out.append(Push(victim.conn, withdrawn, ",
        "    out.append(Push(evictor, withdrawn, ",
        ("R-DLV-1", "R-CLOSE-4"),
        "the victim's withdrawal is pushed to the asker's connection",
    ),
    Mutant(
        "eviction-withdrawal-names-asker-request",
        REDUCER,
        "out.append(Push(victim.conn, withdrawn, victim.request_id))",
        "out.append(Push(victim.conn, withdrawn, call.request_id))",
        ("R-DLV-1",),
        "the victim's withdrawal names the asker's request id (HTTP routes it to a wrong stream)",
    ),
    Mutant(
        "push-mode-not-answered-with-nothing",
        REDUCER,
        "    if replied and not call.replied:  # R-DLV-3: push mode answers the request with "
        "nothing\n        out.append(Reply(call.conn, call.request_id, None))\n",
        "    if replied and not call.replied:  # R-DLV-3: push mode answers the request with "
        "nothing\n        pass\n",
        ("R-DLV-3", "R-DLV-1"),
        "a push-mode call that parks is not answered with nothing",
    ),
    Mutant(
        "push-mode-outcome-replied",
        REDUCER,
        "    if call.replied:\n"
        "        out.append(Push(call.conn, message, call.request_id))\n"
        "    else:\n"
        "        out.append(Reply(call.conn, call.request_id, message))\n",
        "    out.append(Reply(call.conn, call.request_id, message))\n",
        ("R-DLV-3", "R-DLV-1"),
        "a push-mode outcome is sent as a second Reply instead of a Push",
    ),
    Mutant(
        "push-mode-outcome-to-another-connection",
        REDUCER,
        "        out.append(Push(call.conn, message, call.request_id))\n",
        "        out.append(Push(next(k[0] for k in d.calls if k[1] == call.request_id), "
        "message, call.request_id))\n",
        ("R-DLV-1", "R-DLV-3", "R-INV-9"),
        "a push-mode outcome is routed by request id alone (ids are unique per connection only):"
        " it goes to the first connection with an open call of that id",
    ),
    Mutant(
        "prompt-to-another-connection",
        REDUCER,
        "    out.append(Push(call.conn, request, call.request_id))\n",
        "    out.append(Push(next(k[0] for k in d.calls if k[1] == call.request_id), "
        "request, call.request_id))\n",
        ("R-PARK-2", "R-DLV-1", "R-INV-9"),
        "an elicitation/create prompt is routed by request id alone: it goes to the first"
        " connection with an open call of that id",
    ),
    Mutant(
        "ctx-request-to-another-connection",
        REDUCER,
        "    out.append(Push(call.conn, revision.tool_request(rid, method, params), "
        "call.request_id))\n",
        "    out.append(Push(next(k[0] for k in d.calls if k[1] == call.request_id), "
        "revision.tool_request(rid, method, params), call.request_id))\n",
        ("R-CTX-4", "R-INV-9"),
        "a tool's own request (elicitation/create, sampling) is routed by request id alone: it"
        " goes to the first connection with an open call of that id",
    ),
    # --- admission --------------------------------------------------------------------------
    Mutant(
        "duplicate-id-check-removed",
        REDUCER,
        "    if (\n"
        "        key in d.working\n"
        "        or (d.waiting and key in d.waiting)\n"
        "        or (d.listens and key in d.listens)  # R-MRTR-19\n"
        "        or (d.task_waits and key in d.task_waits)  # R-TASK-14\n"
        "    ):\n"
        "        out.append(Reply(conn, request_id, m.duplicate_id(request_id)))"
        "  # type: ignore[arg-type]\n"
        "        return False\n",
        "",
        ("R-ADM-1",),
        "a reused in-flight id is admitted",
    ),
    Mutant(
        "duplicate-id-across-connections",
        REDUCER,
        "        key in d.working\n        or (d.waiting and key in d.waiting)\n",
        "        any(request_id == k[1] for k in (*d.working, *d.waiting))\n",
        ("R-ADM-1",),
        "ids of different connections collide",
    ),
    Mutant(
        "request-id-bool-accepted",
        DECIDE,
        "    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, "
        "bool))\n",
        "    return isinstance(value, (str, int))\n",
        ("R-ADM-0",),
        "true/false are accepted as request ids",
    ),
    Mutant(
        "unknown-tool-parked",
        REDUCER,
        "    if tool is None:  # R-ADM-2\n",
        "    if tool is None and not opts.has_authorizer:  # R-ADM-2\n",
        ("R-ADM-2",),
        "with an authorizer, an unknown tool is authorized (and can park)",
    ),
    Mutant(
        "sensitive-derived-tool-unguarded",
        REDUCER,
        "    elif tool.sensitive:  # R-ADM-3\n",
        "    elif tool.sensitive and not tool.derived:  # R-ADM-3\n",
        ("R-ADM-3",),
        "a sensitive derived tool runs without an authorizer",
    ),
    Mutant(
        "sensitive-tool-unguarded",
        REDUCER,
        "    elif tool.sensitive:  # R-ADM-3\n",
        "    elif False:  # R-ADM-3\n",
        ("R-ADM-3",),
        "a sensitive tool runs without an authorizer",
    ),
    Mutant(
        "read-skips-read-authorizer",
        REDUCER,
        "    if d.options.has_read_authorizer:  # R-READ-1\n",
        "    if False:  # R-READ-1\n",
        ("R-READ-1",),
        "reads run without the read authorizer",
    ),
    Mutant(
        "read-ask-echoes-prompt",
        REDUCER,
        "        _read_deny(d, call, m.READ_ASK, now, out)  # R-READ-2\n",
        "        _read_deny(d, call, str(value.prompt), now, out)  # R-READ-2\n",
        ("R-READ-2",),
        "a read's ASK sends the operator's prompt to the client",
    ),
    Mutant(
        "ask-ignores-subscriber",
        REDUCER,
        "    if not (c.subscribed and c.can_elicit):  # R-AUTH-3\n",
        "    if not c.can_elicit:  # R-AUTH-3\n",
        ("R-AUTH-3", "R-INV-5"),
        "a connection without a subscriber is asked",
    ),
    Mutant(
        "deny-on-ask-says-deny",
        REDUCER,
        '    _deny(d, call, "ask", prompt, now, out, m.CANNOT_ASK, recorded=',
        '    _deny(d, call, "deny", prompt, now, out, m.CANNOT_ASK, recorded=',
        ("R-AUTH-3",),
        "deny-on-ASK carries decision 'deny' instead of 'ask'",
    ),
    # --- records (R-LOG-1 .. R-LOG-4) and the deny's words (R-DLV-4) -------------------------
    Mutant(
        "approval-recorded-as-allow",
        REDUCER,
        '        _run_tool(d, call, "approved", now, out)  # R-CLOSE-1\n',
        '        _run_tool(d, call, "allow", now, out)  # R-CLOSE-1\n',
        ("R-LOG-2",),
        "an approved call's record says the policy allowed it",
    ),
    Mutant(
        "drop-unrecorded",
        REDUCER,
        "        out.append(record)\n\n\ndef _revision",
        "\n\ndef _revision",
        ("R-LOG-1",),
        "a dropped call ends without a call_ended record",
    ),
    Mutant(
        "park-unrecorded",
        REDUCER,
        '    fields["elicitation_id"] = eid\n'
        '    out.append(Emit("call_parked", fields))  # R-LOG-3\n',
        '    fields["elicitation_id"] = eid\n',
        ("R-LOG-3",),
        "a park emits no call_parked record",
    ),
    Mutant(
        "evicted-by-the-victim",
        REDUCER,
        '_deny(d, victim, "ask", m.EVICTED, now, out, evicted_by=evictor)',
        '_deny(d, victim, "ask", m.EVICTED, now, out, evicted_by=victim.conn)',
        ("R-LOG-2",),
        "an evicted call's record names its own connection as the evictor",
    ),
    Mutant(
        "failure-recorded-as-result",
        REDUCER,
        '"callback_failed"), now, out, "failed")',
        '"callback_failed"), now, out, "result")',
        ("R-LOG-2",),
        "a tool that raised is recorded as having returned a result",
    ),
    Mutant(
        "record-shows-the-prompt",
        REDUCER,
        ", recorded=m.CANNOT_ASK_DETAIL)",
        ")",
        ("R-LOG-2",),
        "a deny-on-ASK's record carries the authorizer's prompt as its detail",
    ),
    Mutant(
        "evicted-says-server-full",
        REDUCER,
        '_deny(d, victim, "ask", m.EVICTED, now, out, evicted_by=evictor)',
        '_deny(d, victim, "ask", m.TOO_MANY_ON_SERVER, now, out, evicted_by=evictor)',
        ("R-PARK-3", "R-CLOSE-2"),
        "an evicted call is told the server was full, not that it was evicted",
    ),
    Mutant(
        "timeout-sentence-in-ms-always",
        MESSAGES,
        '    return f"{ms // 1000} s" if ms % 1000 == 0 else f"{ms} ms"\n',
        '    return f"{ms} ms"\n',
        ("R-DLV-4",),
        "a timeout of whole seconds is told in milliseconds",
    ),
    # --- capabilities and subscribers -------------------------------------------------------
    Mutant(
        "capability-eviction-live-first",
        REDUCER,
        "        live = not d.cap_unsubscribed\n",
        "        live = bool(d.cap_live)\n",
        ("R-CAP-3",),
        "the capability eviction picks a live entry before an unsubscribed one",
    ),
    Mutant(
        "second-initialize-replaces",
        REDUCER,
        "        return  # R-CAP-1: a later initialize never replaces the entry\n",
        "        c = _remove_caps(d, c)  # R-CAP-1: a later initialize never replaces the entry\n",
        ("R-CAP-1",),
        "a second initialize replaces the capabilities entry",
    ),
    Mutant(
        "can-elicit-url-only",
        DECIDE,
        '    return not elicitation or isinstance(elicitation.get("form"), dict)\n',
        '    return not elicitation or "form" in elicitation or "url" in elicitation\n',
        ("R-CAP-4",),
        "a client advertising only url elicitation is asked with a form",
    ),
    Mutant(
        "rebind-inherits",
        REDUCER,
        "    if c.subscribed:  # R-SUB-2: a rebind inherits nothing\n"
        "        _drop_connection(d, ev.conn, ev.now, out)\n"
        "        c = _get_conn(d, ev.conn)\n",
        "",
        ("R-SUB-2",),
        "a second subscriber on a live connection inherits its parked calls and capabilities",
    ),
    # --- identifiers and indexes ------------------------------------------------------------
    Mutant(
        "elicitation-id-reused",
        REDUCER,
        "    d.next_elicitation += 1\n",
        "",
        ("R-ID-1",),
        "the elicitation counter is not incremented: every park mints the same id",
    ),
    Mutant(
        "top-never-lowered",
        STORE,
        "        while top and top not in buckets:\n            top -= 1\n",
        "",
        ("R-INV-3", "R-PARK-4"),
        "top is not lowered when the top holders' counts drop",
    ),
    # --- the invariant checker itself -------------------------------------------------------
    Mutant(
        "check-misses-per-connection-parked-cap",
        INVARIANTS,
        "        if n > cap:\n",
        "        if False:\n",
        ("R-INV-1",),
        "check_invariants does not check the per-connection parked cap",
        outside_model=_CHECKER,
    ),
    Mutant(
        "check-misses-per-connection-share",
        INVARIANTS,
        "        if n > opts.in_flight_share:\n",
        "        if False:\n",
        ("R-INV-1",),
        "check_invariants does not check the per-owner worker share",
        outside_model=_CHECKER,
    ),
    Mutant(
        "check-misses-unsubscribed-parked-owner",
        INVARIANTS,
        "            if c is None or not c.subscribed:\n",
        "            if False:\n",
        ("R-INV-5",),
        "check_invariants does not check that a parked call's owner is subscribed",
        outside_model=_CHECKER,
    ),
    Mutant(
        "check-misses-a-parked-call-of-another-owner",
        INVARIANTS,
        "            if p.owner != call.owner:\n",
        "            if False:\n",
        ("R-INV-5",),
        "check_invariants does not check that a parked call counts against its call's owner",
        outside_model=_CHECKER,
    ),
    # --- a running tool's context (R-CTX) -----------------------------------------------------
    Mutant(
        "ctx-foreign-answer-accepted",
        REDUCER,
        "    key = d.client_requests[rid].key\n"
        "    if key[0] != conn:\n"
        "        tasks.relayed(d, ElicitationAnswered(conn, rid, result, 0, error), key, out)"
        "  # R-TASK-15\n"
        "        return  # R-CTX-5: foreign answers are ignored\n",
        "",
        ("R-CTX-5",),
        "another connection's answer settles a tool's request",
    ),
    Mutant(
        "ctx-no-withdraw-when-worker-ends",
        REDUCER,
        "    if d.worker_requests and ref in d.worker_requests:\n"
        "        _withdraw_requests(d, ref, out, notify=True)  # R-CTX-6\n",
        "",
        ("R-CTX-6", "R-INV-7"),
        "a tool that finishes, fails or times out leaves its requests outstanding",
    ),
    Mutant(
        "ctx-no-withdraw-on-drop",
        REDUCER,
        "        if call.worker in d.worker_requests:\n"
        "            _withdraw_requests(d, call.worker, out, notify=notify)  # R-CTX-6\n",
        "",
        ("R-CTX-6", "R-INV-7"),
        "a cancelled or dropped tool leaves its requests outstanding",
    ),
    Mutant(
        "ctx-withdraw-pushes-to-a-gone-connection",
        REDUCER,
        "            _withdraw_requests(d, call.worker, out, notify=notify)  # R-CTX-6\n",
        "            _withdraw_requests(d, call.worker, out, notify=True)  # R-CTX-6\n",
        ("R-CTX-6",),
        "withdrawals are pushed to a connection that went away",
    ),
    Mutant(
        "ctx-request-cap-plus-one",
        REDUCER,
        "    if len(outstanding) >= d.options.max_client_requests_per_call:\n",
        "    if len(outstanding) > d.options.max_client_requests_per_call:\n",
        ("R-CTX-4", "R-INV-7"),
        "one request more than max_client_requests_per_call per tool",
    ),
    Mutant(
        "ctx-sampling-without-capability",
        REDUCER,
        '    if method == "sampling/createMessage" and not (c.subscribed and c.can_sample):\n',
        '    if method == "sampling/createMessage" and not c.subscribed:\n',
        ("R-CTX-4",),
        "sampling is sent to a client that did not offer it",
    ),
    Mutant(
        "ctx-elicit-mode-for-old-revisions",
        REVISIONS,
        '            return {"mode": "form", **sent} if self.form_mode else sent\n',
        '            return {"mode": "form", **sent}\n',
        ("R-CTX-4", "R-REV-4"),
        "a 2025-06-18 client is sent the mode field it does not know",
    ),
    Mutant(
        "ctx-authorizer-may-ask",
        REDUCER,
        "    return call if call.stage is Stage.RUNNING else None\n",
        "    return call\n",
        ("R-CTX-1",),
        "an authorizer's worker may send requests, logs and progress",
    ),
    Mutant(
        "ctx-progress-may-repeat",
        REDUCER,
        "    if progress.last is not None and value <= progress.last:\n",
        "    if progress.last is not None and value < progress.last:\n",
        ("R-CTX-2",),
        "a progress value equal to the last is sent again",
        outside_model=_NOT_DRAWN,
    ),
    Mutant(
        "ctx-log-ignores-level",
        REDUCER,
        "    if rank is None or wanted is None or protocol.LOG_RANK[wanted] > rank:\n",
        "    if rank is None or wanted is None:\n",
        ("R-CTX-3",),
        "a tool's log below the caller's level is sent",
        outside_model=_NOT_DRAWN,
    ),
    Mutant(
        "ctx-timeout-not-resolved",
        REDUCER,
        "    out.append(Resolve(request.ref, request.token, failure))  # R-CTX-6\n",
        "",
        ("R-CTX-6",),
        "a timed-out request leaves its tool waiting",
    ),
    Mutant(
        "ctx-answer-keeps-timer",
        REDUCER,
        "    out.append(CancelTimer((CLIENT_REQUEST_TIMER, rid)))\n    outcome: object\n",
        "    outcome: object\n",
        ("R-CTX-5", "R-INV-4"),
        "an answered request's timer stays armed",
    ),
    Mutant(
        "check-misses-client-requests",
        INVARIANTS,
        "    _check_client_requests(state)\n",
        "",
        ("R-INV-7",),
        "check_invariants does not check a running tool's requests",
        outside_model=_CHECKER,
    ),
    # --- the door and the message layer (R-PROTO-15): what a client message means ----------
    Mutant(
        "door-cancel-reads-wrong-field",
        DOOR,
        '            return CancelRequested(conn, params.get("requestId"), now)\n',
        '            return CancelRequested(conn, params.get("id"), now)\n',
        ("R-PROTO-13", "R-PROTO-15"),
        "notifications/cancelled cancels nothing: the door reads the wrong field",
    ),
    Mutant(
        "door-any-notification-cancels",
        DOOR,
        '        if message.method == "notifications/cancelled":  # R-PROTO-13\n',
        '        if message.method.startswith("notifications/"):  # R-PROTO-13\n',
        ("R-PROTO-5", "R-PROTO-13"),
        "any notification naming a requestId cancels that call",
    ),
    Mutant(
        "door-absent-arguments-are-null",
        DOOR,
        '            p.get("arguments", {}),\n',
        '            p.get("arguments"),\n',
        ("R-PROTO-6", "R-PROTO-15"),
        "a tools/call without arguments is refused instead of meaning {}",
    ),
    Mutant(
        "door-meta-dropped",
        DOOR,
        '            p.get("_meta"),\n            p.get("requestState"),\n',
        '            None,\n            p.get("requestState"),\n',
        ("R-CTX-2", "R-PROTO-15"),
        "a tools/call's _meta (its progress token) is lost on the wire",
    ),
    Mutant(
        "door-initialize-version-ignored",
        DOOR,
        "        return ClientInitialized(conn, capabilities, now, rid, "
        'p.get("protocolVersion"))\n',
        "        return ClientInitialized(conn, capabilities, now, rid, None)\n",
        ("R-PROTO-3", "R-PROTO-15"),
        "initialize answers the latest version whatever the client asked",
    ),
    Mutant(
        "door-ping-is-unknown",
        DOOR,
        '    if method == "ping" and not _names_a_version(request.params):  # R-PROTO-4\n',
        '    if method == "pong" and not _names_a_version(request.params):  # R-PROTO-4\n',
        ("R-PROTO-4", "R-PROTO-15"),
        "ping is answered -32601 as an unknown method",
    ),
    Mutant(
        "door-error-answer-read-as-result",
        DOOR,
        "        return ElicitationAnswered(conn, message.id, None, now, message.error)\n",
        "        return ElicitationAnswered(conn, message.id, message.error, now)\n",
        ("R-PROTO-2", "R-CLOSE-2"),
        "an error answer to an elicitation is read as a result: the wrong deny detail",
    ),
    Mutant(
        "door-response-read-as-error",
        DOOR,
        "        return ElicitationAnswered(conn, message.id, message.result, now)\n",
        "        return ElicitationAnswered(conn, message.id, None, now, message.result)\n",
        ("R-PROTO-2", "R-CLOSE-1"),
        "every answer is read as an error: nothing is ever approved",
    ),
    # --- listing (R-PROTO-8) ---------------------------------------------------------------
    Mutant(
        "listing-truthy-verdict",
        REDUCER,
        "        if verdict is True:\n",
        "        if verdict:\n",
        ("R-PROTO-8",),
        "a truthy verdict that is not True (a raise, 1, a string) lists the tool",
    ),
    Mutant(
        "listing-raise-unreported",
        REDUCER,
        "        elif verdict is not False:\n",
        "        elif verdict is None:\n",
        ("R-PROTO-8",),
        "a hook that raised (or answered a non-bool) hides the tool without telling the operator",
    ),
    Mutant(
        "listing-asks-without-a-hook",
        REDUCER,
        "        if d.options.has_visibility and d.tools:\n",
        "        if d.options.has_authorizer and d.tools:\n",
        ("R-PROTO-8",),
        "tools/list starts a FilterTools worker when there is an authorizer but no hook",
    ),
    Mutant(
        "door-invalid-swallowed",
        DOOR,
        "    return message.reply  # R-PROTO-1\n",
        "    return None  # R-PROTO-1\n",
        ("R-PROTO-1",),
        "an invalid message gets no error reply",
    ),
    Mutant(
        "door-mode-lost",
        DOOR,
        "    return _request(conn, message, now, mode, caller, principal)\n",
        '    return _request(conn, message, now, "reply", caller, principal)\n',
        ("R-DLV-3", "R-PROTO-15"),
        "a push-mode call arriving on the wire is answered in reply mode",
    ),
    Mutant(
        "tool-call-arguments-unchecked",
        REDUCER,
        "    if not isinstance(ev.tool, str) or not isinstance(ev.arguments, dict):  # R-PROTO-6\n",
        "    if not isinstance(ev.tool, str):  # R-PROTO-6\n",
        ("R-PROTO-6",),
        "a tools/call whose arguments are not an object reaches the authorizer",
    ),
    Mutant(
        "invalid-id-answered-under-it",
        REDUCER,
        "        out.append(Reply(conn, None, m.invalid_id()))\n",
        "        out.append(Reply(conn, request_id, m.invalid_id()))\n",
        ("R-ADM-0", "R-PROTO-15"),
        "a typed event's bad id is answered under that id, the wire's under none",
    ),
    Mutant(
        "initialize-not-admitted",
        REDUCER,
        "    if not _admit(d, conn, rid, out):\n        return\n    if _get_conn(d, conn).version:",
        "    if _get_conn(d, conn).version:",
        ("R-ADM-1", "R-PROTO-3"),
        "an initialize reusing an open call's id is answered as if new",
    ),
    Mutant(
        "initialize-renegotiates",
        REDUCER,
        "    if _get_conn(d, conn).version:  # R-PROTO-23: nothing changes\n",
        "    if False:  # R-PROTO-23: nothing changes\n",
        ("R-PROTO-23", "R-PROTO-3", "R-REV-1"),
        "a second initialize is answered afresh (and changes the negotiated version)",
    ),
    Mutant(
        "initialize-refused-after-records",
        REDUCER,
        "ALREADY_INITIALIZED)))\n        return\n",
        "ALREADY_INITIALIZED)))\n"
        "        _record_capabilities(d, conn, ev.capabilities, out)\n        return\n",
        ("R-PROTO-23", "R-CAP-1"),
        "a refused second initialize still records capabilities (after an eviction, afresh)",
    ),
    Mutant(
        "prompt-not-held",
        REDUCER,
        "    _park(d, call, owner, eid, c.version, prompt, now, out, c.held is not None)\n",
        "    _park(d, call, owner, eid, c.version, prompt, now, out, False)\n",
        ("R-PARK-8",),
        "an ASK before notifications/initialized sends its prompt at once",
    ),
    Mutant(
        "held-prompts-never-sent",
        REDUCER,
        "        out.append(Push(ev.conn, request, rid))\n",
        "        pass\n",
        ("R-PARK-8",),
        "notifications/initialized does not send the prompts held for the client",
    ),
    Mutant(
        "held-prompt-withdrawn",
        REDUCER,
        "    if not _unheld(d, victim):  # R-PARK-9\n",
        "    if _unheld(d, victim) or True:  # R-PARK-9\n",
        ("R-PARK-9",),
        "an evicted call whose prompt was never sent is withdrawn all the same",
    ),
    Mutant(
        "prompt-without-digest",
        REDUCER,
        "    if key is None:\n        return prompt\n    shown = sealing",
        "    if True:\n        return prompt\n    shown = sealing",
        ("R-DLV-5",),
        "an approval prompt does not show the arguments' digest",
    ),
    Mutant(
        "prompt-digest-of-the-tool",
        REDUCER,
        "    shown = _with_digest(d, call.arguments, prompt)  # R-DLV-5\n"
        "    request = revision_for",
        "    shown = _with_digest(d, call.name, prompt)  # R-DLV-5\n    request = revision_for",
        ("R-DLV-5",),
        "a prompt's digest is not of the call's arguments (look-alikes share it)",
    ),
    Mutant(
        "held-prompt-answerable",
        REDUCER,
        "    if held and any(h[0] == eid for h in held):\n",
        "    if False:\n",
        ("R-PARK-9", "R-CLOSE-5"),
        "an answer to a prompt never sent approves its call",
    ),
    Mutant(
        "ping-not-admitted",
        REDUCER,
        "    if _admit(d, ev.conn, ev.request_id, out):  # R-PROTO-4\n",
        "    if is_request_id(ev.request_id):  # R-PROTO-4\n",
        ("R-ADM-1", "R-PROTO-4"),
        "a ping reusing an open call's id is answered as if new",
    ),
    Mutant(
        "revision-ask-never-names-mode",
        REVISIONS,
        '        if not self.form_mode:\n            del request["params"]["mode"]\n',
        '        del request["params"]["mode"]\n',
        ("R-REV-2", "R-PARK-2"),
        "a 2025-11-25 client is asked without the mode it expects",
    ),
    Mutant(
        "revision-old-versions-get-mode",
        REVISIONS,
        '    "2025-06-18": ELICITATION_PLAIN,\n',
        '    "2025-06-18": ELICITATION_FORM,\n',
        ("R-REV-1", "R-REV-2"),
        "a 2025-06-18 client is asked with a mode field it does not know",
    ),
    # --- the wire codec ---------------------------------------------------------------------
    Mutant(
        "codec-byte-cap-minus-one",
        CODEC,
        "        if len(data) > max_bytes:\n",
        "        if len(data) >= max_bytes:\n",
        ("R-WIRE-2",),
        "a message of exactly the byte cap is refused",
        outside_model=_WIRE_CAPS,
    ),
    Mutant(
        "codec-depth-minus-one",
        CODEC,
        '    return bool(signs) and max(accumulate(array("b", signs))) > limit\n',
        '    return bool(signs) and max(accumulate(array("b", signs))) >= limit\n',
        ("R-WIRE-6",),
        "nesting of exactly 64 is refused",
        outside_model=_WIRE_CAPS,
    ),
    Mutant(
        "codec-byte-cap-plus-one",
        CODEC,
        "        if len(data) > max_bytes:\n",
        "        if len(data) > max_bytes + 1:\n",
        ("R-WIRE-2",),
        "a message one byte over the byte cap is parsed",
        outside_model=_WIRE_CAPS,
    ),
    Mutant(
        "codec-depth-plus-one",
        CODEC,
        '    return bool(signs) and max(accumulate(array("b", signs))) > limit\n',
        '    return bool(signs) and max(accumulate(array("b", signs))) > limit + 1\n',
        ("R-WIRE-6",),
        "nesting of 65 is accepted",
        outside_model=_WIRE_CAPS,
    ),
    Mutant(
        "codec-bool-id",
        CODEC,
        "    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, "
        "bool))\n",
        "    return isinstance(value, (str, int))\n",
        ("R-WIRE-8",),
        "true is accepted as an id on the wire",
        outside_model=_WIRE_BOOL_ID,
    ),
    # --- modern approvals in the reducer (spec/modern.md, R-MRTR-12 ..) -----------------------
    Mutant(
        "mrtr-accepts-a-replayed-nonce",
        REDUCER,
        '    if outcome == "taken":\n',
        '    if outcome in ("taken", "closed"):\n',
        ("R-MRTR-13", "R-MRTR-14"),
        "a valid state whose nonce was already closed runs the tool again",
    ),
    Mutant(
        "mrtr-skips-the-digest",
        REDUCER,
        "        return sealing.arguments_digest(arguments)\n",
        "        return sealing.arguments_digest({})\n",
        ("R-MRTR-13", "R-MRTR-3"),
        "the state binds no arguments: a retry with changed arguments runs the tool",
    ),
    Mutant(
        "mrtr-ttl-plus-one",
        REDUCER,
        "    deadline = now + d.options.elicitation_timeout_ms\n    d.parked = d.parked.set(nid,",
        "    deadline = now + d.options.elicitation_timeout_ms + 1\n"
        "    d.parked = d.parked.set(nid,",
        ("R-MRTR-12", "R-MRTR-5"),
        "a nonce's timer fires one millisecond after its state expired",
    ),
    Mutant(
        "mrtr-evicts-the-wrong-nonce",
        STORE,
        "            held = self.victim()\n",
        "            held = (owner, h[1]) if h else self.victim()\n",
        ("R-MRTR-12", "R-PARK-4", "R-STORE-2"),
        "eviction takes the asker's own oldest place when it holds one, not the top holder's",
    ),
    Mutant(
        "mrtr-closes-without-unparking",
        STORE,
        "        return self._free(ident, owner, h, at, USED, now), TAKEN\n",
        "        return self, TAKEN\n",
        ("R-MRTR-13", "R-CLOSE-3", "R-STORE-3"),
        "an approved retry leaves its nonce parked: the same state runs the tool again",
    ),
    # --- stopping (R-STOP-1) --------------------------------------------------------------------
    Mutant(
        "stop-without-withdrawal",
        REDUCER,
        "        out.append(Push(call.conn, withdrawn, rid))\n"
        '        _deny(d, call, "ask", m.STOPPING, now, out)\n',
        '        _deny(d, call, "ask", m.STOPPING, now, out)\n',
        ("R-STOP-1", "R-CLOSE-4"),
        "a parked call is denied at the stop but its prompt is not withdrawn",
    ),
    Mutant(
        "stop-leaves-workers-running",
        REDUCER,
        "    out.append(KillWorker(call.worker))\n"
        "    out.append(CancelTimer((WORKER_TIMER, call.worker)))\n"
        "    _release_worker(d, call)\n"
        "    if call.worker in d.worker_requests:\n",
        "    out.append(CancelTimer((WORKER_TIMER, call.worker)))\n"
        "    _release_worker(d, call)\n"
        "    if call.worker in d.worker_requests:\n",
        ("R-STOP-1",),
        "a call whose worker runs is answered at the stop but its worker is not killed",
    ),
    # --- the sealed approval state (spec/modern.md) -------------------------------------------
    Mutant(
        "sealing-expiry-plus-one",
        SEALING,
        "    if now >= expiry:\n",
        "    if now > expiry:\n",
        ("R-MRTR-5", "R-MRTR-4"),
        "a state is still valid at its expiry",
        outside_model=_SEALING_PRIMITIVE,
    ),
    Mutant(
        "sealing-skips-the-digest",
        SEALING,
        '        hmac.compare_digest(_tag(secret, b"arguments", digest), parsed.arguments_tag),\n',
        "        True,\n",
        ("R-MRTR-2", "R-MRTR-4"),
        "a state approved for some arguments opens for any",
        outside_model=_SEALING_PRIMITIVE,
    ),
    Mutant(
        "sealing-skips-the-principal",
        SEALING,
        '    if not principal_matches:\n        return "foreign principal"\n',
        "",
        ("R-MRTR-2", "R-MRTR-4"),
        "another principal's state opens",
        outside_model=_SEALING_PRIMITIVE,
    ),
    Mutant(
        "sealing-unknown-key-opens-with-current",
        SEALING,
        "            return previous\n    return None\n",
        "            return previous\n    return ring.current\n",
        ("R-MRTR-6", "R-MRTR-4"),
        "a token naming an unknown key id is checked against the current key",
        outside_model=_SEALING_PRIMITIVE,
    ),
    Mutant(
        "sealing-retired-key-plus-one",
        SEALING,
        "    return now < rotated_at + ttl\n",
        "    return now <= rotated_at + ttl\n",
        ("R-MRTR-6",),
        "the rotated-out key opens one millisecond past its ttl",
        outside_model=_SEALING_PRIMITIVE,
    ),
    Mutant(
        "sealing-no-length-bound",
        SEALING,
        "    if not isinstance(token, str) or len(token) > max_chars:\n",
        "    if not isinstance(token, str):\n",
        ("R-MRTR-7",),
        "a huge token is decoded before it is refused",
        outside_model=_SEALING_PRIMITIVE,
    ),
    Mutant(
        "sealing-mac-not-checked",
        SEALING,
        "    if not hmac.compare_digest(_mac(secret, parsed.body), parsed.mac):\n",
        "    if False:\n",
        ("R-MRTR-1", "R-MRTR-4"),
        "a token whose MAC does not verify is believed",
        outside_model=_SEALING_PRIMITIVE,
    ),
    Mutant(
        "sealing-mac-compared-with-eq",
        SEALING,
        "    if not hmac.compare_digest(_mac(secret, parsed.body), parsed.mac):\n",
        "    if _mac(secret, parsed.body) != parsed.mac:\n",
        ("R-MRTR-4",),
        "the MAC is compared with ==, in time that depends on the first differing byte",
        outside_model=_SEALING_PRIMITIVE,
    ),
    # --- a modern request's tool context and listens (spec/modern.md, R-MRTR-17 ..) -----------
    Mutant(
        "mrtr-tool-asks-in-a-stateless-call",
        REDUCER,
        "    if _stateless_call(d, call) is not None:  # R-MRTR-17\n",
        "    if False:  # R-MRTR-17\n",
        ("R-MRTR-17",),
        "a tool serving a modern call asks its client as a 2025 tool would",
    ),
    Mutant(
        "mrtr-log-by-connection-level",
        REDUCER,
        "    wanted = d.log_levels.get(call.conn) if st is None else st.log_level  # R-MRTR-18\n",
        "    wanted = d.log_levels.get(call.conn)  # R-MRTR-18\n",
        ("R-MRTR-18",),
        "a modern call's logs follow the connection's logging/setLevel, not its request's level",
        outside_model=_NOT_DRAWN,
    ),
    Mutant(
        "listen-honours-every-kind",
        REDUCER,
        "        if kind in kinds:  # R-MRTR-19\n",
        "        if True:  # R-MRTR-19\n",
        ("R-MRTR-19",),
        "every listen gets every list change, asked for or not",
        outside_model=_LISTEN,
    ),
    Mutant(
        "listen-untagged",
        REDUCER,
        "            out.append(Push(conn, tagged(message, rid), rid))\n",
        "            out.append(Push(conn, message, rid))\n",
        ("R-MRTR-19",),
        "a list change sent on a listen does not name its subscription",
        outside_model=_LISTEN,
    ),
    # --- listen bounds (spec/modern.md, R-MRTR-25 .. R-MRTR-27) --------------------------------
    Mutant(
        "listen-ignores-the-owner-cap",
        REDUCER,
        "    elif held >= options.max_listens_per_owner:  # R-MRTR-25\n",
        "    elif False:  # R-MRTR-25\n",
        ("R-MRTR-25",),
        "one principal opens listens past max_listens_per_owner, a stateless request at a time",
        outside_model=_LISTEN,
        files=_LISTEN_TESTS,
    ),
    Mutant(
        "listen-ignores-the-total-cap",
        REDUCER,
        "    if len(d.listens) >= options.max_listens_total:  # R-MRTR-25\n",
        "    if False:  # R-MRTR-25\n",
        ("R-MRTR-25",),
        "owners under their quota open listens past max_listens_total",
        outside_model=_LISTEN,
        files=_LISTEN_TESTS,
    ),
    Mutant(
        "listen-end-keeps-its-place",
        REDUCER,
        "    held = d.owner_listens[owner] - 1\n",
        "    held = d.owner_listens[owner]\n",
        ("R-MRTR-26",),
        "an ended listen still counts against its owner: a client is locked out by gone streams",
        outside_model=_LISTEN,
        files=_LISTEN_TESTS,
    ),
    Mutant(
        "listen-counts-by-scanning",
        REDUCER,
        "    mine = d.conn_listens.get(conn, ())\n",
        "    mine = tuple((key[1], owner) for key in d.listens if key[0] == conn)\n",
        ("R-MRTR-27",),
        "a listen's connection share is counted by scanning every open listen (the same answer)",
        outside_model=_LISTEN,
        files=_LISTEN_TESTS,
    ),
    # --- a callback's own input-required rounds (spec/modern.md, R-MRTR-20 ..) ----------------
    Mutant(
        "round-requests-unchecked",
        REDUCER,
        "    requests = round_requests(needs.requests)\n",
        "    requests = needs.requests if isinstance(needs.requests, dict) else None\n",
        ("R-MRTR-20",),
        "a round's input requests go on the wire whatever they are (any method, none at all)",
    ),
    Mutant(
        "round-state-reusable",
        REDUCER,
        "        reason = _take(d, nonce_id(opened.nonce), st.owner, now, out)  # single use\n",
        "        reason = None  # single use\n",
        ("R-MRTR-21", "R-MRTR-23"),
        "a round's state is not taken: a replayed retry runs the callback again",
    ),
    # --- the approvals store (spec/store.md, R-STORE-*) -------------------------------------
    Mutant(
        "store-ignores-the-per-owner-cap",
        STORE,
        "        verdict = park_verdict("
        "self.count(owner), per_owner, self.total, total, self.top)\n",
        "        count = min(self.count(owner), per_owner - 1)\n"
        "        verdict = park_verdict(count, per_owner, self.total, total, self.top)\n",
        ("R-STORE-2", "R-PARK-1"),
        "reserve never answers owner_full: an owner parks past max_parked_elicitations",
    ),
    Mutant(
        "store-forgets-a-closed-reason",
        STORE,
        "        if why is not None and deadline is not None:\n",
        "        if False:\n",
        ("R-STORE-3", "R-STORE-4", "R-MRTR-14"),
        "a closed nonce is not remembered: take answers unknown instead of closed(why)",
    ),
    Mutant(
        "store-remembers-a-call",
        STORE,
        "        if why is not None and deadline is not None:\n"
        "            closed, order = _remember(closed, order, ident, why, deadline, now,",
        "        if why is not None:\n"
        "            closed, order = _remember("
        "closed, order, ident, why, deadline or now + 1, now,",
        ("R-STORE-4",),
        "a place that is not single use is remembered as closed when released with a reason",
    ),
    Mutant(
        "store-lets-a-foreign-owner-take",
        STORE,
        "        h = self.owners.get(owner)\n"
        "        if h is None:\n"
        "            return self, FOREIGN\n"
        "        try:\n"
        "            at = h.index(ident, 1)  # its place among the owner's (h[0] is no id)\n"
        "        except ValueError:\n"
        "            return self, FOREIGN\n"
        "        return self._free(ident, owner, h, at, USED, now), TAKEN\n",
        "        owner = next(o for o, g in self.owners.items() if ident in g[1:])\n"
        "        h = self.owners[owner]\n"
        "        at = h.index(ident, 1)\n"
        "        return self._free(ident, owner, h, at, USED, now), TAKEN\n",
        ("R-STORE-3", "R-MRTR-13"),
        "take answers taken to an owner that does not hold the nonce",
    ),
    Mutant(
        "round-approved-without-flag",
        REDUCER,
        "    if opened.approved:  # R-MRTR-21: asked and approved once, never asked again\n",
        "    if True:  # R-MRTR-21: asked and approved once, never asked again\n",
        ("R-MRTR-21",),
        "every round's retry runs its tool without its authorizer, approved or not",
    ),
    Mutant(
        "round-approval-forgotten",
        REDUCER,
        "    if opened.approved:  # R-MRTR-21: asked and approved once, never asked again\n",
        "    if False:  # R-MRTR-21: asked and approved once, never asked again\n",
        ("R-MRTR-21",),
        "an approved call's round state is retried through its authorizer, which asks again",
    ),
    Mutant(
        "round-approval-recorded-as-allow",
        REDUCER,
        '            approved = call.moved(Stage.RUNNING, call.worker, "", call.replied, '
        '"approved", "")\n',
        '            approved = call.moved(Stage.RUNNING, call.worker, "", call.replied, '
        '"allow", "")\n',
        ("R-MRTR-21", "R-LOG-2"),
        "a call run again by its approved round state is recorded allowed, not approved",
    ),
    Mutant(
        "round-skips-the-capability-check",
        REDUCER,
        "    if missing:  # R-MRTR-22\n",
        "    if False:  # R-MRTR-22\n",
        ("R-MRTR-22",),
        "a round asks what the request did not declare instead of answering -32021",
    ),
    Mutant(
        "round-state-of-any-prompt",
        REDUCER,
        '    return f"{method} {named}", _digest(arguments)\n',
        "    return method, _digest(arguments)\n",
        ("R-MRTR-24",),
        "a prompt's round state opens for any prompt of the same method",
        outside_model=_READ_ROUNDS,
    ),
    # --- tasks (spec/tasks.md, R-TASK-*) ---------------------------------------------------
    Mutant(
        "task-support-any-string",
        TASKS,
        '    return value if value in ("optional", "required") else "forbidden"\n',
        '    return value if isinstance(value, str) else "forbidden"\n',
        ("R-TASK-1",),
        "a tool's task support is whatever string its definition holds, not forbidden",
    ),
    Mutant(
        "task-forbidden-tool-escalates",
        TASKS,
        '    if support(d.tools.get(call.name)) == "forbidden":\n        return\n',
        '    if support(d.tools.get(call.name)) == "":\n        return\n',
        ("R-TASK-2",),
        "a tool that forbids tasks gets an inline window and becomes a task",
    ),
    Mutant(
        "task-undeclared-call-escalates",
        TASKS,
        "    if call is None or not call.is_tool or not declares(capabilities):\n",
        "    if call is None or not call.is_tool:\n",
        ("R-TASK-2",),
        "a call that did not declare the extension becomes a task all the same",
    ),
    Mutant(
        "task-required-runs-undeclared",
        TASKS,
        '    if tool is None or support(tool) != "required" or declares(capabilities):\n',
        '    if tool is None or support(tool) != "required" or not declares(capabilities):\n',
        ("R-TASK-3",),
        "a required tool's call without the extension is admitted and runs inline",
    ),
    Mutant(
        "task-window-minus-one",
        TASKS,
        "now + d.options.task_inline_ms))\n",
        "now + d.options.task_inline_ms - 1))\n",
        ("R-TASK-4",),
        "the inline window ends one ms early: a call answered in its last ms becomes a task",
    ),
    Mutant(
        "task-window-plus-one",
        TASKS,
        "now + d.options.task_inline_ms))\n",
        "now + d.options.task_inline_ms + 1))\n",
        ("R-TASK-4",),
        "the inline window lasts one ms too long",
    ),
    Mutant(
        "task-legacy-required-runs-without-a-task",
        TASKS,
        '    if wanted == "required" and not asked:\n',
        "    if False:\n",
        ("R-TASK-12",),
        "a 2025-11-25 call of a required tool without a task is served inline, not -32601",
        outside_model=_TASKS,
    ),
    Mutant(
        "task-legacy-error-result-completes",
        TASKS,
        '        status = "failed" if result.get("isError") is True else "completed"\n',
        '        status = "completed"\n',
        ("R-TASK-13",),
        "a 2025-11-25 task whose tool answered isError (a deny among them) is completed",
        outside_model=_TASKS,
    ),
    Mutant(
        "task-legacy-result-without-related-task",
        TASKS,
        '        return m.result(rid, {**result, "_meta": related})\n',
        "        return m.result(rid, result)\n",
        ("R-TASK-14",),
        "tasks/result answers the result without the related-task _meta",
        outside_model=_TASKS,
    ),
    Mutant(
        "task-legacy-waits-unbounded",
        TASKS,
        "    elif sum(1 for tid in d.task_waits.values() if tid == task.task_id) >= MAX_WAITS:\n",
        "    elif False:\n",
        ("R-TASK-14",),
        "any number of tasks/result wait on one task",
        outside_model=_TASKS,
    ),
    Mutant(
        "task-legacy-cancel-of-a-terminal-task-accepted",
        TASKS,
        '        if task.status in TERMINAL:\n            problem = f"Task {task.task_id} is'
        " already",
        '        if False:\n            problem = f"Task {task.task_id} is already',
        ("R-TASK-14",),
        "a tasks/cancel of a finished 2025-11-25 task is answered with it, not -32602",
        outside_model=_TASKS,
    ),
    Mutant(
        "task-legacy-foreign-answer-relayed",
        TASKS,
        "    if task is None or task.origin != ev.conn or eid not in task.sent:\n",
        "    if task is None or eid not in task.sent:\n",
        ("R-TASK-15",),
        "another connection's answer to a 2025-11-25 task's question is taken",
        outside_model=_TASKS,
    ),
    Mutant(
        "task-legacy-question-sent-twice",
        TASKS,
        "    fresh = [(key, request) for key, request in task.inputs if key not in task.sent]\n",
        "    fresh = list(task.inputs)\n",
        ("R-TASK-15",),
        "a 2025-11-25 task's question is sent again on every tasks/result",
        outside_model=_TASKS,
    ),
    Mutant(
        "task-window-not-closed-by-answer",
        TASKS,
        "                if seq is not None:  # an answer, or a drop (R-DROP-4)\n",
        "                if False:\n",
        ("R-TASK-4",),
        "a call answered inline keeps its window open: its timer stays armed, its entry kept",
    ),
    Mutant(
        "task-window-ignores-the-seq",
        TASKS,
        "    if d.task_pending.get(key) != seq:\n",
        "    if key not in d.task_pending:\n",
        ("R-TASK-4",),
        "a stale window timer (of an earlier call with the same request id) closes the window "
        "of the call that reuses the id: it never becomes a task",
        outside_model=_STALE_WINDOW,
    ),
    Mutant(
        "task-askgate-failure-completes",
        TASKS,
        "    failure = _askgate_failure(result)\n",
        "    failure = None\n",
        ("R-TASK-5",),
        "askgate's own failure of a task's call (callback_failed) completes the task",
    ),
    Mutant(
        "task-deny-fails-the-task",
        TASKS,
        '    if not isinstance(data, dict) or data.get("error") not in ASKGATE_FAILURES:\n',
        "    if not isinstance(data, dict):\n",
        ("R-TASK-5", "R-TASK-10"),
        "any error result (a deny of the task's ASK among them) fails the task instead of "
        "completing it with the deny",
    ),
    Mutant(
        "task-per-owner-cap-plus-one",
        TASKS,
        "    if held >= opts.max_tasks_per_owner or d.live_tasks >= opts.max_tasks_total:\n",
        "    if held > opts.max_tasks_per_owner or d.live_tasks >= opts.max_tasks_total:\n",
        ("R-TASK-6",),
        "an owner holds one live task more than max_tasks_per_owner",
    ),
    Mutant(
        "task-total-cap-plus-one",
        TASKS,
        "    if held >= opts.max_tasks_per_owner or d.live_tasks >= opts.max_tasks_total:\n",
        "    if held >= opts.max_tasks_per_owner or d.live_tasks > opts.max_tasks_total:\n",
        ("R-TASK-6",),
        "the server holds one live task more than max_tasks_total",
    ),
    Mutant(
        "task-total-cap-ignored",
        TASKS,
        "    if held >= opts.max_tasks_per_owner or d.live_tasks >= opts.max_tasks_total:\n",
        "    if held >= opts.max_tasks_per_owner:\n",
        ("R-TASK-6",),
        "owners under their quota make tasks past max_tasks_total",
    ),
    Mutant(
        "task-end-keeps-its-place",
        TASKS,
        "    n = d.owner_tasks[task.owner] - 1\n",
        "    n = d.owner_tasks[task.owner]\n",
        ("R-TASK-6",),
        "a finished task still counts against its owner: a client is locked out by old tasks",
    ),
    Mutant(
        "task-answered-to-another-principal",
        TASKS,
        "    if task is None or task.owner != owner:  # R-TASK-7: foreign and unknown alike\n",
        "    if task is None:  # R-TASK-7: foreign and unknown alike\n",
        ("R-TASK-7",),
        "tasks/get, tasks/update and tasks/cancel serve another principal's task",
    ),
    Mutant(
        "task-cancelled-by-another-principal",
        TASKS,
        "    if task is None or task.owner != owner:  # R-TASK-7: foreign and unknown alike\n",
        '    if task is None or task.owner != owner and method != "tasks/cancel":  # R-TASK-7\n',
        ("R-TASK-7", "R-TASK-8"),
        "tasks/cancel cancels another principal's task",
    ),
    Mutant(
        "task-calls-without-declaration",
        TASKS,
        "    if not legacy and not declares(capabilities):\n",
        "    if False:\n",
        ("R-TASK-7",),
        "tasks/* served to a request that did not declare the extension",
    ),
    Mutant(
        "task-get-hides-its-inputs",
        TASKS,
        '        if task.status == "input_required":\n',
        "        if False:\n",
        ("R-TASK-7", "R-TASK-10"),
        "tasks/get of an input_required task leaves out its inputRequests",
    ),
    Mutant(
        "task-cancel-only-hides",
        TASKS,
        "    if call is not None:\n        r._drop(",
        "    if False:\n        r._drop(",
        ("R-TASK-8",),
        "tasks/cancel marks the task cancelled but its call runs on (worker not killed, "
        "approval kept)",
    ),
    Mutant(
        "task-cancel-spares-the-worker",
        TASKS,
        "    kept = absorb(d, sub, now)  # what the drop sent its channel changes nothing now\n",
        '    kept = [e for e in absorb(d, sub, now) if type(e).__name__ != "KillWorker"]\n',
        ("R-TASK-8",),
        "tasks/cancel forgets the call but never kills its worker",
    ),
    Mutant(
        "task-ttl-minus-one",
        TASKS,
        "ended.updated + d.options.task_ttl_ms))\n",
        "ended.updated + d.options.task_ttl_ms - 1))\n",
        ("R-TASK-9",),
        "a finished task is forgotten one ms before its ttl",
    ),
    Mutant(
        "task-ttl-from-creation",
        TASKS,
        "ended.updated + d.options.task_ttl_ms))\n",
        "ended.created + d.options.task_ttl_ms))\n",
        ("R-TASK-9",),
        "a finished task's ttl counts from its creation: a long task is forgotten as it ends",
    ),
    Mutant(
        "task-ttl-forgets-a-live-task",
        TASKS,
        "        if task is not None and task.status in TERMINAL:\n",
        "        if task is not None:\n",
        ("R-TASK-9",),
        "a ttl timer that fires while its task is live forgets it (R-TASK-9: never a live task)",
        outside_model=_LIVE_TTL,
    ),
    Mutant(
        "task-update-forwards-only-accepts",
        TASKS,
        "        if not any(entry[0] == key for entry in current.inputs):\n",
        "        if not any(entry[0] == key for entry in current.inputs) or not (\n"
        '            isinstance(response, dict) and response.get("action") == "accept"\n'
        "        ):\n",
        ("R-TASK-10",),
        "a declined or cancelled input of a task is ignored: its ASK never ends in the deny",
    ),
    Mutant(
        "task-answered-input-stays-listed",
        TASKS,
        "        _answered_input(d, current, key)\n",
        "        pass\n",
        ("R-TASK-10",),
        "an answered input stays in inputRequests: the task stays input_required",
    ),
    Mutant(
        "task-withdrawn-input-stays-listed",
        TASKS,
        '    elif method == "notifications/cancelled":\n',
        "    elif False:\n",
        ("R-TASK-10",),
        "a withdrawn request (timed out, its tool gone) stays in the task's inputRequests",
    ),
)


# ---------------------------------------------------------------------------------------------
# Copies of the repository


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def make_base(dest: Path, source: str, commit: str = "HEAD") -> None:
    """Copies the repository's files (as in the working tree, or as committed in ``commit``)
    into ``dest``."""
    dest.mkdir(parents=True)
    if source == "head":
        with tarfile.open(fileobj=io.BytesIO(_git("archive", commit))) as archive:
            archive.extractall(dest, filter="tar")
        link_in_place(dest)
        return
    names = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split(b"\0")
    for raw in names:
        if not raw:
            continue
        rel = os.fsdecode(raw)
        src, dst = ROOT / rel, dest / rel
        if not src.is_symlink() and not src.is_file():
            continue  # deleted in the working tree, or a submodule
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    link_in_place(dest)


def copy_tree(base: Path, dest: Path) -> None:
    shutil.copytree(
        base, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis")
    )


def apply(mutant: Mutant, tree: Path) -> str:
    """Applies ``mutant`` to the copy at ``tree``; returns the edited file's new text.

    Raises ValueError unless exactly one spelling of the edit occurs, exactly once.
    """
    path = tree / mutant.path
    text = path.read_text(encoding="utf-8")
    spellings = [(mutant.old, mutant.new), (mutant.or_old, mutant.or_new)]
    found = [(old, new) for old, new in spellings if old and old in text]
    if len(found) != 1:
        raise ValueError(f"{mutant.name}: {len(found)} spellings of the edit in {mutant.path}")
    old, new = found[0]
    count = text.count(old)
    if count != 1:
        raise ValueError(f"{mutant.name}: old text occurs {count} times in {mutant.path}")
    if old == new:
        raise ValueError(f"{mutant.name}: old and new text are the same")
    mutated = text.replace(old, new)
    compile(mutated, str(path), "exec")  # a mutant must be a program, not a syntax error
    path.write_text(mutated, encoding="utf-8")
    return mutated


# ---------------------------------------------------------------------------------------------
# Running tests in a copy

_PROCS: set[subprocess.Popen[str]] = set()
_PROCS_LOCK = threading.Lock()


PLUGIN = "askgate_mutate_plugin"
PLUGIN_SOURCE = '''"""Loaded by bench/mutate.py into every test run of a copy.

Hypothesis reports the first failing example it finds without shrinking it (a kill needs a
failure, not a minimal one, and shrinking a stateful run can take minutes), and keeps no
example database.
"""

from hypothesis import Phase, settings

settings.register_profile(
    "askgate-mutate", phases=(Phase.explicit, Phase.reuse, Phase.generate), database=None
)
settings.load_profile("askgate-mutate")
'''
_plugin_dir: list[Path] = []


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(tree), *map(str, _plugin_dir), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _run(
    cmd: Sequence[str], tree: Path, timeout: float, cwd: Path | None = None
) -> tuple[int | None, str]:
    """Runs ``cmd`` against the copy at ``tree`` (in ``tree``, unless ``cwd`` is given);
    ``None`` as status when it ran out of time (then it is killed)."""
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd or tree,
        env=_env(tree),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a timeout ends CrossHair's children too
    )
    with _PROCS_LOCK:
        _PROCS.add(proc)
    try:
        out, _ = proc.communicate(timeout=max(timeout, 1.0))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, _ = proc.communicate()
        return None, out
    finally:
        with _PROCS_LOCK:
            _PROCS.discard(proc)


def _kill_all() -> None:
    with _PROCS_LOCK:
        for proc in list(_PROCS):
            _kill(proc)


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def pytest_cmd(test_file: str) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    if importlib.util.find_spec("pytest_randomly") is not None:
        cmd += ["-p", "no:randomly"]
    if importlib.util.find_spec("hypothesis") is not None:
        cmd.append("--hypothesis-seed=0")  # a mutant is killed or not, the same on every run
        if _plugin_dir:
            cmd += ["-p", PLUGIN]
    return [*cmd, test_file]


_FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", re.MULTILINE)


def _first_failure(output: str, test_file: str) -> str:
    found = _FAILED.search(output)
    if found:
        return found.group(1)
    if "error" in output.lower():
        return f"{test_file} (collection error)"
    return test_file


@dataclass
class FileRun:
    file: str
    status: str  # passed | failed | timeout | skipped
    seconds: float
    failure: str = ""
    tail: str = ""


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed | timeout | survived | error
    seconds: float
    killed_by: str = ""
    runs: list[FileRun] = field(default_factory=list)
    error: str = ""


def run_files(
    tree: Path, files: Sequence[str], budget: float, *, stop_at_first: bool
) -> list[FileRun]:
    runs: list[FileRun] = []
    began = time.monotonic()
    for test_file in files:
        if not (tree / test_file).exists():
            continue
        left = budget - (time.monotonic() - began)
        if left <= 0:
            runs.append(FileRun(test_file, "timeout", 0.0))
            break
        t0 = time.monotonic()
        code, out = _run(pytest_cmd(test_file), tree, left)
        seconds = time.monotonic() - t0
        tail = "\n".join(out.strip().splitlines()[-15:])
        if code is None:
            runs.append(FileRun(test_file, "timeout", seconds, tail=tail))
            break
        if code == 0:
            runs.append(FileRun(test_file, "passed", seconds))
            continue
        if code == 5:  # no tests collected: the file holds nothing yet
            runs.append(FileRun(test_file, "skipped", seconds))
            continue
        runs.append(FileRun(test_file, "failed", seconds, _first_failure(out, test_file), tail))
        if stop_at_first:
            break
    return runs


def _imports_mutated_code(mutant: Mutant, tree: Path) -> str:
    """An empty string when the copy's Python imports the mutated file, from the copy."""
    module = "askgate." + mutant.path.removesuffix(".py").replace("/", ".")
    expected = (tree / mutant.path).resolve()
    digest = hashlib.sha256(expected.read_bytes()).hexdigest()
    probe = (
        "import hashlib, importlib, os\n"
        f"m = importlib.import_module({module!r})\n"
        "path = os.path.realpath(m.__file__)\n"
        "digest = hashlib.sha256(open(path, 'rb').read()).hexdigest()\n"
        f"print('ok' if (path, digest) == ({str(expected)!r}, {digest!r}) else path)\n"
    )
    # From "/", so that only PYTHONPATH can lead Python to the copy (as in CrossHair's runs).
    code, out = _run([sys.executable, "-c", probe], tree, 60, cwd=Path("/"))
    return "" if code == 0 and out.strip() == "ok" else f"imports another file: {out[-300:]}"


def budget_for(mutant: Mutant, floor: float, timings: dict[str, float]) -> float:
    """``floor`` seconds, or three times what the mutant's files took unmutated if more: a
    mutant that survives runs every file, and must not be cut short on a busy machine."""
    return max(floor, 3 * sum(timings.get(f, 0.0) for f in mutant.suite()))


def run_mutant(mutant: Mutant, base: Path, work: Path, budget: float, full: bool) -> Outcome:
    began = time.monotonic()
    tree = work / mutant.name
    try:
        copy_tree(base, tree)
        try:
            apply(mutant, tree)
        except (ValueError, SyntaxError) as bad:
            return Outcome(mutant, "error", time.monotonic() - began, error=str(bad))
        probe = _imports_mutated_code(mutant, tree)
        if probe:
            return Outcome(mutant, "error", time.monotonic() - began, error=probe)
        runs = run_files(tree, mutant.suite(), budget, stop_at_first=not full)
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    seconds = time.monotonic() - began
    first_bad = next((r for r in runs if r.status in ("failed", "timeout")), None)
    if first_bad is None:
        return Outcome(mutant, "survived", seconds, runs=runs)
    if first_bad.status == "timeout":
        return Outcome(mutant, "timeout", seconds, f"{first_bad.file} (timeout)", runs)
    return Outcome(mutant, "killed", seconds, first_bad.failure, runs)


def sanity(base: Path, work: Path, jobs: int, mutants: Sequence[Mutant]) -> dict[str, float]:
    """The unmutated copy imports itself and passes every test file; returns seconds per file."""
    tree = work / "_unmutated"
    copy_tree(base, tree)
    probe = (
        "import os, askgate.core, askgate.models, tests.harness\n"
        "print(os.path.realpath(askgate.core.__file__))\n"
        "print(os.path.realpath(askgate.models.__file__))\n"
    )
    code, out = _run([sys.executable, "-c", probe], tree, 60, cwd=Path("/"))
    root = str(tree.resolve()) + os.sep
    paths = out.split()
    if code != 0 or len(paths) != 2 or not all(p.startswith(root) for p in paths):
        raise SystemExit(f"sanity: the copy does not import its own code:\n{out}")
    files = sorted({f for mutant in mutants for f in mutant.suite() if (tree / f).exists()})
    timings: dict[str, float] = {}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        done = pool.map(lambda f: run_files(tree, [f], 1800, stop_at_first=True), files)
        for test_file, runs in zip(files, done, strict=True):
            for r in runs:
                if r.status not in ("passed", "skipped"):
                    raise SystemExit(
                        f"sanity: the unmutated copy fails {test_file} ({r.status}); nothing "
                        f"to measure against:\n{r.tail}"
                    )
                timings[test_file] = round(r.seconds, 2)
    shutil.rmtree(tree, ignore_errors=True)
    return timings


# ---------------------------------------------------------------------------------------------
# Reporting


def _table(outcomes: list[Outcome]) -> str:
    rows = [("mutant", "file", "result", "s", "killed by")]
    for o in outcomes:
        result = o.status + (
            " (equivalent)" if o.mutant.equivalent and o.status == "survived" else ""
        )
        by = o.killed_by or o.error
        rows.append((o.mutant.name, o.mutant.path, result, f"{o.seconds:.1f}", by))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(4)]
        lines.append("  ".join([*cells, row[4]]).rstrip())
    return "\n".join(lines)


def _kills_by_file(killed: list[Outcome]) -> dict[str, int]:
    """How many mutants each test file killed first (the first file that failed or timed out)."""
    counts: dict[str, int] = {}
    for o in killed:
        first = next(r for r in o.runs if r.status in ("failed", "timeout"))
        counts[first.file] = counts.get(first.file, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _record(o: Outcome) -> dict[str, Any]:
    return {
        "name": o.mutant.name,
        "file": o.mutant.path,
        "rules": list(o.mutant.rules),
        "what": o.mutant.what,
        "old": o.mutant.old,
        "new": o.mutant.new,
        "status": o.status,
        "killed_by": o.killed_by,
        "seconds": round(o.seconds, 2),
        "equivalent": o.mutant.equivalent,
        "outside_model": o.mutant.outside_model,
        "error": o.error,
        "runs": [
            {
                "file": r.file,
                "status": r.status,
                "seconds": round(r.seconds, 2),
                "failure": r.failure,
            }
            for r in o.runs
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Mutation testing of the reducer")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--budget", type=float, default=240.0, help="seconds per mutant, all its test files"
    )
    parser.add_argument("--only", nargs="*", default=None, help="run only these mutants")
    parser.add_argument(
        "--full",
        action="store_true",
        help="run every test file on every mutant (which suites kill what), not just to the first",
    )
    parser.add_argument(
        "--files",
        nargs="*",
        default=None,
        help="run only these test files (e.g. tests/test_model.py: what one checker kills alone)",
    )
    parser.add_argument(
        "--model-suite",
        action="store_true",
        help="run only the model-based suite (" + ", ".join(MODEL_SUITE) + "), skipping the "
        "mutants outside the model; results in " + str(MODEL_RESULTS.relative_to(ROOT)),
    )
    parser.add_argument(
        "--source",
        choices=("worktree", "head"),
        default="worktree",
        help="copy the working tree (the default) or the committed HEAD (others' uncommitted "
        "edits stay out)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"the results file (default {RESULTS.relative_to(ROOT)}, or "
        f"{MODEL_RESULTS.relative_to(ROOT)} with --model-suite)",
    )
    args = parser.parse_args(argv)
    out_path: Path = args.out or (MODEL_RESULTS if args.model_suite else RESULTS)

    names = [mutant.name for mutant in MUTANTS]
    if len(set(names)) != len(names):
        raise SystemExit("two mutants share a name")
    if args.list:
        for mutant in MUTANTS:
            print(f"{mutant.name:42} {mutant.path:20} {mutant.what}")
        return 0
    chosen = [m for m in MUTANTS if args.only is None or m.name in args.only]
    skipped: list[Mutant] = []
    files = args.files
    if args.model_suite:
        skipped = [m for m in chosen if m.outside_model]
        chosen = [m for m in chosen if not m.outside_model]
        files = MODEL_SUITE if files is None else files
    if files is not None:
        chosen = [dataclasses.replace(m, files=tuple(files)) for m in chosen]
    unknown = set(args.only or ()) - set(names)
    if unknown:
        raise SystemExit(f"unknown mutants: {sorted(unknown)}")

    began = time.monotonic()
    # The commit copied (others may commit while the run lasts) and whether the copy differs.
    head = _git("rev-parse", "HEAD").decode().strip()
    dirty = bool(_git("status", "--porcelain", "--", "core", "tests", "models").strip())
    work = Path(tempfile.mkdtemp(prefix="askgate-mutate-"))
    outcomes: list[Outcome] = []
    try:
        base = work / "_base"
        make_base(base, args.source, head)
        if importlib.util.find_spec("hypothesis") is not None:
            (work / "_plugin").mkdir()
            (work / "_plugin" / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
            _plugin_dir.append(work / "_plugin")
        print(f"copy of the {args.source} in {work}; sanity run of the unmutated copy ...")
        timings = sanity(base, work, args.jobs, chosen)
        print("  passes: " + ", ".join(f"{Path(f).name} {s:.1f}s" for f, s in timings.items()))
        print(
            f"{len(chosen)} mutants, {args.jobs} at a time, each with a budget of "
            f"{args.budget:.0f}s or 3x its files' unmutated time if more"
        )
        for m in skipped:
            print(f"  skipped  {m.name}: outside the model: {m.outside_model}")
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = [
                pool.submit(
                    run_mutant, m, base, work, budget_for(m, args.budget, timings), args.full
                )
                for m in chosen
            ]
            try:
                for future in concurrent.futures.as_completed(futures):
                    o = future.result()
                    outcomes.append(o)
                    by = o.killed_by or o.error
                    print(f"  {o.status:8} {o.mutant.name} ({o.seconds:.1f}s) {by}", flush=True)
            except BaseException:  # Ctrl-C: start nothing more, end what runs
                for future in futures:
                    future.cancel()
                _kill_all()
                raise
    finally:
        _kill_all()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    order = {name: i for i, name in enumerate(names)}
    outcomes.sort(key=lambda o: order[o.mutant.name])
    wall = time.monotonic() - began

    killed = [o for o in outcomes if o.status in ("killed", "timeout")]
    survived = [o for o in outcomes if o.status == "survived"]
    errors = [o for o in outcomes if o.status == "error"]
    unexplained = [o for o in survived if not o.mutant.equivalent]
    print()
    print(_table(outcomes))
    print()
    for o in survived:
        note = f"equivalent: {o.mutant.equivalent}" if o.mutant.equivalent else "NOT EXPLAINED"
        print(f"survived: {o.mutant.name}: {o.mutant.what} ({note})")
    for o in errors:
        print(f"error: {o.mutant.name}: {o.error}")
    scored = len(outcomes) - len(errors)
    by_file = _kills_by_file(killed)
    print("killed first by: " + ", ".join(f"{Path(f).name} {n}" for f, n in by_file.items()))
    if skipped:
        print(f"skipped, outside the model: {len(skipped)} ({', '.join(m.name for m in skipped)})")
    print(f"mutation score: {len(killed)}/{scored} killed ({wall:.0f}s wall, {args.jobs} jobs)")

    report = {
        "command": " ".join(["python bench/mutate.py", *(sys.argv[1:] if argv is None else argv)]),
        "source": args.source,
        "commit": head,
        "working_tree_differs_from_commit": dirty if args.source == "worktree" else False,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "jobs": args.jobs,
        "budget_seconds": args.budget,
        "full": args.full,
        "test_files": list(files) if files is not None else "per mutant (SUITES)",
        "wall_seconds": round(wall, 1),
        "unmutated_seconds_per_file": timings,
        "mutants": len(outcomes),
        "killed": len(killed),
        "survived": [o.mutant.name for o in survived],
        "timeouts": [o.mutant.name for o in outcomes if o.status == "timeout"],
        "errors": [o.mutant.name for o in errors],
        "score": f"{len(killed)}/{scored}",
        "killed_first_by_file": by_file,
        "skipped_outside_model": [
            {"name": m.name, "file": m.path, "reason": m.outside_model} for m in skipped
        ],
        "results": [_record(o) for o in outcomes],
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out_path.relative_to(ROOT) if out_path.is_relative_to(ROOT) else out_path}")
    return 1 if unexplained or errors else 0


if __name__ == "__main__":
    sys.exit(main())
