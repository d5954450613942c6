"""The ``cluster`` command group whole: cluster_cmd's commands (up, down, status, start,
stop) and ``backup`` (cluster_backup_cmd.py). app.py loads it when a ``cluster`` command runs."""

from __future__ import annotations

from . import cluster_backup_cmd, cluster_cmd

app = cluster_cmd.cluster_app
app.command("backup")(cluster_backup_cmd.backup_cmd)
