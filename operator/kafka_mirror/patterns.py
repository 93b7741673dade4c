"""Topic and group patterns, matched with RE2 so that matching time is linear in the name.

A user's pattern runs against every topic of the source cluster in the worker and the operator;
with a backtracking engine (Python's `re`, Java's) `(a+)+b` takes exponential time on a name of
a's, so one hostile selection could stall both. RE2 has no backtracking: it refuses the few
constructs that need it (lookaround, backreferences, possessive quantifiers) with a message, and
bounds the compiled program's size.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol

import re2

COMPILED_LISTS = 4096  # pattern lists kept compiled: more than the live selections of a big install

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # an invalid pattern is reported to its author, not to stderr


# RE2's reasons for the constructs that only a backtracking engine has.
_NEEDS_BACKTRACKING = (
    "invalid perl operator",
    "invalid escape sequence",
    "bad repetition operator",
)
_RE2_HINT = "RE2 syntax: no lookaround, backreferences or possessive quantifiers"


class Pattern(Protocol):
    def fullmatch(self, text: str) -> object | None: ...


class InvalidPattern(ValueError):
    """The pattern does not compile under RE2; the message says why."""


def compile_pattern(pattern: str) -> Pattern:
    try:
        compiled: Pattern = re2.compile(pattern, options=_OPTIONS)
    except re2.error as error:
        reason = error.args[0] if error.args else "does not compile"
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        if str(reason).startswith(_NEEDS_BACKTRACKING):
            reason = f"{reason} ({_RE2_HINT})"
        raise InvalidPattern(str(reason)) from None
    return compiled


def validate_patterns(patterns: list[str]) -> list[str]:
    """Refuse patterns that do not compile, naming each with the reason."""
    problems = [f"{p!r}: {reason}" for p in patterns if (reason := pattern_error(p)) is not None]
    if problems:
        raise ValueError("invalid regular expression " + "; ".join(problems))
    return patterns


@functools.lru_cache(maxsize=COMPILED_LISTS)
def pattern_error(pattern: str) -> str | None:
    """Why `pattern` is not a usable pattern, or None."""
    try:
        compile_pattern(pattern)
    except InvalidPattern as error:
        return str(error)
    return None


class _AnyOf:
    """Several compiled patterns tried in turn: for lists whose one alternation RE2 refuses as
    too large."""

    def __init__(self, compiled: list[Pattern]) -> None:
        self.compiled = compiled

    def fullmatch(self, text: str) -> object | None:
        return next((m for p in self.compiled if (m := p.fullmatch(text)) is not None), None)


def compile_any(patterns: Sequence[str]) -> Pattern | None:
    """One matcher for a list of patterns (None for an empty list: it matches nothing): a name
    matches it when it matches any of them. One RE2 alternation, so a name is read once however
    many patterns there are (a tenant's 100 selections of 256 patterns against 1,000 topics
    took 27 s a refresh one by one, 0.2 s so); each pattern alone where the alternation is over
    RE2's program size. Raises InvalidPattern for the first pattern that does not compile.

    Compiled once per list (RE2 matchers are safe to share between threads): the operator
    meets the same selections every refresh, and compiling those 100 selections each time made
    it 25 MiB more every round that the allocator did not give back."""
    if not patterns:
        return None
    return _compiled_any(tuple(patterns))


@functools.lru_cache(maxsize=COMPILED_LISTS)
def _compiled_any(patterns: tuple[str, ...]) -> Pattern:
    compiled = [compile_pattern(p) for p in patterns]
    if len(compiled) == 1:
        return compiled[0]
    try:
        return compile_pattern("|".join(f"(?:{p})" for p in patterns))
    except InvalidPattern:  # each compiles, so the union is only too large
        return _AnyOf(compiled)
