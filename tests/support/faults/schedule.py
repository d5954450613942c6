"""A run's faults, from its seed alone: the decks of fault kinds each profile deals from, and
:func:`make_schedule`, the :class:`Step` list (kind, how long it holds, the calm after it, how
cuts are made, whom it hits).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.support.faults.network import BLACKHOLE, DROP


# kind -> weight (copies in the deck a schedule is dealt from)
KILL_FAULTS = {"kill-leader": 3, "kill-follower": 2, "kill-minority": 1, "kill-majority": 1, "kill-all": 1}
PARTITION_FAULTS = {"partition-halves": 2, "isolate-leader": 2, "majority-ring": 2, "one-way": 2, "slow-links": 1,
                    "flaky-link": 1}
MIXED_FAULTS = {"kill-leader": 1, "kill-follower": 1, "kill-minority": 1, "partition-halves": 1, "isolate-leader": 1,
                "majority-ring": 1, "one-way": 1, "pause-leader": 2, "pause-follower": 1, "torn-write": 3,
                "partition+pause": 1, "kill+partition": 1}
# membership changes (peer replace: a spare joins as a learner, then a member leaves), alone
# and racing a crash of the leader or a partition, among the other faults
MEMBER_FAULTS = {"replace-follower": 2, "replace-leader": 2, "replace+kill-leader": 2, "replace+partition": 2,
                 "kill-leader": 1, "kill-follower": 1, "isolate-leader": 1, "partition-halves": 1, "pause-leader": 1,
                 "torn-write": 1}
# frames an attacker or a buggy peer sends (tests/support/hostile.py) to every member, alone and
# while the group is already shaken
HOSTILE_FAULTS = {"hostile": 4, "hostile+kill-leader": 1, "hostile+partition": 1, "kill-follower": 1,
                  "isolate-leader": 1}
# bytes flipped in committed entries of one running member at a time (its scrub must find and
# repair them from a replica), among kills, pauses and partitions
BITROT_FAULTS = {"bitrot": 4, "kill-follower": 1, "pause-leader": 1, "partition-halves": 1, "isolate-leader": 1}
# bytes flipped in entries nobody committed yet: the leader's tail while its followers are
# paused, and a follower's last entry (issue 59), among kills and pauses
ROTTAIL_FAULTS = {"rot-tail": 4, "rot-follower-tail": 2, "kill-follower": 1, "pause-leader": 1}
PROFILES = {"kills": KILL_FAULTS, "partitions": PARTITION_FAULTS, "mixed": MIXED_FAULTS, "members": MEMBER_FAULTS,
            "hostile": HOSTILE_FAULTS, "bitrot": BITROT_FAULTS, "rot-tail": ROTTAIL_FAULTS}
SPARES = {"members": 40}  # ids a profile's runs may add


@dataclass
class Step:
    kind: str
    hold: float  # seconds the fault lasts
    gap: float  # seconds of calm after it is undone
    mode: str  # DROP or BLACKHOLE for cuts
    pick: float  # in [0, 1): which of the candidates the fault hits


def make_schedule(seed: int, profile: str, seconds: float) -> list[Step]:
    """The faults of a run, from the seed alone (enough of them to fill ``seconds``). Kinds
    are dealt from a shuffled deck holding each kind as often as its weight, so a short run
    still sees most of them."""
    rng = random.Random(f"{profile}:{seed}")
    deck: list[str] = []
    steps, t = [], 0.0
    while t < seconds:
        if not deck:
            deck = [k for k, w in PROFILES[profile].items() for _ in range(w)]
            rng.shuffle(deck)
        step = Step(deck.pop(), round(rng.uniform(1.0, 5.0), 2), round(rng.uniform(0.3, 2.5), 2),
                    rng.choice((DROP, BLACKHOLE)), rng.random())
        steps.append(step)
        t += step.hold + step.gap
    return steps
