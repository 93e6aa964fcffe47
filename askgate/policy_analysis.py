"""What a policy file decides, computed over every name at once (spec/policy.md R-POL-7 .. 10).

A ``match`` is an ``fnmatch`` glob, and a glob's language is regular, so the questions an
auditor asks of a file have exact answers. :func:`name_classes` splits the space of all names
into the classes that a list of globs cannot tell apart: two names are in the same class when
exactly the same globs match both. A policy's decision is a function of the class (the first
entry whose glob matches decides, R-POL-1), so one representative per class answers for every
name in it. The classes come from the product of one automaton per glob over an alphabet of
character classes (the code points no bracket or literal tells apart count as one symbol),
explored breadth first from the empty name: every class that holds a name is reached, and its
representative is one of its shortest non-empty names (the empty name when it is alone).

On top of it: :func:`shadowed` (entries that can never decide, R-POL-7), :func:`explain` (which
entry decides a name, R-POL-8), :func:`check` (what ``askgate policy check`` reports, R-POL-9)
and :func:`diff` (the names whose decision changes between two files, R-POL-10).
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
import json
import re
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from askgate.core.protocol import READ_METHODS
from askgate.policy import LIST_METHODS, Policy, Rule, literal_glob

__all__ = [
    "GUARDED_READS",
    "MAX_STATES",
    "NO_MATCH",
    "AnalysisTooLargeError",
    "Change",
    "Explanation",
    "Finding",
    "check",
    "describe",
    "describe_together",
    "diff",
    "explain",
    "is_literal",
    "name_classes",
    "name_problem",
    "said_together",
    "shadowed",
    "unguarded_reads",
]

MAX_STATES: Final = 200_000
"""The most product states :func:`name_classes` explores before giving up."""

NO_MATCH: Final = "no policy rule matches"
"""The reason of the deny a name no entry matches gets (R-POL-1)."""

_TOP: Final = 0x110000
_PREFERRED: Final = "abcdefghijklmnopqrstuvwxyz0123456789_-./ABCDEFGHIJKLMNOPQRSTUVWXYZ"

Intervals = tuple[tuple[int, int], ...]
"""A set of code points as sorted, disjoint half-open intervals ``[lo, hi)``."""


class AnalysisTooLargeError(ValueError):
    """The globs' product automaton has more than :data:`MAX_STATES` states."""


# -- globs as automata -------------------------------------------------------------------------


def _bracket_set(bracket: str) -> Intervals:
    """The code points the bracket expression ``bracket`` (``[...]``) matches, as ``fnmatch``
    reads it. The class ``fnmatch`` compiles is a union of ranges whose ends are characters of
    the bracket, so membership can change only at those characters and just after them."""
    compiled = re.compile(fnmatch.translate(bracket))
    points = sorted({0, *(ord(c) for c in bracket), *(ord(c) + 1 for c in bracket)} - {_TOP})
    found: list[tuple[int, int]] = []
    for k, lo in enumerate(points):
        hi = points[k + 1] if k + 1 < len(points) else _TOP
        if compiled.match(chr(lo)):
            if found and found[-1][1] == lo:
                found[-1] = (found[-1][0], hi)
            else:
                found.append((lo, hi))
    return tuple(found)


def _atoms(pattern: str) -> tuple[Intervals | None, ...]:
    """``pattern`` as ``fnmatch`` reads it: one entry per character it consumes (the set of
    characters it accepts there), ``None`` for a ``*`` (runs of ``*`` are one)."""
    atoms: list[Intervals | None] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not atoms or atoms[-1] is not None:
                atoms.append(None)
        elif c == "?":
            atoms.append(((0, _TOP),))
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                atoms.append(((ord("["), ord("[") + 1),))
            else:
                atoms.append(_bracket_set(pattern[i - 1 : j + 1]))
                i = j + 1
        else:
            atoms.append(((ord(c), ord(c) + 1),))
    return tuple(atoms)


