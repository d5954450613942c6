"""``certs init`` never re-issues what a directory holds (a revoked member would get a valid
certificate back); ``certs add`` adds identities to an existing CA; ``--force`` re-issues on
request. Each CA is named after its directory (or ``--ca-name``). Real files (CliRunner).
"""

from __future__ import annotations

import json
import os

from cryptography import x509
from cryptography.x509.oid import NameOID

from cluster.net import crl
from cluster.node import pki
from tests.support.commands import invoke as run


def contents(d) -> dict[str, bytes]:
    return {p: open(os.path.join(d, p), "rb").read() for p in sorted(os.listdir(d))}


def serial(d, stem: str) -> int:
    with open(os.path.join(d, f"{stem}.pem"), "rb") as fh:
        return x509.load_pem_x509_certificate(fh.read()).serial_number


def uri(d, stem: str) -> str:
    return dict(pki.issued(d).values())[f"{stem}.pem"]


def ca_cn(d) -> str:
    with open(os.path.join(d, "ca.pem"), "rb") as fh:
        cert = x509.load_pem_x509_certificate(fh.read())
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def test_init_again_refuses_to_reissue_a_revoked_member(tmp_path):
    d = str(tmp_path / "tls")
    assert run("certs", "init", d, "--members", "n0,n1,n2", "--group", "broker-a").exit_code == 0
    r = run("certs", "revoke", d, "--identity", "dledger://broker-a/member/n1")
    assert r.exit_code == 0, r.output
    before = contents(d)
    # the operator's mistake of the issue: init again to add an operator
    r = run("certs", "init", d, "--members", "n0,n1,n2", "--operators", "admin2", "--group", "broker-a")
    assert r.exit_code == 1, r.output
    (line,) = errors(r.stderr)
    assert "member-n0.pem" in line and "certs add" in line and "--force" in line, line
    assert contents(d) == before  # nothing re-issued, no operator half-made
    # n1 stays revoked
    assert serial(d, "member-n1") in crl.load(os.path.join(d, "crl.pem"), os.path.join(d, "ca.pem"))


def test_add_issues_only_the_new_identities_in_the_directorys_group(tmp_path):
    d = str(tmp_path / "tls")
    assert run("certs", "init", d, "--members", "n0,n1,n2", "--group", "broker-a").exit_code == 0
    assert run("certs", "revoke", d, "--identity", "dledger://broker-a/member/n1").exit_code == 0
    before = contents(d)
    r = run("certs", "add", d, "--operators", "admin2", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["identity"] for row in rows] == ["dledger://broker-a/operator/admin2"]
    after = contents(d)
    assert {k: v for k, v in after.items() if k in before} == before  # the CA, the CRL and the members unchanged
    assert set(after) - set(before) == {"operator-admin2.pem", "operator-admin2.key"}
    assert uri(d, "operator-admin2") == "dledger://broker-a/operator/admin2"


def test_add_refuses_an_existing_identity_unless_forced(tmp_path):
    d = str(tmp_path / "tls")
    assert run("certs", "init", d, "--members", "n0,n1").exit_code == 0
    old = serial(d, "member-n1")
    before = contents(d)
    r = run("certs", "add", d, "--members", "n1,n2")
    assert r.exit_code == 1, r.output
    (line,) = errors(r.stderr)
    assert "member-n1.pem" in line and "--force" in line, line
    assert contents(d) == before  # not even n2
    r = run("certs", "add", d, "--members", "n1", "--force", "--format", "json")
    assert r.exit_code == 0, r.output
    assert serial(d, "member-n1") != old
    assert contents(d)["ca.pem"] == before["ca.pem"]
    r = run("certs", "init", d, "--members", "n0", "--force")
    assert r.exit_code == 0, r.output
    assert contents(d)["ca.pem"] == before["ca.pem"]  # --force re-issues identities, never the CA


def test_add_needs_a_ca_and_leaves_nothing_without_one(tmp_path):
    d = tmp_path / "empty"
    r = run("certs", "add", str(d), "--clients", "app")
    assert r.exit_code == 1, r.output
    (line,) = errors(r.stderr)
    assert "no CA" in line and "certs init" in line, line
    assert not d.exists()
    d.mkdir()
    r = run("certs", "add", str(d), "--clients", "app")
    assert r.exit_code == 1
    assert os.listdir(d) == []
    r = run("certs", "add", str(d))
    assert r.exit_code == 2
    assert "--members, --operators or --clients" in errors(r.stderr)[0]


