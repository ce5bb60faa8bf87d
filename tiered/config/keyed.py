"""The machinery of a frozen model whose fields are read from upstream keys: each field declares
its key, meaning, default and the parser its value goes through (:mod:`tiered.config.values`).

Plain Python on purpose: every command builds the configuration at start, and a general
validation library costs more to import and to build the model than the whole offload of a small
store; the parsers are ours either way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Mapping
from typing import Any
from typing import ClassVar
from typing import NamedTuple
from typing import Self

from tiered.errors import ConfigError


class Parse:
    """The parser a field's values go through (the ``Annotated`` mark of a value type)."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func


class Secret:
    """A secret value: shown as ``**********`` (empty when unset), read with
    :meth:`get_secret_value`."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __repr__(self) -> str:
        return f"Secret({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def _secret(value: object) -> Secret:
    if isinstance(value, Secret):
        return value
    if isinstance(value, str):
        return Secret(value)
    raise ValueError("is not text")


def _plain_text(value: object) -> str:
    if isinstance(value, str):
        return value
    raise ValueError("is not text")


_PLAIN: dict[Any, Callable[[Any], Any]] = {str: _plain_text, Secret: _secret}


class Field:
    """One field: its Python name, upstream key (``validation_alias``), meaning, default and
    parser."""

    __slots__ = (
        "annotation",
        "default",
        "default_factory",
        "description",
        "name",
        "parse",
        "validation_alias",
    )

    def __init__(
        self, key: str, doc: str, default: Any, default_factory: Callable[[], Any] | None
    ) -> None:
        self.name = ""
        self.validation_alias = key
        self.description = doc
        self.default = default
        self.default_factory = default_factory
        self.annotation: Any = None
        self.parse: Callable[[Any], Any] = _plain_text

    def value_of_default(self) -> Any:
        return self.default if self.default_factory is None else self.default_factory()


class Problem(NamedTuple):
    """One thing wrong with the values given: the key (None for the model as a whole), the value
    given and what is wrong with it."""

    key: str | None
    value: object
    message: str


class FieldValueError(ConfigError):
    """Values a model refuses; :attr:`problems` lists each."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(_describe(p) for p in problems))


def _describe(problem: Problem) -> str:
    if problem.key is None:
        return problem.message
    return f"{problem.key}={problem.value!r} {problem.message}"


class KeyedModel:
    """A frozen model of :class:`Field` attributes.

    Subclasses declare ``name: Type = key(...)`` fields, with ``Type`` either ``Annotated[T,
    Parse(func)]`` or a plain ``str`` (a text value, as given), and may define
    ``_check_together`` (raise ``ValueError`` naming what is wrong with the fields together).
    """

    model_fields: ClassVar[dict[str, Field]]
    _by_key: ClassVar[dict[str, Field]]
    __slots__ = ("__dict__", "model_fields_set")
    model_fields_set: set[str]
    """The Python names of the fields given (not defaulted)."""

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        fields: dict[str, Field] = {}
        for name, annotation in inspect.get_annotations(cls).items():
            spec = cls.__dict__.get(name)
            if not isinstance(spec, Field):
                continue
            spec.name = name
            marks = getattr(annotation, "__metadata__", ())
            parsers = [m.func for m in marks if isinstance(m, Parse)]
            spec.annotation = annotation.__origin__ if marks else annotation
            spec.parse = parsers[0] if parsers else _PLAIN[annotation]
            fields[name] = spec
            delattr(cls, name)  # the instance's value, not the field, answers cls().name
        cls.model_fields = fields
        cls._by_key = {f.validation_alias: f for f in fields.values()}

    def __init__(self, **values: Any) -> None:
        self._fill(values.items())

    @classmethod
    def model_validate(cls, values: Mapping[str, Any]) -> Self:
        """A model of ``values`` by upstream key (or Python name).

        Raises:
            FieldValueError: an unknown key, a bad value, or fields wrong together.
        """
        model = cls.__new__(cls)
        model._fill(values.items())
        return model

    def _fill(self, items: Iterable[tuple[str, Any]]) -> None:
        fields, by_key = type(self).model_fields, type(self)._by_key
        problems: list[Problem] = []
        out: dict[str, Any] = {}
        for given, value in items:
            spec = by_key.get(given) or fields.get(given)
            if spec is None:
                problems.append(Problem(given, value, "is not a key of this model"))
                continue
            try:
                out[spec.name] = spec.parse(value)
            except ValueError as e:
                problems.append(Problem(spec.validation_alias, value, str(e)))
        if problems:
            raise FieldValueError(problems)
        given_names = set(out)
        for name, spec in fields.items():
            if name not in out:
                out[name] = spec.value_of_default()
        self.__dict__.update(out)
        object.__setattr__(self, "model_fields_set", given_names)
        try:
            self._check_together()
        except ValueError as e:
            raise FieldValueError([Problem(None, None, str(e))]) from None

    def _check_together(self) -> None:
        """Raise ``ValueError`` when fields are wrong together; nothing by default."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A copy with ``update`` (Python names) applied, not validated again: for values the
        caller already holds as the field's type."""
        copy = type(self).__new__(type(self))
        copy.__dict__.update(self.__dict__)
        fields_set = set(self.model_fields_set)
        for name, value in (update or {}).items():
            if name not in type(self).model_fields:
                raise AttributeError(f"{type(self).__name__} has no field {name!r}")
            copy.__dict__[name] = value
            fields_set.add(name)
        object.__setattr__(copy, "model_fields_set", fields_set)
        return copy

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be deleted")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash(tuple(self.__dict__.values()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.__dict__.items())
        return f"{type(self).__name__}({shown})"

    def __getstate__(self) -> Any:
        return (self.__dict__, self.model_fields_set)

    def __setstate__(self, state: Any) -> None:
        values, fields_set = state
        self.__dict__.update(values)
        object.__setattr__(self, "model_fields_set", fields_set)


def key(
    key: str,
    doc: str,
    default: Any = None,
    *,
    default_factory: Callable[[], Any] | None = None,
) -> Any:
    """A field read from upstream key ``key``; ``doc`` gives meaning and unit."""
    return Field(key, doc, default, default_factory)
