"""TLS for members and clients: contexts, identities in certificates, and who may do what.

Every certificate names one identity in a URI subject alternative name::

    dledger://GROUP/ROLE/NAME

``ROLE`` is ``member`` (NAME is the member id; GROUP its group), ``operator`` or ``client``
(NAME says who; GROUP is the group it may act on, or ``*`` for every group). A member's
identity is tied to its group, so member ``n0`` of one broker group cannot act as ``n0``
of another even when both trust the same CA. Certificates without such a name are refused.

Connections are mutual TLS (TLS 1.2 or later): both sides present a certificate signed by
the configured CA, and expired or otherwise invalid ones fail the handshake. Host names
are not checked: a client checks instead that the member it reached is the member it
meant (its identity), and a node checks every request against the identity of the
connection it came on (:func:`refusal`).

Reloading (:meth:`Tls.reload`) loads the certificate and key again into the same
contexts, so new connections use them and open ones go on; a CA file that changed adds
its certificates to those trusted (OpenSSL cannot forget one without a restart). A CRL
(``--tls-crl``, cluster/net/crl.py) is read again too: :meth:`Tls.refused` says whether a
peer's certificate is revoked.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import NamedTuple

from .crl import CrlError, load, serial_of

SCHEME = "dledger"
ROLES = ("member", "operator", "client")
ANY_GROUP = "*"
ENV = {"cert": "DLEDGERCTL_TLS_CERT", "key": "DLEDGERCTL_TLS_KEY", "ca": "DLEDGERCTL_TLS_CA"}


class TlsError(Exception):
    """The TLS files are missing, unreadable or do not fit together (one line says which)."""


class Identity(NamedTuple):
    group: str
    role: str
    name: str

    @property
    def uri(self) -> str:
        return f"{SCHEME}://{self.group}/{self.role}/{self.name}"

    def __str__(self) -> str:
        if self.role == "member":
            return f"member {self.name} of group {self.group}"
        where = "every group" if self.group == ANY_GROUP else f"group {self.group}"
        return f"{self.role} {self.name} of {where}"


def parse_uri(uri: str) -> Identity | None:
    prefix = f"{SCHEME}://"
    if not uri.startswith(prefix):
        return None
    parts = uri[len(prefix):].split("/")
    if len(parts) != 3 or parts[1] not in ROLES or not all(parts):
        return None
    return Identity(*parts)


def identity_of(peercert: dict | None) -> Identity | None:
    """The identity a verified peer certificate (``SSLSocket.getpeercert()``) names, or
    None when it names none, or more than one."""
    if not peercert:
        return None
    found = {i for kind, value in peercert.get("subjectAltName", ()) if kind == "URI"
             and (i := parse_uri(value)) is not None}
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class TlsFiles:
    cert: str
    key: str
    ca: str
    crl: str | None = None  # revoked certificates (cluster/net/crl.py), or None

    @classmethod
    def resolve(cls, cert: str | None, key: str | None, ca: str | None, crl: str | None = None) -> "TlsFiles | None":
        """The files from the options, else from ``DLEDGERCTL_TLS_*``; None when none is
        given (plain TCP); TlsError when only some are. ``crl`` (a node's ``--tls-crl``,
        whose option reads ``DLEDGERCTL_TLS_CRL``) is taken as given: clients have none."""
        given = {"cert": cert or os.environ.get(ENV["cert"]), "key": key or os.environ.get(ENV["key"]),
                 "ca": ca or os.environ.get(ENV["ca"])}
        if not any(given.values()):
            if crl:
                raise TlsError("--tls-crl goes with --tls-cert, --tls-key and --tls-ca")
            return None
        missing = [f"--tls-{k}" for k, v in given.items() if not v]
        if missing:
            raise TlsError(f"TLS needs --tls-cert, --tls-key and --tls-ca together; missing {', '.join(missing)}")
        return cls(**{k: os.path.abspath(v) for k, v in given.items()}, crl=os.path.abspath(crl) if crl else None)


class Tls:
    """A node's or a client's TLS: its two contexts (it serves and connects) and identity."""

    def __init__(self, files: TlsFiles, expect: Identity | None = None) -> None:
        """``expect``: the identity the certificate must name (a node's own member
        identity); TlsError otherwise, at start and at every reload."""
        self.files, self.expect = files, expect
        self.server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.client.check_hostname = False  # identities are checked instead (Channel)
        for ctx in (self.server, self.client):
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.verify_mode = ssl.CERT_REQUIRED
        self.identity: Identity | None = None
        self.expires_at: float | None = None  # when the certificate in use expires (Unix time)
        self.revoked: dict = {}  # serial -> when, from files.crl (cluster/net/crl.py)
        self.serial: int | None = None  # the certificate in use's serial number
        self.reload()

    def refused(self, peercert: dict | None) -> str | None:
        """Why a verified peer certificate is refused although it verified (its serial is on
        the CRL), or None."""
        serial = serial_of(peercert)
        if serial is None or serial not in self.revoked:
            return None
        return f"certificate serial {serial:X} ({identity_of(peercert) or 'no identity'}) is revoked"

    def refused_self(self) -> str | None:
        """Why this side's own certificate is refused by the CRL it loaded (it is listed), or None."""
        if self.serial is None or self.serial not in self.revoked:
            return None
        return f"certificate serial {self.serial:X} ({self.identity}) is revoked"

    def reload(self) -> Identity:
        """(Re)load the certificate, key and CA; the identity the certificate names."""
        f = self.files
        for path, what in ((f.cert, "certificate"), (f.key, "key"), (f.ca, "CA certificate")):
            if not os.path.isfile(path):
                raise TlsError(f"TLS {what} {path} does not exist")
        revoked = self.revoked
        if f.crl is not None:
            try:
                revoked = load(f.crl, f.ca)
            except CrlError as exc:
                raise TlsError(f"CRL: {exc}") from None
        ident = _identity_of_file(f.cert)
        if ident is None:
            raise TlsError(f"{f.cert} names no identity (a subjectAltName URI {SCHEME}://GROUP/ROLE/NAME)")
        if self.expect is not None and ident != self.expect:
            raise TlsError(f"{f.cert} names {ident}, not {self.expect}")
        try:
            # first into a context of its own: a key that does not fit, or a file read half
            # written, must leave the contexts in use as they were (OpenSSL would keep the new
            # certificate without a key)
            trial = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            trial.load_cert_chain(f.cert, f.key)
            trial.load_verify_locations(f.ca)
            for ctx in (self.server, self.client):
                ctx.load_cert_chain(f.cert, f.key)
                ctx.load_verify_locations(f.ca)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsError(f"cannot load TLS files ({f.cert}, {f.key}, {f.ca}): {exc}") from None
        expires_at, serial = _expiry_and_serial_of_file(f.cert)
        self.identity, self.expires_at, self.serial, self.revoked = ident, expires_at, serial, revoked
        return ident


