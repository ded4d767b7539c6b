"""Settings defined once: each setting is a dataclass field declared with :func:`setting`.

The field gives the name, its annotation the type, and :func:`setting` the default, the rules
and the help text. Everything else is derived from that one place: type coercion of values that
arrive as JSON, KFP parameters or Katib strings (:meth:`Settings.from_dict`), validation with
messages that name the fix (:meth:`Settings.problems`), command-line flags
(:func:`add_flags`), docstrings of the pipeline and components (:func:`args_doc`) and the
README's tables (:func:`markdown_table`).

A group of settings (training, jobs, tuning, serving, ...) is a dataclass subclassing
:class:`Settings`; groups combine by inheritance, so a setting shared by two groups (``epochs``
in the trainer's and the pipeline's) is still declared once.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import MISSING, Field, dataclass
from typing import Any, ClassVar, TypeVar

from fmnist_kfp.errors import UserInputError

_KEY = "fmnist.setting"
# A rule: (name, value) -> the problem, or None when the value is fine.
Rule = Callable[[str, Any], str | None]
S = TypeVar("S", bound="Settings")


@dataclass(frozen=True)
class Setting:
    """What a field declared with :func:`setting` carries besides its name, type and default;
    ``help_for``: (component folder, help) pairs, where components that take the setting do
    different things with it."""

    help: str
    rules: tuple[Rule, ...] = ()
    help_for: tuple[tuple[str, str], ...] = ()

    def help_in(self, component: str) -> str:
        """The help of the setting as the component in folder ``component`` takes it."""
        return dict(self.help_for).get(component, self.help)


def setting(default: Any = MISSING, *, help: str, factory: Callable[[], Any] | Any = MISSING,
            rules: Iterable[Rule] = (), help_for: dict[str, str] | None = None) -> Any:
    """Declares one setting: ``name: type = setting(default, help=..., rules=[...])``;
    ``help_for``: the help in the components (by folder) that use it differently."""
    metadata = {_KEY: Setting(help=" ".join(help.split()), rules=tuple(rules),
                              help_for=tuple((component, " ".join(text.split()))
                                             for component, text in (help_for or {}).items()))}
    if factory is not MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# ---------------------------------------------------------------------------------------------
# Rules


def raising(check: Callable[[Any], Any]) -> Rule:
    """A rule from a check that raises ``UserInputError`` naming the problem."""
    def rule(name: str, value: Any) -> str | None:
        try:
            check(value)
        except UserInputError as error:
            return str(error)
        return None

    return rule


def positive(name: str, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"{name} must be a positive integer, got {value!r}"
    return None


def at_least(minimum: int | float, hint: str = "") -> Rule:
    def rule(name: str, value: Any) -> str | None:
        if value < minimum:
            return f"{name} must be at least {minimum}, got {value!r}" + (
                f" ({hint})" if hint else "")
        return None

    return rule


def not_negative(name: str, value: Any) -> str | None:
    return f"{name} must be 0 or more, got {value!r}" if value < 0 else None


def between(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> Rule:
    """``low <= value <= high``, either end open; the message states the interval."""
    def rule(name: str, value: Any) -> str | None:
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if isinstance(value, float) and not math.isfinite(value) or not (above and below):
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            return f"{name} must be in {interval}, got {value!r}"
        return None

    return rule


def one_of(choices: Iterable[Any], noun: str = "") -> Rule:
    """``unknown <noun> 'x'; choose one of a, b, c`` (the noun defaults to the name)."""
    options = tuple(choices)

    def rule(name: str, value: Any) -> str | None:
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item not in options:
                return (f"unknown {noun or name.replace('_', ' ')} {item!r}; choose one of "
                        + ", ".join(str(o) for o in options))
        return None

    return rule


def each_once(name: str, value: Any) -> str | None:
    if len(set(value)) != len(value):
        return f"{name} has duplicates: {value}"
    return None


def not_empty(what: str) -> Rule:
    return lambda name, value: None if value else f"{name} is empty; {what}"


# ---------------------------------------------------------------------------------------------
# Types


def _kind_name(kind: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string",
            list: "a list", dict: "a JSON object"}.get(kind, getattr(kind, "__name__", str(kind)))


def _base_type(annotation: Any) -> tuple[Any, bool]:
    """``int | None`` -> (int, True); ``list[str]`` -> (list, False)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(args[0])[0], type(None) in typing.get_args(annotation)
    return (origin or annotation), False