def is_literal(pattern: str) -> bool:
    """Whether ``pattern`` matches exactly one name (itself read literally, or one character
    per position)."""
    return all(
        atom is not None and len(atom) == 1 and atom[0][1] - atom[0][0] == 1
        for atom in _atoms(pattern)
    )


def _contains(intervals: Intervals, point: int) -> bool:
    k = bisect.bisect_right(intervals, (point, _TOP)) - 1
    return k >= 0 and intervals[k][0] <= point < intervals[k][1]


class _Glob:
    """One glob as a lazily determinized automaton over the symbols of :class:`_Alphabet`."""

    def __init__(self, atoms: tuple[Intervals | None, ...], accepts: list[frozenset[int]]):
        self.atoms = atoms
        self.accepts = accepts  # per atom: the symbols it accepts (all of them for a star)
        self.end = len(atoms)
        self.moves: dict[tuple[frozenset[int], int], frozenset[int]] = {}

    def closure(self, positions: set[int]) -> frozenset[int]:
        todo = list(positions)
        while todo:
            k = todo.pop()
            if k < self.end and self.atoms[k] is None and k + 1 not in positions:
                positions.add(k + 1)
                todo.append(k + 1)
        return frozenset(positions)

    def start(self) -> frozenset[int]:
        return self.closure({0})

    def move(self, state: frozenset[int], symbol: int) -> frozenset[int]:
        key = (state, symbol)
        found = self.moves.get(key)
        if found is None:
            after = set()
            for k in state:
                if k < self.end and symbol in self.accepts[k]:
                    after.add(k if self.atoms[k] is None else k + 1)
            found = self.moves[key] = self.closure(after)
        return found

    def accepting(self, state: frozenset[int]) -> bool:
        return self.end in state


def _alphabet(
    patterns: Sequence[tuple[Intervals | None, ...]],
) -> tuple[list[str], list[list[frozenset[int]]]]:
    """The symbols: the classes of code points that every atom of every glob accepts alike;
    for each symbol a representative character, and for each glob and atom the symbols it
    accepts."""
    sets = sorted({atom for atoms in patterns for atom in atoms if atom is not None})
    cuts = sorted({0, _TOP, *(p for s in sets for lo, hi in s for p in (lo, hi))})
    signature_of: dict[tuple[bool, ...], int] = {}
    members: dict[int, list[tuple[int, int]]] = {}
    for lo, hi in itertools.pairwise(cuts):
        signature = tuple(_contains(s, lo) for s in sets)
        symbol = signature_of.setdefault(signature, len(signature_of))
        members.setdefault(symbol, []).append((lo, hi))
    by_set = {
        s: frozenset(sym for sig, sym in signature_of.items() if sig[k]) for k, s in enumerate(sets)
    }
    every = frozenset(signature_of.values())
    accepts = [[every if atom is None else by_set[atom] for atom in atoms] for atoms in patterns]
    return [_representative(members[sym]) for sym in range(len(signature_of))], accepts


def _representative(intervals: list[tuple[int, int]]) -> str:
    for c in _PREFERRED:
        if any(lo <= ord(c) < hi for lo, hi in intervals):
            return c
    for lo, hi in intervals:
        for point in range(lo, min(hi, lo + 256)):
            if 0xD800 <= point < 0xE000:
                continue
            if chr(point).isprintable():
                return chr(point)
    return chr(intervals[0][0])


