"""The operator library the command line is thin over: what ``dledgerctl`` does, callable from
Python without typer, printing or exit codes.

- targets.py: where requests go (a group's members from a peers string or a local cluster's
  record, its name, the TLS identity), and running work with a client that is closed after it;
- status.py: one typed row per member (``cluster status``);
- localgroup.py: a local group's processes (``cluster up``/``start``), waited on until serving;
- logio.py: appends a batch at a time with what committed so far, and paged reads of
  committed entries (``append``, ``get``);
- peers.py: operator requests (``peer ...``): watermarks, forced compare and truncation,
  leadership transfer, member add, remove and replace; members.py: a change's steps, and
  the undo of an add that was interrupted;
- kv.py: the built-in key-value state machine (``kv put``, ``kv get``);
- salvage.py: kept messages matched against a live group's log (``mq salvage``);
- controller_watch.py: a RocketMQ 5 controller group watched for held-back elections.

docs/library.md shows it used from a script.

Errors: :class:`OpsError` for what the caller asked that cannot be done (``usage`` when the
request itself is wrong), and the lower layers' own (cluster.net.client.ClientError,
store.errors.StoreError, OSError), which name their cause in one line. Results are msgspec
Structs; ``row(result)`` gives the dict a ``--format json`` line shows.
"""

from .targets import OpsError, Target, find_target, row, run

__all__ = ["OpsError", "Target", "find_target", "row", "run"]
