"""Extensible enums (DaCe's): registration with auto and explicit values, templates with
attributes, interning, `match`/`case`, `Undefined`, pickling, and where plugin members show."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import kiln
from kiln.backend import DeviceKind, ExecutionModel, MemorySpace
from kiln.cli import main
from kiln.ir.enums import ExtensibleEnum
from kiln.ir.passes.features import device_feature_check


class Color(ExtensibleEnum):
    """An enum of the test's own, so registrations here touch nothing of kiln's."""


@dataclasses.dataclass(frozen=True)
class Bank:
    bank: int
    width: int = 4


def test_auto_and_explicit_values() -> None:
    red = Color.register("RED")
    green = Color.register("GREEN", 301)
    blue = Color.register("BLUE")
    assert (red.value, green.value, blue.value) == (1, 301, 302)
    assert Color.RED is red and Color["GREEN"] is green and Color.from_value(302) is blue
    assert Color.register("RED") is red and Color.register("GREEN", 301) is green
    assert isinstance(red, Color) and red.name == "RED" and repr(red) == "Color.RED"
    assert Color.members()[:3] == [red, green, blue]


def test_registration_errors_name_the_conflict() -> None:
    Color.register("CYAN", 7)
    with pytest.raises(ValueError, match=r"value 7 already belongs to Color.CYAN"):
        Color.register("MAGENTA", 7)
    with pytest.raises(ValueError, match=r"Color.CYAN is registered with value 7, not 8"):
        Color.register("CYAN", 8)
    with pytest.raises(ValueError, match="cannot name"):
        Color.register("Undefined")
    with pytest.raises(ValueError, match="attribute of Color"):
        Color.register("register")
    with pytest.raises(KeyError, match="did you mean 'CYAN'"):
        Color["CYNA"]
    with pytest.raises(TypeError, match="frozen dataclass"):
        Color.register_template("PLAIN", dict)


def test_templates_give_interned_attributed_members() -> None:
    bank = Color.register_template("BANK", Bank)
    two = Color.BANK(bank=2)
    assert two is Color.BANK(2) is Color.BANK(2, width=4)
    assert two is not Color.BANK(3) and two != Color.BANK(3)
    assert (two.bank, two.width) == (2, 4) and two.attributes == Bank(2)
    assert isinstance(two, Color) and two.name == "BANK" and two.value == bank.value
    assert two == bank and bank == two and hash(two) == hash(bank)  # the template matches
    assert two != Color.register("PLAIN_MEMBER") and repr(two) == "Color.BANK(bank=2, width=4)"
    assert Color.register_template("BANK", Bank) is bank


def test_match_case_on_templates_and_members() -> None:
    Color.register_template("TILE", Bank)

    def describe(c: Color) -> str:
        match c:
            case Color.RED:
                return "red"
            case Color.TILE:
                return f"tile {c.bank}"
            case _:
                return "other"

    Color.register("RED")
    assert [describe(c) for c in (Color.RED, Color.TILE(bank=5), Color.register("GREY"))] == \
        ["red", "tile 5", "other"]


def test_undefined_is_a_falsy_member_of_its_own_enum() -> None:
    assert not Color.Undefined and Color.register("WHITE")
    assert isinstance(Color.Undefined, Color) and Color.Undefined is not MemorySpace.Undefined
    assert Color.Undefined not in Color.members() and repr(MemorySpace.Undefined) == \
        "MemorySpace.Undefined"


def test_pickling_round_trips_to_the_same_objects() -> None:
    Color.register_template("STRIPE", Bank)
    for obj in (MemorySpace.SHARED, DeviceKind.GPU, ExecutionModel.JIT, Color.register("RED"),
                Color.STRIPE, Color.STRIPE(bank=1, width=8), Color.Undefined,
                MemorySpace.Undefined):
        assert pickle.loads(pickle.dumps(obj)) is obj


def test_kilns_enums_are_extensible() -> None:
    assert {m.name for m in DeviceKind.members()} >= {"CPU", "GPU", "ACCELERATOR"}
    assert {m.name for m in MemorySpace.members()} >= {"GLOBAL", "SHARED", "LOCAL"}
    assert {m.name for m in ExecutionModel.members()} >= {"JIT", "DIRECT", "CUSTOM"}
    assert MemorySpace.register("CONSTANT_TEST") in MemorySpace.members()


def test_plugin_members_show_in_kiln_info_and_capabilities(capsys, interp) -> None:
    fpga = DeviceKind.register("FPGA_TEST")
    scratch = MemorySpace.register("SCRATCH_TEST")
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "FPGA_TEST" in out and "SCRATCH_TEST" in out
    caps = dataclasses.replace(interp.capabilities, kind=fpga,
                               memory_spaces=interp.capabilities.memory_spaces | {scratch})
    shown = caps.as_dict()
    assert shown["kind"] == "FPGA_TEST" and "scratch_test" in shown["memory spaces"]


@kiln.kernel
def uses_shared(a: kiln.f32[:]):
    s = kiln.shared(kiln.f32, 4)
    s[0] = a[0]
    a[1] = s[0]


def test_a_device_without_a_memory_space_rejects_kernels_using_it(interp) -> None:
    without = dataclasses.replace(interp.capabilities,
                                  memory_spaces=frozenset({MemorySpace.GLOBAL}))
    program = uses_shared.program((kiln.f32[:],))
    with pytest.raises(kiln.DeviceFeatureError, match="shared memory is not supported"):
        device_feature_check(without)(program)
    assert device_feature_check(interp.capabilities)(program) is program
    a = np.arange(4, dtype=np.float32)
    uses_shared[1, 1](a)
    assert a[1] == 0.0
