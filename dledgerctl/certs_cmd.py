"""``dledgerctl certs``: a CA and certificates for trying TLS out (cluster/node/pki.py)."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from cluster.net.crl import CrlError
from cluster.net.tls import ANY_GROUP, Identity, parse_uri
from cluster.node import pki

from .common import FormatOpt, check_group, fail
from .render import Format, render

app = typer.Typer(help="Certificates for mutual TLS: a CA and one certificate per member, operator and client.",
                  no_args_is_help=True)


def _names(values: list[str] | None) -> list[str]:
    """'n0,n1' and repeated options alike -> ['n0', 'n1']."""
    return [n.strip() for v in values or [] for n in v.split(",") if n.strip()]


def _check_ca_name(value: str | None) -> str | None:
    problem = None if value is None else pki.ca_name_problem(value)
    if problem is not None:
        raise typer.BadParameter(f"{value!r} {problem}")
    return value


MembersOpt = Annotated[Optional[list[str]], typer.Option("--members", help="Member ids, comma-separated or "
                                                         "repeated: one certificate each, for --group.",
                                                         show_default=False)]
OperatorsOpt = Annotated[Optional[list[str]], typer.Option("--operators", help="Operator names: may also compare "
                                                           "and truncate followers and transfer leadership.",
                                                           show_default=False)]
ClientsOpt = Annotated[Optional[list[str]], typer.Option("--clients", help="Client names: may append, get and "
                                                         "read status and watermarks.", show_default=False)]
AnyGroupOpt = Annotated[bool, typer.Option("--any-group", help="Operator and client certificates valid for every "
                                           "group, not just --group.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Re-issue the certificates and keys of identities DIR "
                                        "already holds (new serials: one revoked before becomes valid again). "
                                        "Without it they are refused; the CA is never re-made.")]


def _identities(group: str, members, operators, clients, any_group: bool) -> list[Identity]:
    """The identities asked for, checked: a usage error for a bad or repeated name."""
    names = {"--members": _names(members), "--operators": _names(operators), "--clients": _names(clients)}
    for opt, ns in names.items():
        bad = [n for n in ns if "/" in n or n in (".", "..")]
        if bad or len(set(ns)) != len(ns):
            raise fail(f"{opt}: {'bad name ' + repr(bad[0]) if bad else 'a name is given twice'}", 2)
    return [Identity(ANY_GROUP if any_group and role != "member" else group, role, name)
            for role, opt in (("member", "--members"), ("operator", "--operators"), ("client", "--clients"))
            for name in names[opt]]


def _issue(directory: str, idents: list[Identity], force: bool, ca_name: str | None = None) -> list[dict]:
    """Certificates for ``idents`` signed by the CA of ``directory`` (made, named ``ca_name``,
    when missing): one row each. Files of an identity DIR holds already are refused before
    anything is written, unless ``force``."""
    held = {ident: pki.files_of(directory, ident) for ident in idents}
    if not force:
        there = [f for files in held.values() for f in files]
        if there:
            shown = ", ".join(there[:4]) + (f" and {len(there) - 4} more" if len(there) > 4 else "")
            raise fail(f"{directory} holds {shown} already: 'certs add {directory}' adds other identities to its "
                       "CA; --force re-issues these (a revoked one becomes valid again)")
    rows = []
    try:
        pki.init_ca(directory, name=ca_name)
        for ident in idents:
            cert, key = pki.issue(directory, ident)
            rows.append({"identity": ident.uri, "role": ident.role, "name": ident.name, "cert": cert, "key": key,
                         "result": "re-issued" if held[ident] else "issued"})
    except OSError as exc:
        raise fail(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    except ValueError as exc:  # (a CA file that is not one)
        raise fail(f"the CA in {directory} cannot be used: {exc}") from None
    return rows


def _render_issued(rows: list[dict], fmt: Format) -> None:
    render(rows, fmt, columns=["identity", "cert", "key", "result"] if fmt in (Format.table, Format.csv) else None)


@app.command("init")
def init_cmd(
    directory: Annotated[str, typer.Argument(help="Where the CA and the certificates go (made if missing; an "
                                             "existing CA there is reused).", show_default=False)],
    members: MembersOpt = None,
    group: Annotated[str, typer.Option("--group", "-g", callback=check_group,
                                       help="The group the members (and, without --any-group, the "
                                       "operators and clients) belong to.")] = "default",
    operators: OperatorsOpt = None,
    clients: ClientsOpt = None,
    any_group: AnyGroupOpt = False,
    ca_name: Annotated[Optional[str], typer.Option("--ca-name", callback=_check_ca_name, show_default=False,
                                                   help="The new CA's common name (default: 'dledgerctl CA' and "
                                                   "DIR's absolute path).")] = None,
    force: ForceOpt = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Make a CA (ca.pem, ca.key) in DIR unless one is there, and a certificate and key per identity:
    member-ID.pem/.key, operator-NAME.pem/.key, client-NAME.pem/.key. Each names its identity in a URI
    subjectAltName dledger://GROUP/ROLE/NAME. Certificates DIR holds already are never re-issued without
    --force ('certs add' adds identities). For trying TLS out; use your own PKI in production."""
    idents = _identities(group, members, operators, clients, any_group)
    if not any(i.role == "member" for i in idents):
        raise fail("--members names no member", 2)
    if ca_name is not None and pki.has_ca(directory) and pki.ca_name(directory) != ca_name:
        raise fail(f"{directory} has a CA already ({pki.ca_name(directory)!r}); --ca-name names a new CA only")
    _render_issued(_issue(directory, idents, force, ca_name), fmt)


