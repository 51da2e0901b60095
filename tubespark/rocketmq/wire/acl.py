"""Signing requests with an access key and secret, as RocketMQ's Java client does (``AclClientRPCHook``).

Every request carries ``AccessKey`` and ``Signature`` header fields: the signature is base64 of
HmacSHA1(secret, the values of all header fields sorted by name, concatenated, then the body)
(``AclUtils.combineRequestContent``, ``AclSigner``). A 5.x broker with ``authenticationEnabled=true``
(ACL 2.0; 5.3 has no ACL 1.0 ``plain_acl.yml`` any more) recomputes it with the user's password; with
``authorizationEnabled=true`` it also checks the user's ACL policies (docs/rocketmq/protocol.md, "ACL").

The secret never leaves :class:`Credentials` except as the HMAC key: it is left out of the repr, and only
the signature travels.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field, replace

from tubespark.rocketmq.wire.frame import Command

ACCESS_KEY, SIGNATURE = "AccessKey", "Signature"


@dataclass(frozen=True)
class Credentials:
    """An access key (the broker's user name) and its secret (the user's password)."""

    access_key: str
    secret_key: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("an access key and its secret are both needed")


def signature(data: bytes, secret: str) -> str:
    """``AclSigner.calSignature``: base64 of HmacSHA1 with the UTF-8 secret as key."""
    return base64.b64encode(hmac.new(secret.encode(), data, hashlib.sha1).digest()).decode()


def sign(cmd: Command, credentials: Credentials) -> Command:
    """``cmd`` with ``AccessKey`` and ``Signature`` added (a new command; ``cmd`` is left as it was)."""
    ext = {k: v for k, v in cmd.ext.items() if k != SIGNATURE}
    ext[ACCESS_KEY] = credentials.access_key
    content = "".join(ext[k] for k in sorted(ext)).encode() + cmd.body
    ext[SIGNATURE] = signature(content, credentials.secret_key)
    return replace(cmd, ext=ext)
