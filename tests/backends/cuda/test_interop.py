"""Zero-copy interop with CuPy and PyTorch (CUDA array interface and DLPack), on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from tests.helpers import requires_backend

pytestmark = [requires_backend("cuda", "no CUDA GPU"), pytest.mark.gpu]


@kiln.kernel
def twice(x: f32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i // x.shape[1], i % x.shape[1]] = x[i // x.shape[1], i % x.shape[1]] * f32(2)


def test_cupy_arrays_in_and_out() -> None:
    cp = pytest.importorskip("cupy")
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    twice[1, 64](x, 12)  # written in place, no copy
    np.testing.assert_array_equal(cp.asnumpy(x), np.arange(12).reshape(3, 4) * 2)
    k = kiln.to_device(np.arange(6, dtype=np.float32).reshape(2, 3), "cuda")
    view = cp.asarray(k)  # __cuda_array_interface__
    assert view.data.ptr == k.buffer.ptr
    np.testing.assert_array_equal(cp.asnumpy(cp.from_dlpack(k)), k.numpy())
    with pytest.raises(kiln.LaunchError, match="C-contiguous"):
        twice[1, 64](x.T, 12)


def test_torch_tensors_in_and_out() -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    twice[1, 64](x, 12)
    assert torch.equal(x.cpu(), torch.arange(12, dtype=torch.float32).reshape(3, 4) * 2)
    k = kiln.to_device(np.arange(6, dtype=np.float32).reshape(2, 3), "cuda")
    t = torch.from_dlpack(k)  # DLPack
    assert t.data_ptr() == k.buffer.ptr and t.shape == (2, 3)
    t += 1
    np.testing.assert_array_equal(k.numpy(), np.arange(6).reshape(2, 3) + 1)
    t2 = torch.as_tensor(k, device="cuda")  # __cuda_array_interface__
    assert t2.data_ptr() == k.buffer.ptr


@kiln.kernel
def copy_scaled(src: f32[:, :], dst: f32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        dst[i // src.shape[1], i % src.shape[1]] = src[i // src.shape[1], i % src.shape[1]] * 3


def test_jax_arrays_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)  # JAX arrays are read-only: read it
    out = kiln.zeros((3, 4), f32, "cuda")
    copy_scaled[1, 64](x, out, 12)
    np.testing.assert_array_equal(out.numpy(), np.arange(12).reshape(3, 4) * 3)
