"""A small certificate authority for trying TLS out (``dledgerctl certs``, ``cluster up --tls``).

Writes, in one directory: ``ca.pem`` and ``ca.key`` (an EC P-256 CA), ``crl.pem`` (its
revocation list, empty until ``certs revoke`` adds serials: :func:`revoke`), and per identity
``<role>-<name>.pem`` and ``<role>-<name>.key``, each certificate naming its identity in
a URI subject alternative name (cluster/net/tls.py) and signed by the CA. Keys are written
with mode 0600. A real deployment uses its own PKI: any CA will do, as long as each
certificate carries the URI name (see docs/security.md).

What a running node needs stays in cluster/net: the identities (tls.py) and reading and
checking a CRL (crl.py), which this module uses to extend the list it signs. The writing
half lives here, beside the launcher that issues members' certificates, so that nothing in
cluster/net keeps a CA's key. cryptography is imported where it is used: it takes some
60 ms to load, which every command would pay at start (the command line imports the
launcher, and this module with it).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os

from ..net import crl
from ..net.tls import Identity, identity_of_cert

CA_CERT, CA_KEY = "ca.pem", "ca.key"
CN_MAX = 64  # X.509's ub-common-name: a longer common name is refused
_CA_PREFIX = "dledgerctl CA "


def default_ca_name(directory: str) -> str:
    """A CA's common name when none is given: named after its directory (absolute; its tail
    when too long), so two directories' CAs can be told apart, in a node's log, by
    ``openssl``, and by a verifier trusting both (the CRL's issuer names one)."""
    path = os.path.abspath(directory)
    room = CN_MAX - len(_CA_PREFIX)
    return _CA_PREFIX + (path if len(path) <= room else "..." + path[-(room - 3):])


def ca_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a CA's common name, or None."""
    if not name.strip():
        return "must not be empty"
    if len(name) > CN_MAX:
        return f"is {len(name)} characters long; a common name holds {CN_MAX} at most"
    if not name.isprintable():
        return "holds control characters"
    return None


def has_ca(directory: str) -> bool:
    return all(os.path.isfile(os.path.join(directory, f)) for f in (CA_CERT, CA_KEY))


def ca_name(directory: str) -> str | None:
    """The common name of the CA in ``directory`` (None when it has none, or names none)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        with open(os.path.join(directory, CA_CERT), "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
    except (OSError, ValueError):
        return None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else None


def files_of(directory: str, ident: Identity) -> list[str]:
    """The files ``issue`` writes for ``ident`` that ``directory`` already holds."""
    stem = file_stem(ident)
    return [f for f in (f"{stem}.pem", f"{stem}.key") if os.path.lexists(os.path.join(directory, f))]


def file_stem(ident: Identity) -> str:
    return f"{ident.role}-{ident.name}"


def _write(path: str, data: bytes, private: bool = False) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def init_ca(directory: str, days: int = 3650, name: str | None = None) -> tuple[str, str]:
    """The CA of ``directory``, made when it has none (its common name ``name``, else
    :func:`default_ca_name`): (certificate path, key path)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    os.makedirs(directory, exist_ok=True)
    cert_path, key_path = os.path.join(directory, CA_CERT), os.path.join(directory, CA_KEY)
    if has_ca(directory):
        _empty_crl(directory)
        return cert_path, key_path
    present = [f for f in (CA_CERT, CA_KEY, crl.CRL_FILE) if os.path.lexists(os.path.join(directory, f))]
    if present:  # (half a CA: a new one would replace the ca.pem every member trusts)
        raise ValueError(f"{' and '.join(present)} {'is' if len(present) == 1 else 'are'} there without the rest of "
                         f"the CA ({CA_CERT} and {CA_KEY} both: a key kept offline must be put back to issue); "
                         "nothing was written")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name or default_ca_name(directory))])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write(key_path, _key_pem(key), private=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    _empty_crl(directory)
    return cert_path, key_path


def _empty_crl(directory: str) -> None:
    """An empty CRL beside the CA unless one is there: members can be started with
    ``--tls-crl`` on it from the start, and ``certs revoke`` adds to it."""
    if not os.path.exists(os.path.join(directory, crl.CRL_FILE)):
        revoke(directory, [])


def issue(directory: str, ident: Identity, *, days: int = 825, not_before: datetime.datetime | None = None,
          not_after: datetime.datetime | None = None, stem: str | None = None) -> tuple[str, str]:
    """A certificate and key for ``ident`` signed by the CA of ``directory`` (made if
    missing): (certificate path, key path). ``not_before``/``not_after`` override the
    validity (tests make expired ones); ``stem`` the file names."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert_path, ca_key_path = init_ca(directory)
    with open(ca_cert_path, "rb") as fh:
        ca_cert = x509.load_pem_x509_certificate(fh.read())
    with open(ca_key_path, "rb") as fh:
        ca_key = serialization.load_pem_private_key(fh.read(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    start = not_before or now - datetime.timedelta(minutes=5)
    end = not_after or now + datetime.timedelta(days=days)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ident.name),
                                     x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ident.role)]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(ident.uri),
                                                        x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    stem = stem or file_stem(ident)
    cert_path, key_path = os.path.join(directory, f"{stem}.pem"), os.path.join(directory, f"{stem}.key")
    _write(key_path, _key_pem(key), private=True)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


# -- revoking: the CA's CRL ---------------------------------------------------------------

def revoke(directory: str, serials: list[int]) -> tuple[str, list[int]]:
    """Add ``serials`` to the CRL of the CA in ``directory`` (written empty when missing),
    signed with its key: (the CRL's path, the serials added now; ones listed already are not
    added twice). crl.CrlError when there is no CA to sign with."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        with open(os.path.join(directory, CA_CERT), "rb") as fh:
            ca_cert = x509.load_pem_x509_certificate(fh.read())
        with open(os.path.join(directory, CA_KEY), "rb") as fh:
            ca_key = serialization.load_pem_private_key(fh.read(), password=None)
    except OSError as exc:
        raise crl.CrlError(f"no CA in {directory} ({exc.filename}: {exc.strerror}); 'certs init' makes one") from None
    except ValueError as exc:
        raise crl.CrlError(f"the CA files in {directory} cannot be read: {exc}") from None
    path = os.path.join(directory, crl.CRL_FILE)
    with _locked(directory):  # (two revokes at once: each must see the other's serials)
        return _add(directory, path, ca_cert, ca_key, serials)


@contextlib.contextmanager
def _locked(directory: str):
    """An exclusive lock on ``directory`` itself (flock on its descriptor: no lock file left
    behind) for a read-modify-write of its CRL."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _add(directory: str, path: str, ca_cert, ca_key, serials: list[int]) -> tuple[str, list[int]]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    listed: dict[int, datetime.datetime] = {}
    number = 1
    if os.path.exists(path):
        old = crl.read(path, os.path.join(directory, CA_CERT))
        listed = crl.serials(old)
        try:
            number = old.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number + 1
        except x509.ExtensionNotFound:
            pass
    now = datetime.datetime.now(datetime.timezone.utc)
    added = [s for s in dict.fromkeys(serials) if s not in listed]
    if not added and os.path.exists(path):
        return path, added  # (nothing new: the file the members read stays as it is)
    listed.update({s: now for s in added})
    builder = (x509.CertificateRevocationListBuilder().issuer_name(ca_cert.subject)
               .last_update(now - datetime.timedelta(minutes=5)).next_update(now + datetime.timedelta(days=3650))
               .add_extension(x509.CRLNumber(number), critical=False))
    for serial, when in listed.items():
        builder = builder.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(serial).revocation_date(when).build())
    _write(path, builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return path, added


def issued(directory: str) -> dict[int, tuple[str, str]]:
    """The certificates in ``directory`` (the CA's excepted): serial -> (file, the identity
    URI it names, or '')."""
    from cryptography import x509

    out = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".pem") or name in (CA_CERT, crl.CRL_FILE):
            continue
        try:
            with open(os.path.join(directory, name), "rb") as fh:
                cert = x509.load_pem_x509_certificate(fh.read())
        except (OSError, ValueError):
            continue
        ident = identity_of_cert(cert)
        out[cert.serial_number] = (name, ident.uri if ident is not None else "")
    return out
