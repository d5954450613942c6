"""Certificate revocation: reading a CRL a node trusts, and writing the one ``certs`` keeps.

A node started with ``--tls-crl FILE`` refuses every connection whose certificate's serial
number the CRL lists, on both sides: every request of a client or member connecting to it
is answered NO_PERMISSION naming the serial and identity, and a member it connects to is
refused like a wrong peer. The check
is the node's own, after OpenSSL's verification, rather than OpenSSL's CRL check: a
context's store can take a new CRL but never forget an old one, and SIGHUP must be able
to replace the list (cluster/node/process.py closes the open connections it now
revokes). The CRL must be signed by one of the CA certificates of ``--tls-ca``; a file
that is not (or is unreadable, or not a CRL) is refused whole, and a reload keeps the
list loaded before.

A CRL past its nextUpdate is used all the same, with one warning per load (at start and at
each SIGHUP): what it lists stays revoked, and refusing it would refuse every connection,
members' too, at one instant, the whole group down over a date (as nginx and OpenSSL's own
CRL check do), while it only may miss revocations made since. The warning says to publish
a fresh one; ``certs revoke`` writes its CRLs with a nextUpdate ten years on.

``dledgerctl certs init`` writes an empty ``crl.pem`` beside ``ca.pem``; ``certs revoke``
adds serials to it (:func:`revoke`), signed with the CA's key.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import logging
import os

CRL_FILE = "crl.pem"
log = logging.getLogger("dledgerctl.tls")


class CrlError(Exception):
    """The CRL cannot be used (one line says why)."""


def load(path: str, ca_path: str) -> dict[int, datetime.datetime]:
    """The serial numbers ``path`` revokes (-> when), once its signature is checked against
    the CA certificates in ``ca_path``. A CRL past its nextUpdate is logged (once a load)."""
    crl = _checked(path, ca_path)
    due = crl.next_update_utc
    if due is not None and due < datetime.datetime.now(datetime.timezone.utc):
        log.warning("CRL %s is past its nextUpdate (%s): using it, but revocations made since it was issued may be "
                    "missing; publish a fresh one and send SIGHUP", path, due.isoformat(timespec="seconds"))
    return _serials(crl)


def _serials(crl) -> dict[int, datetime.datetime]:
    return {r.serial_number: r.revocation_date_utc for r in crl}


def _checked(path: str, ca_path: str):
    """The CRL in ``path`` (cryptography's object), once its signature is checked against
    the CA certificates in ``ca_path``."""
    from cryptography import x509

    try:
        with open(path, "rb") as fh:
            crl = x509.load_pem_x509_crl(fh.read())
        with open(ca_path, "rb") as fh:
            cas = x509.load_pem_x509_certificates(fh.read())
    except OSError as exc:
        raise CrlError(f"cannot read {exc.filename}: {exc.strerror}") from None
    except ValueError as exc:
        raise CrlError(f"{path} is not a PEM CRL ({exc})") from None
    issuers = [ca for ca in cas if ca.subject == crl.issuer]
    if not any(_signed_by(crl, ca) for ca in issuers):
        raise CrlError(f"{path} is not signed by a CA of {ca_path} (issuer {crl.issuer.rfc4514_string()})")
    return crl


def _signed_by(crl, ca) -> bool:
    try:
        return crl.is_signature_valid(ca.public_key())
    except (TypeError, ValueError):
        return False


def serial_of(peercert: dict | None) -> int | None:
    """The serial number of a verified peer certificate (``getpeercert()``'s dict)."""
    text = (peercert or {}).get("serialNumber")
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def revoke(directory: str, serials: list[int]) -> tuple[str, list[int]]:
    """Add ``serials`` to the CRL of the CA in ``directory`` (cluster/net/pki.py's files;
    written empty when missing), signed with its key: (the CRL's path, the serials added
    now; ones listed already are not added twice)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from .pki import CA_CERT, CA_KEY

    try:
        with open(os.path.join(directory, CA_CERT), "rb") as fh:
            ca_cert = x509.load_pem_x509_certificate(fh.read())
        with open(os.path.join(directory, CA_KEY), "rb") as fh:
            ca_key = serialization.load_pem_private_key(fh.read(), password=None)
    except OSError as exc:
        raise CrlError(f"no CA in {directory} ({exc.filename}: {exc.strerror}); 'certs init' makes one") from None
    except ValueError as exc:
        raise CrlError(f"the CA files in {directory} cannot be read: {exc}") from None
    path = os.path.join(directory, CRL_FILE)
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

    from .pki import CA_CERT, _write

    listed: dict[int, datetime.datetime] = {}
    number = 1
    if os.path.exists(path):
        old = _checked(path, os.path.join(directory, CA_CERT))
        listed = _serials(old)
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

    from .pki import CA_CERT
    from .tls import _identity_of_cert

    out = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".pem") or name in (CA_CERT, CRL_FILE):
            continue
        try:
            with open(os.path.join(directory, name), "rb") as fh:
                cert = x509.load_pem_x509_certificate(fh.read())
        except (OSError, ValueError):
            continue
        ident = _identity_of_cert(cert)
        out[cert.serial_number] = (name, ident.uri if ident is not None else "")
    return out