def name_classes(patterns: Sequence[str]) -> dict[tuple[bool, ...], str]:
    """Every class of names ``patterns`` tell apart: which of them match (one flag per pattern,
    in order) -> one of the shortest non-empty names of the class (the empty name when it is the
    class's only name). A combination absent from the result holds no name. Raises
    :class:`AnalysisTooLargeError` past :data:`MAX_STATES` states."""
    parsed = [_atoms(p) for p in patterns]
    representatives, accepts = _alphabet(parsed)
    globs = [_Glob(atoms, acc) for atoms, acc in zip(parsed, accepts, strict=True)]
    start = tuple(g.start() for g in globs)
    names: dict[tuple[frozenset[int], ...], str] = {start: ""}
    queue = deque([start])
    classes: dict[tuple[bool, ...], str] = {}
    while queue:
        state = queue.popleft()
        name = names[state]
        flags = tuple(g.accepting(s) for g, s in zip(globs, state, strict=True))
        if classes.get(flags, "") == "":  # the empty name only when the class has no other
            classes[flags] = name
        for symbol, char in enumerate(representatives):
            after = tuple(g.move(s, symbol) for g, s in zip(globs, state, strict=True))
            if after not in names:
                if len(names) >= MAX_STATES:
                    raise AnalysisTooLargeError(
                        f"the globs {list(patterns)!r} need more than {MAX_STATES} states to "
                        "analyse exactly"
                    )
                names[after] = name + char
                queue.append(after)
    return classes


# -- one file ----------------------------------------------------------------------------------


def _first(flags: Sequence[bool]) -> int | None:
    return next((k for k, hit in enumerate(flags) if hit), None)


def _entry(source: str, section: str, index: int, rule: Rule) -> str:
    if rule.line == 0:
        return f"{source}: the default of a file without [[reads]] ({rule.label})"
    return f"{source}, line {rule.line}: [[{section}]] entry {index + 1} ({rule.label})"


def shadowed(rules: Sequence[Rule]) -> list[tuple[int, tuple[int, ...]]]:
    """Each entry that can never decide (R-POL-7): ``(its index, the indexes of the earlier
    entries that decide every name it matches)``; the second is empty for a glob that matches
    no name at all."""
    classes = name_classes([rule.glob for rule in rules])  # a literal entry's too (R-POL-11)
    found = []
    for k in range(len(rules)):
        winners = {_first(flags) for flags in classes if flags[k]}
        if k not in winners:
            found.append((k, tuple(sorted(w for w in winners if w is not None))))
    return found


@attrs.frozen(slots=True)
class Explanation:
    """Which entry of a section decides ``name`` (R-POL-8); ``index`` is ``None`` when none
    matches."""

    name: str
    section: str
    index: int | None
    rule: Rule | None
    decision: str
    text: str
    listed: bool | None

    def lines(self, source: str) -> list[str]:
        if self.rule is None or self.index is None:
            said = [f"{self.name}: no [[{self.section}]] entry matches: deny ({NO_MATCH})"]
        else:
            where = _entry(source, self.section, self.index, self.rule)
            said = [f"{where} decides {self.name}: {self.decision}"]
            if self.index:
                said.append(f"  the {self.index} entries before it do not match {self.name}")
        if self.decision == "ask":
            said.append(f"  prompt: {self.text}")
        elif self.decision == "deny" and self.rule is not None:
            said.append(f"  reason: {self.text}")
        if self.listed is not None:
            said.append(f"  tools/list: {'shown' if self.listed else 'hidden'}")
        return said


def explain(
    policy: Policy, name: str, arguments: Mapping[str, Any] | None = None, *, read: bool = False
) -> Explanation:
    """Which entry decides the tool (or, with ``read``, the read method) ``name`` and what it
    decides, with the prompt rendered for ``arguments`` as the authorizer renders it."""
    section = "reads" if read else "tools"
    rules = policy.reads if read else policy.tools
    index = next((k for k, rule in enumerate(rules) if rule.fits(name)), None)
    rule = None if index is None else rules[index]
    decision = policy.decide(rules, name, arguments or {})
    verdict = type(decision).__name__.lower()
    text = getattr(decision, "prompt", None) or getattr(decision, "reason", None) or ""
    listed = None if read else verdict != "deny"
    return Explanation(name, section, index, rule, verdict, text, listed)


# -- policy check ------------------------------------------------------------------------------

