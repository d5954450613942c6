"""The ``store`` command group whole: store_cmd's commands and ``elect`` (store_elect_cmd.py),
which ``--help`` lists first, and the backup, restore and force-new-group commands (backup_cmd.py). app.py
loads it when a ``store`` command runs."""

from __future__ import annotations

from . import backup_cmd, store_cmd, store_elect_cmd

app = store_cmd.app
app.command("elect")(store_elect_cmd.elect_cmd)
app.registered_commands.insert(0, app.registered_commands.pop())  # (elect first in the listing)
app.command("backup")(backup_cmd.backup_cmd)
app.command("backup-verify")(backup_cmd.backup_verify_cmd)
app.command("restore")(backup_cmd.restore_cmd)
app.command("force-new-group")(backup_cmd.force_new_group_cmd)