def _group_of(directory: str) -> str:
    """The group of the member certificates in ``directory`` (of the others when it holds no
    member's); 'default' when none names one; a usage error when they name several."""
    idents = [i for _file, uri in pki.issued(directory).values() if (i := parse_uri(uri)) is not None]
    groups = sorted({i.group for i in idents if i.role == "member"}
                    or {i.group for i in idents if i.group != ANY_GROUP})
    if len(groups) > 1:
        raise fail(f"{directory} holds certificates of groups {', '.join(groups)}: give --group", 2)
    return groups[0] if groups else "default"


@app.command("add")
def add_cmd(
    directory: Annotated[str, typer.Argument(help="A directory 'certs init' made (its ca.pem and ca.key sign the "
                                             "new certificates).", show_default=False)],
    members: MembersOpt = None,
    operators: OperatorsOpt = None,
    clients: ClientsOpt = None,
    group: Annotated[Optional[str], typer.Option("--group", "-g", callback=check_group, show_default=False,
                                                 help="The group of the new identities (default: the group of "
                                                 "the member certificates in DIR).")] = None,
    any_group: AnyGroupOpt = False,
    force: ForceOpt = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Add identities to the CA in DIR: a certificate and key each, as 'certs init' writes them. Identities DIR
    holds already are refused (nothing is written) unless --force; the CA and crl.pem are left as they are."""
    if not (_names(members) or _names(operators) or _names(clients)):
        raise fail("give --members, --operators or --clients (the identities to add)", 2)
    if not pki.has_ca(directory):
        raise fail(f"no CA in {directory} (ca.pem and ca.key): 'certs init' makes one")
    idents = _identities(group or _group_of(directory), members, operators, clients, any_group)
    _render_issued(_issue(directory, idents, force), fmt)


SERIAL_MAX = (1 << 159) - 1  # RFC 5280 4.1.2.2: a positive number of at most 20 octets (DER, so 159 bits)


def _serial(text: str) -> int:
    """A serial number as OpenSSL and the nodes' logs print it: hex (0x, colons allowed),
    one a certificate can have (1 to 2^159-1), else a usage error."""
    digits = text.strip().lower().removeprefix("0x").replace(":", "")
    value = int(digits, 16) if digits and all(c in "0123456789abcdef" for c in digits) else None
    if value is None or not 1 <= value <= SERIAL_MAX:
        raise fail(f"--serial {text!r} is not a serial number in hex: certificates' run from 1 to 2^159-1 "
                   "(positive, at most 20 bytes: RFC 5280)", 2)
    return value


@app.command("revoke")
def revoke_cmd(
    directory: Annotated[str, typer.Argument(help="The directory 'certs init' made (its ca.pem, ca.key and "
                                             "crl.pem).", show_default=False)],
    serials: Annotated[Optional[list[str]], typer.Option("--serial", help="A certificate's serial number, in hex "
                                                         "(as 'openssl x509 -serial' and the nodes' logs print it); "
                                                         "repeatable.")] = None,
    identities: Annotated[Optional[list[str]], typer.Option("--identity", help="Revoke every certificate in DIR "
                                                            "naming this identity (dledger://GROUP/ROLE/NAME); "
                                                            "repeatable.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Add certificates to DIR/crl.pem, signed with the CA's key there. Members started with --tls-crl on that file
    (cluster up --tls does so) refuse them once they read it again: send SIGHUP to every member; their open
    connections with a revoked certificate are closed then."""
    if not serials and not identities:
        raise fail("give --serial or --identity (the certificates to revoke)", 2)
    wanted = {_serial(s): None for s in serials or []}
    if not os.path.isdir(directory):
        raise fail(f"{directory}: no such directory")
    known = pki.issued(directory)
    for uri in identities or []:
        found = [serial for serial, (_file, ident) in known.items() if ident == uri]
        if not found:
            raise fail(f"no certificate in {directory} names {uri}")
        wanted.update(dict.fromkeys(found))
    try:
        path, added = pki.revoke(directory, list(wanted))
    except CrlError as exc:
        raise fail(str(exc)) from None
    strangers = [s for s in wanted if s not in known]
    rows = [{"serial": f"{s:X}", "file": known.get(s, ("", ""))[0] or None, "identity": known.get(s, ("", ""))[1]
             or None, "result": "revoked" if s in added else "revoked already",
             "note": f"no certificate in {directory} has this serial" if s in strangers else None} for s in wanted]
    render(rows, fmt, columns=["serial", "file", "identity", "result", "note"]
           if fmt in (Format.table, Format.csv) else None)
    for s in strangers:  # (a typo in a serial revokes nothing real: say so where a person looks)
        typer.echo(f"Warning: no certificate in {directory} has serial {s:X}: check it is the one meant (one "
                   "issued from here but since deleted is revoked all the same)", err=True)
    if added:
        typer.echo(f"{path} updated; send SIGHUP to every member started with --tls-crl {path}", err=True)
    else:
        typer.echo(f"{path} unchanged: every certificate asked for is revoked already", err=True)