GUARDED_READS: Final = tuple(sorted(READ_METHODS - set(LIST_METHODS)))
"""The reads that hand out data or change what a connection receives: an entry that allows
one of them without naming it leaves it unguarded (R-POL-9)."""


@attrs.frozen(slots=True)
class Finding:
    """One thing ``askgate policy check`` reports; ``kind`` is ``shadowed``, ``argument``,
    ``unguarded``, ``name`` (a match that looks like a name but reads as a glob, R-POL-12),
    ``warning`` (the loader's other warnings, R-POL-5), and given the server's tools ``unused``
    (an entry matching none of them) or ``uncovered`` (a tool no entry matches)."""

    kind: str
    line: int
    message: str


def unguarded_reads(policy: Policy) -> list[tuple[int, Rule, tuple[str, ...]]]:
    """Each ``[[reads]]`` entry that allows reads of :data:`GUARDED_READS` through a glob
    (not by their name): ``(its index, the entry, the methods)``."""
    found: dict[int, list[str]] = {}
    for method in GUARDED_READS:
        index = next((k for k, rule in enumerate(policy.reads) if rule.fits(method)), None)
        if index is None:
            continue
        rule = policy.reads[index]
        if rule.decision == "allow" and rule.match != method:
            found.setdefault(index, []).append(method)
    return [(k, policy.reads[k], tuple(methods)) for k, methods in sorted(found.items())]


def _name_like(match: str) -> list[str]:
    """The glob syntax in ``match`` that a name could hold as well (R-POL-12): a ``?``, a ``*``
    between two characters, brackets around one character that is not a glob character
    (``read[1]``: as a glob, pointless). Not a leading or trailing ``*``, nor a bracket
    expression of a range, a negation or several characters (no name reads so), nor ``[*]``
    (a glob character written as itself), nor a ``[`` without its ``]`` (itself)."""
    found: dict[str, None] = {}
    lead, end = len(match) - len(match.lstrip("*")), len(match.rstrip("*"))
    i, n = 0, len(match)
    while i < n:
        c = match[i]
        i += 1
        if c == "?":
            found["a ?"] = None
        elif c == "*" and lead < i <= end:
            found["a * between two characters"] = None
        elif c == "[":
            j = i + 1 if i < n and match[i] == "!" else i
            j = j + 1 if j < n and match[j] == "]" else j
            while j < n and match[j] != "]":
                j += 1
            if j < n:
                inner = match[i:j]
                if len(inner) == 1 and inner not in "*?[]":
                    found[f"[{inner}], which matches {inner!r} alone"] = None
                i = j + 1
    return list(found)


def name_problem(rule: Rule, section: str = "tools") -> str | None:
    """What is odd about an entry's ``match`` read as a name (R-POL-12), or ``None``: leading or
    trailing whitespace, or glob syntax a name could hold as well (:func:`_name_like`), said
    with what the glob matches instead. An entry with a
    ``literal`` key (either value) said what it means and has none."""
    match = rule.match
    if rule.literal is not None or rule.line == 0:
        return None
    said = []
    stripped = match.strip()
    if stripped != match:
        ends = [
            end
            for end, kept in (("starts", match.lstrip()), ("ends", match.rstrip()))
            if kept != match
        ]
        who = "a tool name should not have" if section == "tools" else "no method has"
        said.append(f"{' and '.join(ends)} with whitespace, which {who}")
    syntax = _name_like(match)
    if syntax:
        example = name_classes([match, literal_glob(match)]).get((True, False))
        effects = [] if fnmatch.fnmatchcase(match, match) else [f"not the name {match!r} itself"]
        if example is not None:
            effects.append(f"{'' if effects else 'names other than it, such as '}{example!r}")
        matches = f": it matches {' but '.join(effects)}" if effects else ""
        said.append(f"reads as a glob ({', '.join(syntax)}){matches}")
    if not said:
        return None
    return (
        f"{'; '.join(said)} (write literal = true if it is a name, literal = false to keep "
        "the glob)"
    )


