"""Which topics a read covers: the ``topic`` option as given, or what ``topicPattern`` matches now."""

from __future__ import annotations

from tubespark.errors import OptionError
from tubespark.tubemq.client.metadata import list_topics
from tubespark.tubemq.spark.options import TubeMQOptions


def subscribed_topics(options: TubeMQOptions, *, allow_none: bool = False) -> tuple[str, ...]:
    """``topic``, or every topic the masters serve whose whole name matches ``topicPattern`` (sorted).

    A pattern matching nothing fails with a message naming the pattern and the topics there are, unless
    ``allow_none`` (a running stream whose topics were all removed keeps going on its offsets).
    """
    if options.topics:
        return options.topics
    pattern = options.topic_pattern
    assert pattern is not None, "options.check() demands topic or topicPattern"
    names = list_topics(options.web_urls(), timeout_s=options.request_timeout_ms / 1000)
    matched = tuple(name for name in names if pattern.fullmatch(name))
    if not matched and not allow_none:
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        raise OptionError(f"option topicPattern={pattern.pattern!r} matches none of the {len(names)} topics the "
                          f"master serves ({shown or 'none'}); the whole name must match")
    return matched
