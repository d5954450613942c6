"""``certs revoke`` on serials: one nobody in the directory has gets a note, a serial no
certificate can have (0, negative, over 159 bits) is a usage error, revoking again leaves
the CRL's bytes alone and says so; a CRL past its nextUpdate is loaded with one warning.
Real files (CliRunner; the CRL through cluster/net/tls.py as a node loads it).
"""

from __future__ import annotations

import datetime
import json
import logging
import os

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from cluster.net import crl
from cluster.net.tls import Tls, TlsFiles
from tests.support.commands import invoke as run


def contents(d) -> dict[str, bytes]:
    return {p: open(os.path.join(d, p), "rb").read() for p in sorted(os.listdir(d))}


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


@pytest.fixture
def tls_dir(tmp_path):
    d = str(tmp_path / "tls")
    assert run("certs", "init", d, "--members", "n0,n1").exit_code == 0
    return d


def test_a_serial_nobody_in_the_directory_has_gets_a_note(tls_dir):
    r = run("certs", "revoke", tls_dir, "--serial", "AB:CD", "--format", "json")
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    assert row["serial"] == "ABCD" and row["result"] == "revoked" and row["file"] is None
    assert "no certificate in" in row["note"], row
    warn = [line for line in r.stderr.splitlines() if "ABCD" in line]
    assert warn and "no certificate in" in warn[0], r.stderr
    assert 0xABCD in crl.load(os.path.join(tls_dir, "crl.pem"), os.path.join(tls_dir, "ca.pem"))
    # one in the directory: no note
    r = run("certs", "revoke", tls_dir, "--identity", "dledger://default/member/n1", "--format", "json")
    (row,) = json.loads(r.stdout)
    assert row["file"] == "member-n1.pem" and row["note"] is None
    assert "no certificate in" not in r.stderr


def test_revoking_again_leaves_the_crl_alone_and_says_so(tls_dir):
    r = run("certs", "revoke", tls_dir, "--identity", "dledger://default/member/n1")
    assert r.exit_code == 0 and "updated" in r.stderr
    before = contents(tls_dir)
    mtime = os.stat(os.path.join(tls_dir, "crl.pem")).st_mtime_ns
    r = run("certs", "revoke", tls_dir, "--identity", "dledger://default/member/n1", "--format", "json")
    assert r.exit_code == 0, r.output
    assert [row["result"] for row in json.loads(r.stdout)] == ["revoked already"]
    assert contents(tls_dir) == before and os.stat(os.path.join(tls_dir, "crl.pem")).st_mtime_ns == mtime
    assert "updated" not in r.stderr and "SIGHUP" not in r.stderr, r.stderr
    assert "unchanged" in r.stderr, r.stderr


@pytest.mark.parametrize("serial", ["0", "-1", "0x00", "-0x5", "8" + "0" * 39, "1" + "0" * 40])
def test_a_serial_no_certificate_can_have_is_a_usage_error(tls_dir, serial):
    before = contents(tls_dir)
    r = run("certs", "revoke", tls_dir, "--serial", serial)
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    (line,) = errors(r.stderr)
    assert "--serial" in line and "1 to" in line, line
    assert "Traceback" not in r.output
    assert contents(tls_dir) == before


def test_the_largest_serial_is_taken(tls_dir):
    r = run("certs", "revoke", tls_dir, "--serial", "7" + "F" * 39)
    assert r.exit_code == 0, r.output


def _stale_crl(d: str) -> str:
    with open(os.path.join(d, "ca.pem"), "rb") as fh:
        ca = x509.load_pem_x509_certificate(fh.read())
    with open(os.path.join(d, "ca.key"), "rb") as fh:
        key = serialization.load_pem_private_key(fh.read(), password=None)
    now = datetime.datetime.now(datetime.timezone.utc)
    revoked = x509.RevokedCertificateBuilder().serial_number(77).revocation_date(now - datetime.timedelta(days=9))
    stale = (x509.CertificateRevocationListBuilder().issuer_name(ca.subject)
             .last_update(now - datetime.timedelta(days=10)).next_update(now - datetime.timedelta(days=3))
             .add_revoked_certificate(revoked.build()).sign(key, hashes.SHA256()))
    path = os.path.join(d, "stale.pem")
    with open(path, "wb") as fh:
        fh.write(stale.public_bytes(serialization.Encoding.PEM))
    return path


def test_a_crl_past_its_next_update_is_used_with_one_warning(tls_dir, caplog):
    path = _stale_crl(tls_dir)
    files = TlsFiles(os.path.join(tls_dir, "member-n0.pem"), os.path.join(tls_dir, "member-n0.key"),
                     os.path.join(tls_dir, "ca.pem"), path)
    with caplog.at_level(logging.WARNING):
        tls = Tls(files)
    assert 77 in tls.revoked  # what it revokes stays revoked
    stale = [r for r in caplog.records if "nextUpdate" in r.getMessage()]
    assert len(stale) == 1, caplog.text
    assert path in stale[0].getMessage() and stale[0].levelno == logging.WARNING
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        tls.refused({"serialNumber": "4D"})
        tls.refused({"serialNumber": "01"})
    assert not caplog.records  # once per load, not per connection
    with caplog.at_level(logging.WARNING):
        tls.reload()  # (SIGHUP) still stale: said again
    assert len([r for r in caplog.records if "nextUpdate" in r.getMessage()]) == 1
    # a fresh one (certs revoke writes nextUpdate ten years on) is loaded quietly
    caplog.clear()
    fresh = TlsFiles(files.cert, files.key, files.ca, os.path.join(tls_dir, "crl.pem"))
    with caplog.at_level(logging.WARNING):
        Tls(fresh)
    assert not [r for r in caplog.records if "nextUpdate" in r.getMessage()]
