"""Throw-away certificates for a TLS test cluster, made with the JDK's ``keytool``.

TubeMQ's servers read their key and certificate chain from a JKS key store and, for client
certificates, a JKS trust store (``docs/tubemq/tls.md``), so the CAs and the server certificates are
made with the JDK's own tool, in the formats the servers load. The Python side needs PEM: keytool
writes certificates as PEM (``-rfc``), but cannot export a private key, so the client keys are made
by ``openssl`` and their certificates signed by keytool from the CA's store.

What :func:`make_pki` lays out under a directory, one password for every store:

* a CA, and an unrelated second CA (a client trusting only the second must refuse the servers);
* server key stores signed by the CA: a good one (SAN ``IP:127.0.0.1``, what clients connect to), an
  expired one (valid for a day, three days ago) and one for a wrong host name (SAN ``DNS:`` only);
* a trust store with the CA, for the servers' client-certificate check;
* a client certificate and key (PEM) signed by the CA (the key also encrypted with the password), and
  one signed by the second CA.

Passwords reach ``keytool`` and ``openssl`` through the environment (``-storepass:env``,
``-passin env:``), never the command line, where any local user could read them from ``ps``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tubespark_testbed.errors import ClusterError

_PASS_ENV = "TUBESPARK_TESTBED_STORE_PASS"
_KEY_ALG = ("-keyalg", "EC", "-groupname", "secp256r1")  # fast to generate, accepted by JDK 17 and OpenSSL 3
_TOOL_TIMEOUT_S = 60.0
WRONG_HOST = "wrong-host.invalid"


@dataclass(frozen=True)
class LocalPki:
    """Paths of one throw-away PKI and the password of its stores (left out of ``repr``)."""

    directory: Path
    password: str = field(repr=False)
    ca_pem: Path
    other_ca_pem: Path
    server_keystore: Path
    expired_keystore: Path
    wrong_host_keystore: Path
    truststore: Path
    client_cert_pem: Path
    client_key_pem: Path
    other_client_cert_pem: Path
    other_client_key_pem: Path
    client_key_encrypted_pem: Path  # the client's key encrypted with ``password``


def _keytool() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "keytool").is_file():
        return str(Path(home) / "bin" / "keytool")
    found = shutil.which("keytool")
    if not found:
        raise ClusterError("no 'keytool' on PATH; install a JDK 17+ (or set JAVA_HOME)")
    return found


def _run(argv: list[str], password: str, what: str) -> None:
    env = {**os.environ, _PASS_ENV: password}
    try:
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=_TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"{what}: {Path(argv[0]).name} failed: {exc}") from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).replace(password, "***")
        raise ClusterError(f"{what}: {Path(argv[0]).name} exited with {done.returncode}: {output.strip()}")


class _Maker:
    def __init__(self, directory: Path, password: str) -> None:
        self.dir = directory
        self.password = password
        self.keytool = _keytool()

    def keytool_run(self, what: str, *args: str) -> None:
        _run([self.keytool, *args], self.password, what)

    def store(self, path: Path, *, jks: bool = False) -> list[str]:
        kind = "JKS" if jks else "PKCS12"  # the servers load "JKS" stores; PKCS12 for what openssl reads
        return ["-keystore", str(path), "-storetype", kind, "-storepass:env", _PASS_ENV]

    def ca(self, name: str) -> tuple[Path, Path]:
        """A self-signed CA (key usage: certificate signing) -> (PKCS12 store, PEM certificate)."""
        store, pem = self.dir / f"{name}.p12", self.dir / f"{name}.pem"
        self.keytool_run(f"make CA {name}", "-genkeypair", "-alias", "ca", *_KEY_ALG, "-dname",
                         f"CN=tubespark test {name}", "-validity", "7", "-ext", "bc:c=ca:true",
                         "-ext", "ku:c=keyCertSign,cRLSign", *self.store(store))
        self.keytool_run(f"export CA {name}", "-exportcert", "-rfc", "-alias", "ca", "-file", str(pem),
                         *self.store(store))
        return store, pem

    def server_stores(self, ca_store: Path, ca_pem: Path, host_ip: str) -> tuple[Path, Path, Path]:
        """JKS stores with one server key pair and, each, one certificate for it signed by the CA:
        (good: SAN ``IP:host_ip``; expired: valid for a day, three days ago; for :data:`WRONG_HOST` only).

        One key pair for the three saves keytool runs (each is a JVM start); the certificate is what differs.
        """
        base, csr = self.dir / "server-key.jks", self.dir / "server.csr"
        self.keytool_run("make server key", "-genkeypair", "-alias", "key", *_KEY_ALG, "-dname", f"CN={host_ip}",
                         "-validity", "7", "-keypass:env", _PASS_ENV, *self.store(base, jks=True))
        self.keytool_run("request server", "-certreq", "-alias", "key", "-file", str(csr),
                         *self.store(base, jks=True))
        usage = ["-ext", "eku=serverAuth", "-ext", "ku:c=digitalSignature"]
        variants = {
            "server": ["-validity", "7", "-ext", f"san=ip:{host_ip}"],
            "expired": ["-startdate", "-3d", "-validity", "1", "-ext", f"san=ip:{host_ip}"],
            "wrong-host": ["-validity", "7", "-dname", f"CN={WRONG_HOST}", "-ext", f"san=dns:{WRONG_HOST}"],
        }
        stores = []
        for name, args in variants.items():
            crt, chain, store = self.dir / f"{name}.crt", self.dir / f"{name}-chain.pem", self.dir / f"{name}.jks"
            self.keytool_run(f"sign {name}", "-gencert", "-alias", "ca", "-infile", str(csr), "-outfile", str(crt),
                             "-rfc", *args, *usage, *self.store(ca_store))
            chain.write_text(crt.read_text() + ca_pem.read_text())  # a reply with its chain needs no CA entry
            shutil.copyfile(base, store)
            self.keytool_run(f"install {name}", "-importcert", "-noprompt", "-alias", "key", "-file", str(chain),
                             "-keypass:env", _PASS_ENV, *self.store(store, jks=True))
            stores.append(store)
        csr.unlink()
        base.unlink()
        return stores[0], stores[1], stores[2]

    def client(self, name: str, ca_store: Path, *, usage: tuple[str, ...] = ("-ext", "eku=clientAuth")) -> tuple[
            Path, Path]:
        """A key (made by openssl: keytool cannot export a private key; PKCS#8 PEM) and its certificate signed
        by the CA, a client's unless ``usage`` says otherwise -> (certificate PEM, unencrypted private key PEM)."""
        key, csr, cert = self.dir / f"{name}.key", self.dir / f"{name}.csr", self.dir / f"{name}.crt"
        _run([_openssl(), "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
              "-keyout", str(key), "-out", str(csr), "-subj", f"/CN=tubespark {name}"], self.password, f"key {name}")
        key.chmod(0o600)
        self.keytool_run(f"sign {name}", "-gencert", "-alias", "ca", "-infile", str(csr), "-outfile", str(cert),
                         "-rfc", "-validity", "7", *usage, "-ext", "ku:c=digitalSignature", *self.store(ca_store))
        csr.unlink()
        return cert, key

    def encrypted_key(self, key: Path) -> Path:
        """``key`` again, as PEM encrypted with the stores' password."""
        out = key.with_name(key.stem + "-encrypted.key")
        _run([_openssl(), "pkey", "-in", str(key), "-aes256", "-passout", f"env:{_PASS_ENV}", "-out", str(out)],
             self.password, f"encrypt {key.name}")
        return out


def _openssl() -> str:
    found = shutil.which("openssl")
    if found is None:
        raise ClusterError("no 'openssl' on PATH: it makes the client keys (keytool cannot export a private key)")
    return found


@dataclass(frozen=True)
class PemPki:
    """A CA, an unrelated second CA, and a server certificate (SAN ``IP:host_ip``) and key as PEM files, for
    servers that read PEM (RocketMQ's ``tls.server.certPath`` / ``tls.server.keyPath``)."""

    directory: Path
    ca_pem: Path
    other_ca_pem: Path
    server_cert_pem: Path  # the server's certificate (what a Netty server sends is this file's chain)
    server_key_pem: Path  # its private key, unencrypted PKCS#8


def make_pem_pki(directory: str | os.PathLike[str], *, host_ip: str = "127.0.0.1") -> PemPki:
    """Create :class:`PemPki` in the empty (or new) ``directory``: fewer keytool runs than :func:`make_pki`."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        raise ClusterError(f"make_pem_pki needs an empty directory, {root} is not")
    maker = _Maker(root, secrets.token_hex(16))
    ca_store, ca_pem = maker.ca("ca")
    _, other_pem = maker.ca("other-ca")
    cert, key = maker.client("server", ca_store, usage=("-ext", "eku=serverAuth", "-ext", f"san=ip:{host_ip}"))
    return PemPki(directory=root, ca_pem=ca_pem, other_ca_pem=other_pem, server_cert_pem=cert, server_key_pem=key)


def make_pki(directory: str | os.PathLike[str], *, host_ip: str = "127.0.0.1") -> LocalPki:
    """Create the test PKI in the empty (or new) ``directory``; server certificates name ``host_ip``."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):  # keytool would add to (or fail on) stores left from another run
        raise ClusterError(f"make_pki needs an empty directory, {root} is not")
    maker = _Maker(root, secrets.token_hex(16))
    ca_store, ca_pem = maker.ca("ca")
    other_store, other_pem = maker.ca("other-ca")
    server, expired, wrong = maker.server_stores(ca_store, ca_pem, host_ip)
    truststore = root / "truststore.jks"
    maker.keytool_run("trust store", "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
                      *maker.store(truststore, jks=True))
    client_cert, client_key = maker.client("client", ca_store)
    other_cert, other_key = maker.client("other-client", other_store)
    return LocalPki(directory=root, password=maker.password, ca_pem=ca_pem, other_ca_pem=other_pem,
                    server_keystore=server, expired_keystore=expired, wrong_host_keystore=wrong,
                    truststore=truststore, client_cert_pem=client_cert, client_key_pem=client_key,
                    other_client_cert_pem=other_cert, other_client_key_pem=other_key,
                    client_key_encrypted_pem=maker.encrypted_key(client_key))
