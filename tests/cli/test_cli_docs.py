"""The command line and its man pages stay in step.

Walks the real typer app: every group and command has help text, every command has a
section in its man page (``man/dledgerctl-<group>.1`` for group commands, ``man/dledgerctl.1``
for top-level ones), every option a command accepts is named in that section, and no
section lists an option the command no longer accepts. Plain text checks, no ``man``
needed; a groff syntax check runs when groff is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import typer

from dledgerctl.app import app
from tests.support import paths

MAN = os.path.join(paths.ROOT, "man")
ROOT_PAGE = os.path.join(MAN, "dledgerctl.1")
ROOT = typer.main.get_command(app).load_all()  # (every command group loaded)


def _is_group(cmd) -> bool:
    return hasattr(cmd, "commands")


GROUPS = sorted(name for name, cmd in ROOT.commands.items() if _is_group(cmd))
# (page, label, command object) for every runnable command
COMMANDS = [
    (os.path.join(MAN, f"dledgerctl-{g}.1"), f"{g} {c}", ROOT.commands[g].commands[c])
    for g in GROUPS
    for c in sorted(ROOT.commands[g].commands)
] + [(ROOT_PAGE, c, ROOT.commands[c]) for c in sorted(ROOT.commands) if not _is_group(ROOT.commands[c])]


def _plain(roff: str) -> str:
    """Roff source with the escapes that can sit inside an option name removed."""
    text = roff.replace("\\-", "-").replace("\\(hy", "-").replace("\\&", "").replace("\\%", "")
    return re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", text)


def _read(page: str) -> str:
    assert os.path.exists(page), f"missing man page {os.path.relpath(page, MAN)}"
    with open(page, encoding="utf-8") as fh:
        return fh.read()


def _section(page: str, name: str) -> str:
    """The ``.SS name`` subsection of a page (up to the next .SS/.SH), or failing that the
    ``.TP`` entry whose tag names the command. Returned as plain text."""
    lines = _plain(_read(page)).split("\n")

    def until(start: int, stops: tuple[str, ...]) -> str:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(stops)), len(lines))
        return "\n".join(lines[start:end])

    for i, line in enumerate(lines):
        if line.startswith(".SS ") and line[4:].strip().strip('"') == name:
            return until(i, (".SS", ".SH"))
    for i, line in enumerate(lines[:-1]):
        if line.startswith(".TP"):
            tag = re.sub(r"^\.[BIR]{1,2}\s+", "", lines[i + 1]).strip().strip('"')
            if re.match(rf"{re.escape(name)}(?![\w-])", tag):
                return until(i, (".TP", ".SS", ".SH"))
    return ""


TLS_OPTIONS = {"--tls-cert", "--tls-key", "--tls-ca"}


def _page_section(text: str, name: str) -> str:
    """The ``.SH name`` section of a page's plain text ("" when there is none)."""
    m = re.search(rf"^\.SH \"?{re.escape(name)}\"?\s*$(.*?)(?=^\.SH |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


def _names(option: str, text: str) -> bool:
    """``option`` appears as a whole word (so --index does not match --index-file-size)."""
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def _options(cmd) -> list[str]:
    return [o for p in cmd.params if p.param_type_name == "option" for o in p.opts + p.secondary_opts]


def test_the_app_has_groups_and_commands():
    assert "store" in GROUPS
    assert len(COMMANDS) >= 6


@pytest.mark.parametrize("page", [ROOT_PAGE] + [os.path.join(MAN, f"dledgerctl-{g}.1") for g in GROUPS],
                         ids=os.path.basename)
def test_page_is_a_man_page(page):
    text = _read(page)
    assert text.startswith(".TH "), f"{os.path.basename(page)} does not start with .TH"
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"):
        assert re.search(rf"^\.SH \"?{heading}\"?\s*$", text, re.M), f"{os.path.basename(page)}: no .SH {heading}"


def test_root_help_and_global_options():
    assert (ROOT.help or "").strip()
    text = _plain(_read(ROOT_PAGE))
    for opt in _options(ROOT):
        assert _names(opt, text), f"dledgerctl.1 does not document the global option {opt}"
    assert _names("--help", text)


@pytest.mark.parametrize("group", GROUPS)
def test_group_has_help_and_is_referenced(group):
    assert (ROOT.commands[group].help or "").strip(), f"group {group} has no help text"
    root = _plain(_read(ROOT_PAGE))
    ref = rf"\.BR\s+dledgerctl-{re.escape(group)}\s+\(1\)"
    assert re.search(ref, root), f"dledgerctl.1 does not point to dledgerctl-{group}(1)"


@pytest.mark.parametrize("page,label,cmd", COMMANDS, ids=[c[1] for c in COMMANDS])
def test_command_has_help_and_man_section(page, label, cmd):
    assert (cmd.help or "").strip(), f"{label} has no help text"
    for p in cmd.params:
        assert (getattr(p, "help", None) or "").strip(), f"{label}: {p.name} has no help text"
    name = label.split()[-1]
    section = _section(page, name)
    assert section, f"{os.path.basename(page)} has no .SS (or .TP) entry for {name}"
    accepted = set(_options(cmd)) | {"--help", "-h"}
    page_text = _plain(_read(page))
    for opt in sorted(accepted - {"--help", "-h"}):
        if opt in TLS_OPTIONS:  # shared by every client command: the page's TLS section describes them once
            assert _names(opt, _page_section(page_text, "TLS")), f"{label}: {opt} is not in the page's TLS section"
            continue
        assert _names(opt, section), f"{label}: {opt} is not in its man section"
    # Options named in the section's .TP tags (its option list) must still exist.
    lines = section.split("\n")
    listed = {o for i, line in enumerate(lines[:-1]) if line.startswith(".TP")
              for o in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", lines[i + 1])}
    stale = sorted(listed - accepted)
    assert not stale, f"{label}: man section lists options the command does not accept: {stale}"


@pytest.mark.skipif(shutil.which("groff") is None, reason="groff is not installed")
@pytest.mark.parametrize("page", [ROOT_PAGE] + [os.path.join(MAN, f"dledgerctl-{g}.1") for g in GROUPS],
                         ids=os.path.basename)
def test_page_formats_without_warnings(page):
    run = subprocess.run(["groff", "-man", "-ww", "-z", page], capture_output=True, text=True)
    assert run.returncode == 0 and not run.stderr.strip(), run.stderr


# --- the README and docs/: every command they show is one the command line accepts ------

PROJECT = os.path.dirname(MAN)
README = os.path.join(PROJECT, "README.md")
DOCS = sorted(os.path.join(PROJECT, "docs", n) for n in os.listdir(os.path.join(PROJECT, "docs")) if n.endswith(".md"))


def _doc_commands(path: str) -> list[list[str]]:
    """Every ``dledgerctl ...`` command in a page's fenced blocks, as argument lists:
    comments dropped, continuation lines joined, the dledgerctl part of a pipeline taken."""
    import shlex

    with open(path, encoding="utf-8") as fh:
        blocks = re.findall(r"^```[^\n]*\n(.*?)^```", fh.read(), re.S | re.M)
    out = []
    for block in blocks:
        for line in block.replace("\\\n", " ").split("\n"):
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError as exc:
                raise AssertionError(f"{os.path.basename(path)}: cannot split {line!r}: {exc}") from None
            segment: list[str] = []
            for tok in tokens + ["|"]:
                if tok != "|":
                    segment.append(tok)
                    continue
                if segment[:1] == ["dledgerctl"]:
                    out.append(segment[1:])
                segment = []
    return out


README_COMMANDS = _doc_commands(README)
EXAMPLE_PEERS = "n0-10.0.0.4:20911;n1-10.0.0.5:20911;n2-10.0.0.6:20911"
DOC_COMMANDS = README_COMMANDS + [c for page in DOCS for c in _doc_commands(page)]


def test_the_readme_shows_commands():
    assert len(README_COMMANDS) >= 15
    groups = {args[0] for args in README_COMMANDS}
    assert {"cluster", "append", "get", "peer", "store", "spark"} <= groups


@pytest.mark.parametrize("args", DOC_COMMANDS, ids=[" ".join(a)[:60] for a in DOC_COMMANDS])
def test_every_documented_command_parses(args):
    """The command and its options exist, and its arguments are valid for it: the real
    command's parser takes them (types, ranges, required options), without running it."""
    # a page's $PEERS stands for a real group's members (the parser checks peers lists)
    cmd, path, rest = ROOT, ["dledgerctl"], [a.replace("$PEERS", EXAMPLE_PEERS) for a in args]
    while _is_group(cmd):
        while rest and rest[0].startswith("-"):
            assert rest[0] in _options(cmd), f"{' '.join(path)} has no option {rest[0]}"
            rest.pop(0)
        assert rest, f"{' '.join(path)} without a command"
        name = rest.pop(0)
        assert name in cmd.commands, f"{' '.join(path)} has no command {name!r}"
        cmd = cmd.commands[name]
        path.append(name)
    if "--config" in rest:  # (the file a page names is one on a server, not here: the option is checked, not read)
        assert "--config" in _options(cmd), f"{' '.join(path)} has no option --config"
        k = rest.index("--config")
        rest = rest[:k] + rest[k + 2:] + ["--id", "n0", "--peers", "n0-127.0.0.1:20911"]
    try:
        cmd.make_context(" ".join(path), rest)
    except Exception as exc:  # the parser's own error says what is wrong
        raise AssertionError(f"dledgerctl {' '.join(args)}: {exc}") from None


def test_the_readme_test_command_is_what_ci_runs():
    with open(README, encoding="utf-8") as fh:
        readme = fh.read()
    with open(os.path.join(PROJECT, ".ci", "run"), encoding="utf-8") as fh:
        ci_last = [line for line in fh.read().split("\n") if line.strip()][-1].strip()
    assert f"```\n{ci_last}\n```" in readme, f"the README does not show CI's command: {ci_last}"
    assert "```\nbash scripts/cluster.sh\n```" in readme and os.path.exists(os.path.join(PROJECT, "scripts",
                                                                                           "cluster.sh"))


def test_the_readme_fits_and_links_every_page_in_docs():
    """The README is a guide a newcomer reads whole: under 12,000 bytes, with every page in
    docs/ linked from it, and every relative link in it and in docs/ pointing at a file."""
    with open(README, "rb") as fh:
        raw = fh.read()
    assert len(raw) < 12_000, f"README.md is {len(raw)} bytes"
    readme = raw.decode()
    for page in DOCS:
        name = os.path.relpath(page, PROJECT)
        assert f"]({name})" in readme, f"README.md does not link {name}"
    for page in [README, *DOCS]:
        with open(page, encoding="utf-8") as fh:
            text = fh.read()
        for target in re.findall(r"\]\(([^)#\s]+)\)", text):
            if "://" in target:
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(page), target))
            assert os.path.exists(path), f"{os.path.relpath(page, PROJECT)} links {target}, which is not there"


def test_version_is_the_installed_distributions():
    import sys
    from importlib.metadata import version

    installed = version("dledgerctl")  # (pyproject.toml takes it from dledgerctl.__version__)
    r = subprocess.run([sys.executable, "-m", "dledgerctl", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith(f"dledgerctl {installed} ("), (r.stdout, r.stderr)
