"""Libraries the AOT tests share, built once per target for the whole package."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.aot.helpers import CHECKED, EXAMPLES, build, target_params


@pytest.fixture(scope="package", params=target_params())
def examples_library(request, tmp_path_factory) -> tuple[str, Path]:
    target = request.param
    out = tmp_path_factory.mktemp(f"lib-{target}") / "ex"
    build(EXAMPLES, out, "--target", target, "--block", "matmul_tiled=16x16")
    return target, out


@pytest.fixture(scope="package", params=target_params())
def checked_library(request, tmp_path_factory) -> tuple[str, Path]:
    target = request.param
    out = tmp_path_factory.mktemp(f"chk-{target}") / "chk"
    build(CHECKED, out, "--target", target, "--block", "staged=64", name="chk")
    return target, out
