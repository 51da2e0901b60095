"""The rules for offsets a user names (``startingOffsets`` / ``endingOffsets`` JSON), the same for every broker.

:mod:`tubespark.spark.offsets` parses a spec on its own; whether its numbers fit a topic can only be told once
the broker said which partitions exist and where each one ends. The readers call these checks as they
resolve a read's start (batch and stream) and end (batch), with the broker supplying only facts: the
partitions it lists, each one's bounds, and how its offsets count (:class:`OffsetUnits`). A number that
breaks a rule is a mistake in the options, so each raises :class:`~tubespark.errors.OptionError` before
anything is read, naming the option, the partition and what would be valid:

* a JSON key the topics do not have (a typo, another topic, a partition id past the last one) would be
  ignored, and the partition it meant read from the default instead;
* a number above the partition's end is no message yet: waiting for it would hang a batch read and stall
  a stream with no word of the cause (a running query's own offset above a lagging replica's end is another
  matter, the broker's :class:`~tubespark.spark.planning.BoundsPolicy` judges that);
* a number between two messages (TubeMQ's offsets count bytes of 28-byte index records; TANK's sequence
  numbers and RocketMQ's queue offsets count messages, so every number is a boundary) would be rounded to
  the next record and lose the message the user meant to start at;
* a number below the partition's first available offset names messages that are gone (retention removed
  them): data loss, so ``failOnDataLoss`` decides (:func:`resolve_start`) whether the read fails or starts at
  the first offset there is;
* an end before its start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass

from tubespark.errors import DataLossError, OptionError
from tubespark.spark.offsets import OffsetSpec, wanted_offset

log = logging.getLogger(__name__)

SHOWN = 12
"""Most existing partitions an error lists (a topic of hundreds would drown the message)."""


@dataclass(frozen=True)
class OffsetUnits:
    """How a broker's offsets count: the facts the rules need, named the way its users know them."""

    record_size: int = 1
    """Offset units per message: 1 where offsets count messages; TubeMQ's are byte positions of 28-byte index
    records, so only multiples of 28 are message boundaries (docs/tubemq/protocol.md "Index offsets")."""
    end_name: str = "max offset"
    """What the partition's end (the offset the next message gets) is called: in error messages."""
    noun: str = "offset"


MESSAGES = OffsetUnits()
"""Offsets that count messages (RocketMQ queue offsets): every number in bounds is a message boundary."""


def check_named_partitions(option: str, spec: OffsetSpec | None, listed: Collection[str], *,
                           exists: Callable[[str], bool] = lambda key: False, listing: str = "") -> None:
    """Fail when the JSON ``spec`` of ``option`` names a partition the topics do not have.

    ``listed``: the partitions the broker lists now (the error shows them); ``exists``: asked of each other
    key, true where the key may be a real partition the broker does not list now (its broker is down). A
    word (``earliest``...) names no partition. ``listing``: how else to list them (a broker's admin tool).
    """
    if not isinstance(spec, dict):
        return
    unknown = sorted(key for key in spec if key not in listed and not exists(key))
    if not unknown:
        return
    have = sorted(listed)
    shown = ", ".join(have[:SHOWN]) + (f" and {len(have) - SHOWN} more" if len(have) > SHOWN else "")
    raise OptionError(f"option {option} names {'a partition' if len(unknown) == 1 else 'partitions'} the topics do "
                      f"not have: {', '.join(unknown)}; they have {shown or 'none listed now'}"
                      f"{f' ({listing})' if listing else ''}. Fix the key or remove it from the JSON")


def check_offset(option: str, key: str, offset: int, end: int, units: OffsetUnits = MESSAGES) -> None:
    """An offset the user named for ``key``: on a message boundary and not above the partition's ``end``."""
    size = units.record_size
    if size > 1 and offset % size:
        below = offset - offset % size
        raise OptionError(f"option {option}: {units.noun} {offset} of {key} is not on a message boundary ("
                          f"{units.noun}s are multiples of {size}, the index record size); use one of the nearest "
                          f"valid ones, {below} or {below + size}")
    if offset > end:
        raise OptionError(f"option {option}: {key} is at {offset}, beyond the partition's {units.end_name} {end}: "
                          f"use latest or {'an offset' if units.noun == 'offset' else f'a {units.noun}'} up to {end}")


def resolve_checked(option: str, spec: OffsetSpec, key: str, *, low: int, high: int, default: int,
                    units: OffsetUnits = MESSAGES) -> int:
    """The offset ``spec`` means for ``key`` in a partition spanning ``[low, high)``; a number the user named
    passes :func:`check_offset` (a word needs no check: the broker's own bounds are boundaries)."""
    wanted = wanted_offset(spec, key, default=default)
    if wanted == "earliest":
        return low
    if wanted == "latest":
        return high
    offset = int(wanted)
    check_offset(option, key, offset, high, units)
    return offset


def check_range(key: str, start: int, end: int, units: OffsetUnits = MESSAGES) -> None:
    """A batch read's range of ``key``: its start not after its end."""
    if end < start:
        raise OptionError(f"for {key} the starting {units.noun} {start} is after the ending one {end}: fix "
                          f"startingOffsets or endingOffsets")


def resolve_start(option: str, spec: OffsetSpec, key: str, *, low: int | None, high: int, default: int,
                  units: OffsetUnits = MESSAGES, fail_on_data_loss: bool = True) -> int:
    """Where ``spec`` starts ``key`` (batch read or a new stream), the partition spanning ``[low, high)`` (``low``
    ``None``: the broker does not tell). :func:`resolve_checked`, and a number below ``low`` is data loss: raised
    as :class:`DataLossError` with ``fail_on_data_loss``, else logged, the read starting at ``low``."""
    first = 0 if low is None else low
    offset = resolve_checked(option, spec, key, low=first, high=high, default=default, units=units)
    if low is None or offset >= low:
        return offset
    message = (f"option {option}: {key} is at {offset}, below the partition's first available {units.noun} {low}: "
               f"the messages before it are gone (retention removed them)")
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Use earliest or {'an offset' if units.noun == 'offset' else 'a number'} "
                            f"from {low}, or set failOnDataLoss=false to read from {low}")
    log.warning("%s; failOnDataLoss=false: reading from %d", message, low)
    return low
