"""Every command has help text and a man page section naming it and each of its options."""

from __future__ import annotations

import os
import re

import typer

from dledgerctl.app import app

MAN = os.path.join(os.path.dirname(__file__), "..", "man")


def _commands():
    root = typer.main.get_command(app)
    for gname, group in root.commands.items():
        for cname, cmd in group.commands.items():
            yield gname, cname, cmd


def test_every_command_has_help_and_man_section():
    seen = 0
    for gname, cname, cmd in _commands():
        seen += 1
        assert (cmd.help or "").strip(), f"{gname} {cname} has no help text"
        page = os.path.join(MAN, f"dledgerctl-{gname}.1")
        assert os.path.exists(page), f"no man page for group {gname}"
        text = open(page).read()
        assert text.startswith(".TH ")
        sections = re.split(r"^\.SS ", text, flags=re.M)
        section = next((s for s in sections if s.split("\n", 1)[0].strip() == cname), None)
        assert section is not None, f"man page has no .SS {cname}"
        common = text.split(".SH COMMANDS")[0]
        for param in cmd.params:
            for opt in param.opts:
                if opt.startswith("--") and opt != "--help":
                    roff = opt.replace("-", r"\-")
                    assert roff in section or roff in common, f"{gname} {cname}: {opt} not in its man section"
    assert seen >= 6
    assert open(os.path.join(MAN, "dledgerctl.1")).read().startswith(".TH ")
