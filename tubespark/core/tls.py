"""TLS for every broker's connections: the client's context, what a failed handshake means, and a probe.

Why this is more than ``ssl.create_default_context``: a TLS failure surfaces as an OpenSSL code or
alert name (``CERTIFICATE_VERIFY_FAILED`` with verify code 10, ``SSLV3_ALERT_BAD_CERTIFICATE``) that
does not say what to fix, and it may surface at the handshake or, with TLS 1.3, only at the first read
(the server judges the client's certificate after the client considers the handshake done). Both
paths go through :func:`tls_failure`, which turns the configuration errors into a
:class:`~tubespark.errors.TlsError` (not retried) whose message names the cause; what it does not
recognise stays a connection error. What TubeMQ's servers do over TLS is in ``docs/tubemq/tls.md``.

Why :class:`TlsChannel` instead of ``SSLContext.wrap_socket``: a framed connection reads on one thread
while callers send on theirs, and an ``ssl.SSLSocket`` cannot be used that way. OpenSSL does not allow
one connection object to be used by two threads at once, CPython adds no lock around it, and TLS 1.3
makes reading change state that writing uses (session tickets, key updates). The channel keeps the
TLS state in an ``ssl.SSLObject`` over memory buffers, calls it only under a lock, and moves the bytes
over the plain socket outside that lock, so a blocked receive never holds up a send.

No password handled here is ever put into a message: the key password only reaches OpenSSL through
a callback.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time

from tubespark.errors import TlsError

# OpenSSL's X509_V_ERR_* codes (include/openssl/x509_vfy.h), what ssl.SSLCertVerificationError.verify_code holds
_UNTRUSTED = {2, 18, 19, 20, 21}  # no path to a trusted CA: issuer unknown, self-signed, chain not trusted
_EXPIRED = 10
_NOT_YET_VALID = 9
_WRONG_HOST = {62, 64}  # host name / IP address mismatch

# TLS alerts by which a server says it does not accept the client's certificate (or that it sent none)
_CLIENT_CERT_ALERTS = ("BAD_CERTIFICATE", "CERTIFICATE_REQUIRED", "CERTIFICATE_UNKNOWN", "UNKNOWN_CA",
                       "UNSUPPORTED_CERTIFICATE", "CERTIFICATE_EXPIRED", "CERTIFICATE_REVOKED", "HANDSHAKE_FAILURE")
# what OpenSSL reports when the bytes that came back are no TLS record at all
_NOT_TLS_REASONS = ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE",
                    "HTTP_REQUEST", "UNEXPECTED_RECORD")


def client_context(*, ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None,
                   key_password: str | None = None, verify_hostname: bool = True) -> ssl.SSLContext:
    """A client context that verifies the server's chain (against ``ca_file``, else the system's CAs)
    and, unless ``verify_hostname`` is off, that its certificate names the host connected to.

    ``cert_file``/``key_file``: the client's own certificate (PEM; the key may sit in ``cert_file``),
    for servers that require one. An encrypted key needs ``key_password``; OpenSSL is never allowed
    to prompt for one on the terminal (an executor would hang on it). Raises ValueError naming the
    file that could not be loaded.
    """
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"cannot load CA certificates from {ca_file}: {_reason(exc)}; give a readable PEM file of "
                         f"CA certificates") from None
    context.check_hostname = verify_hostname  # chain verification (CERT_REQUIRED) stays on either way
    if cert_file is not None:
        def password() -> str:  # a callback, so a missing password fails instead of prompting
            return key_password or ""

        try:
            context.load_cert_chain(cert_file, key_file, password=password)
        except (ssl.SSLError, OSError) as exc:
            where = cert_file + (f" with key {key_file}" if key_file else "")
            raise ValueError(f"cannot load the client certificate {where}: {_reason(exc)} (a certificate and "
                             f"its unencrypted key, or an encrypted key and its password)") from None
    return context


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)


def tls_failure(address: str, exc: BaseException) -> TlsError | None:
    """The :class:`TlsError` naming the cause of ``exc`` (raised on a TLS socket to ``address``), or None
    when it is not a TLS configuration error (a reset, a timeout, a close: the caller's usual handling)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsError(f"TLS to {address} failed: {_verify_cause(address, exc)}")
    if not isinstance(exc, ssl.SSLError) or isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return None
    reason = (exc.reason or "").upper()
    if "ALERT" in reason:
        if any(alert in reason for alert in _CLIENT_CERT_ALERTS):
            return TlsError(f"TLS to {address} failed: the server refused the client's certificate (it requires "
                            f"one signed by a CA it trusts, and none was sent or this one is not accepted; "
                            f"TLS alert {exc.reason}): give a client certificate the server's CA signed")
        return TlsError(f"TLS to {address} failed: the server ended the TLS session with alert {exc.reason}; "
                        f"check the TLS options against the server's TLS settings")
    if any(name in reason for name in _NOT_TLS_REASONS):
        return TlsError(f"TLS to {address} failed: the server did not answer in TLS ({exc.reason}); the port "
                        f"is probably a plain-text port: use the server's TLS port, or turn TLS off")
    return TlsError(f"TLS to {address} failed: {exc.reason or exc}; check the TLS options against the server's "
                    f"TLS settings")


def _verify_cause(address: str, exc: ssl.SSLCertVerificationError) -> str:
    code, detail = exc.verify_code, exc.verify_message
    if code == _EXPIRED:
        return f"the server's certificate has expired ({detail}): renew it on the server"
    if code == _NOT_YET_VALID:
        return f"the server's certificate is not valid yet; check the clocks ({detail})"
    if code in _WRONG_HOST:
        host = address.rpartition(":")[0]
        return (f"the server's certificate is not valid for the host name {host!r} the client connected to: "
                f"hostname verification is on and the certificate's subjectAltName does not name it ({detail}); "
                f"connect by a name the certificate holds")
    if code in _UNTRUSTED:
        return (f"the server's certificate is not signed by a CA the client trusts (the CA file, or the system's "
                f"CAs without one) ({detail}): give the CA that signed it as the CA file")
    return f"the server's certificate failed verification ({detail}, code {code}): check it and the CA file"


def handshake_timeout(address: str, timeout_s: float) -> TlsError:
    """The error for a TLS handshake that got no answer: TubeMQ's plain ports ignore a ClientHello."""
    return TlsError(f"TLS to {address} failed: no answer to the TLS handshake within {timeout_s:g}s; the port is "
                    f"probably a plain-text port: use the server's TLS port, or turn TLS off")


def speaks_tls(address: tuple[str, int], timeout_s: float) -> bool:
    """True when the server at ``address`` answers a TLS handshake (completes it, or answers with an alert).

    Used only to explain why a plain-text connection was closed unanswered; it verifies nothing and
    sends no data, so trusting any certificate here is harmless.
    """
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname = False
    probe.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(address, timeout=timeout_s) as raw, \
                probe.wrap_socket(raw, server_hostname=address[0]):
            return True
    except ssl.SSLError as exc:
        return "ALERT" in (exc.reason or "").upper()  # only a TLS peer sends alerts
    except OSError:
        return False


_RECORD_READ = 64 * 1024  # raw bytes taken from the socket at once (TLS records are at most 16 KiB + overhead)


class TlsChannel:
    """TLS over a connected plain socket, for one reading thread and any number of sending threads at once.

    The subset of the socket API a framed connection uses: :meth:`recv` (``b""`` once the peer closed),
    :meth:`sendall`, :meth:`settimeout`, :meth:`shutdown`, :meth:`close`. Timeouts
    are the plain socket's. Two locks, always taken in this order: ``_send`` keeps what goes on the wire
    in the order the TLS state produced it; ``_state`` guards every call into the ``SSLObject``.
    """

    def __init__(self, raw: socket.socket, context: ssl.SSLContext, server_hostname: str) -> None:
        self._raw = raw
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._state = threading.Lock()
        self._send = threading.Lock()

    def handshake(self, timeout_s: float) -> None:
        """Run the TLS handshake within ``timeout_s``; raises TimeoutError, ssl.SSLError or OSError."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._state:
                try:
                    self._tls.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    done = False
                data = self._outgoing.read()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the TLS handshake timed out")
            self._raw.settimeout(remaining)
            if data:
                self._raw.sendall(data)
            if done:
                return
            chunk = self._raw.recv(_RECORD_READ)
            if not chunk:
                raise ssl.SSLEOFError(ssl.SSL_ERROR_EOF, "the server closed the connection during the TLS handshake")
            with self._state:
                self._incoming.write(chunk)

    def version(self) -> str | None:
        """The TLS version agreed on (``TLSv1.3``), as ``SSLSocket.version``."""
        with self._state:
            return self._tls.version()

    def recv(self, bufsize: int) -> bytes:
        """Up to ``bufsize`` bytes of plain text; ``b""`` when the peer closed. TimeoutError when idle."""
        while True:
            with self._state:
                try:
                    data: bytes | None = self._tls.read(bufsize)
                except ssl.SSLWantReadError:
                    data = None
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):  # close_notify, or the TCP stream just ended
                    data = b""
                answer = self._outgoing.pending > 0  # post-handshake messages that want a reply (key update)
            if answer:
                self._flush()
            if data is not None:
                return data
            chunk = self._raw.recv(_RECORD_READ)
            with self._state:
                if chunk:
                    self._incoming.write(chunk)
                else:
                    self._incoming.write_eof()

    def _flush(self) -> None:
        # Only when no sender holds the wire: a blocked sender must not stall the reader (which would let
        # both sides' buffers fill up). The bytes stay queued in order and the next send takes them along.
        if not self._send.acquire(blocking=False):
            return
        try:
            with self._state:
                data = self._outgoing.read()
            if data:
                self._raw.sendall(data)
        finally:
            self._send.release()

    def sendall(self, data: bytes) -> None:
        with self._send:
            with self._state:
                self._tls.write(data)
                out = self._outgoing.read()
            self._raw.sendall(out)

    def settimeout(self, value: float | None) -> None:
        self._raw.settimeout(value)

    def gettimeout(self) -> float | None:
        return self._raw.gettimeout()

    def shutdown(self, how: int) -> None:
        """Shut the plain socket down (wakes a blocked :meth:`recv`), without a TLS close_notify: the
        framed protocols end a connection by closing it."""
        self._raw.shutdown(how)

    def close(self) -> None:
        self._raw.close()