def _expiry_and_serial_of_file(path: str) -> tuple[float | None, int | None]:
    from cryptography import x509

    try:
        with open(path, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
    except (OSError, ValueError):
        return None, None
    return cert.not_valid_after_utc.timestamp(), cert.serial_number


def _identity_of_file(path: str) -> Identity | None:
    from cryptography import x509

    try:
        with open(path, "rb") as fh:
            cert = x509.load_pem_x509_certificate(fh.read())
    except (OSError, ValueError):
        return None
    return identity_of_cert(cert)


def identity_of_cert(cert) -> Identity | None:
    """The identity a certificate (cryptography's object) names, or None when it names none,
    or more than one."""
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return None
    found = {i for u in san.get_values_for_type(x509.UniformResourceIdentifier) if (i := parse_uri(u)) is not None}
    return found.pop() if len(found) == 1 else None


# -- who may do what ---------------------------------------------------------------------

def expect_member(group: str, member: str, ident: Identity | None) -> str | None:
    """Why a TLS peer reached for ``member`` of ``group`` is not it (None when it is): what
    a connecting side checks instead of a host name."""
    want = Identity(group, "member", member)
    return None if ident == want else f"its certificate names {ident or 'no identity'}, not {want}"


PEER, OPERATOR, CLIENT = "peer", "operator", "client"


def refusal(ident: Identity | None, group: str, members, need: str, sender: str | None = None) -> str | None:
    """Why a request needing ``need`` is refused from a connection of identity ``ident``
    (None: allowed). ``PEER`` requests (VOTE, HEART_BEAT, PUSH, ...) need a member of
    ``group`` that is the request's ``sender``; ``OPERATOR`` ones an operator of the group
    (or of every group); ``CLIENT`` ones any identity of the group."""
    if ident is None:
        return "the connection's certificate names no identity"
    own = ident.group == group or (ident.group == ANY_GROUP and ident.role != "member")
    if not own:
        return f"the certificate is for group {ident.group}, not {group}"
    if need == PEER:
        if ident.role != "member" or ident.name not in members:
            return f"{ident} is not a member of group {group}"
        if sender is not None and sender != ident.name:
            return f"{ident} sent a request as member {sender}"
        return None
    if need == OPERATOR and ident.role != "operator":
        return f"{ident} has no operator role"
    return None
