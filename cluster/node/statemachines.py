"""Loading the state machine ``node start --state-machine module:Class`` names: the node
imports it and hands the instance to the Applier (cluster/raft/statemachine.py), so the
rules never load code themselves."""

from __future__ import annotations

import importlib

from ..raft.statemachine import KeyValue, StateMachineError


def load(spec: str):
    """An instance of ``module:Class`` (``kv`` names the built-in :class:`KeyValue`)."""
    if spec == "kv":
        return KeyValue()
    mod_name, sep, cls_name = spec.partition(":")
    if not sep or not mod_name or not cls_name:
        raise StateMachineError(f"--state-machine {spec!r} is not module:Class (or kv)")
    try:
        cls = getattr(importlib.import_module(mod_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise StateMachineError(f"cannot load state machine {spec!r}: {exc}") from None
    if not isinstance(cls, type):
        raise StateMachineError(f"state machine {spec!r} is not a class")
    try:
        sm = cls()
    except Exception as exc:  # noqa: BLE001 - its constructor's error, in one line
        raise StateMachineError(f"state machine {spec!r} failed to start: {exc}") from None
    missing = [m for m in ("apply", "snapshot", "restore") if not callable(getattr(sm, m, None))]
    if missing:
        raise StateMachineError(f"state machine {spec!r} has no {', '.join(missing)}")
    return sm
