"""The ``store`` command group whole: store_cmd's commands and ``elect`` (store_elect_cmd.py),
which ``--help`` lists first. app.py loads it when a ``store`` command runs."""

from __future__ import annotations

from . import store_cmd, store_elect_cmd

app = store_cmd.app
app.command("elect")(store_elect_cmd.elect_cmd)
app.registered_commands.insert(0, app.registered_commands.pop())  # (elect first in the listing)
