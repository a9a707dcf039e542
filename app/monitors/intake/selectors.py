"""PromQL series selectors (``http_requests_total{job="api", instance=~"web-.*"}``): how a monitor says which
remote-written series feed it. Parsed once, matched against every incoming series' labels.

The syntax is PromQL's instant-vector selector without range or offset: an optional metric name, then
``{name op "value", ...}`` with op one of ``=``, ``!=``, ``=~``, ``!~``, values in double quotes, single quotes
or backticks. As in PromQL, regular expressions are RE2's syntax, anchored at both ends, and matched in time
linear in the label's length (so no pattern can stall the process); a matcher against a missing label sees the
empty string, and a selector must have at least one matcher that does not match the empty string
(``{}`` or ``{job!="x"}`` alone would take every series written to the account).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import re2

from app.errors import MalformedInput
from app.web.validation import problem

MAX_SELECTOR_LENGTH = 4096
MAX_REGEX_LENGTH = 512
MAX_MATCHERS = 32

_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPERATORS = ("=~", "!~", "!=", "=")
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'",
            '"': '"'}


def _re2_options() -> re2.Options:
    options = re2.Options()
    options.dot_nl = True  # PromQL's "." matches a line break too
    options.never_capture = True  # only whether it matches is asked
    options.log_errors = False  # a refused pattern is the user's 400, not a line on stderr
    return options


_RE2_OPTIONS = _re2_options()

Op = Literal["=", "!=", "=~", "!~"]


class SelectorError(ValueError):
    """A selector that cannot be parsed or would be unsafe or meaningless; the message says where."""


@dataclass(frozen=True)
class Matcher:
    name: str
    op: Op
    value: str
    pattern: Any = None  # a compiled RE2 pattern

    def matches(self, actual: str) -> bool:
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        assert self.pattern is not None
        found = self.pattern.fullmatch(actual) is not None
        return found if self.op == "=~" else not found


@dataclass(frozen=True)
class Selector:
    text: str
    matchers: tuple[Matcher, ...]

    @property
    def required_pair(self) -> tuple[str, str] | None:
        """One label=value pair every matching series has (the last non-empty equality matcher), for indexing
        selectors; None when there is none."""
        for matcher in reversed(self.matchers):
            if matcher.op == "=" and matcher.value:
                return matcher.name, matcher.value
        return None

    def matches(self, labels: dict[str, str]) -> bool:
        return all(m.matches(labels.get(m.name, "")) for m in self.matchers)


def parse(text: str) -> Selector:
    if not isinstance(text, str) or not text.strip():
        raise SelectorError("must not be blank")
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"must be at most {MAX_SELECTOR_LENGTH} characters")
    position = _skip_space(text, 0)
    matchers: list[Matcher] = []
    name = _NAME_RE.match(text, position)
    if name is not None:
        matchers.append(Matcher("__name__", "=", name.group()))
        position = _skip_space(text, name.end())
    if position < len(text):
        if text[position] != "{":
            raise SelectorError(f"expected '{{' at character {position + 1}")
        position = _skip_space(text, position + 1)
        while position < len(text) and text[position] != "}":
            matcher, position = _matcher(text, position)
            matchers.append(matcher)
            position = _skip_space(text, position)
            if position < len(text) and text[position] == ",":
                position = _skip_space(text, position + 1)
            elif position < len(text) and text[position] != "}":
                raise SelectorError(f"expected ',' or '}}' at character {position + 1}")
        if position >= len(text):
            raise SelectorError("missing the closing '}'")
        position = _skip_space(text, position + 1)
        if position < len(text):
            raise SelectorError(f"unexpected text after the selector at character {position + 1}: only a series "
                                "selector is accepted here (no functions, ranges or offsets)")
    if not matchers:
        raise SelectorError("needs a metric name or at least one label matcher")
    if len(matchers) > MAX_MATCHERS:
        raise SelectorError(f"at most {MAX_MATCHERS} matchers")
    if all(m.matches("") for m in matchers):
        raise SelectorError("needs at least one matcher that does not match the empty string (as in PromQL), or it "
                            "would take every series")
    return Selector(text=text, matchers=tuple(matchers))


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _matcher(text: str, position: int) -> tuple[Matcher, int]:
    label = _LABEL_RE.match(text, position)
    if label is None:
        raise SelectorError(f"expected a label name at character {position + 1}")
    position = _skip_space(text, label.end())
    op = next((o for o in _OPERATORS if text.startswith(o, position)), None)
    if op is None:
        raise SelectorError(f"expected one of =, !=, =~, !~ after '{label.group()}' at character {position + 1}")
    position = _skip_space(text, position + len(op))
    value, position = _string(text, position)
    pattern = None
    if op in ("=~", "!~"):
        if len(value) > MAX_REGEX_LENGTH:
            raise SelectorError(f"the regular expression for '{label.group()}' is longer than {MAX_REGEX_LENGTH} "
                                "characters")
        try:
            pattern = re2.compile(value, _RE2_OPTIONS)
        except re2.error as exc:
            reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
            raise SelectorError(f"invalid regular expression for '{label.group()}' (RE2 syntax, as in "
                                f"Prometheus): {reason}") from None
    return Matcher(label.group(), op, value, pattern), position  # type: ignore[arg-type]


def _string(text: str, position: int) -> tuple[str, int]:
    if position >= len(text) or text[position] not in "\"'`":
        raise SelectorError(f"expected a quoted value at character {position + 1}")
    quote = text[position]
    position += 1
    out: list[str] = []
    while position < len(text):
        char = text[position]
        if char == quote:
            return "".join(out), position + 1
        if char == "\\" and quote != "`":
            if position + 1 >= len(text):
                break
            escaped = text[position + 1]
            if escaped not in _ESCAPES:
                raise SelectorError(f"unknown escape '\\{escaped}' at character {position + 1}")
            out.append(_ESCAPES[escaped])
            position += 2
            continue
        if char == "\n" and quote != "`":
            raise SelectorError(f"line break inside a quoted value at character {position + 1}")
        out.append(char)
        position += 1
    raise SelectorError("a quoted value is not closed")


def check_monitor_field(fields: dict[str, Any], *, prometheus_backed: bool) -> None:
    """400 for a ``remote_write_selector`` that does not parse, or on a monitor that reads Prometheus itself."""
    text = fields.get("remote_write_selector")
    if text is None:
        return
    if prometheus_backed:
        raise _refuse("A Prometheus-backed monitor reads its points itself; only a pushed monitor takes "
                      "remote-written series", text)
    try:
        parse(text)
    except SelectorError as exc:
        raise _refuse(f"Not a series selector: {exc}", text) from None


def _refuse(issue: str, provided: str) -> MalformedInput:
    return MalformedInput(f"Invalid request: remote_write_selector: {issue}.",
                          details=problem("remote_write_selector", issue, provided))
