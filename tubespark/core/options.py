"""The options framework every broker's data source builds on: specs, common parsers, the Options page's tables.

A broker declares its options once, as a tuple of :class:`OptionSpec` (name, default, parser,
documentation, required, read/write/both), and a frozen dataclass deriving from
:class:`ParsedOptions` with one typed attribute per spec. :meth:`ParsedOptions.from_raw` parses
Spark's option map into it before any network call, so a typo fails at once with a message naming
the option and the value. An unknown option name fails the same way, naming the closest known option
(Spark passes user options through verbatim, so a misspelt ``maxOffsetPerTrigger`` would otherwise be
silently ignored and the query would read everything in one batch); protected keys are refused. An
option renamed to give one idea one name across brokers keeps its old name in ``deprecated``: the old
name still works, with a ``FutureWarning`` (shown to users by default, unlike ``DeprecationWarning``)
naming the new one.

Option names are case-insensitive, as Spark's option map is (``maxoffsetspertrigger`` is
``maxOffsetsPerTrigger``); messages always use the documented spelling.

Defaults are text, parsed by the same parser as a user's value: there is one default per setting and
it is what the generated table of docs/reference/options.md shows. Nothing here imports Spark.
"""

from __future__ import annotations

import difflib
import logging
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from tubespark.errors import OptionError

log = logging.getLogger(__name__)

READ, WRITE, BOTH = "read", "write", "both"
MODES = (READ, WRITE)

Parser = Callable[[str, str], Any]  # (option name, text) -> value; raises OptionError


def attribute_name(option: str) -> str:
    """The Python attribute of an option: ``maxOffsetsPerTrigger`` -> ``max_offsets_per_trigger``.

    camelCase becomes snake_case and ``.`` becomes ``_`` (``auth.user`` -> ``auth_user``).
    """
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", option.replace(".", "_"))
    return re.sub(r"([A-Z]+)(?=[A-Z][a-z])", r"\1_", snake).lower()


@dataclass(frozen=True)
class OptionSpec:
    """One option: its Spark name, default (text, or ``None`` for unset), parser and documentation.

    ``attr`` is the attribute of the parsed options object; empty means ``attribute_name(name)``.
    ``deprecated`` lists old names of the option that still work, with a warning.
    """

    name: str
    default: str | None
    parse: Parser
    doc: str
    required: bool = False
    applies: str = READ  # read | write | both
    attr: str = ""
    deprecated: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.applies not in (READ, WRITE, BOTH):
            raise ValueError(f"option {self.name}: applies must be read, write or both, not {self.applies!r}")
        if not self.attr:
            object.__setattr__(self, "attr", attribute_name(self.name))

    def applies_to(self, mode: str) -> bool:
        return self.applies in (mode, BOTH)

    def deprecation_note(self) -> str:
        """What the documentation says of the old names (empty without any)."""
        if not self.deprecated:
            return ""
        names = " and ".join(f"`{old}`" for old in self.deprecated)
        return f"The old name {names} still works, with a deprecation warning."


# --- common parsers --------------------------------------------------------------------------------

_ADDRESS_RE = re.compile(r"^[^\s:,]+:\d{1,5}$")
_ATTRIBUTE_RE = re.compile(r"^[A-Za-z_][\w.-]{0,63}$")


def parse_text(name: str, value: str) -> str:
    """Any text, as given."""
    return value


def parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}={value!r}: expected true or false")


def expected_integer(name: str, kind: str) -> str:
    """What an option error says an integer option expects: ``kind`` ("a positive integer"), and for an option
    named ``...Ms`` its unit with an example. The one place that says it, for every numeric parser: such an
    option counts milliseconds, and Spark's own duration syntax (``'10s'``) is the usual mistake there."""
    return f"{kind} of milliseconds, e.g. 10000 for 10 s" if name.endswith("Ms") else kind