_ARGS = re.compile(r"\{args\.([A-Za-z_][A-Za-z0-9_\-]*)\}")


def _declared(definition: object) -> tuple[str, ...] | None:
    """The argument names a tool definition's ``inputSchema`` declares, or ``None`` when it
    declares none it could be checked against."""
    schema = definition.get("inputSchema") if isinstance(definition, dict) else None
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return tuple(properties) if isinstance(properties, dict) else None


def check(policy: Policy, tools: Mapping[str, object] | None = None) -> list[Finding]:
    """What ``askgate policy check`` reports (R-POL-9), by line: entries that can never decide
    (exactly, R-POL-7), the loader's other warnings, reads of :data:`GUARDED_READS` allowed by
    a glob, and, given ``tools`` (name -> ``tools/list`` definition), each prompt quoting an
    argument a tool it asks about does not declare, each ``[[tools]]`` entry matching none of
    the tools and each tool no entry matches."""
    source = policy.source
    found: list[Finding] = []
    for section, rules in (("tools", policy.tools), ("reads", policy.reads)):
        for index, winners in shadowed(rules):
            rule = rules[index]
            where = _entry(source, section, index, rule)
            if not winners:
                said = f"{where} never applies: its glob matches no name"
            elif len(winners) == 1:
                first = rules[winners[0]]
                said = (
                    f"{where} never applies: entry {winners[0] + 1} on line {first.line} "
                    f"({first.label}) comes first and matches every name it matches"
                )
            else:
                named = ", ".join(
                    f"{w + 1} on line {rules[w].line} ({rules[w].label})" for w in winners
                )
                said = (
                    f"{where} never applies: every name it matches is matched first by "
                    f"entries {named}"
                )
            found.append(Finding("shadowed", rule.line, said))
    for section, rules in (("tools", policy.tools), ("reads", policy.reads)):
        for index, rule in enumerate(rules):
            problem = name_problem(rule, section)
            if problem is not None:
                where = _entry(source, section, index, rule)
                found.append(Finding("name", rule.line, f"{where} {problem}"))
    found += [  # the loader's other warnings; its own, weaker, shadowing check is left out
        Finding("warning", _line(warning), warning)
        for warning in policy.warnings
        if " never applies: " not in warning
    ]
    for index, rule, methods in unguarded_reads(policy):
        where = _entry(source, "reads", index, rule)
        found.append(
            Finding(
                "unguarded",
                rule.line,
                f"{where} allows {', '.join(methods)} without naming them: these reads hand "
                "out data or change what a connection receives; write an entry for each",
            )
        )
    if tools is not None:
        found += _against_tools(policy, sorted(tools), {k for k, _ in shadowed(policy.tools)})
    for name, definition in sorted((tools or {}).items()):
        decider = next((k for k, rule in enumerate(policy.tools) if rule.fits(name)), None)
        if decider is None or policy.tools[decider].decision != "ask":
            continue
        index, rule = decider, policy.tools[decider]
        declared = _declared(definition)
        if declared is None:
            continue
        for argument in dict.fromkeys(_ARGS.findall(rule.text)):
            if argument not in declared:
                has = ", ".join(declared) or "none"
                found.append(
                    Finding(
                        "argument",
                        rule.line,
                        f"{_entry(source, 'tools', index, rule)} asks about {name} with a "
                        f"prompt quoting {{args.{argument}}}, an argument {name} does not have "
                        f"(its arguments: {has}); the prompt would show (none)",
                    )
                )
    return sorted(found, key=lambda finding: finding.line)


