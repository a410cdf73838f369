"""Enums that plugins extend at run time (DaCe's extensible enums).

    MemorySpace.register("TEXTURE")              # auto value
    DeviceKind.register("FPGA", 301)             # explicit value
    MemorySpace.register_template("BANK", Bank)  # Bank: a frozen dataclass (bank: int)
    MemorySpace.BANK(bank=2) is MemorySpace.BANK(bank=2)   # interned
    match space:
        case MemorySpace.BANK: ...               # the template equals each of its members

Members are interned singletons (compare them with `is` or `==`); `Cls.NAME`, `Cls["NAME"]`
and `Cls.from_value(v)` find them; `Cls.Undefined` is a falsy member meaning "not set";
members pickle to the registered member of the unpickling process.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, ClassVar, TypeVar

E = TypeVar("E", bound="ExtensibleEnum")


class ExtensibleEnum:
    """A set of named members to which plugins add new ones (see the module docstring)."""

    _members: ClassVar[dict[str, Any]]
    _by_value: ClassVar[dict[Any, Any]]
    Undefined: ClassVar[Any]

    def __init_subclass__(cls, internal: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not internal:  # a new enum (not the class of a template's members)
            cls._members, cls._by_value = {}, {}
            cls.Undefined = undefined = object.__new__(cls)
            undefined.name, undefined.value = "Undefined", None

    def __init__(self, name: str, value: Any) -> None:
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_member, (_owner(self), self.name))  # the registered member: a singleton

    def __bool__(self) -> bool:
        return self is not _owner(self).Undefined

    @classmethod
    def register(cls: type[E], name: str, value: Any = None) -> E:
        """Add a member named `name` with `value` (default: the next integer), or return the
        member already registered under `name` (with the same value, when one is given)."""
        _check_name(cls, name)
        found = cls._members.get(name)
        if found is not None:
            if value is not None and found.value != value:
                raise ValueError(f"{cls.__name__}.{name} is registered with value "
                                 f"{found.value!r}, not {value!r}")
            return found
        if value is None:
            value = 1 + max((v for v in cls._by_value if isinstance(v, int)), default=0)
        elif value in cls._by_value:
            raise ValueError(f"value {value!r} already belongs to {cls._by_value[value]!r}")
        member = cls(name, value)
        cls._add(member)
        return member

    @classmethod
    def register_template(cls, name: str, attributes: type, value: Any = None
                          ) -> EnumTemplate:
        """Add a template: calling it with `attributes`' fields (a frozen dataclass) gives a
        member carrying them, interned per distinct arguments (`Cls.NAME(bank=2)`)."""
        if not (dataclasses.is_dataclass(attributes)
                and attributes.__dataclass_params__.frozen):  # type: ignore[attr-defined]
            raise TypeError(f"the attributes of {cls.__name__}.{name} must be a frozen "
                            f"dataclass, got {attributes!r}")
        _check_name(cls, name)
        found = cls._members.get(name)
        if found is not None:
            if not isinstance(found, EnumTemplate) or found.attributes is not attributes:
                raise ValueError(f"{cls.__name__}.{name} is already registered as {found!r}")
            return found
        if value is None:
            value = 1 + max((v for v in cls._by_value if isinstance(v, int)), default=0)
        template = EnumTemplate(cls, name, value, attributes)
        cls._add(template)  # type: ignore[arg-type]
        return template

    @classmethod
    def _add(cls, member: ExtensibleEnum) -> None:
        cls._members[member.name] = member
        cls._by_value[member.value] = member
        setattr(cls, member.name, member)

    def __class_getitem__(cls: type[E], name: str) -> E:
        found = cls._members.get(name)
        if found is None:
            raise KeyError(_unknown(cls, name))
        return found

    @classmethod
    def from_value(cls: type[E], value: Any) -> E:
        found = cls._by_value.get(value)
        if found is None:
            raise KeyError(f"no {cls.__name__} member has value {value!r}")
        return found

    @classmethod
    def members(cls: type[E]) -> list[E]:
        """Every registered member and template, in registration order."""
        return list(cls._members.values())


class EnumTemplate:
    """A registered template: `template(**fields)` is an interned member with those
    attributes; the template compares equal to each of them (for `match`/`case`)."""

    def __init__(self, owner: type[ExtensibleEnum], name: str, value: Any,
                 attributes: type) -> None:
        self.owner, self.name, self.value, self.attributes = owner, name, value, attributes
        self._instances: dict[Any, TemplateMember] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> TemplateMember:
        attrs = self.attributes(*args, **kwargs)
        found = self._instances.get(attrs)
        if found is None:
            found = self._instances[attrs] = _template_member(self, attrs)
        return found

    def __eq__(self, other: object) -> bool:
        return other is self or (isinstance(other, ExtensibleEnum)
                                 and getattr(other, "template", None) is self)

    def __hash__(self) -> int:
        return hash((self.owner.__name__, self.name))

    def __repr__(self) -> str:
        return f"{self.owner.__name__}.{self.name}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_member, (self.owner, self.name))


class TemplateMember(ExtensibleEnum, internal=True):
    """Base of the members a template makes (one subclass per enum, made on first use)."""

    template: EnumTemplate
    attributes: Any

    def __getattr__(self, name: str) -> Any:
        if name in ("template", "attributes"):
            raise AttributeError(name)
        return getattr(self.attributes, name)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.template

    def __hash__(self) -> int:
        return hash(self.template)

    def __repr__(self) -> str:
        fields = str(self.attributes).removeprefix(type(self.attributes).__name__)
        return f"{self.template!r}{fields}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_instantiate, (self.template, self.attributes))


_TEMPLATE_CLASSES: dict[type[ExtensibleEnum], type[TemplateMember]] = {}


def _template_member(template: EnumTemplate, attrs: Any) -> TemplateMember:
    """A member of `template.owner` (so isinstance holds) that carries `attrs`."""
    owner = template.owner
    cls = _TEMPLATE_CLASSES.get(owner)
    if cls is None:
        cls = _TEMPLATE_CLASSES[owner] = type(
            owner.__name__, (TemplateMember, owner), {"_owner": owner}, internal=True)
    member = object.__new__(cls)
    member.name, member.value, member.template, member.attributes = (
        template.name, template.value, template, attrs)
    return member


def _owner(member: ExtensibleEnum) -> type[ExtensibleEnum]:
    cls = type(member)
    return getattr(cls, "_owner", cls)


def _member(owner: type[ExtensibleEnum], name: str) -> Any:
    """Unpickling: the member, template or Undefined registered as `owner.name`."""
    return owner.Undefined if name == "Undefined" else owner.__class_getitem__(name)


def _instantiate(template: EnumTemplate, attributes: Any) -> TemplateMember:
    return template(**{f.name: getattr(attributes, f.name)
                       for f in dataclasses.fields(attributes)})


def _check_name(cls: type[ExtensibleEnum], name: str) -> None:
    if not name.isidentifier() or name == "Undefined" or name.startswith("_"):
        raise ValueError(f"{name!r} cannot name a {cls.__name__} member")
    if name not in cls._members and hasattr(cls, name):
        raise ValueError(f"{name!r} is an attribute of {cls.__name__}, not a member name")


def _unknown(cls: type[ExtensibleEnum], name: str) -> str:
    close = difflib.get_close_matches(name, list(cls._members), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"no {cls.__name__} member named {name!r}{hint}"


class MemorySpace(ExtensibleEnum):
    GLOBAL: ClassVar[MemorySpace]
    SHARED: ClassVar[MemorySpace]
    LOCAL: ClassVar[MemorySpace]
    CONSTANT: ClassVar[MemorySpace]  # read-only tables at program scope (Program.tables)


for _name in ("GLOBAL", "SHARED", "LOCAL", "CONSTANT"):
    MemorySpace.register(_name)
