"""`kiln.capture` on cuda: runs of recorded launches become CUDA graphs built node by node
(kiln/builtin_backends/cuda/graphs.py), updated in place, replayed with one driver call.

The node parameters are checked wherever cuda-bindings is installed; the replays need a
GPU (marked `gpu`, skipped without one).
"""

from __future__ import annotations

import ctypes
import importlib.util

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from tests.execution.test_capture import nw_launches, nw_numpy
from tests.helpers import requires_backend

gpu = pytest.mark.gpu
needs_gpu = requires_backend("cuda", "no CUDA GPU")


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None,
                    reason="cuda-bindings is not installed")
def test_a_kernel_node_reads_the_packed_parameters() -> None:
    from kiln.builtin_backends.cuda.driver import api
    from kiln.builtin_backends.cuda.graphs import node_params
    from kiln.builtin_backends.cuda.launch import ParamBlock

    block = ParamBlock(["i", "d", "P"])
    block.struct.pack_into(block.data, 0, 7, 2.5, 0xDEAD0000)
    params = node_params(api().CUfunction(), 128, (3, 2, 1), (64, 1, 1), block.address)
    assert (params.gridDimX, params.gridDimY, params.gridDimZ) == (3, 2, 1)
    assert (params.blockDimX, params.blockDimY, params.blockDimZ) == (64, 1, 1)
    assert params.sharedMemBytes == 128
    pointers = ctypes.cast(int(params.kernelParams), ctypes.POINTER(ctypes.c_void_p))
    assert ctypes.c_int32.from_address(pointers[0]).value == 7
    assert ctypes.c_double.from_address(pointers[1]).value == 2.5
    assert ctypes.c_uint64.from_address(pointers[2]).value == 0xDEAD0000


@kiln.kernel
def axpy(x: f32[:], y: f32[:], k: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        y[i] = y[i] + k * x[i]


@gpu
@needs_gpu
@pytest.mark.parametrize("n", [64, 300])
def test_a_wavefront_replays_as_a_cuda_graph(n: int) -> None:
    dev = kiln.device("cuda")
    rng = np.random.default_rng(n)
    a_host = rng.integers(0, 4, n).astype(np.int32)
    b_host = rng.integers(0, 4, n).astype(np.int32)
    a, b = kiln.to_device(a_host, dev), kiln.to_device(b_host, dev)
    eager = kiln.zeros((n + 1, n + 1), i32, dev)
    nw_launches(eager, a, b, n, -1, block=64)
    h = kiln.zeros((n + 1, n + 1), i32, dev)
    with kiln.capture(dev) as g:
        a.copy_from_host(a_host)  # between graphs: a copy, then one graph of 2n launches
        nw_launches(h, a, b, n, kiln.Param("gap", -1), block=64)
    assert g.native
    g.replay()
    np.testing.assert_array_equal(h.numpy(), nw_numpy(a_host, b_host, -1))
    np.testing.assert_array_equal(eager.numpy(), h.numpy())
    a_host[:] = rng.integers(0, 4, n)
    g.replay(gap=-3)  # every node set again (cuGraphExecKernelNodeSetParams)
    np.testing.assert_array_equal(h.numpy(), nw_numpy(a_host, b_host, -3))


@gpu
@needs_gpu
def test_node_updates_grids_dims_and_arrays_on_the_gpu() -> None:
    dev = kiln.device("cuda")
    n = 1000
    x = kiln.to_device(np.arange(n, dtype=np.float32), dev)
    other = kiln.to_device(np.ones(n, np.float32), dev)
    y = kiln.zeros(n, f32, dev)
    stream = kiln.Stream(dev)
    with kiln.capture(dev) as g:
        axpy[1, 128](x, y, 1.0, n)
        axpy[kiln.dim(n)](x, y, 2.0, n)
    g.replay()
    expected = 2 * np.arange(n, dtype=np.float32)
    expected[:128] += np.arange(128)
    np.testing.assert_array_equal(y.numpy(), expected)
    g.update(0, grid=8, x=other)        # all of y, from another array
    g.update(1, dim=10, k=-1.0)
    g.replay(stream=stream)
    stream.synchronize()
    expected += 1
    expected[:10] -= np.arange(10)
    np.testing.assert_array_equal(y.numpy(), expected)
    with pytest.raises(kiln.CaptureError, match="grid dimension y"):
        g.update(0, grid=(1, 1 << 20))


@gpu
@needs_gpu
def test_raw_and_prepared_launches_are_nodes_too() -> None:
    dev = kiln.device("cuda")
    raw = kiln.RawKernel(r'''
extern "C" __global__ void bump(int *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1;
}''', "bump")
    x = kiln.zeros(256, i32, dev)
    y = kiln.zeros(256, f32, dev)
    prepared = axpy.prepare(1, 256, kiln.to_device(np.ones(256, np.float32), dev), y, 1.0,
                            256)
    with kiln.capture(dev) as g:
        raw[1, 128](x, np.int32(256))
        prepared()
    assert g.native
    g.replay()
    g.update(0, grid=2)
    g.replay()
    np.testing.assert_array_equal(x.numpy(), [2] * 128 + [1] * 128)
    np.testing.assert_array_equal(y.numpy(), 2)



@gpu
@needs_gpu
def test_foreign_arrays_are_held_by_the_graph() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    dev = kiln.device("cuda")
    x = torch.arange(256, dtype=torch.float32, device="cuda")
    y = torch.zeros(256, dtype=torch.float32, device="cuda")
    with kiln.capture(dev) as g:
        axpy[2, 128](x, y, 2.0, 256)
    del x  # the graph holds the tensor's memory (through the array it adopted)
    torch.cuda.synchronize()
    g.replay()
    dev.synchronize()  # the next replay is on another stream: nothing orders the two
    g.replay(stream=kiln.Stream(dev))
    dev.synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), 4 * np.arange(256, dtype=np.float32))
