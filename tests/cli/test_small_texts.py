"""Small texts issue 58 item 15 found wrong: ``cluster status``'s scrub cell ("1 passes",
and "at 9001" for a log whose commit index is 9000: the scrub waits for an entry no log
holds yet), and ``controller events --type bogus`` leaving out the names the docs use
(``--type elect-master``)."""

from __future__ import annotations

import pytest

from dledgerctl.cluster_cmd import _scrub_text
from tests.support.commands import invoke


@pytest.mark.parametrize("scrub, committed, text", [
    ({"passes": 1, "position": 9001}, 9000, "1 pass, caught up"),
    ({"passes": 2, "position": 500}, 9000, "2 passes, at 500"),
    ({"passes": 0, "position": -1}, 9000, "0 passes"),
    ({"passes": 3, "position": 7, "damaged": [5]}, None, "3 passes, at 7, damaged: 5"),
])
def test_the_scrub_cell(scrub, committed, text):
    assert _scrub_text(scrub, committed) == text


def test_a_bad_event_type_lists_the_names_the_docs_use(tmp_path):
    r = invoke("controller", "events", str(tmp_path), "--type", "bogus")
    assert r.exit_code == 2
    for name in ("alter-sync-state-set", "apply-broker-id", "elect-master", "clean-broker-data",
                 "update-broker-address", "ElectMasterEvent", "ELECT_MASTER_EVENT", "1-6"):
        assert name in r.stderr, name


def test_every_usage_line_names_a_directory_argument_alike():
    """``mq consumers`` showed ``{DIR}`` where every other command shows ``{dir}``."""
    for group in ("mq", "store", "controller"):
        sub = invoke(group, "--help").stdout
        names = [line.split()[1] for line in sub.splitlines() if line.startswith("│ ") and len(line.split()) > 2]
        for name in names:
            r = invoke(group, name, "--help")
            usage = next((x for x in r.stdout.splitlines() if "Usage:" in x), "")
            assert "{DIR}" not in usage, (group, name, usage)
