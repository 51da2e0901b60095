"""Message filters of a subscription: a tag expression (``TagA || TagB``, ``*`` = all) or an SQL92 expression
over message properties (docs/rocketmq/protocol.md, "Filters").

Why the client checks tags again: the broker keeps only each message's tag hash (Java ``String.hashCode``)
in its consume queue and filters by that, so a message whose tag merely collides with a wanted one
(``Aa`` and ``BB`` share 2112) reaches the client; the Java client drops those by the ``TAGS`` property
(``PullAPIWrapper.processPullResult``), and so does :meth:`Filter.keeps`. An SQL92 expression is evaluated
by the broker on the stored properties exactly, so no second check is needed.

Why a pull reader must know whether a filter is on: filtered messages leave holes in a pull answer's
offsets, and a pull whose scanned chunk matched nothing answers PULL_RETRY_IMMEDIATELY with
``nextBeginOffset`` moved past the chunk; without a filter both would mean lost data or a lagging broker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tubespark.rocketmq.wire import codes
from tubespark.rocketmq.wire.frame import Command, request

TAG, SQL92 = "TAG", "SQL92"
SUB_ALL = "*"


@dataclass(frozen=True)
class Filter:
    """What a read subscribes to. ``Filter()`` is everything (``*``)."""

    expression: str = SUB_ALL
    kind: str = TAG
    tags: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in (TAG, SQL92):
            raise ValueError(f"filter type is {TAG} or {SQL92}, not {self.kind!r}")
        if self.kind == SQL92 and not self.expression.strip():
            raise ValueError("an SQL92 filter needs an expression")
        # the broker's FilterAPI.buildSubscriptionData: split on "||", trim, drop empty parts; "" or "*" is all
        expr = self.expression.strip()
        tags = frozenset() if self.kind != TAG or expr in ("", SUB_ALL) else frozenset(
            t.strip() for t in expr.split("||") if t.strip())
        if self.kind == TAG and not tags and expr not in ("", SUB_ALL):
            raise ValueError(f"the tag expression {self.expression!r} names no tag (tags are joined by '||')")
        object.__setattr__(self, "tags", tags)

    @property
    def everything(self) -> bool:
        """True when the broker passes every message (no holes in offsets, nothing to check again)."""
        return self.kind == TAG and not self.tags

    @property
    def sub_string(self) -> str:
        """The subscription as the broker takes it (``*`` for everything)."""
        return SUB_ALL if self.everything else self.expression.strip()

    def keeps(self, tags: str | None) -> bool:
        """Whether a message the broker passed, with ``TAGS`` ``tags``, really matches (tag hash collisions
        and untagged messages do not, as in the Java client); SQL92 results are the broker's, exact."""
        if self.kind != TAG or not self.tags:
            return True
        return tags is not None and tags in self.tags


ALL = Filter()


def check_client_request(*, group: str, topic: str, flt: Filter, client_id: str, now_ms: int) -> Command:
    """CHECK_CLIENT_CONFIG: the broker compiles an SQL92 filter and says whether it filters by properties at
    all (``enablePropertyFilter``), before any read. The Java consumer asks the same at start; a pull itself
    does not say it: with an expression that does not compile, the 5.3.3 broker passes every message."""
    subscription = {"topic": topic, "subString": flt.sub_string, "expressionType": flt.kind,
                    "tagsSet": sorted(flt.tags), "codeSet": [], "subVersion": now_ms, "classFilterMode": False}
    body = json.dumps({"clientId": client_id, "group": group, "subscriptionData": subscription},
                      separators=(",", ":")).encode()
    return request(codes.CHECK_CLIENT_CONFIG, None, body)