def coerce(kind: Any, value: Any, *, from_text: bool = False) -> Any:
    """``value`` as a setting of type ``kind`` holds it, or ``ValueError``. KFP carries numbers
    in dicts and artifact metadata as floats: ``64.0`` becomes ``64`` for an int, a float that
    is not whole stays an error. Text (``from_text``: command-line flags, Katib's assignments)
    is parsed: ``"64"`` becomes ``64``; in JSON a number must be a number."""
    if isinstance(value, str) and not from_text and kind in (bool, int, float):
        raise ValueError(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ValueError(value)
    if kind is int:
        if isinstance(value, bool):
            raise ValueError(value)
        if isinstance(value, int):
            return value
        number = float(value) if isinstance(value, str) else value
        if isinstance(number, float) and number.is_integer():
            return int(number)
        raise ValueError(value)
    if kind is float:
        if isinstance(value, bool):
            raise ValueError(value)
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            return float(value)
        raise ValueError(value)
    if kind is str:
        if isinstance(value, str):
            return value
        raise ValueError(value)
    if kind is list:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        if isinstance(value, list | tuple):
            return list(value)
        raise ValueError(value)
    if kind is dict:
        if isinstance(value, str):
            value = json.loads(value) if value.strip() else {}
        if isinstance(value, dict):
            return dict(value)
        raise ValueError(value)
    if kind is tuple:
        if isinstance(value, list | tuple):
            return tuple(value)
        raise ValueError(value)
    return value


# ---------------------------------------------------------------------------------------------
# Groups


@dataclass(frozen=True)
class Spec:
    """One setting of a group, as the derived views need it."""

    name: str
    kind: Any  # int, float, bool, str, list, dict, tuple
    optional: bool  # None is allowed
    default: Any
    setting: Setting

    @property
    def type_name(self) -> str:
        return getattr(self.kind, "__name__", str(self.kind))

    @property
    def default_text(self) -> str:
        """The default as a user types it: JSON for containers, plain otherwise."""
        if isinstance(self.default, bool) or self.default is None or self.default == "":
            return json.dumps(self.default)
        if isinstance(self.default, list | dict | tuple):
            return json.dumps(self.default)
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


class Settings:
    """Base of every settings group; subclasses are dataclasses of :func:`setting` fields."""

    # Names the group in messages: "invalid <WHAT>: ...", "unknown <WHAT> [...]".
    WHAT: ClassVar[str] = "settings"

    @classmethod
    def specs(cls) -> dict[str, Spec]:
        hints = typing.get_type_hints(cls)
        specs = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # each group is a dataclass
            if _KEY not in f.metadata:
                continue
            kind, optional = _base_type(hints[f.name])
            specs[f.name] = Spec(f.name, kind, optional, _default(f), f.metadata[_KEY])
        return specs

    @classmethod
    def defaults(cls: type[S]) -> S:
        return cls()

    @classmethod
    def coerce_values(cls, values: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """``values`` typed as the group's fields, and the problems: unknown keys, wrong types."""
        specs = cls.specs()
        unknown = sorted(set(values) - set(specs))
        if unknown:
            return {}, [f"unknown {cls.WHAT} {unknown}; known: {sorted(specs)}"]
        typed: dict[str, Any] = {}
        problems: list[str] = []
        for name, value in values.items():
            spec = specs[name]
            if value is None and spec.optional:
                typed[name] = None
                continue
            try:
                typed[name] = coerce(spec.kind, value)
            except (TypeError, ValueError):
                problems.append(f"{cls.WHAT} {name} must be {_kind_name(spec.kind)}, "
                                f"got {value!r}")
        return typed, problems

    @classmethod
    def from_dict(cls: type[S], values: dict[str, Any] | None) -> S:
        """The group from user values (JSON, KFP parameters, Katib strings): unknown keys and
        wrong types raise ``UserInputError``; rules are checked by :meth:`validate`."""
        typed, problems = cls.coerce_values(dict(values or {}))
        if problems:
            raise UserInputError(f"invalid {cls.WHAT}: " + "; ".join(problems))
        return cls(**typed)

    @classmethod
    def typed(cls, name: str, value: Any) -> Any:
        """One value as field ``name`` holds it (``"64"``, ``64.0`` -> ``64`` for an int)."""
        spec = cls.specs().get(name)
        if spec is None:
            raise KeyError(f"{name!r} is not one of the {cls.WHAT}")
        if value is None and spec.optional:
            return None
        return coerce(spec.kind, value, from_text=True)

    def problems(self) -> list[str]:
        """Every broken rule, each naming the setting and what is allowed."""
        problems = []
        for name, spec in self.specs().items():
            value = getattr(self, name)
            if value is None and spec.optional:
                continue
            for rule in spec.setting.rules:
                problem = rule(name, value)
                if problem:
                    problems.append(problem)
                    break
        return problems + self.cross_problems()

    def cross_problems(self) -> list[str]:
        """Rules that involve more than one setting; groups override it."""
        return []

    def validate(self: S) -> S:
        problems = self.problems()
        if problems:
            raise UserInputError(f"invalid {self.WHAT}: " + "; ".join(problems))
        return self

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.specs()}

    def changed(self) -> dict[str, Any]:
        """The settings that differ from the group's defaults."""
        defaults = type(self)()
        return {k: v for k, v in self.as_dict().items() if v != getattr(defaults, k)}


def _default(f: Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


# ---------------------------------------------------------------------------------------------
# Derived views


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_flags(parser, group: type[Settings], *, title: str | None = None,
              description: str | None = None,
              defaults: Sequence[tuple[str, Settings]] = ()) -> None:
    """One ``--flag`` per setting of ``group`` (``argparse``). Every flag defaults to None
    ("not given"), so :func:`given_values` returns only what was typed; a boolean alone means
    true (``--tune``) or takes a value (``--augment false``), lists take ``a,b``, JSON objects
    take ``'{...}'``.

    The help states the defaults a value left out gets: the group's own, or ``defaults``, the
    sets of defaults by where they apply (``[("with --local", local), ("with --host",
    cluster)]``): ``(default 10)`` where they agree, ``(default 1 with --local, 2 with --host)``
    where not. A single set is shown without its place."""
    target = parser.add_argument_group(title, description) if title else parser
    sets = list(defaults) or [("", group())]
    for name, spec in group.specs().items():
        shown = f"{spec.setting.help} ({default_note(spec, sets)})".replace("%", "%%")
        if spec.kind is bool:
            target.add_argument(flag(name), nargs="?", const="true", default=None,
                                metavar="BOOL", help=shown)
        elif spec.kind in (dict, list, tuple):
            target.add_argument(flag(name), default=None,
                                metavar="JSON" if spec.kind is dict else "A,B", help=shown)
        else:
            target.add_argument(flag(name), default=None, type=str,
                                metavar=spec.type_name.upper(), help=shown)


def default_note(spec: Spec, sets: Sequence[tuple[str, Settings]]) -> str:
    """``default 10``, or ``default 1 with --local, 2 with --host`` when the sets disagree."""
    texts = [(where, dataclasses.replace(spec, default=getattr(values, spec.name)).default_text)
             for where, values in sets]
    if len({text for _, text in texts}) == 1:
        return f"default {texts[0][1]}"
    return "default " + ", ".join(f"{text} {where}".rstrip() for where, text in texts)


def given_values(args, group: type[Settings]) -> dict[str, Any]:
    """The settings of ``group`` given on the command line, typed (a JSON flag that is not a
    JSON object, or a value of the wrong type, raises ``UserInputError`` naming the flag)."""
    values = {}
    for name, spec in group.specs().items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if spec.kind is dict and isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as error:
                raise UserInputError(f"{flag(name)} is not a JSON object: {error}") from error
            if not isinstance(value, dict):
                raise UserInputError(f"{flag(name)} must be a JSON object")
        try:
            values[name] = coerce(spec.kind, value, from_text=True)
        except (TypeError, ValueError):
            raise UserInputError(f"{flag(name)} must be {_kind_name(spec.kind)}, got "
                                 f"{value!r}") from None
    return values


def args_doc(groups: Iterable[type[Settings]], names: Iterable[str] | None = None,
             indent: str = "    ") -> str:
    """Google-style ``Args:`` entries (``name: help``) for docstrings; the defaults are the
    signature's (the Kubeflow UI shows them beside each parameter)."""
    specs: dict[str, Spec] = {}
    for group in groups:
        specs.update(group.specs())
    wanted = list(names) if names is not None else list(specs)
    lines = []
    for name in wanted:
        spec = specs[name]
        lines.append(f"{indent}{name}: {spec.setting.help}")
    return "\n".join(lines)


def markdown_table(group: type[Settings], names: Iterable[str] | None = None,
                   header: Sequence[str] = ("setting", "default", "meaning"),
                   defaults: Sequence[Settings] | None = None) -> str:
    """A README table of the group's settings: name, one default column per set of
    ``defaults`` (the group's own when none are given; ``header`` names each), help."""
    specs = group.specs()
    sets = list(defaults or [group()])
    rows = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name in names if names is not None else specs:
        spec = specs[name]
        shown = [dataclasses.replace(spec, default=getattr(values, name)).default_text
                 for values in sets]
        rows.append(f"| `{name}` | " + " | ".join(f"`{text}`" for text in shown)
                    + f" | {spec.setting.help} |")
    return "\n".join(rows)