def _against_tools(policy: Policy, names: list[str], dead: set[int]) -> list[Finding]:
    """Given the server's tool ``names`` (R-POL-9): each ``[[tools]]`` entry that matches none
    of them (``unused``; not the entries of ``dead``, reported as never applying whatever the
    names), and each tool that no entry matches (``uncovered``: denied and hidden, R-POL-1)."""
    source = policy.source
    found = []
    listed = ", ".join(names) or "none"
    for index, rule in enumerate(policy.tools):
        if index not in dead and not any(rule.fits(name) for name in names):
            where = _entry(source, "tools", index, rule)
            said = f"{where} matches no tool of the server (its tools: {listed})"
            found.append(Finding("unused", rule.line, said))
    for name in names:
        if not any(rule.fits(name) for rule in policy.tools):
            said = (
                f"{source}: no [[tools]] entry matches the server's tool {name}: every call of "
                f"it is denied ({NO_MATCH}) and tools/list hides it"
            )
            found.append(Finding("uncovered", 0, said))
    return found


def _line(message: str) -> int:
    found = re.search(r", line (\d+):", message)
    return int(found.group(1)) if found else 0


# -- policy diff -------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class Change:
    """A class of names whose decision differs between two files (R-POL-10). ``example`` is
    one of its shortest names; ``name`` is set when the class is that one name; ``old`` and
    ``new`` are the deciding entries' indexes (``None``: no entry matches)."""

    section: str
    example: str
    name: str | None
    matched_old: tuple[int, ...]
    matched_new: tuple[int, ...]
    old: int | None
    new: int | None
    before: tuple[str, str]
    after: tuple[str, str]
    methods: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self, recurse=False) | {
            "before": list(self.before),
            "after": list(self.after),
            "matched_old": list(self.matched_old),
            "matched_new": list(self.matched_new),
            "methods": list(self.methods),
        }


def _decision(rules: Sequence[Rule], index: int | None) -> tuple[str, str]:
    if index is None:
        return ("deny", NO_MATCH)
    return (rules[index].decision, rules[index].text)


def diff(old: Policy, new: Policy) -> list[Change]:
    """Every class of tool names and of read method names whose decision (allow, ask or deny,
    with its prompt or reason) differs between ``old`` and ``new``, exactly (R-POL-10); a
    class of read names lists the read methods of R-PROTO-7 it holds."""
    changes = []
    for section in ("tools", "reads"):
        before: tuple[Rule, ...] = getattr(old, section)
        after: tuple[Rule, ...] = getattr(new, section)
        patterns = [r.glob for r in (*before, *after)]
        classes = name_classes(patterns)
        methods: dict[tuple[bool, ...], list[str]] = {}
        for method in sorted(READ_METHODS) if section == "reads" else ():
            flags = tuple(fnmatch.fnmatchcase(method, p) for p in patterns)
            methods.setdefault(flags, []).append(method)
        for flags, example in classes.items():
            mine, theirs = flags[: len(before)], flags[len(before) :]
            o, n = _first(mine), _first(theirs)
            was, now = _decision(before, o), _decision(after, n)
            if was == now:
                continue
            literal = [r.glob for r, hit in zip((*before, *after), flags, strict=True) if hit]
            name = example if any(is_literal(p) for p in literal) else None
            changes.append(
                Change(
                    section,
                    example,
                    name,
                    tuple(k for k, hit in enumerate(mine) if hit),
                    tuple(k for k, hit in enumerate(theirs) if hit),
                    o,
                    n,
                    was,
                    now,
                    tuple(methods.get(flags, ())),
                )
            )
    return sorted(changes, key=lambda c: (c.section != "tools", c.name is None, c.example))


def describe(change: Change, old: Policy, new: Policy) -> list[str]:
    """``change`` in words: the name or the class, both decisions and the entries that made
    them."""
    before: tuple[Rule, ...] = getattr(old, change.section)
    after: tuple[Rule, ...] = getattr(new, change.section)
    head = f"{change.name}" if change.name is not None else _class_text(change, before, after)
    was = _said(change.before, old.source, before, change.old)
    now = _said(change.after, new.source, after, change.new)
    said = [f"{head}:", f"  old: {was}", f"  new: {now}"]
    if change.methods and change.name is None:
        said.append(f"  the read methods in it: {', '.join(change.methods)}")
    return said


