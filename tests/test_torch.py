"""kiln.torch: kiln kernels as PyTorch operators (docs/pytorch.md), on CPU tensors with the
host backends and, marked `gpu`, on CUDA tensors with the cuda backend."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import f32, i32
from tests.helpers import backend_entry, run_python

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'kiln[torch]')")
from torch import Tensor  # noqa: E402
from torch._dynamo.testing import CompileCounter  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import kiln.torch  # noqa: E402 - needs torch

HOST_BACKENDS = ["cpu", "interp", "opencl"]


@kiln.kernel
def scale_in_place(x, k, n: i32):
    i = kiln.global_id(0)
    if i < n:
        x[i] = x[i] * k


@kiln.kernel
def copy_f32(x: f32[:], out: f32[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        out[i] = x[i]


@kiln.autotune(configs=[kiln.Config({"THREADS": t}, block=t) for t in (32, 64)], key=["n"])
@kiln.kernel
def double_tuned(x: f32[:], out: f32[:], n: i32, THREADS: kiln.constexpr):
    i = kiln.global_id(0)
    if i < n:
        out[i] = x[i] * 2.0


@kiln.kernel
def row_softmax_kernel(x, out, rows: i32, cols: i32):
    r = kiln.global_id(0)
    if r < rows:
        m = x[r, 0]
        for c in range(1, cols):
            m = max(m, x[r, c])
        total = x[r, 0] * 0.0
        for c in range(cols):
            e = kiln.exp(x[r, c] - m)
            out[r, c] = e
            total += e
        for c in range(cols):
            out[r, c] = out[r, c] / total


@kiln.kernel
def row_softmax_grad_kernel(g, y, dx, rows: i32, cols: i32):
    r = kiln.global_id(0)
    if r < rows:
        dot = g[r, 0] * 0.0
        for c in range(cols):
            dot += g[r, c] * y[r, c]
        for c in range(cols):
            dx[r, c] = y[r, c] * (g[r, c] - dot)


@kiln.torch.op("kiln_tests::row_softmax")
def row_softmax(x: Tensor) -> Tensor:
    out = torch.empty_like(x)
    rows, cols = x.shape
    kiln.torch.launch(row_softmax_kernel, dim=rows, args=(x, out, rows, cols))
    return out


@kiln.torch.op("kiln_tests::row_softmax_grad")
def row_softmax_grad(g: Tensor, y: Tensor) -> Tensor:
    dx = torch.empty_like(y)
    rows, cols = y.shape
    kiln.torch.launch(row_softmax_grad_kernel, dim=rows, args=(g, y, dx, rows, cols))
    return dx


def _save_output(ctx: object, inputs: tuple[Tensor], output: Tensor) -> None:
    ctx.save_for_backward(output)  # type: ignore[attr-defined]


def _softmax_backward(ctx: object, grad: Tensor) -> Tensor:
    y, = ctx.saved_tensors  # type: ignore[attr-defined]
    return row_softmax_grad(grad.contiguous(), y)


row_softmax.register_autograd(_softmax_backward, setup_context=_save_output)


@kiln.torch.op("kiln_tests::copy")
def copy_op(x: Tensor) -> Tensor:
    out = torch.empty_like(x)
    kiln.torch.launch(copy_f32, dim=x.numel(), args=(x, out, x.numel()))
    return out


@kiln.torch.op("kiln_tests::scale_", mutates_args=("x",))
def scale_(x: Tensor, k: float) -> None:
    kiln.torch.launch(scale_in_place, dim=x.numel(), args=(x.view(-1), k, x.numel()))


@pytest.mark.slow
def test_without_torch_the_import_says_which_extra() -> None:
    done = run_python("import sys\nsys.modules['torch'] = None  # as if not installed\n"
                      "import kiln.torch")
    assert "kiln.torch needs" in done.stderr and "pip install 'kiln[torch]'" in done.stderr


# ---------------------------------------------------------------- launches


@pytest.mark.slow
def test_importing_kiln_imports_neither_torch_nor_jax() -> None:
    done = run_python("import sys, kiln, kiln.examples, numpy as np\n"
                      "kiln.launch(kiln.examples.vector_add, dim=4, args=(np.ones(4, np.float32),"
                      " np.ones(4, np.float32), np.zeros(4, np.float32), 4), device='interp')\n"
                      "print(sorted({'torch', 'jax', 'jaxlib'} & set(sys.modules)))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_launch_writes_cpu_tensors_in_place(backend: str) -> None:
    entry = backend_entry(backend)
    if not entry.available:
        pytest.skip(f"the {backend} backend is not available: {entry.reason}")
    x = torch.arange(10, dtype=torch.float32)
    kiln.torch.launch(scale_in_place, dim=10, args=(x, np.float32(3), 10), backend=backend)
    assert torch.equal(x, torch.arange(10, dtype=torch.float32) * 3)


def test_cpu_tensors_are_shared_not_copied() -> None:
    """A view of a tensor's storage sees what the kernel wrote through the tensor."""
    base = torch.ones(8, dtype=torch.float64)
    x = base[:4]
    kiln.torch.launch(scale_in_place, dim=4, args=(x, 2.5, 4))
    assert base.tolist() == [2.5] * 4 + [1.0] * 4


