"""Option and argument values converted as typer converts them, without pydantic (issue 50).

typer (0.2x) converts the value of every parameter but a plain flag through a pydantic
TypeAdapter that it builds on first use: importing pydantic and building the adapters' schemas
cost a short client command (append, get, cluster status) more than all of its own work. The
kinds of parameter this command line declares (str, int and float with or without a range, bool,
an Enum, a list of those, and any of them through a ``parser``) are converted here directly, to
the value the adapter gives for the same input. Anything else, and any value that does not
convert here cleanly (not a plain number, out of range, a parser's or a choice's error), goes
to typer's own adapter, so a wrong value is refused with typer's message, word for word.

tests/cli/test_option_values.py holds the two conversions equal over every parameter of every
command, with good and bad values; tests/cli/test_cli_lazy.py checks the client commands run
without pydantic.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Callable, get_args, get_origin

import typer.core

try:  # (typer's conversion layer, where it has one: 0.2x)
    from typer import _coercion
    from typer._param_types import coerce_cli_choice
except ImportError:  # pragma: no cover - a typer without it converts without pydantic already
    _coercion = None

# what int() and float() read exactly as pydantic's lax mode does (signs, underscores, spaces,
# exponents, very long numbers: typer's adapter)
_PLAIN = {int: re.compile(r"-?[0-9]{1,18}"), float: re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,15})?")}


class _NotHere(Exception):
    """The value is typer's adapter's to convert (or to refuse)."""


def _same(kind: type) -> Callable[[Any, Any], Any]:
    def convert(value, _ctx):
        if type(value) is kind:
            return value
        raise _NotHere
    return convert


def _number(kind: type, low, high) -> Callable[[Any, Any], Any]:
    plain = _PLAIN[kind]

    def convert(value, _ctx):
        if type(value) is kind:
            number = value
        elif type(value) is str and plain.fullmatch(value):
            number = kind(value)
        else:
            raise _NotHere
        if (low is not None and number < low) or (high is not None and number > high):
            raise _NotHere
        return number
    return convert


def _leaf(annotation, info) -> Callable[[Any, Any], Any] | None:
    """The converter ``(value, ctx) -> value`` of one value, in the order typer's
    ``build_leaf_adapter`` tries the kinds; None for a kind left to typer."""
    if info.parser is not None:
        parser = info.parser
        return lambda value, _ctx: parser(value)
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        choices, case_sensitive = list(annotation), info.case_sensitive
        return lambda value, ctx: coerce_cli_choice(value, choices=choices, case_sensitive=case_sensitive, ctx=ctx)
    if annotation in (int, float):
        return None if info.clamp else _number(annotation, info.min, info.max)
    if annotation in (bool, str):
        return _same(annotation)
    return None


def _converter(annotation, info) -> Callable[[Any, Any], Any] | None:
    if get_origin(annotation) is list and len(get_args(annotation)) == 1:
        one = _leaf(get_args(annotation)[0], info)
        if one is None:
            return None
        return lambda value, ctx: [one(v, ctx) for v in (value if isinstance(value, (list, tuple)) else [value])]
    if get_origin(annotation) is not None:
        return None
    return _leaf(annotation, info)


if _coercion is not None:
    _typers_own = _coercion.build_runtime_param

    class Direct(_coercion.RuntimeParam):
        """A parameter's conversion: ``convert`` first, typer's adapter when it declines. (Not a
        dataclass of its own, as typer's are: making one costs every command a millisecond.)"""

        def __init__(self, descriptor, convert: Callable[[Any, Any], Any]) -> None:
            for name, value in (("parameter_info", descriptor.parameter_info), ("annotation", descriptor.annotation),
                                ("convert", convert), ("descriptor", descriptor),
                                ("fallback", [])):  # (typer's own, built on first need)
                object.__setattr__(self, name, value)  # (frozen, as typer's are)

        def _coerce_value(self, value, param, ctx):
            try:
                return self.convert(value, ctx)
            except Exception:  # (_NotHere, or a parser's or a choice's error: typer's adapter says it its way)
                pass
            if not self.fallback:
                self.fallback.append(_typers_own(self.descriptor))
            return self.fallback[0]._coerce_value(value, param, ctx)

    def runtime_param(descriptor):
        """typer's ``build_runtime_param``, with :class:`Direct` for the kinds converted here."""
        convert = None if descriptor.file_annotation is not None else _converter(descriptor.annotation,
                                                                                 descriptor.parameter_info)
        if convert is None:
            return _typers_own(descriptor)
        return Direct(descriptor, convert)


def install() -> None:
    """Every typer parameter converts its values here (typer.core builds them on first use)."""
    if _coercion is not None and getattr(typer.core, "build_runtime_param", None) is _typers_own:
        typer.core.build_runtime_param = runtime_param
