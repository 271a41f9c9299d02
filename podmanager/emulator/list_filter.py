"""Compute Engine's list `filter`, parsed by the grammar its own definition states (the `filter`
parameter of every `list` method in compute.v1's discovery document) and evaluated on one
resource's fields. `rulebook.compute_list_filter` is the rule that uses it.

The grammar, as that text gives it:
- one expression `FIELD OP VALUE` alone, unparenthesized; or several, EACH within parentheses
  (`(labels.a = "x") (labels.b = "y")`), joined by nothing (AND), `AND` or `OR`;
- two dialects never mixed in one filter: AIP-160's operators (`=`, `!=`, `>`, `<`, `<=`, `>=`,
  `:`; `:*` tests that a key is defined), and regular expressions (`eq`, `ne`) whose literal,
  unquoted or in single or double quotes, must match the whole field (RE2; Python's `re` here).

Anything else (`labels.a = "x" AND labels.b = "y"`, unbalanced parentheses, a mixed filter) is
not a filter: `InvalidFilter`. Where the text is silent, the stricter or AIP-160's reading:
single quotes belong to the regular-expression dialect only; OR binds tighter than AND (AIP-160).
The emulator evaluates `=`, `!=`, `:` and the regular expressions; an ordering operator, or a
field it does not model, is refused as a limit of the emulator (Google would evaluate them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

# One expression: FIELD OP VALUE (`eq`/`ne` need spaces around them; the others may have none).
_EXPRESSION = re.compile(
    r"\s*(?P<field>[A-Za-z_][\w.-]*)\s*"
    r"(?:(?P<op>!=|>=|<=|=|>|<|:)|\s(?P<regex>eq|ne)\s)\s*"
    r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s()\"']+)\s*")
_PARENTHESIZED = re.compile(r"\((?P<inner>[^()]*)\)")
_JOIN = re.compile(r"\s+(?P<word>AND|OR)\s+|\s*")

Lookup = Callable[[str], "str | None"]  # a field of the resource ("labels.K" included); None: not set


class InvalidFilter(ValueError):
    """Not a filter by the grammar; the message says which part."""


class UnsupportedFilter(ValueError):
    """A valid filter the emulator cannot evaluate (an ordering operator, a field it lacks)."""


@dataclass(frozen=True)
class Expression:
    field: str
    op: str  # =, !=, :, eq, ne (and the ordering operators, which `matches` refuses)
    value: str  # without its quotes
    quote: str  # ', " or ""

    def matches(self, lookup: Lookup) -> bool:
        found = lookup(self.field)
        if self.op in ("eq", "ne"):
            hit = found is not None and re.fullmatch(self.value, found) is not None
            return hit if self.op == "eq" else not hit
        if self.op == ":" and self.value == "*" and not self.quote:
            return found is not None
        if self.op in ("=", ":"):
            return found == self.value
        if self.op == "!=":
            return found != self.value
        raise UnsupportedFilter(f"the emulator does not evaluate the operator {self.op!r} ({self.field})")


@dataclass(frozen=True)
class ListFilter:
    """AND of ORs of expressions (an empty filter matches everything)."""

    all_of: tuple[tuple[Expression, ...], ...]

    def matches(self, lookup: Lookup) -> bool:
        return all(any(e.matches(lookup) for e in any_of) for any_of in self.all_of)


def _expression(text: str) -> Expression:
    found = _EXPRESSION.fullmatch(text)
    if found is None:
        raise InvalidFilter(f"{text.strip()!r} is not FIELD OPERATOR VALUE")
    value = found["value"]
    quote = value[0] if value[0] in "\"'" else ""
    op = found["op"] or found["regex"]
    if quote == "'" and op not in ("eq", "ne"):
        raise InvalidFilter(f"single quotes in {text.strip()!r}: string literals take double quotes")
    return Expression(field=found["field"], op=op, value=value[1:-1] if quote else value, quote=quote)


def parse(text: str) -> ListFilter:
    """`text` by the grammar above; InvalidFilter naming what is wrong."""
    text = text.strip()
    if not text:
        return ListFilter(())
    if not text.startswith("("):  # one expression, alone
        return ListFilter(((_expression(text),),))
    groups: list[list[Expression]] = []
    at, joined_by = 0, "AND"
    while True:
        term = _PARENTHESIZED.match(text, at)
        if term is None:
            raise InvalidFilter(f"expected a parenthesized expression at {text[at:]!r}: with several "
                                "expressions, each goes within parentheses")
        expression = _expression(term["inner"])
        if joined_by == "OR":
            groups[-1].append(expression)
        else:
            groups.append([expression])
        at = term.end()
        if at == len(text):
            break
        join = _JOIN.match(text, at)
        assert join is not None  # `\s*` matches anywhere
        joined_by, at = join["word"] or "AND", join.end()
        if at == len(text):
            raise InvalidFilter(f"{text!r} ends with {joined_by}")
    dialects = {e.op in ("eq", "ne") for group in groups for e in group}
    if len(dialects) > 1:
        raise InvalidFilter("regular expressions (eq, ne) and comparisons (=, !=, ...) cannot be mixed in one filter")
    return ListFilter(tuple(tuple(group) for group in groups))