@pytest.mark.parametrize(("dtype", "factor"), [(torch.bfloat16, kiln.bf16(2)),
                                               (torch.uint32, np.uint32(2))])
def test_bfloat16_and_unsigned_tensors_launch(dtype: torch.dtype, factor: object) -> None:
    x = torch.ones(6, dtype=dtype)
    kiln.torch.launch(scale_in_place, dim=6, args=(x, factor, 6), backend="interp")
    assert torch.equal(x, torch.full((6,), 2, dtype=dtype))


def test_autotuned_kernels_launch_and_fake_launches_skip_them() -> None:
    x, out = torch.arange(100, dtype=torch.float32), torch.zeros(100)
    grid = lambda cfg: (100 + cfg.block - 1) // cfg.block  # noqa: E731
    kiln.torch.launch(double_tuned, grid=grid, args=(x, out, 100), backend="interp")
    assert torch.equal(out, x * 2)
    with FakeTensorMode():
        kiln.torch.launch(double_tuned, grid=grid, args=(torch.empty(100), torch.empty(100), 100))


# ---------------------------------------------------------------- operators


def test_operator_matches_pytorch_and_gradcheck_passes() -> None:
    x = torch.randn(5, 7, dtype=torch.float64)
    assert torch.allclose(row_softmax(x), torch.softmax(x, dim=1))
    x.requires_grad_()
    assert torch.autograd.gradcheck(row_softmax, (x,))


def test_opcheck_passes() -> None:
    x = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    result = torch.library.opcheck(row_softmax.default, (x,))
    assert set(result.values()) == {"SUCCESS"}, result


def test_compile_traces_the_operator_without_a_graph_break() -> None:
    counter = CompileCounter()

    def model(x: Tensor) -> Tensor:
        return row_softmax(x * 2).sum(dim=1)

    compiled = torch.compile(model, backend=counter, fullgraph=True)
    x = torch.randn(3, 5)
    assert torch.allclose(compiled(x), model(x))
    assert counter.frame_count == 1


def test_compile_with_dynamic_shapes_and_backward() -> None:
    """The wrapper runs on symbolic shapes (the launch's sizes are SymInts): one graph
    serves every size, and its backward calls the backward operator."""
    counter = CompileCounter()
    compiled = torch.compile(lambda t: row_softmax(t) + 1, backend=counter, dynamic=True,
                             fullgraph=True)
    for rows in (3, 5, 9):
        x = torch.randn(rows, 7, dtype=torch.float64, requires_grad=True)
        y = compiled(x)
        torch.testing.assert_close(y, torch.softmax(x, dim=1) + 1)
        (grad,) = torch.autograd.grad((y * y).sum(), x)
        (expected,) = torch.autograd.grad(((torch.softmax(x, dim=1) + 1) ** 2).sum(), x)
        torch.testing.assert_close(grad, expected)
    assert counter.frame_count == 1


def test_an_operator_that_writes_its_input() -> None:
    x = torch.ones(2, 3, dtype=torch.float64)
    scale_(x, 3.0)
    assert torch.equal(x, torch.full((2, 3), 3.0, dtype=torch.float64))
    compiled = torch.compile(lambda t: (scale_(t, 2.0), t + 1)[1], backend="aot_eager",
                             fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.full((2, 3), 7.0, dtype=torch.float64))
    assert torch.equal(x, torch.full((2, 3), 6.0, dtype=torch.float64))
    result = torch.library.opcheck(scale_.default, (torch.ones(4, dtype=torch.float64), 2.0))
    assert set(result.values()) == {"SUCCESS"}, result


def test_fake_tensors_give_shapes_without_launching() -> None:
    with FakeTensorMode():
        x = torch.empty(3, 4)
        y = row_softmax(x)
        assert tuple(y.shape) == (3, 4) and y.dtype == torch.float32


# ---------------------------------------------------------------- refusals


def test_wrong_element_type_is_a_launch_error() -> None:
    x = torch.ones(4, dtype=torch.float64)
    with pytest.raises(kiln.LaunchError, match="float64"):
        copy_op(x)
    with FakeTensorMode(), pytest.raises(kiln.LaunchError, match="float64"):
        copy_op(torch.empty(4, dtype=torch.float64))  # what torch.compile traces


def test_compile_reports_a_wrong_element_type_while_tracing() -> None:
    counter = CompileCounter()
    compiled = torch.compile(lambda x: copy_op(x) + 1, backend=counter, fullgraph=True)
    # Dynamo reports what the fake implementation raised in a RuntimeError of its own
    with pytest.raises(RuntimeError, match=r"LaunchError.*argument 'x' \(#1\) of copy_f32"):
        compiled(torch.ones(4, dtype=torch.float64))
    assert counter.frame_count == 0  # refused while tracing, before any graph ran


