"""dledgerctl/option_values.py converts every parameter's values as typer's own (pydantic)
conversion does: the same value, or the same refusal word for word, for every parameter of
every command, over good and bad values of each kind."""

from __future__ import annotations

from enum import Enum

import pytest
import typer
from typer import _coercion
from typer._click.exceptions import BadParameter

from dledgerctl import option_values
from dledgerctl.app import app

SAMPLES = ["0", "1", "-1", "-0", "007", "42", "+5", " 5", "5 ", "1_000", "1.5", "-2.25", "1.0", "1e3", ".5", "5.",
           "inf", "nan", "99999999999999999999", "123456789012345678", "abc", "", " ", "true", "False", "yes", "1G",
           "64MiB", "10KB", "3h", "table", "JSON", "Utf8", "n0-127.0.0.1:1", "a=b", "\u00e9", 0, 1, -1, 2.5, True,
           False, ["a", "b"], ("1", "2"), []]


def _params():
    root = typer.main.get_command(app).load_all()
    found = []

    def walk(cmd, path):
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])
        for p in cmd.params:
            if hasattr(p, "type_descriptor"):
                found.append((" ".join([*path, p.name]), cmd, p))
    walk(root, [])
    return found


PARAMS = _params()


def _outcome(runtime, value, param, ctx):
    try:
        out = runtime._coerce_value(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return ("refused", type(exc), exc.format_message())
    except Exception as exc:  # (what typer lets through, e.g. a parser's own error)
        return ("raised", type(exc), str(exc))
    return ("value", type(out), out if not isinstance(out, list) else [(type(v), v) for v in out])


def _same(a, b) -> bool:  # (nan is not equal to itself)
    return a == b or (a[0] == b[0] == "value" and a[1] is b[1] is float and a[2] != a[2] and b[2] != b[2])


@pytest.mark.parametrize("name, cmd, param", PARAMS, ids=[n for n, _c, _p in PARAMS])
def test_every_parameter_converts_as_typers_own(name, cmd, param):
    ctx = cmd.context_class(cmd, info_name=name.split(" ")[0])
    theirs = option_values._typers_own(param.type_descriptor)
    ours = option_values.runtime_param(param.type_descriptor)
    samples = list(SAMPLES) + ([param.default] if param.default is not None and not callable(param.default) else [])
    annotation = param.type_descriptor.annotation
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        samples += [m for m in annotation] + [str(m.value) for m in annotation] + [str(m.value).upper() for m in annotation]
    for value in samples:
        a, b = _outcome(theirs, value, param, ctx), _outcome(ours, value, param, ctx)
        assert _same(a, b), f"{name} {value!r}: typer {a}, option_values {b}"


def test_the_kinds_of_this_command_line_are_converted_here_not_by_pydantic():
    """Every parameter of every command (all of them str, int, float, bool, an Enum, lists of
    those, through parsers or not) converts here: none needs typer's adapter for a good value."""
    left = [name for name, _cmd, p in PARAMS if not isinstance(option_values.runtime_param(p.type_descriptor),
                                                               option_values.Direct)]
    assert left == []
    for name, cmd, p in PARAMS:  # (and each default converts here, without typer's adapter)
        if p.default is not None and not callable(p.default):
            runtime = option_values.runtime_param(p.type_descriptor)
            runtime.convert(p.default, cmd.context_class(cmd, info_name=name.split(" ")[0]))


def test_installed_by_the_app():
    assert typer.core.build_runtime_param is option_values.runtime_param
    assert _coercion.build_runtime_param is option_values._typers_own
