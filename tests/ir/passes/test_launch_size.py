"""Launches by size (`kiln.launch(k, dim=n)`, `k[kiln.dim(n)]`) run exactly `n` threads on
every backend, as Warp's `wp.launch` does: kernels need no `if i < n:` guard."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import f32, i32

BACKENDS = [e.name for e in kiln.backends() if e.available]


@pytest.fixture(params=BACKENDS)
def dev(request: pytest.FixtureRequest) -> kiln.Device:
    return kiln.device(request.param)


@kiln.kernel
def count_1d(out: i32[:], hits: i32[:]):
    i = kiln.global_id(0)
    out[i] = i * 2  # no guard: exactly len(out) threads run
    kiln.atomic_add(hits, 0, 1)


@kiln.kernel
def count_2d(out: i32[:, :], hits: i32[:]):
    y, x = kiln.global_id(0), kiln.global_id(1)
    out[y, x] = y * 1000 + x
    kiln.atomic_add(hits, 0, 1)


@kiln.kernel
def count_3d(out: i32[:, :, :], hits: i32[:]):
    z, y, x = kiln.global_id(0), kiln.global_id(1), kiln.global_id(2)
    out[z, y, x] = z * 10000 + y * 100 + x
    kiln.atomic_add(hits, 0, 1)


@kiln.kernel(debug=True)
def fill_checked(out: f32[:], value: f32):
    out[kiln.global_id(0)] = value


@kiln.kernel
def guarded_scale(x: f32[:], s: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] * s


@kiln.kernel
def tree_sum(x: f32[:], out: f32[:]):
    s = kiln.shared(f32, 64)
    t = kiln.thread_idx.x
    s[t] = x[kiln.global_id(0)]
    kiln.barrier()
    if t == 0:
        kiln.atomic_add(out, 0, s[0])


@kiln.kernel
def uses_barrier(x: f32[:]):
    kiln.barrier()
    x[kiln.global_id(0)] = 1.0


@kiln.kernel
def uses_warp(x: f32[:]):
    x[kiln.global_id(0)] = kiln.shuffle_down(x[kiln.global_id(0)], 1)


EXPECTED = {
    1: lambda s: np.arange(s[0]) * 2,
    2: lambda s: np.add.outer(np.arange(s[0]) * 1000, np.arange(s[1])),
    3: lambda s: (np.arange(s[0])[:, None, None] * 10000 + np.arange(s[1])[:, None] * 100
                  + np.arange(s[2])),
}
KERNELS = {1: count_1d, 2: count_2d, 3: count_3d}


@pytest.mark.parametrize("shape", [(1,), (37,), (256,), (257,), (1000,), (19, 45), (1, 300),
                                   (17, 16), (5, 7, 9), (3, 1, 17), (8, 8, 4)])
def test_dim_runs_exactly_dim_threads(dev: kiln.Device, shape: tuple[int, ...]) -> None:
    """Sizes that are and are not multiples of the block, in 1, 2 and 3 dimensions: every
    element written once by an unguarded kernel, into arrays of exactly that shape."""
    out = kiln.to_device(np.full(shape, -1, np.int32), dev)
    hits = kiln.to_device(np.zeros(1, np.int32), dev)
    dim = shape[0] if len(shape) == 1 else shape
    kiln.launch(KERNELS[len(shape)], dim=dim, args=(out, hits))
    dev.synchronize()
    assert hits.numpy()[0] == math.prod(shape)
    np.testing.assert_array_equal(out.numpy(), EXPECTED[len(shape)](shape))
    hits.copy_from_host(np.zeros(1, np.int32))
    KERNELS[len(shape)][kiln.dim(*shape)](out, hits)  # the indexed form: the same
    dev.synchronize()
    assert hits.numpy()[0] == math.prod(shape)


def test_dim_zero_runs_no_thread(dev: kiln.Device) -> None:
    hits = np.zeros(1, np.int32)
    kiln.launch(count_1d, dim=0, args=(np.zeros(0, np.int32), hits), device=dev)
    kiln.launch(count_2d, dim=(4, 0), args=(np.zeros((4, 0), np.int32), hits), device=dev)
    dev.synchronize()
    assert hits[0] == 0


def test_unguarded_kernel_with_debug_checks_reports_nothing(dev: kiln.Device) -> None:
    """Bounds checks on: the threads of the last block past n do not exist to be caught."""
    for n in (1, 100, 300):
        out = np.zeros(n, np.float32)
        kiln.launch(fill_checked, dim=n, args=(out, 2.5), device=dev)
        dev.synchronize()  # an out-of-bounds write would raise IndexOutOfBoundsError here
        np.testing.assert_array_equal(out, np.full(n, 2.5, np.float32))


def test_guarded_kernels_and_repeated_launches_keep_working(dev: kiln.Device) -> None:
    x = kiln.to_device(np.ones(300, np.float32), dev)
    for _ in range(3):  # the repeats go through the fast path's plan
        kiln.launch(guarded_scale, dim=300, args=(x, 2.0, 300))
    guarded_scale[kiln.dim(200)](x, 0.5, 300)
    dev.synchronize()
    expected = np.full(300, 8.0, np.float32)
    expected[:200] = 4.0
    np.testing.assert_array_equal(x.numpy(), expected)
    assert len(guarded_scale.sized(1).launch_plans) >= 1


@pytest.mark.parametrize(("kernel", "reason"), [
    (tree_sum, r"uses shared memory \('s'"),
    (uses_barrier, r"calls kiln.barrier\(\), which every thread of the block must reach"),
    (uses_warp, r"calls kiln.shuffle_down\(\), which needs every lane of its warp"),
])
def test_kernels_sized_by_their_block_need_the_explicit_form(
        interp: kiln.Device, kernel: kiln.Kernel, reason: str) -> None:
    """A clear error, not a deadlock: threads returning early would skip the barrier."""
    x = np.ones(64, np.float32)
    args = (x, np.zeros(1, np.float32)) if kernel is tree_sum else (x,)
    with pytest.raises(kiln.LaunchError, match=reason + r".*explicit .*\[grid, block\]"):
        kiln.launch(kernel, dim=64, args=args, device=interp)
    with pytest.raises(kiln.LaunchError, match=reason):
        kernel[kiln.dim(64)](*args)


def test_explicit_launches_run_the_kernel_as_written() -> None:
    """Only `dim=` launches get the size parameters and the early return."""
    assert "kiln_size" not in count_1d.source("opencl")
    sized = count_1d.sized(1).source("opencl", count_1d.signature[0][1],
                                     count_1d.signature[1][1], i32)
    assert "int kiln_size_x" in sized and "return;" in sized and "kiln_size_y" not in sized
    assert count_1d.sized(1).name == "count_1d"
    in_3d = count_3d.sized(3).source("opencl", count_3d.signature[0][1],
                                     count_3d.signature[1][1], i32, i32, i32)
    assert all(f"kiln_size_{axis}" in in_3d for axis in "xyz")


def test_a_wrong_argument_count_names_the_users_parameters(interp: kiln.Device) -> None:
    with pytest.raises(kiln.LaunchError, match=r"count_1d takes 2 argument\(s\) \(out, hits\), "
                                               r"got 1"):
        kiln.launch(count_1d, dim=4, args=(np.zeros(4, np.int32),), device=interp)


@pytest.mark.parametrize("bad", [True, 4.0, (4.0,), (True, 2), [4]])
def test_sizes_equal_to_valid_ones_are_still_checked(interp: kiln.Device, bad: object) -> None:
    """A size launched before (4, (1, 2)) is remembered; 4.0 or True, equal to it as dict
    keys, are still errors, and a list is read each time."""
    out, hits = np.zeros(4, np.int32), np.zeros(1, np.int32)
    kiln.launch(count_1d, dim=4, args=(out, hits), device=interp)
    kiln.launch(count_1d, dim=1, args=(out, hits), device=interp)
    if isinstance(bad, list):
        kiln.launch(count_1d, dim=bad, args=(out, hits), device=interp)
        return
    with pytest.raises(kiln.LaunchError, match="1 to 3 ints"):
        kiln.launch(count_1d, dim=bad, args=(out, hits), device=interp)
