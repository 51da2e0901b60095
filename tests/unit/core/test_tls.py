"""The TLS logic that needs no server: naming a failure's cause, loading the client's files, the options.

The live behaviour (a real 2.4.0 master and broker refusing each case) is in
``tests/integration/tubemq/test_tls.py``; the connection-level paths (a concurrent TLS channel, the plain-text
probe, a silent handshake, a refused client certificate) in ``tests/unit/core/test_framed.py``.
"""

from __future__ import annotations

import inspect
import pickle
import shutil
import ssl
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from tubespark.core.tls import client_context, handshake_timeout, tls_failure
from tubespark.errors import OptionError, TlsError
from tubespark.rocketmq.client.client import RocketMQClient
from tubespark.rocketmq.spark.options import RocketMQOptions
from tubespark.spark.tls_options import TlsOptions
from tubespark.tubemq.client.common import ClientSettings
from tubespark.tubemq.spark.options import TubeMQOptions
from tubespark.tubemq.wire.formats import BrokerInfo

ADDRESS = "10.0.0.7:8716"
KEY_PASSWORD = "key-password-" + "5f0c2a"


def verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: {message}")
    error.verify_code, error.verify_message, error.reason = code, message, "CERTIFICATE_VERIFY_FAILED"
    return error


def ssl_error(reason: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason}] ...")
    error.reason = reason
    return error


@pytest.mark.parametrize(("code", "message", "cause"), [
    (10, "certificate has expired", "the server's certificate has expired"),
    (9, "certificate is not yet valid", "is not valid yet; check the clocks"),
    (62, "Hostname mismatch, certificate is not valid for '10.0.0.7'.",
     "not valid for the host name '10.0.0.7' the client connected to: hostname verification is on"),
    (64, "IP address mismatch", "not valid for the host name '10.0.0.7'"),
    (19, "self-signed certificate in certificate chain", "not signed by a CA the client trusts"),
    (20, "unable to get local issuer certificate", "not signed by a CA the client trusts"),
    (18, "self-signed certificate", "not signed by a CA the client trusts"),
    (23, "certificate revoked", "failed verification (certificate revoked, code 23)"),
])
def test_a_verification_failure_names_its_cause(code: int, message: str, cause: str) -> None:
    error = tls_failure(ADDRESS, verify_error(code, message))
    assert isinstance(error, TlsError) and not error.retriable
    assert str(error).startswith(f"TLS to {ADDRESS} failed: ") and cause in str(error)
    assert message in str(error)  # OpenSSL's own words stay, for searching


@pytest.mark.parametrize(("reason", "cause"), [
    ("SSLV3_ALERT_BAD_CERTIFICATE", "refused the client's certificate"),
    ("TLSV13_ALERT_CERTIFICATE_REQUIRED", "refused the client's certificate"),
    ("SSLV3_ALERT_CERTIFICATE_UNKNOWN", "refused the client's certificate"),
    ("TLSV1_ALERT_UNKNOWN_CA", "refused the client's certificate"),
    ("TLSV1_ALERT_PROTOCOL_VERSION", "ended the TLS session with alert TLSV1_ALERT_PROTOCOL_VERSION"),
    ("WRONG_VERSION_NUMBER", "did not answer in TLS (WRONG_VERSION_NUMBER); the port is probably a plain-text"),
    ("RECORD_LAYER_FAILURE", "did not answer in TLS"),
    ("NO_CIPHERS_AVAILABLE", "failed: NO_CIPHERS_AVAILABLE"),
])
def test_other_tls_errors_name_their_cause(reason: str, cause: str) -> None:
    error = tls_failure(ADDRESS, ssl_error(reason))
    assert isinstance(error, TlsError) and cause in str(error)


@pytest.mark.parametrize("error", [
    ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
    ssl.SSLZeroReturnError(6, "TLS/SSL connection has been closed"),
    ConnectionResetError(104, "Connection reset by peer"),
    TimeoutError("timed out"),
])
def test_closes_resets_and_timeouts_are_not_tls_errors(error: OSError) -> None:
    """A peer going away is the connection layer's business (retried), not a configuration error."""
    assert tls_failure(ADDRESS, error) is None


def test_a_silent_handshake_names_the_likely_cause() -> None:
    error = handshake_timeout(ADDRESS, 2.5)
    assert "no answer to the TLS handshake within 2.5s" in str(error) and "plain-text port" in str(error)
    assert not error.retriable


def test_a_blank_broker_port_means_the_tls_default_over_tls() -> None:
    assert BrokerInfo.parse("3:10.0.0.7: ").port == 8123
    assert BrokerInfo.parse("3:10.0.0.7: ", ClientSettings(ssl_context=ssl.create_default_context()
                                                           ).default_broker_port).port == 8124
    assert BrokerInfo.parse("3:10.0.0.7:9124", 8124).port == 9124
    assert ClientSettings().default_broker_port == 8123


# --- files and options ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed client certificate, its key, the key encrypted, and an unrelated key."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a test certificate")
    work = tmp_path_factory.mktemp("tls-client")
    files = {name: work / f"{name}.pem" for name in ("cert", "key", "encrypted", "other_key")}

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=30)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
        str(files["key"]), "-out", str(files["cert"]), "-days", "1", "-subj", "/CN=client")
    run("pkey", "-in", str(files["key"]), "-aes256", "-passout", f"pass:{KEY_PASSWORD}", "-out",
        str(files["encrypted"]))
    run("genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", str(files["other_key"]))
    return files


def test_client_context_verifies_chain_and_host_unless_told(client_files: dict[str, Path]) -> None:
    ca = str(client_files["cert"])
    strict = client_context(ca_file=ca)
    assert strict.verify_mode == ssl.CERT_REQUIRED and strict.check_hostname
    lenient = client_context(ca_file=ca, verify_hostname=False)
    assert lenient.verify_mode == ssl.CERT_REQUIRED and not lenient.check_hostname


