"""``members.json`` in the node's directory: the membership in force where its log begins
(the *base*, cluster/raft/membership.py), kept across restarts. The core decides when the
base changes and hands it to ``save_base`` (given to RaftCore); the node reads it back at
start, before the config entries of its log."""

from __future__ import annotations

import json
import os

from store.metafiles import replace_file

from ..raft.membership import Membership, MembershipError

MEMBERS_FILE = "members.json"


def load_base(node_dir: str) -> tuple[Membership, int] | None:
    """The base kept in ``node_dir`` and the index it is in force up to; None when none was kept."""
    path = os.path.join(node_dir, MEMBERS_FILE)
    try:
        with open(path, "rb") as fh:
            o = json.loads(fh.read())
        return Membership.from_body(json.dumps(o["members"]).encode()), int(o["index"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MembershipError(f"{path} is unreadable: {exc}") from None


def save_base(node_dir: str, membership: Membership, index: int) -> None:
    """Keep the membership in force up to ``index`` in ``members.json`` (atomically)."""
    data = json.dumps({"index": index, "members": json.loads(membership.body())}).encode()
    replace_file(os.path.join(node_dir, MEMBERS_FILE), data)
