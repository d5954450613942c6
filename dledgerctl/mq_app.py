"""The ``mq`` command group whole: mq_cmd's commands (messages, topics, check) and those
kept in modules of their own, in the order ``--help`` lists them. app.py loads it when an
``mq`` command runs."""

from __future__ import annotations

from . import mq_align_cmd, mq_cmd, mq_consumers_cmd, mq_epochs_cmd, mq_move_cmd, mq_rebuild_cmd, mq_salvage_cmd

app = mq_cmd.app
app.command("migrate")(mq_move_cmd.migrate_cmd)
app.command("rebuild")(mq_rebuild_cmd.rebuild_cmd)
app.command("salvage")(mq_salvage_cmd.salvage_cmd)
app.command("consumers")(mq_consumers_cmd.consumers_cmd)
app.command("epochs")(mq_epochs_cmd.epochs_cmd)
app.command("digest")(mq_align_cmd.digest_cmd)
app.command("align")(mq_align_cmd.align_cmd)