def test_client_context_loads_plain_and_encrypted_keys(client_files: dict[str, Path]) -> None:
    cert = str(client_files["cert"])
    client_context(cert_file=cert, key_file=str(client_files["key"]))
    client_context(cert_file=cert, key_file=str(client_files["encrypted"]), key_password=KEY_PASSWORD)


@pytest.mark.parametrize(("key", "password"), [("encrypted", None), ("encrypted", "wrong-" + KEY_PASSWORD),
                                               ("other_key", None)])
def test_a_key_that_cannot_be_used_fails_without_prompting_or_echoing_a_password(
        client_files: dict[str, Path], key: str, password: str | None) -> None:
    """OpenSSL would ask on the terminal for a missing password (an executor would hang): never."""
    with pytest.raises(ValueError, match="cannot load the client certificate") as error:
        client_context(cert_file=str(client_files["cert"]), key_file=str(client_files[key]), key_password=password)
    assert KEY_PASSWORD not in str(error.value)


BROKERS = {"tubemq": "tubemq.", "rocketmq": ""}
"""Every broker with TLS options, and its option prefix (the options are written once: spark/tls_options.py)."""


def _options(broker: str = "tubemq", **extra: str) -> TubeMQOptions | RocketMQOptions:
    if broker == "rocketmq":
        return RocketMQOptions.from_raw({"namesrv": "127.0.0.1:9876", "topic": "events", **extra}, mode="read")
    return TubeMQOptions.from_raw({"master": "127.0.0.1:8716", "topic": "events", "group": "g1", **extra},
                                  mode="read")


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_tls_options_build_the_client_context(client_files: dict[str, Path], broker: str) -> None:
    p = BROKERS[broker]
    options = _options(broker, **{f"{p}tlsEnable": "true", f"{p}tlsCaFile": str(client_files["cert"]),
                                  f"{p}tlsCertFile": str(client_files["cert"]),
                                  f"{p}tlsKeyFile": str(client_files["encrypted"]),
                                  f"{p}tlsKeyPassword": KEY_PASSWORD, f"{p}tlsVerifyHostname": "false"})
    context = options.client_settings().ssl_context
    assert context is not None and not context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert KEY_PASSWORD not in repr(options) and options.tls_key_password == KEY_PASSWORD
    assert KEY_PASSWORD not in repr(options.client_settings())
    default = _options(broker, **{f"{p}tlsEnable": "true"}).client_settings().ssl_context
    assert default is not None and default.check_hostname  # the default
    assert _options(broker).client_settings().ssl_context is None


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_the_tls_attributes_are_declared_once_and_travel_with_the_options(client_files: dict[str, Path],
                                                                          broker: str) -> None:
    """The six fields are :class:`TlsOptions`' own, inherited by each broker's options (not declared again
    there, where the copies could drift), and a pickled options object (Spark ships it to the executors)
    keeps them."""
    p = BROKERS[broker]
    options = _options(broker, **{f"{p}tlsEnable": "true", f"{p}tlsCertFile": str(client_files["cert"]),
                                  f"{p}tlsKeyFile": str(client_files["encrypted"]),
                                  f"{p}tlsKeyPassword": KEY_PASSWORD})
    tls = {f.name for f in fields(TlsOptions)}
    assert len(tls) == 6 and tls <= {f.name for f in fields(options)}
    assert not tls & set(inspect.get_annotations(type(options)))
    copy = pickle.loads(pickle.dumps(options))
    assert copy == options and copy.tls_key_password == KEY_PASSWORD and copy.ssl_context() is not None


@pytest.mark.parametrize("broker", sorted(BROKERS))
@pytest.mark.parametrize(("extra", "message"), [
    ({"tlsCaFile": "cert"}, "{p}tlsCaFile set but {p}tlsEnable is not true"),
    ({"tlsCertFile": "cert", "tlsKeyFile": "key"}, "{p}tlsCertFile, {p}tlsKeyFile set but"),
    ({"tlsEnable": "true", "tlsKeyFile": "key"}, "need {p}tlsCertFile"),
    ({"tlsEnable": "true", "tlsCertFile": "cert", "tlsKeyFile": "other_key"}, "cannot load the client certificate"),
    ({"tlsEnable": "true", "tlsCertFile": "cert", "tlsKeyFile": "encrypted", "tlsKeyPassword": "wrong"},
     "cannot load the client certificate"),
    ({"tlsEnable": "true", "tlsCaFile": "key"}, "cannot load CA certificates"),
])
def test_tls_option_mistakes_fail_before_any_connection(client_files: dict[str, Path], extra: dict[str, str],
                                                        message: str, broker: str) -> None:
    p = BROKERS[broker]
    files = {p + k: str(client_files[v]) if v in client_files else v for k, v in extra.items()}
    with pytest.raises(OptionError, match=message.format(p=p.replace(".", "\\."))):
        _options(broker, **files)


def test_one_shared_rocketmq_client_per_tls_configuration(client_files: dict[str, Path]) -> None:
    """Each parse builds a new TLS context (compared by identity): the executor's shared client must still be
    one per cluster and TLS configuration, not one per task."""
    from tubespark.rocketmq.spark.clients import shared_client

    def client(verify: str) -> RocketMQClient:
        return shared_client(_options("rocketmq", tlsEnable="true", tlsCaFile=str(client_files["cert"]),
                                      tlsVerifyHostname=verify))

    first, again, other = client("true"), client("true"), client("false")
    assert first is again and other is not first and first.settings.ssl_context is not None
    assert shared_client(_options("rocketmq")).settings.ssl_context is None
