"""One running process: the node that wires the rules (cluster/raft), the network
(cluster/net) and the store together on an asyncio loop (process.py; what it answers in
requests.py, with its parts reads.py, operator.py and peers.py, seeing the node through
nodeview.py; its flushes off the loop in background.py), the term and vote file (terms.py), the members
file (memberfile.py), state machine loading (statemachines.py), the event-loop runtime,
metrics, and the launcher of local clusters with the small certificate authority it and
``dledgerctl certs`` issue certificates and CRLs from (pki.py).

May import: cluster/raft, cluster/net, store. Nothing imports it but the command line.
"""
