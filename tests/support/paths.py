"""Where things are, computed once: the project's root (a checkout or worktree) and this
folder of test support files (fixtures/, sm/, prometheus/, java/, the helper scripts)."""

from __future__ import annotations

import os

SUPPORT = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(SUPPORT))

