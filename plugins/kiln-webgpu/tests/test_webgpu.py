"""The webgpu plugin on a real adapter (Mesa's lavapipe in CI), against NumPy."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln import f32, i32

PACKAGE = Path(__file__).resolve().parents[1] / "kiln_webgpu"
PUBLIC = {
    "kiln", "kiln.backend", "kiln.codegen", "kiln.ir.intrinsics", "kiln.framework.cache",
    "kiln.framework.buildenv", "kiln.ir", "kiln.ir.nodes", "kiln.ir.types", "kiln.ir.visit",
    "kiln.ir.passes",
}
"""The modules docs/backends.md documents for backends ("What a backend may import")."""


def webgpu_device() -> kiln.Device:
    entry = {e.name: e for e in kiln.backends()}.get("webgpu")
    if entry is None or not entry.available:
        pytest.skip("no WebGPU adapter here: "
                    f"{entry.reason if entry else 'the webgpu backend is not registered'}")
    return kiln.device("webgpu")


def test_imports_only_public_kiln() -> None:
    """The plugin reaches kiln only through documented modules and public names."""
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.split(".")[0] == "kiln":
                assert node.module in PUBLIC, f"{path.name} imports {node.module}"
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports private {private}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "kiln":
                        assert alias.name in PUBLIC, f"{path.name} imports {alias.name}"


def test_registered_with_priority_by_device_kind() -> None:
    device = webgpu_device()
    backend = device.backend
    caps = device.capabilities
    cpu_priority = {e.name: e.priority for e in kiln.backends()}["cpu"]
    gpu = backend.device_priority(
        type(caps)(**{**caps.__dict__, "kind": kiln.backend.DeviceKind.GPU}), 0)
    assert cpu_priority < gpu < 100  # above cpu, below cuda
    if caps.kind is kiln.backend.DeviceKind.CPU:  # lavapipe: never the default over cpu
        assert device.priority < cpu_priority


@kiln.kernel
def vector_add(a: f32[:], b: f32[:], c: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        c[i] = a[i] + b[i]


@kiln.kernel
def block_sum(x: f32[:], out: f32[:], n: i32):
    s = kiln.shared(f32, 256)
    t = kiln.thread_idx.x
    acc = f32(0)
    i = kiln.global_id(0)
    while i < n:
        acc += x[i]
        i += kiln.global_size(0)
    s[t] = acc
    kiln.barrier()
    k = kiln.block_dim.x // 2
    while k > 0:
        if t < k:
            s[t] += s[t + k]
        kiln.barrier()
        k //= 2
    if t == 0:
        kiln.atomic_add(out, 0, s[0])


def test_vector_add_and_reduce() -> None:
    device = webgpu_device()
    rng = np.random.default_rng(1)
    n = 100_003
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    c = kiln.zeros(n, np.float32, device=device)
    vector_add[(n + 255) // 256, 256](kiln.to_device(a, device), kiln.to_device(b, device), c, n)
    np.testing.assert_array_equal(c.numpy(), a + b)
    out = kiln.zeros(1, np.float32, device=device)
    block_sum[64, 256](kiln.to_device(a, device), out, n)
    np.testing.assert_allclose(out.numpy()[0], a.sum(dtype=np.float64), rtol=1e-5)


@kiln.kernel
def block_ids(out: i32[:]):
    if kiln.thread_idx.x == 0:
        out[kiln.block_idx.x] = kiln.block_idx.x + kiln.grid_dim.x * 0


def test_grid_past_the_dispatch_limit_is_folded() -> None:
    """70,000 blocks in x: more than WebGPU dispatches in one dimension (65,535)."""
    device = webgpu_device()
    blocks = 70_000
    out = kiln.zeros(blocks, np.int32, device=device)
    block_ids[blocks, 32](out)
    np.testing.assert_array_equal(out.numpy(), np.arange(blocks, dtype=np.int32))


def test_i64_is_a_device_feature_error() -> None:
    device = webgpu_device()

    @kiln.kernel
    def wide(a: i32[:]):
        a[0] = i32(kiln.i64(a[0]) * 3)

    with pytest.raises(kiln.DeviceFeatureError, match="i64 values is not supported by device"):
        wide[1, 1](kiln.zeros(1, np.int32, device=device))


def test_too_many_arrays_is_a_launch_error() -> None:
    device = webgpu_device()
    most = device.handle.limit("max-storage-buffers-per-shader-stage")
    if most > 256:  # NVIDIA's Vulkan driver: 524288
        pytest.skip(f"this adapter takes {most} storage buffers per kernel: a kernel with "
                    "more parameters is more than Python compiles")
    names = [f"a{k}" for k in range(most + 1)]
    source = (f"def many({', '.join(f'{n}: f32[:]' for n in names)}):\n"
              f"    {names[0]}[0] = " + " + ".join(f"{n}[0]" for n in names[1:]) + "\n")
    scope: dict[str, object] = {"f32": f32}
    path = Path(__file__).with_name("_many_arrays.py")
    path.write_text(source)
    try:
        exec(compile(source, str(path), "exec"), scope)
        many = kiln.kernel(scope["many"])
        arrays = [kiln.zeros(1, np.float32, device=device) for _ in names]
        with pytest.raises(kiln.LaunchError, match="storage buffers per kernel"):
            many[1, 1](*arrays)
    finally:
        path.unlink()


@kiln.kernel
def scale(x: f32[:], k: f32, flip: kiln.bool_, offset: kiln.u32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = (-x[i] if flip else x[i]) * k + f32(offset)


def test_scalar_parameters_travel_in_the_uniform_block() -> None:
    device = webgpu_device()
    x = np.arange(10, dtype=np.float32)
    d = kiln.to_device(x, device)
    scale[1, 32](d, np.float32(2.5), True, np.uint32(7), 10)
    np.testing.assert_array_equal(d.numpy(), -x * np.float32(2.5) + 7)


@kiln.kernel
def bad_native(a: f32[:]):
    v = a[0]
    kiln.native(wgsl="{v} = undefined_function({v});")  # error
    a[0] = v


def test_wgsl_errors_name_the_users_line() -> None:
    device = webgpu_device()
    with pytest.raises(kiln.BackendCompileError) as info:
        bad_native[1, 1](kiln.zeros(1, np.float32, device=device))
    source = Path(__file__).read_text().splitlines()
    assert info.value.loc is not None and info.value.loc.file == __file__
    assert source[info.value.loc.line - 1].rstrip().endswith("# error")
    assert "undefined_function" in info.value.message


def test_events_time_launches() -> None:
    device = webgpu_device()
    n = 1 << 20
    a = kiln.to_device(np.ones(n, np.float32), device)
    c = kiln.zeros(n, np.float32, device=device)
    start = kiln.Event(device).record()
    for _ in range(3):
        vector_add[n // 256, 256](a, a, c, n)
    end = kiln.Event(device).record()
    end.synchronize()
    assert 0 < start.elapsed_time(end) < 60_000
    np.testing.assert_array_equal(c.numpy(), np.full(n, 2, np.float32))


@kiln.func
def fill(a, v: f32):
    for i in range(a.shape[0]):
        a[i] = v + f32(i)


@kiln.func
def ends(a: f32[:]) -> f32:
    return a[0] + a[3]


@kiln.func
def refill_then_ends(a):
    fill(a, f32(1))  # a pointer passed on
    return ends(a)


@kiln.kernel
def local_to_function(b: f32[:]):
    loc = kiln.local(f32, 4)
    fill(loc, f32(kiln.global_id(0)))
    b[3 * kiln.global_id(0)] = ends(loc)
    b[3 * kiln.global_id(0) + 1] = refill_then_ends(loc)
    b[3 * kiln.global_id(0) + 2] = loc[2]


def test_local_arrays_pass_to_functions_by_pointer() -> None:
    """WGSL functions take `ptr<function, array<f32, 4>>`: writes reach the caller's array,
    and a function passes the pointer on."""
    out = kiln.zeros(3 * 64, np.float32, device=webgpu_device())
    local_to_function[2, 32](out)
    t = np.arange(64, dtype=np.float32)
    want = np.stack([2 * t + 3, np.full(64, 5, np.float32), np.full(64, 3, np.float32)], 1)
    np.testing.assert_array_equal(out.numpy(), want.reshape(-1))
    wgsl = local_to_function.source("webgpu", f32[:])
    assert "fn fill(a: ptr<function, array<f32, 4>>" in wgsl and "fill(&loc, " in wgsl


@kiln.kernel
def rounded_as_written(a: f32[:], b: f32[:], c: f32[:], h: kiln.f16[:], k: i32[:],
                       out: f32[:, :], half: kiln.f16[:, :], ints: i32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[0, i] = a[i] * b[i] + c[i]
        out[1, i] = a[i] / b[i]
        out[2, i] = kiln.sqrt(a[i])
        out[3, i] = a[i] // b[i]
        out[4, i] = kiln.log(a[i])
        half[0, i] = h[i] * h[i] + h[i]
        half[1, i] = h[i] / (h[i] + kiln.f16(1.5))
        ints[0, i] = k[i] % 3
        ints[1, i] = k[i] % -3
        ints[2, i] = k[i] // -3


def test_arithmetic_is_rounded_as_written() -> None:
    """`* / sqrt //` give NumPy's bits (no product fused into a sum, divisions correctly
    rounded: WGSL allows both, NVIDIA's Vulkan driver does both), `log` is within 2 ulp
    near 1 (WGSL allows an absolute error there), signed `%` takes the divisor's sign."""
    device = webgpu_device()
    g = np.random.default_rng(5)
    n = 4096
    a = g.uniform(0.5, 2, n).astype(np.float32)
    b = (g.uniform(0.5, 4, n) * g.choice([-1, 1], n)).astype(np.float32)
    c = g.uniform(-4, 4, n).astype(np.float32)
    a[:8] = b[:8] = np.abs(b[:8])  # a / b == 1 exactly, so a // b == 1
    h = g.uniform(0.1, 8, n).astype(np.float16)
    k = g.integers(-1000, 1000, n).astype(np.int32)
    out, half = np.zeros((5, n), np.float32), np.zeros((2, n), np.float16)
    ints = np.zeros((3, n), np.int32)
    kiln.launch(rounded_as_written, n // 64, 64, (a, b, c, h, k, out, half, ints, n),
                device=device)
    np.testing.assert_array_equal(out[0], a * b + c)
    np.testing.assert_array_equal(out[1], a / b)
    np.testing.assert_array_equal(out[2], np.sqrt(a))
    np.testing.assert_array_equal(out[3], np.floor_divide(a, b))
    np.testing.assert_allclose(out[4], np.log(a), rtol=3e-7, atol=2e-7)
    np.testing.assert_array_equal(half[0], h * h + h)
    np.testing.assert_array_equal(half[1], h / (h + np.float16(1.5)))
    np.testing.assert_array_equal(ints, [k % 3, k % -3, k // -3])


def test_products_are_kept_from_fusing_unless_the_kernel_allows_it() -> None:
    """By default each f32 product is rounded before it is used (`kiln_rounded`); with
    `contract=True` the driver may fuse, as on every backend."""
    webgpu_device()
    types = (f32[:], f32[:], f32[:], kiln.f16[:], i32[:], f32[:, :], kiln.f16[:, :],
             i32[:, :], i32)
    source = rounded_as_written.source("webgpu", *types)
    assert "kiln_rounded(" in source and "kiln_div(" in source
    assert " % " not in source.split("fn rounded_as_written")[0].split("kiln_floormod_i32")[-1]


@kiln.kernel
def axpy(y: f32[:], x: f32[:], k: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = y[i] * k + x[i]


def test_launches_in_flight_keep_their_own_values() -> None:
    """A kernel reuses its last bind group and rewrites its uniform block: launches queued
    without a synchronisation, with other scalars or other arrays, each see their own."""
    device = webgpu_device()
    n = 1000
    ys = [kiln.to_device(np.full(n, 1.0, np.float32), device) for _ in range(2)]
    x = kiln.to_device(np.arange(n, dtype=np.float32), device)
    expected = [np.full(n, 1.0, np.float32) for _ in range(2)]
    for step, (which, k) in enumerate([(0, 2.0), (0, 3.0), (1, 0.5), (0, 0.25), (1, 4.0),
                                       (1, 4.0), (0, -1.0)]):
        count = n - step  # the size changes too
        axpy[(count + 63) // 64, 64](ys[which], x, k, count)
        head = expected[which][:count]
        expected[which][:count] = head * np.float32(k) + np.arange(count, dtype=np.float32)
    for y, want in zip(ys, expected):
        np.testing.assert_array_equal(y.numpy(), want)


def test_features_decide_types() -> None:
    """An adapter's optional features decide the types kernels may use; without them the
    capability set has neither f64 nor f16, and an f64 kernel is refused by name."""
    from kiln_webgpu.runtime import typed_capabilities

    bare = typed_capabilities(frozenset())
    assert not bare["fp64"] and not bare["fp16"]
    assert "f64" not in bare["scalar_types"] and "f16" not in bare["storage_types"]
    assert "f16" in typed_capabilities(frozenset({"shader-f16"}))["scalar_types"]
    dev = webgpu_device()
    if dev.capabilities.fp64:
        pytest.skip("this adapter computes with f64")

    @kiln.kernel
    def twice(x: kiln.f64[:]) -> None:
        i = kiln.global_id(0)
        if i < x.shape[0]:
            x[i] = x[i] * 2.0

    with pytest.raises(kiln.DeviceFeatureError, match="f64"):
        twice[1, 4](kiln.to_device(np.ones(4), dev))
