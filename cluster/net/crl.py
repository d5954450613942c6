"""Certificate revocation: reading and checking the CRL a node trusts.

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
adds serials to it, signed with the CA's key: the writing is the CA's (cluster/node/pki.py),
which reads the list it extends back through :func:`read`.
"""

from __future__ import annotations

import datetime
import logging

CRL_FILE = "crl.pem"
log = logging.getLogger("dledgerctl.tls")


class CrlError(Exception):
    """The CRL cannot be used (one line says why)."""


def load(path: str, ca_path: str) -> dict[int, datetime.datetime]:
    """The serial numbers ``path`` revokes (-> when), once its signature is checked against
    the CA certificates in ``ca_path``. A CRL past its nextUpdate is logged (once a load)."""
    crl = read(path, ca_path)
    due = crl.next_update_utc
    if due is not None and due < datetime.datetime.now(datetime.timezone.utc):
        log.warning("CRL %s is past its nextUpdate (%s): using it, but revocations made since it was issued may be "
                    "missing; publish a fresh one and send SIGHUP", path, due.isoformat(timespec="seconds"))
    return serials(crl)


def serials(crl) -> dict[int, datetime.datetime]:
    return {r.serial_number: r.revocation_date_utc for r in crl}


def read(path: str, ca_path: str):
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
