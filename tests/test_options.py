"""Kernel options: a frozen, validated `KernelOptions`; unknown names and bad values are
errors at the decorator naming the closest option; cache keys hash options by value."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import KernelOptions, OptionError, f32
from kiln.framework.buildenv import BuildEnv
from kiln.framework.cache import cache_key

HERE = str(Path(__file__).resolve())


def test_defaults_and_values() -> None:
    @kiln.kernel(fastmath=True)
    def fast(a: f32[:]):
        a[0] = a[0] * 2.0

    @kiln.func(max_depth=3)
    def helper(x: f32) -> f32:
        return x

    @kiln.kernel
    def plain(a: f32[:]):
        a[0] = 1.0

    assert fast.options == KernelOptions(fastmath=True)
    assert helper.options.max_depth == 3 and not helper.options.fastmath
    assert plain.options == KernelOptions() and plain.options.changed() == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.options.fastmath = False  # type: ignore[misc]


def test_an_unknown_option_names_the_closest_and_the_decorator_line() -> None:
    with pytest.raises(OptionError) as info:
        @kiln.kernel(fastmth=True)
        def typo(a: f32[:]):
            a[0] = 1.0
    assert "unknown option 'fastmth' (did you mean 'fastmath'?" in info.value.message
    assert info.value.loc is not None and info.value.loc.file == HERE
    assert str(info.value).startswith(f"{HERE}:{info.value.loc.line}:")
    assert isinstance(info.value, TypeError) and isinstance(info.value, kiln.KernelError)

    def spelled(a: f32[:]):
        a[0] = 1.0

    with pytest.raises(OptionError, match="did you mean 'max_depth'") as info:
        kiln.func(spelled, maxdepth=2)
    assert info.value.loc is not None and info.value.loc.file == HERE
    assert info.value.loc.line == inspect.getsourcelines(spelled)[1]
    assert "@kiln.func spelled" in info.value.message


def test_an_unknown_option_with_no_close_name_points_at_the_decorator_line() -> None:
    line = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]
    with pytest.raises(OptionError) as info:
        kiln.kernel(bogus=True)
    assert info.value.loc is not None
    assert (info.value.loc.file, info.value.loc.line) == (HERE, line)
    assert "unknown option 'bogus' (valid options: fastmath," in info.value.message
    assert "kiln.kernel(bogus=True)" in str(info.value)  # the line is quoted under the loc


@pytest.mark.parametrize(("options", "message"), [
    ({"fastmath": 1}, "option fastmath must be True or False, got 1"),
    ({"max_depth": 0}, "option max_depth must be a positive int or None, got 0"),
    ({"max_depth": True}, "option max_depth must be a positive int or None, got True"),
    ({"max_depth": "2"}, "option max_depth must be a positive int or None, got '2'"),
])
def test_values_are_validated(options, message) -> None:
    with pytest.raises(OptionError, match=message):
        kiln.kernel(**options)
    with pytest.raises(OptionError, match=message):
        KernelOptions(**options)


def test_raw_kernels_validate_their_options() -> None:
    line = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]
    with pytest.raises(OptionError, match="RawKernel axpy: unknown option 'fast'") as info:
        kiln.RawKernel("", "axpy", fast=True)
    assert info.value.loc is not None
    assert (info.value.loc.file, info.value.loc.line) == (HERE, line)


def test_cache_keys_hash_options_by_value() -> None:
    env = BuildEnv("test", ("cc",), "1")
    key = cache_key("test", "src", env, "arch", KernelOptions(fastmath=True))
    assert key == cache_key("test", "src", env, "arch", KernelOptions(fastmath=True))
    assert key != cache_key("test", "src", env, "arch", KernelOptions())
    assert hash(KernelOptions(max_depth=2)) == hash(KernelOptions(max_depth=2))


def test_fastmath_still_compiles_and_runs(interp) -> None:
    @kiln.kernel(fastmath=True)
    def scale(a: f32[:], n: kiln.i32):
        i = kiln.global_id(0)
        if i < n:
            a[i] = a[i] * 2.0

    a = np.arange(8, dtype=np.float32)
    kiln.launch(scale, 1, 8, (a, 8), device=interp)
    assert np.array_equal(a, np.arange(8, dtype=np.float32) * 2)
