"""Enums that backends may extend at run time (DaCe's idea): `MemorySpace.register("CONSTANT")`."""

from __future__ import annotations

from typing import ClassVar


class ExtensibleEnum:
    """A closed set of named members to which plugins can add new ones.

    Members are singletons compared by identity; `Cls.NAME` and `Cls["NAME"]` find them.
    """

    _members: ClassVar[dict[str, ExtensibleEnum]]

    def __init_subclass__(cls) -> None:
        cls._members = {}

    def __init__(self, name: str) -> None:
        self.name = name
        self.value = name.lower()

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __reduce__(self) -> tuple:
        return (getattr, (type(self), self.name))  # the registered member: still a singleton

    @classmethod
    def register(cls, name: str) -> ExtensibleEnum:
        """Add a member (or return the existing one of that name)."""
        if name not in cls._members:
            member = cls(name)
            cls._members[name] = member
            setattr(cls, name, member)
        return cls._members[name]

    @classmethod
    def __class_getitem__(cls, name: str) -> ExtensibleEnum:
        return cls._members[name]

    @classmethod
    def members(cls) -> list[ExtensibleEnum]:
        return list(cls._members.values())


class MemorySpace(ExtensibleEnum):
    GLOBAL: ClassVar[MemorySpace]
    SHARED: ClassVar[MemorySpace]
    LOCAL: ClassVar[MemorySpace]


for _name in ("GLOBAL", "SHARED", "LOCAL"):
    MemorySpace.register(_name)