def parse_positive_int(name: str, value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise OptionError(f"option {name}={value!r}: expected {expected_integer(name, 'a positive integer')}")
    return number


_DURATION_RE = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_BYTES_RE = re.compile(r"^\s*(\d+)\s*(b|k|kb|m|mb|g|gb|t|tb)?\s*$", re.IGNORECASE)


def parse_duration_ms(name: str, value: str) -> int:
    """A duration as Spark writes them (``500ms``, ``30s``, ``15m``, ``1h``, ``1d``; a bare number is ms)."""
    match = _DURATION_RE.match(value)
    if not match:
        raise OptionError(f"option {name}={value!r}: expected a duration like 500ms, 30s, 15m or 1h")
    return int(match.group(1)) * _DURATION_MS[(match.group(2) or "ms").lower()]


def parse_byte_size(name: str, value: str) -> int:
    """A positive size in bytes as Spark writes them (``1048576``, ``512k``, ``10m``, ``1g``: powers of 1024)."""
    match = _BYTES_RE.match(value)
    size = 0
    if match:
        unit = (match.group(2) or "b").lower().rstrip("b") or "b"
        size = int(match.group(1)) * 1024 ** "bkmgt".index(unit)
    if size <= 0:
        raise OptionError(f"option {name}={value!r}: expected a positive size in bytes, like 1048576, 512k or 10m")
    return size


def parse_non_negative_int(name: str, value: str) -> int:
    """A count, 0 allowed (e.g. how many times to retry)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise OptionError(f"option {name}={value!r}: expected {expected_integer(name, 'a non-negative integer')}")
    return number


def parse_non_negative_ms(name: str, value: str) -> int:
    """A number of milliseconds, 0 allowed (e.g. a linger time)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise OptionError(f"option {name}={value!r}: expected {expected_integer(name, 'a non-negative integer')}")
    return number


def choice(*choices: str) -> Parser:
    """A parser accepting one of ``choices`` (case-insensitive), returned lower-cased."""
    def parse(name: str, value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in choices:
            raise OptionError(f"option {name}={value!r}: expected {' or '.join(choices)}")
        return lowered

    return parse


def int_between(low: int, high: int) -> Parser:
    """A parser accepting an integer from ``low`` to ``high``."""
    def parse(name: str, value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = low - 1
        if not low <= number <= high:
            expected = expected_integer(name, f"an integer from {low} to {high}")
            raise OptionError(f"option {name}={value!r}: expected {expected}")
        return number

    return parse


def comma_list(value: str) -> list[str]:
    """The non-blank, stripped items of a comma separated list, in order."""
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_host_ports(name: str, value: str) -> tuple[str, ...]:
    """``host:port[,host:port...]`` with ports 1..65535, in the given order."""
    items = comma_list(value)
    bad = [v for v in items if not _ADDRESS_RE.match(v) or not 0 < int(v.rsplit(":", 1)[1]) < 65536]
    if not items or bad:
        raise OptionError(f"option {name}={value!r}: expected host:port[,host:port...]"
                          + (f" (bad: {', '.join(bad)})" if bad else ""))
    return tuple(items)


def parse_attribute_name(name: str, value: str) -> str:
    """A message attribute name: letters, digits, ``_ . -``, a letter or ``_`` first, at most 64 chars."""
    value = value.strip()
    if not _ATTRIBUTE_RE.match(value) or value.startswith("$"):
        raise OptionError(f"option {name}={value!r}: expected an attribute name (letters, digits, '_', '.', '-')")
    return value


# --- parsing a Spark option map --------------------------------------------------------------------


SPARK_OWN_OPTIONS = ("checkpointLocation", "path", "paths", "queryName")
"""Keys Spark itself puts into a Python data source's option map (seen in PySpark 4.3): a streaming
write's ``checkpointLocation`` and ``queryName``, ``load(path)``/``save(path)``/``start(path)``'s ``path``,
``load([paths])``'s ``paths``. Not the user's mistake, so never "unknown". A stream reader given the query's
``checkpointLocation`` too reads its commit log when the query stops (``tubespark/spark/commit_log.py``)."""
_SPARK_OWN = frozenset(name.lower() for name in SPARK_OWN_OPTIONS)


def unknown_option_error(key: str, specs: Iterable[OptionSpec], source: str = "") -> OptionError:
    """The error for an option name no spec, old name or Spark option has: it names the closest known
    option in its documented spelling ("did you mean maxOffsetsPerTrigger?"); close to an old name, the
    current one.

    Spark lower-cases the keys of a data source's option map, so ``key`` usually arrives lower-cased and
    the match is made case-insensitively (difflib over lower-cased names, cutoff 0.75).
    """
    spelled = {name.lower(): name for name in SPARK_OWN_OPTIONS}
    for spec in specs:
        spelled.update({old.lower(): spec.name for old in spec.deprecated})
        spelled[spec.name.lower()] = spec.name
    close = difflib.get_close_matches(key.lower(), list(spelled), n=1, cutoff=0.75)
    where = f" for format('{source}')" if source else ""
    hint = f"did you mean {spelled[close[0]]}?" if close else "remove it, or correct its name"
    return OptionError(f"unknown option {key!r}{where}: {hint} (see docs/reference/options.md; names are "
                       f"case-insensitive). Refused before reading or writing: Spark would ignore it silently")


def parse_raw(raw: Mapping[str, str], specs: Iterable[OptionSpec], *, mode: str, required: Iterable[str] = (),
              defaults: Mapping[str, str] | None = None, protected: Mapping[str, str] | None = None,
              source: str = "") -> dict[str, Any]:
    """Parse ``raw`` (Spark's option map; names case-insensitive) for ``mode`` ``read`` or ``write``.

    Returns ``{spec.attr: value}`` for every spec. An option that does not apply to ``mode`` gets its
    parsed default (its value in ``raw`` is ignored). ``required`` names options required in this
    mode on top of the specs' own; ``defaults`` overrides specs' defaults for this call (e.g. a batch
    read starting at ``earliest``). Raises OptionError for a protected key (lower case -> what to use
    instead), a missing required option, a bad value, or an option given under both its name and an old
    name, or an unknown name (:func:`unknown_option_error`); warns about old names (which work, and name
    themselves in messages).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be read or write, not {mode!r}")
    specs = tuple(specs)
    by_name = {spec.name.lower(): spec for spec in specs}
    old_names = {old.lower(): (old, spec) for spec in specs for old in spec.deprecated}
    protected = {k.lower(): v for k, v in (protected or {}).items()}
    overrides = {k.lower(): v for k, v in (defaults or {}).items()}
    needed = {name.lower() for name in required}
    prefix = f"{source}: " if source else ""
    named = {key.lower() for key in raw}
    given: dict[str, tuple[str, Any]] = {}  # documented name, lower case -> (name as spelled in messages, value)
    for key, value in raw.items():
        lowered = key.lower()
        if lowered in protected:
            raise OptionError(f"option {key} cannot be passed through: tubespark sets it itself; "
                              f"use {protected[lowered]} instead")
        if lowered in old_names:
            old, spec = old_names[lowered]
            if spec.name.lower() in named:
                raise OptionError(f"options {spec.name} and {old} are the same option ({old} is its old name): "
                                  f"give only {spec.name}")
            warnings.warn(f"{prefix}option {old!r} is deprecated: use {spec.name!r} (same meaning)", FutureWarning,
                          stacklevel=4)
            log.warning("%soption %r is deprecated: use %r (same meaning)", prefix, old, spec.name)
            given[spec.name.lower()] = (old, value)
            continue
        if lowered not in by_name and lowered not in _SPARK_OWN:
            raise unknown_option_error(key, specs, source)
        given[lowered] = (by_name[lowered].name if lowered in by_name else key, value)
    values: dict[str, Any] = {}
    for spec in specs:
        lowered = spec.name.lower()
        default = overrides.get(lowered, spec.default)
        if not spec.applies_to(mode):
            values[spec.attr] = spec.parse(spec.name, default) if default is not None else None
            continue
        spelled, text = given.get(lowered, (spec.name, None))
        if text is None:
            if spec.required or lowered in needed:
                raise OptionError(f'option {spec.name} is required: add .option("{spec.name}", ...). {spec.doc}')
            spelled, text = spec.name, default
        values[spec.attr] = spec.parse(spelled, str(text)) if text is not None else None
    return values


_Self = TypeVar("_Self", bound="ParsedOptions")


class ParsedOptions:
    """Base of a broker's frozen options dataclass: one attribute per spec of ``SPECS``.

    Subclasses set ``SPECS`` (and optionally ``PROTECTED`` and ``SOURCE``) and may override
    :meth:`check` for rules that involve several options. Instances hold only plain values, so they
    pickle (Spark ships them to executors).
    """

    SPECS: ClassVar[tuple[OptionSpec, ...]] = ()
    PROTECTED: ClassVar[Mapping[str, str]] = {}
    SOURCE: ClassVar[str] = ""

    @classmethod
    def from_raw(cls: type[_Self], raw: Mapping[str, str], *, mode: str, required: Iterable[str] = (),
                 defaults: Mapping[str, str] | None = None) -> _Self:
        """Validated options for ``mode`` (``read`` or ``write``) from Spark's option map."""
        values = parse_raw(raw, cls.SPECS, mode=mode, required=required, defaults=defaults,
                           protected=cls.PROTECTED, source=cls.SOURCE)
        options = cls(**values)
        options.check(mode)
        return options

    def check(self, mode: str) -> None:
        """Rules across options; raise OptionError. Nothing by default."""

    @classmethod
    def missing_attributes(cls) -> tuple[set[str], set[str]]:
        """``(specs without a field, fields without a spec)``; both empty for a consistent class."""
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        attrs = {spec.attr for spec in cls.SPECS}
        return attrs - names, names - attrs


def render_table(specs: Iterable[OptionSpec], mode: str | None = None) -> str:
    """Markdown table of ``specs`` (for ``mode`` only, when given), as embedded in docs/reference/options.md."""
    rows = ["| option | default | applies to | meaning |", "|---|---|---|---|"]
    for spec in specs:
        if mode and not spec.applies_to(mode):
            continue
        default = "**required**" if spec.required else (f"`{spec.default}`" if spec.default else "")
        doc = " ".join(filter(None, (spec.doc, spec.deprecation_note())))
        rows.append(f"| `{spec.name}` | {default} | {spec.applies} | {doc} |")
    return "\n".join(rows)
