"""kiln.jax: kiln kernels inside jax.jit, jax.vmap and jax.grad (docs/jax.md), on the host
backends and, marked `gpu`, with JAX arrays on a GPU."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from tests.helpers import backend_entry, run_python

jax = pytest.importorskip("jax", reason="JAX is not installed (pip install 'kiln[jax]')")
import jax.numpy as jnp  # noqa: E402

import kiln.jax  # noqa: E402 - needs jax


@kiln.kernel
def scale_kernel(x, out, k, n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = x[i] * k


@kiln.kernel
def square_f32(x: f32[:], out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = x[i] * x[i]


@kiln.kernel
def square_grad_f32(x: f32[:], g: f32[:], dx: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        dx[i] = 2.0 * x[i] * g[i]


@kiln.kernel
def negate_in_place(x: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = -x[i]


def scaled(k: float, device: str, x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    kiln.jax.launch(scale_kernel, dim=x.size, args=(x, out, x.dtype.type(k), x.size),
                    device=device)
    return out


@kiln.jax.op
def square_grad(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    dx = np.empty_like(x)
    kiln.jax.launch(square_grad_f32, dim=x.size, args=(x, g, dx, x.size))
    return dx


@kiln.jax.op(backward=square_grad)
def square(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    kiln.jax.launch(square_f32, dim=x.size, args=(x, out, x.size))
    return out


@kiln.jax.op
def square_without_backward(x: np.ndarray) -> np.ndarray:
    out = np.empty_like(x)
    kiln.jax.launch(square_f32, dim=x.size, args=(x, out, x.size))
    return out


@pytest.mark.slow
def test_without_jax_the_import_says_which_extra() -> None:
    done = run_python("import sys\nsys.modules['jax'] = None  # as if not installed\n"
                      "import kiln.jax")
    assert "kiln.jax needs" in done.stderr and "pip install 'kiln[jax]'" in done.stderr


@pytest.mark.parametrize("backend", ["cpu", "interp", "opencl"])
def test_jit_runs_the_kernel(backend: str) -> None:
    entry = backend_entry(backend)
    if not entry.available:
        pytest.skip(f"the {backend} backend is not available: {entry.reason}")
    op = kiln.jax.op(functools.partial(scaled, 3.0, backend))
    x = jnp.arange(10, dtype=jnp.float32)
    assert np.array_equal(jax.jit(lambda v: op(v) + 1)(x), np.arange(10) * 3 + 1)


def test_result_shapes_come_from_the_wrapper_without_launching() -> None:
    outputs = []

    def wrapper(x: np.ndarray) -> np.ndarray:
        out = np.full(x.shape[0] * 2, 7, np.int32)
        kiln.jax.launch(scale_kernel, dim=out.size, args=(out, out, np.int32(0), out.size))
        outputs.append(out)
        return out

    shapes = kiln.jax.op(wrapper).shapes(jnp.zeros((5, 3), jnp.float32))
    assert shapes == jax.ShapeDtypeStruct((10,), np.int32)
    assert len(outputs) == 1 and (outputs[0] == 7).all()  # not launched: still the fill


def test_grad_through_the_backward_kernel() -> None:
    x = jnp.linspace(-2, 2, 9, dtype=jnp.float32)
    grad = jax.jit(jax.grad(lambda v: square(v).sum()))(x)
    assert np.allclose(grad, 2 * np.asarray(x))


def test_vmap_calls_the_wrapper_per_element() -> None:
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    assert np.array_equal(jax.vmap(square)(x), np.asarray(x) ** 2)


def test_grad_without_backward_is_refused() -> None:
    with pytest.raises(kiln.LaunchError, match="square_without_backward has no backward"):
        jax.grad(lambda v: square_without_backward(v).sum())(jnp.ones(3, jnp.float32))


def test_backward_with_the_wrong_number_of_gradients_is_refused() -> None:
    op = kiln.jax.op(square_without_backward.wrapper,
                     backward=lambda x, g: (square_grad(x, g), square_grad(x, g)))
    with pytest.raises(kiln.LaunchError, match="returned 2 gradients for 1 inputs"):
        jax.grad(lambda v: op(v).sum())(jnp.ones(3, jnp.float32))


def test_wrong_dtype_is_a_launch_error_while_tracing() -> None:
    with pytest.raises(kiln.LaunchError, match="int32"):
        jax.jit(square)(jnp.ones(3, jnp.int32))


def test_a_number_argument_is_refused() -> None:
    with pytest.raises(kiln.LaunchError, match=r"argument #2 is float.*functools.partial"):
        kiln.jax.op(lambda x, k: x)(jnp.ones(3), 2.0)


def test_writing_a_read_only_input_is_refused() -> None:
    def negate(x: np.ndarray) -> np.ndarray:
        kiln.jax.launch(negate_in_place, dim=x.size, args=(x, x.size))
        return x.copy()

    with pytest.raises(RuntimeError, match="read-only"):  # XLA's error, carrying kiln's
        jax.block_until_ready(jax.jit(kiln.jax.op(negate))(jnp.ones(4, jnp.float32)))


@pytest.mark.gpu
def test_jit_with_arrays_on_a_gpu() -> None:
    if jax.default_backend() != "gpu":
        pytest.skip("JAX sees no GPU")
    for device in ("cpu", "cuda"):
        if not backend_entry(device).available:
            continue
        op = kiln.jax.op(functools.partial(scaled, 2.0, device))
        x = jnp.arange(1000, dtype=jnp.float32)
        assert np.array_equal(jax.jit(op)(x), np.arange(1000) * 2)
    assert np.allclose(jax.jit(jax.grad(lambda v: square(v).sum()))(jnp.ones(4)), 2.0)
