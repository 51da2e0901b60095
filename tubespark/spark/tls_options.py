"""The TLS options, written once for every broker that speaks TLS (TubeMQ, RocketMQ): specs, rules, context.

Why one place: the six options mean the same on every broker (a CA file, a client certificate and key, the
key's password, hostname verification, and the switch), and so do their rules: a TLS option without the
switch would silently connect in plain text, and a file that does not load must fail when the options are
parsed, before any network call. A broker takes :func:`tls_specs` with its name prefix (TubeMQ's options
are ``tubemq.tlsEnable`` ..., after the Java client's property names; RocketMQ's have no prefix, like all
its options) and the sentences that are its own (what the switch does to addresses, what its servers ask
of a client), and its options class derives from :class:`TlsOptions`, which declares the six attributes.
The TLS itself (context, channel, errors) is :mod:`tubespark.core.tls`.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import ClassVar

from tubespark.core.options import BOTH, OptionSpec, parse_bool, parse_text
from tubespark.core.tls import client_context
from tubespark.errors import OptionError

__all__ = ["TlsOptions", "tls_specs"]


def _ca_file(name: str, value: str) -> str:
    if not os.path.isfile(value) or not os.access(value, os.R_OK):
        raise OptionError(f"option {name}={value!r}: expected a readable PEM file of CA certificates")
    return value


def _pem_file(name: str, value: str) -> str:
    if not os.path.isfile(value) or not os.access(value, os.R_OK):
        raise OptionError(f"option {name}={value!r}: expected a readable PEM file")
    return value


def tls_specs(prefix: str, *, enable: str, cert: str, hosts: str) -> tuple[OptionSpec, ...]:
    """The six TLS options named ``<prefix>tlsEnable`` ...; ``enable``: what the switch does on this broker,
    ``cert``: what its servers ask of a client certificate (may be empty), ``hosts``: which addresses
    hostname verification checks."""
    p = prefix
    return (
        OptionSpec(f"{p}tlsEnable", "false", parse_bool, enable, False, BOTH, attr="tls_enable"),
        OptionSpec(f"{p}tlsCaFile", None, _ca_file, "PEM file of CAs to trust for TLS (default: system CAs).",
                   False, BOTH, attr="tls_ca_file"),
        OptionSpec(f"{p}tlsCertFile", None, _pem_file, " ".join(filter(None, (
            f"PEM file with this client's certificate (and its key, unless `{p}tlsKeyFile` is set).", cert))),
            False, BOTH, attr="tls_cert_file"),
        OptionSpec(f"{p}tlsKeyFile", None, _pem_file, f"PEM file with the private key of `{p}tlsCertFile`.",
                   False, BOTH, attr="tls_key_file"),
        OptionSpec(f"{p}tlsKeyPassword", None, parse_text, f"Password of an encrypted `{p}tlsKeyFile`.", False,
                   BOTH, attr="tls_key_password"),
        OptionSpec(f"{p}tlsVerifyHostname", "true", parse_bool, f"Check that the server's certificate names the "
                   f"host connected to ({hosts}). `false` still checks the certificate's CA and dates, but accepts "
                   f"a certificate for any host.", False, BOTH, attr="tls_verify_hostname"),
    )


@dataclass(frozen=True)
class TlsOptions:
    """The attributes, the rules and the context of the options of :func:`tls_specs`: a base of a broker's
    frozen options dataclass, which inherits the six fields (declared here once, so the brokers' classes
    cannot drift apart). The broker's class sets ``TLS_PREFIX`` (the prefix its specs were made with); its
    ``check`` calls :meth:`check_tls`. No field has a default, so the broker's own fields may follow them.
    """

    TLS_PREFIX: ClassVar[str] = ""

    tls_enable: bool
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None
    tls_key_password: str | None = field(repr=False)  # a parsed options object is printed, logged and pickled
    tls_verify_hostname: bool

    def check_tls(self) -> None:
        """TLS options without ``tlsEnable`` would silently connect in plain text: refuse them. Load the
        files once, so a bad certificate or key fails here, before any network call."""
        p = self.TLS_PREFIX
        given = [f"{p}{name}" for name, value in (("tlsCaFile", self.tls_ca_file),
                                                  ("tlsCertFile", self.tls_cert_file),
                                                  ("tlsKeyFile", self.tls_key_file),
                                                  ("tlsKeyPassword", self.tls_key_password)) if value]
        if not self.tls_enable:
            if given:
                raise OptionError(f"option {', '.join(given)} set but {p}tlsEnable is not true: the connection "
                                  f"would not use TLS; set {p}tlsEnable=true")
            return
        if (self.tls_key_file or self.tls_key_password) and not self.tls_cert_file:
            raise OptionError(f"option {p}tlsKeyFile / {p}tlsKeyPassword need {p}tlsCertFile")
        try:
            self.ssl_context()
        except ValueError as exc:
            raise OptionError(f"option {p}tlsCaFile / {p}tlsCertFile / {p}tlsKeyFile: {exc} (check the files "
                              f"these options name)") from None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS client context these options ask for (``None`` without ``tlsEnable``)."""
        if not self.tls_enable:
            return None
        return client_context(ca_file=self.tls_ca_file, cert_file=self.tls_cert_file, key_file=self.tls_key_file,
                              key_password=self.tls_key_password, verify_hostname=self.tls_verify_hostname)

    def tls_identity(self) -> tuple[object, ...]:
        """What makes two option sets' TLS contexts alike (a cache key; the password as given, never shown)."""
        return (self.tls_enable, self.tls_ca_file, self.tls_cert_file, self.tls_key_file, self.tls_key_password,
                self.tls_verify_hostname)
