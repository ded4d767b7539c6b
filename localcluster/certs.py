"""The control plane's keys: a cluster CA, the API server's serving certificate, and the key
pair that signs ServiceAccount tokens. Made fresh for every cluster (nothing secret is kept in
the checkout), in the files kube-apiserver and kube-controller-manager read."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The names a pod or a program may use for the API server (kubernetes.default.svc: what
# in-cluster clients dial), and the Service IP the API server gives itself (the first of
# --service-cluster-ip-range).
API_SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=30))


def make_ca(directory: Path, common_name: str = "fmnist-kfp-local-ca",
            stem: str = "ca") -> tuple:
    """A CA (``<stem>.crt``, ``<stem>.key``) in ``directory``; returns (certificate, key)."""
    key = _key()
    cert = _validity(x509.CertificateBuilder()).subject_name(_name(common_name)).issuer_name(
        _name(common_name)).public_key(key.public_key()).serial_number(
        x509.random_serial_number()).add_extension(
        x509.BasicConstraints(ca=True, path_length=None), critical=True).add_extension(
        x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                      content_commitment=False, key_encipherment=False, data_encipherment=False,
                      key_agreement=False, encipher_only=False, decipher_only=False),
        critical=True).sign(key, hashes.SHA256())
    _write_cert(cert, directory / f"{stem}.crt")
    _write_key(key, directory / f"{stem}.key")
    return cert, key


def _issue(directory: Path, stem: str, ca: tuple, subject: str,
           extensions: list[x509.ExtensionType]) -> tuple[Path, Path]:
    """A certificate for ``subject`` with ``extensions``, signed by ``ca``: ``<stem>.crt``
    and ``<stem>.key``."""
    ca_cert, ca_key = ca
    key = _key()
    builder = _validity(x509.CertificateBuilder()).subject_name(_name(subject)).issuer_name(
        ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    _write_cert(builder.sign(ca_key, hashes.SHA256()), cert_path)
    _write_key(key, key_path)
    return cert_path, key_path


def make_serving_cert(directory: Path, stem: str, ca: tuple, dns_names: tuple[str, ...],
                      ips: tuple[str, ...]) -> tuple[Path, Path]:
    """A serving certificate signed by ``ca`` for the names and addresses given:
    ``<stem>.crt`` and ``<stem>.key``."""
    alt_names = [x509.DNSName(n) for n in dns_names] + [
        x509.IPAddress(ipaddress.ip_address(a)) for a in ips]
    return _issue(directory, stem, ca, dns_names[0], [
        x509.SubjectAlternativeName(alt_names),
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])])


def make_client_cert(directory: Path, stem: str, ca: tuple,
                     common_name: str) -> tuple[Path, Path]:
    """A client certificate for ``common_name`` signed by ``ca``: ``<stem>.crt``, ``.key``."""
    return _issue(directory, stem, ca, common_name,
                  [x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])])


def make_service_account_keys(directory: Path) -> tuple[Path, Path]:
    """The key pair of ServiceAccount tokens: ``sa.key`` signs (the API server's TokenRequest,
    the controller manager's token controller), ``sa.pub`` verifies."""
    key = _key()
    private, public = directory / "sa.key", directory / "sa.pub"
    _write_key(key, private)
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public
