"""A leader's dispatcher for one follower is in one of these states (dispatcher.py says
what each means; deepcompare.py the last but one)."""

from __future__ import annotations

import enum


class DispatchState(enum.StrEnum):
    COMPARE = "COMPARE"
    TRUNCATE = "TRUNCATE"
    APPEND = "APPEND"
    COMMIT = "COMMIT"
    INSTALL_SNAPSHOT = "INSTALL_SNAPSHOT"  # DLedger HEAD's: a follower that needs entries we no longer hold
    REPAIR = "REPAIR"  # ours: paused while an operator's forced truncation is on its way
    DEEP_COMPARE = "DEEP_COMPARE"  # ours: a follower that does not converge is compared byte for byte, then cut