def said_together(changes: Sequence[Change]) -> list[list[Change]]:
    """``changes`` in groups said together in text (R-POL-10): of one section, the named
    tools (or the classes) that go from the same decision to the same decision (verdict and
    prompt or reason), in the order of their first member."""
    groups: dict[tuple[object, ...], list[Change]] = {}
    for change in changes:
        key = (change.section, change.name is None, change.before, change.after)
        groups.setdefault(key, []).append(change)
    return list(groups.values())


def describe_together(group: Sequence[Change], old: Policy, new: Policy) -> list[str]:
    """A group of :func:`said_together` in words: one change as :func:`describe` says it;
    several as their names (or one line per class), then both decisions once, with the lines
    of every entry that makes them."""
    first = group[0]
    if len(group) == 1:
        return describe(first, old, new)
    before: tuple[Rule, ...] = getattr(old, first.section)
    after: tuple[Rule, ...] = getattr(new, first.section)
    if first.name is not None:
        said = [f"{', '.join(str(change.name) for change in group)}:"]
    else:
        said = [f"{len(group)} classes of names, each changed alike:"]
        said += [f"  {_class_text(change, before, after)}" for change in group]
    was = _said_many(first.before, old.source, before, [c.old for c in group])
    now = _said_many(first.after, new.source, after, [c.new for c in group])
    said += [f"  old: {was}", f"  new: {now}"]
    methods = sorted({method for change in group for method in change.methods})
    if methods and first.name is None:
        said.append(f"  the read methods in them: {', '.join(methods)}")
    return said


def _class_text(change: Change, before: Sequence[Rule], after: Sequence[Rule]) -> str:
    globs = [f"{_glob(before[k])} ({_where('old', before[k])})" for k in change.matched_old]
    globs += [f"{_glob(after[k])} ({_where('new', after[k])})" for k in change.matched_new]
    matched = " and ".join(globs) if globs else "no entry of either file"
    return f"names matched by {matched} and by no other entry, e.g. {json.dumps(change.example)}"


def _said_many(
    decision: tuple[str, str], source: str, rules: Sequence[Rule], indexes: list[int | None]
) -> str:
    """One decision several entries make alike (:func:`_said` for one), with their lines."""
    distinct = sorted(set(indexes), key=lambda k: -1 if k is None else k)
    if len(distinct) == 1:
        return _said(decision, source, rules, distinct[0])
    lines = [str(rules[k].line) for k in distinct if k is not None and rules[k].line]
    places = [f"line{'s' if len(lines) > 1 else ''} {', '.join(lines)}"] if lines else []
    places += ["the default without [[reads]]"] * any(
        k is not None and not rules[k].line for k in distinct
    )
    places += ["no entry"] * (None in distinct)
    verdict, text = decision
    where = f"{source}, {'; '.join(places)}"
    if verdict == "allow":
        return f"allow ({where})"
    label = "prompt" if verdict == "ask" else "reason"
    return f"{verdict} ({where}; {label} {text!r})"


def _glob(rule: Rule) -> str:
    return f"{rule.match!r}" + (" (literal)" if rule.literal else "")


def _where(which: str, rule: Rule) -> str:
    return f"{which} line {rule.line}" if rule.line else f"{which}: the default without [[reads]]"


def _said(decision: tuple[str, str], source: str, rules: Sequence[Rule], index: int | None) -> str:
    verdict, text = decision
    if index is None:
        return f"deny ({NO_MATCH}; no entry of {source} matches)"
    line = rules[index].line
    where = f"{source}, line {line}" if line else f"{source} (no [[reads]]: the default)"
    if verdict == "allow":
        return f"allow ({where})"
    label = "prompt" if verdict == "ask" else "reason"
    return f"{verdict} ({where}; {label} {text!r})"
