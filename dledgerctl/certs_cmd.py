"""``dledgerctl certs``: a CA and certificates for trying TLS out (cluster/net/pki.py)."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from .common import FormatOpt, check_group, fail
from .render import Format, render

app = typer.Typer(help="Certificates for mutual TLS: a CA and one certificate per member, operator and client.",
                  no_args_is_help=True)


def _names(values: list[str] | None) -> list[str]:
    """'n0,n1' and repeated options alike -> ['n0', 'n1']."""
    return [n.strip() for v in values or [] for n in v.split(",") if n.strip()]


@app.command("init")
def init_cmd(
    directory: Annotated[str, typer.Argument(help="Where the CA and the certificates go (made if missing; an "
                                             "existing CA there is reused).", show_default=False)],
    members: Annotated[list[str], typer.Option("--members", help="Member ids, comma-separated or repeated: one "
                                               "certificate each, for --group.", show_default=False)],
    group: Annotated[str, typer.Option("--group", "-g", callback=check_group,
                                       help="The group the members (and, without --any-group, the "
                                       "operators and clients) belong to.")] = "default",
    operators: Annotated[Optional[list[str]], typer.Option("--operators", help="Operator names: may also compare "
                                                           "and truncate followers and transfer leadership.")] = None,
    clients: Annotated[Optional[list[str]], typer.Option("--clients", help="Client names: may append, get and "
                                                         "read status and watermarks.")] = None,
    any_group: Annotated[bool, typer.Option("--any-group", help="Operator and client certificates valid for every "
                                            "group, not just --group.")] = False,
    fmt: FormatOpt = Format.table,
) -> None:
    """Make a CA (ca.pem, ca.key) in DIR unless one is there, and a certificate and key per identity:
    member-ID.pem/.key, operator-NAME.pem/.key, client-NAME.pem/.key. Each names its identity in a URI
    subjectAltName dledger://GROUP/ROLE/NAME. For trying TLS out; use your own PKI in production."""
    from .cluster_cmd import _make_certs

    names = {"--members": _names(members), "--operators": _names(operators), "--clients": _names(clients)}
    if not names["--members"]:
        raise fail("--members names no member", 2)
    for opt, ns in names.items():
        bad = [n for n in ns if "/" in n or n in (".", "..")]
        if bad or len(set(ns)) != len(ns):
            raise fail(f"{opt}: {'bad name ' + repr(bad[0]) if bad else 'a name is given twice'}", 2)
    try:
        rows = _make_certs(directory, group, names["--members"], names["--operators"], names["--clients"],
                           any_group)
    except OSError as exc:
        raise fail(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    render(rows, fmt, columns=["identity", "cert", "key"] if fmt in (Format.table, Format.csv) else None)


def _serial(text: str) -> int:
    """A serial number as OpenSSL and the nodes' logs print it: hex (0x, colons allowed)."""
    digits = text.strip().lower().removeprefix("0x").replace(":", "")
    try:
        return int(digits, 16)
    except ValueError:
        raise fail(f"--serial {text!r} is not a serial number in hex", 2) from None


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
    from cluster.net import crl

    if not serials and not identities:
        raise fail("give --serial or --identity (the certificates to revoke)", 2)
    wanted = {_serial(s): None for s in serials or []}
    if not os.path.isdir(directory):
        raise fail(f"{directory}: no such directory")
    known = crl.issued(directory)
    for uri in identities or []:
        found = [serial for serial, (_file, ident) in known.items() if ident == uri]
        if not found:
            raise fail(f"no certificate in {directory} names {uri}")
        wanted.update(dict.fromkeys(found))
    try:
        path, added = crl.revoke(directory, list(wanted))
    except crl.CrlError as exc:
        raise fail(str(exc)) from None
    rows = [{"serial": f"{s:X}", "file": known.get(s, ("", ""))[0] or None, "identity": known.get(s, ("", ""))[1]
             or None, "result": "revoked" if s in added else "revoked already"} for s in wanted]
    render(rows, fmt, columns=["serial", "file", "identity", "result"] if fmt in (Format.table, Format.csv) else None)
    typer.echo(f"{path} updated; send SIGHUP to every member started with --tls-crl {path}", err=True)