def test_element_type_kiln_lacks_is_refused() -> None:
    x = torch.ones(4, dtype=torch.complex64)
    with pytest.raises(kiln.LaunchError, match="complex64 has no kiln element type"):
        kiln.torch.launch(scale_in_place, dim=4, args=(x, 2.0, 4))


def test_non_contiguous_tensor_is_refused() -> None:
    x = torch.randn(4, 6).t()
    with pytest.raises(kiln.LaunchError, match=r"not contiguous.*contiguous\(\)"):
        row_softmax(x)
    with FakeTensorMode(), pytest.raises(kiln.LaunchError, match="not contiguous"):
        row_softmax(torch.empty(4, 6).t())


def test_requires_grad_without_backward_is_refused_at_the_call() -> None:
    x = torch.ones(4, requires_grad=True)
    with pytest.raises(kiln.LaunchError, match="kiln_tests::copy has no backward"):
        copy_op(x)
    with torch.no_grad():
        assert torch.equal(copy_op(x), torch.ones(4))


def test_mixed_devices_are_refused() -> None:
    with FakeTensorMode(), pytest.raises(kiln.DeviceMismatchError, match="different devices"):
        kiln.torch.launch(copy_f32, dim=4, args=(torch.empty(4), torch.empty(4, device="cuda"),
                                                 4))


def test_cuda_tensors_for_a_host_backend_are_refused() -> None:
    with FakeTensorMode(), pytest.raises(kiln.DeviceMismatchError, match="cpu backend cannot"):
        kiln.torch.launch(copy_f32, dim=4, args=(torch.empty(4, device="cuda"),
                                                 torch.empty(4, device="cuda"), 4), backend="cpu")


def test_args_must_be_a_sequence() -> None:
    with pytest.raises(kiln.LaunchError, match="args= takes a tuple"):
        kiln.torch.launch(copy_f32, dim=4, args=torch.empty(4))  # type: ignore[arg-type]


# ---------------------------------------------------------------- CUDA tensors


def require_cuda() -> None:
    """Skip, saying why, unless both PyTorch and kiln's cuda backend see a GPU."""
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA GPU")
    entry = backend_entry("cuda")
    if not entry.available:
        pytest.skip(f"no CUDA GPU for kiln: {entry.reason}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.gpu
def test_cuda_operator_under_inductor_and_gradcheck(dtype: torch.dtype) -> None:
    require_cuda()
    x = torch.randn(64, 33, dtype=dtype, device="cuda")
    compiled = torch.compile(lambda t: row_softmax(t * 2), fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.softmax(x * 2, dim=1))
    if dtype == torch.float64:
        assert torch.autograd.gradcheck(row_softmax, (x[:4, :5].clone().requires_grad_(),))
        torch.library.opcheck(row_softmax.default, (x[:4, :5].clone().requires_grad_(),))


@pytest.mark.gpu
def test_cuda_launch_is_queued_on_the_current_stream_without_waiting() -> None:
    require_cuda()
    x = torch.zeros(1 << 20, device="cuda")
    kiln.torch.launch(scale_in_place, dim=x.numel(), args=(x, np.float32(2), x.numel()))
    side = torch.cuda.Stream()
    torch.cuda.synchronize()  # compiled and loaded: the launch below only queues
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000_000)  # keeps `side` busy for about half a second
        x.fill_(3.0)
        kiln.torch.launch(scale_in_place, dim=x.numel(), args=(x, np.float32(2), x.numel()))
        assert not side.query()  # the launch returned while the stream was still busy
    side.synchronize()
    assert bool((x == 6.0).all())  # after the fill: on the same stream, in order


@pytest.mark.gpu
def test_cuda_graphs_capture_the_operator() -> None:
    """torch.compile(mode="reduce-overhead") records the operator's launch in a CUDA graph
    (the launch queues on the capturing stream and neither allocates nor waits)."""
    require_cuda()
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = torch.compile(lambda t: row_softmax(t) * 2, mode="reduce-overhead",
                             fullgraph=True)
    x = torch.randn(32, 16, device="cuda")
    for _ in range(3):  # warm-up, recording, replay
        compiled(x)
    x.copy_(torch.randn(32, 16, device="cuda"))
    torch.testing.assert_close(compiled(x), torch.softmax(x, dim=1) * 2)
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


@pytest.mark.gpu
def test_cuda_refusals_on_real_tensors() -> None:
    require_cuda()
    cpu, gpu_x = torch.ones(4), torch.ones(4, device="cuda")
    with pytest.raises(kiln.DeviceMismatchError, match="different devices"):
        kiln.torch.launch(copy_f32, dim=4, args=(cpu, gpu_x, 4))
    with pytest.raises(kiln.DeviceMismatchError, match="cannot read in place"):
        kiln.torch.launch(copy_f32, dim=4, args=(cpu, torch.empty(4), 4), backend="cuda")
    with pytest.raises(kiln.DeviceMismatchError, match="interp backend cannot"):
        kiln.torch.launch(copy_f32, dim=4, args=(gpu_x, torch.empty_like(gpu_x), 4),
                          backend="interp")
