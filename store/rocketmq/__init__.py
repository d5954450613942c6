"""What a RocketMQ broker keeps on top of DLedger: its messages and its consume queues.

A broker in DLedger mode (``enableDLegerCommitLog=true``) appends every message as one
DLedger entry (a producer's batch of N messages as N entries); the entry's body is the
message as RocketMQ's commit log serializes it. Beside its ``dledger-<selfId>/`` directory,
the broker's store root holds ``consumequeue/<topic>/<queueId>/`` files of 20-byte units
that point at those messages by commit-log offset (the entry's pos + 48, which the
leader's append hook writes into the message as its PHYSICALOFFSET).

- :mod:`.message`: the message codec (one pure decoder over a buffer; property maps,
  message ids, tag hashes, compressed bodies);
- :mod:`.consumequeue`: consume-queue files;
- :mod:`.layout`: finding the node directory and the consume queues from a path;
- :mod:`.scan`: every message of a node directory, through the store's own entry scan
  (store/scan.py), as rows or as columns for the fast paths;
- :mod:`.check`: what ``mq check`` finds.

Like the rest of ``store/``: synchronous, no sockets; it imports nothing of ``cluster/``
or of the command line.
"""
