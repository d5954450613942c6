"""The deciding logic of a member: Raft's rules as a pure state machine, and the messages
they speak.

No sockets, no asyncio, no clock and no file I/O of its own: time comes in as an argument,
randomness from the generator it is given, storage through store's interfaces (the log
store, snapshots). The asyncio node (cluster/node) and the simulator (tests/support/sim.py) drive
the same code: ``RaftCore`` in core.py is where every event enters.

May import: ``store`` only (and the standard library). The message types (rpc.py) and the
settings the rules read (config.py: members, peers, timings) are what cluster/net may import
from here.
"""
