"""``dledgerctl cluster backup``: a backup of a running group, its writes going on
(dledgerctl/ops/backup.py; the file format is store/backup.py's)."""

from __future__ import annotations

from typing import Annotated

import typer

from cluster.node.launcher import DEFAULT_BASE_DIR

from . import clients
from .common import BaseDirOpt, ClientGroupOpt, FormatOpt, PeersOpt, TimeoutOpt, errors_as_exit, progress_bar, tls_options
from .ops.targets import row
from .render import Format, render_object


@tls_options
def backup_cmd(
    out: Annotated[str, typer.Option("--out", "-o", help="The backup file to write (a new file; a failed backup "
                                     "leaves none).", show_default=False)],
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 10.0, fmt: FormatOpt = Format.table,
) -> None:
    """Back up a running group's committed log to FILE without stopping its writes: as of the leader's commit index
    when it starts (confirmed by a linearizable read), read page by page from the leader's log, in the format of
    'store backup' (a manifest with the group, members, first and last index and term, a sha256 per chunk). Check it
    with 'store backup-verify', build a new group from it with 'store restore'. With a state machine, its latest
    snapshot is copied first from the same member, and the backup reaches at least to the snapshot's index."""
    # (imported here: the backup's writer and checks load numpy, which the group's quick commands, cluster status
    # among them, must not pay for: tests/cli/test_cli_lazy.py)
    from .ops import backup as live

    found = clients.target(peers, base_dir, group, timeout)
    with clients.failures(), errors_as_exit():
        start = live.start_point(found)
        with progress_bar(f"backing up {start.first}-{start.last}", start.bytes) as advance:
            result = live.backup(found, out, progress=advance, start=start)
    render_object(row(result), fmt)