def test_add_asks_for_the_group_when_the_directory_holds_several(tmp_path):
    d = str(tmp_path / "tls")
    assert run("certs", "init", d, "--members", "a0", "--group", "a").exit_code == 0
    assert run("certs", "add", d, "--members", "b0", "--group", "b").exit_code == 0
    before = contents(d)
    r = run("certs", "add", d, "--clients", "app")
    assert r.exit_code == 2, r.output
    (line,) = errors(r.stderr)
    assert "--group" in line and "a, b" in line, line
    assert contents(d) == before


def test_each_ca_is_named_after_its_directory_or_ca_name(tmp_path):
    one, two = str(tmp_path / "east" / "tls"), str(tmp_path / "west" / "tls")
    assert run("certs", "init", one, "--members", "n0").exit_code == 0
    assert run("certs", "init", two, "--members", "n0", "--ca-name", "West TLS CA").exit_code == 0
    assert ca_cn(two) == "West TLS CA"
    assert ca_cn(one) != "dledgerctl test CA" and ca_cn(one).endswith("east/tls"), ca_cn(one)
    deep = str(tmp_path / ("x" * 80) / "tls")  # a common name holds 64 characters at most
    assert run("certs", "init", deep, "--members", "n0").exit_code == 0
    assert len(ca_cn(deep)) <= 64 and ca_cn(deep).endswith("/tls")
    r = run("certs", "init", str(tmp_path / "bad"), "--members", "n0", "--ca-name", "x" * 65)
    assert r.exit_code == 2
    assert "--ca-name" in errors(r.stderr)[0]
    assert not (tmp_path / "bad").exists()
    r = run("certs", "init", one, "--members", "n1", "--ca-name", "Other")
    assert r.exit_code == 1
    assert "--ca-name" in errors(r.stderr)[0] and not os.path.exists(os.path.join(one, "member-n1.pem"))


def test_a_ca_whose_key_is_kept_offline_is_never_replaced(tmp_path):
    # ca.pem and the issued certificates without ca.key (kept offline): a new CA would take
    # ca.pem's place and every member's certificate would stop verifying
    d = str(tmp_path / "pki")
    assert run("certs", "init", d, "--members", "n0,n1").exit_code == 0
    key = open(os.path.join(d, "ca.key"), "rb").read()
    os.unlink(os.path.join(d, "ca.key"))
    before = contents(d)
    for args in (["certs", "init", d, "--members", "n2"], ["certs", "add", d, "--members", "n2"]):
        r = run(*args)
        assert r.exit_code == 1, r.output
        lines = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
        assert len(lines) == 1 and "ca.pem" in lines[0] and "ca.key" in lines[0], r.stderr
        assert contents(d) == before
    with open(os.path.join(d, "ca.key"), "wb") as fh:  # (put back: issuing works again)
        fh.write(key)
    assert run("certs", "add", d, "--members", "n2").exit_code == 0
    assert contents(d)["ca.pem"] == before["ca.pem"]


def test_revokes_at_the_same_time_keep_each_others_serials(tmp_path):
    import threading

    d = str(tmp_path / "pki")
    assert run("certs", "init", d, "--members", "n0,n1,n2,n3,n4,n5").exit_code == 0
    serials = [serial(d, f"member-n{i}") for i in range(6)]
    gate = threading.Barrier(len(serials))

    def revoke(s):
        gate.wait(timeout=30)
        pki.revoke(d, [s])
    threads = [threading.Thread(target=revoke, args=(s,)) for s in serials]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    with open(os.path.join(d, "crl.pem"), "rb") as fh:
        listed = {r.serial_number for r in x509.load_pem_x509_crl(fh.read())}
    assert listed == set(serials)
    assert sorted(os.listdir(d)) == sorted(contents(d))  # (and no lock file beside them)
    assert not [n for n in os.listdir(d) if "lock" in n or n.endswith(".tmp")]
