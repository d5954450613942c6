"""The ``controller`` command group whole: controller_cmd's commands (events, state, check) and
those kept in modules of their own (elect-plan, watch), in the order ``--help`` lists them.
app.py loads it when a ``controller`` command runs."""

from __future__ import annotations

from . import controller_cmd, controller_plan_cmd, controller_watch_cmd

app = controller_cmd.app
app.command("elect-plan")(controller_plan_cmd.elect_plan_cmd)
app.command("watch")(controller_watch_cmd.watch_cmd)
