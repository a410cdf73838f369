"""The webgpu plugin (on whatever adapter wgpu finds: Mesa's lavapipe without a GPU) beside
the cpu backend, the cuda backend where there is one, hand-written WGSL vector_add and
reduce dispatched through wgpu directly, and NumPy, in the same run.

vector_add and reduce (`block_sum`; 2^22 f32, 2^26 with a GPU) in GB/s and the 16x16
shared-memory tiled matmul (512^2 f32) in GFLOP/s; each result is checked against NumPy
first. A run is `LAUNCHES` launches then one synchronisation (so a GPU's time, not the
wait for it, is measured); medians of timed runs after a warm-up, per launch; ratios are
NumPy time / kiln time.

    python benchmarks/bench_webgpu.py [--quick]          (also: kiln bench --backend webgpu)

Exits at once (status 0) when another backend is asked for or the plugin is not installed
or finds no adapter.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
from common import backend_device, median_ms, quick, ratio, record, timed_ms, versions

import kiln
from kiln.examples import BLOCK, TILE, block_sum, matmul_tiled_square, vector_add

Run = Callable[[], object]
LAUNCHES = 10

HAND_ADD = """
@group(0) @binding(0) var<uniform> n: vec4<u32>;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) w: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (w.x + w.y * 65535u) * 256u + t;
    if (i < n.x) { c[i] = a[i] + b[i]; }
}
"""
"""vector_add as one would write it for WebGPU by hand: workgroups of 256, one element per
invocation, a bounds check, a 2-D dispatch past 65535 workgroups."""

HAND_REDUCE = """
@group(0) @binding(0) var<uniform> n: vec4<u32>;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> total: array<atomic<u32>>;
var<workgroup> s: array<f32, 256>;
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) w: vec3<u32>, @builtin(num_workgroups) g: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
    var acc = 0.0;
    var i = w.x * 256u + t;
    while (i < n.x) { acc += x[i]; i += g.x * 256u; }
    s[t] = acc;
    workgroupBarrier();
    var k = 128u;
    while (k > 0u) {
        if (t < k) { s[t] += s[t + k]; }
        workgroupBarrier();
        k = k / 2u;
    }
    if (t == 0u) {
        var old = atomicLoad(&total[0]);
        loop {
            let sum = bitcast<u32>(bitcast<f32>(old) + s[0]);
            let r = atomicCompareExchangeWeak(&total[0], old, sum);
            if (r.exchanged) { break; }
            old = r.old_value;
        }
    }
}
"""
"""`block_sum` as one would write it for WebGPU by hand, the same algorithm: a grid-stride
loop, a tree in workgroup memory, one float add per workgroup as a compare-exchange loop
on the bits (WGSL has no float atomics)."""


def hand_dispatch(dev: kiln.Device, code: str, n: int, arrays: list[np.ndarray],
                  shape: tuple[int, int, int]) -> tuple[Run, list[object]]:
    """`LAUNCHES` dispatches of `code` over `arrays` (after a uniform holding `n`), one
    submit each as kiln does, then a wait; and the arrays' buffers, to read back."""
    import wgpu

    gpu, usage = dev.handle.device, wgpu.BufferUsage
    buffers = [gpu.create_buffer_with_data(data=x, usage=usage.STORAGE | usage.COPY_SRC)
               for x in arrays]
    size = gpu.create_buffer_with_data(data=np.array([n, 0, 0, 0], np.uint32),
                                       usage=usage.UNIFORM | usage.COPY_SRC)
    module = gpu.create_shader_module(code=code)
    pipeline = gpu.create_compute_pipeline(layout="auto",
                                           compute={"module": module, "entry_point": "main"})
    group = gpu.create_bind_group(
        layout=pipeline.get_bind_group_layout(0),
        entries=[{"binding": 0, "resource": {"buffer": size}},
                 *({"binding": k + 1, "resource": {"buffer": buf}}
                   for k, buf in enumerate(buffers))])

    def run() -> None:
        for _ in range(LAUNCHES):
            encoder = gpu.create_command_encoder()
            compute = encoder.begin_compute_pass()
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(*shape)
            compute.end()
            gpu.queue.submit([encoder.finish()])
        gpu.queue.read_buffer(size, 0, 4)  # waits for the dispatches

    return run, buffers


def hand_kernels(dev: kiln.Device, n: int) -> dict[str, Run]:
    """The hand-written WGSL twins of vector_add and reduce, each checked against NumPy."""
    rng = np.random.default_rng(0)
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    gpu = dev.handle.device
    groups = -(-n // 256)
    add, (_, _, c) = hand_dispatch(dev, HAND_ADD, n, [a, b, np.zeros(n, np.float32)],
                                   (min(groups, 65535), -(-groups // 65535), 1))
    add()
    np.testing.assert_array_equal(np.frombuffer(gpu.queue.read_buffer(c), np.float32), a + b)
    reduce, (_, total) = hand_dispatch(dev, HAND_REDUCE, n, [a, np.zeros(1, np.float32)],
                                       (min(groups, 1024), 1, 1))
    reduce()
    got = np.frombuffer(gpu.queue.read_buffer(total), np.float32)[0]
    np.testing.assert_allclose(got, LAUNCHES * a.sum(dtype=np.float64), rtol=1e-4)
    return {"vector_add": add, "reduce": reduce}


def kernels(dev: kiln.Device, n: int, mm: int) -> dict[str, tuple[Run, float]]:
    """Each benchmark's synchronised run on `dev` and its work (bytes or flops)."""
    rng = np.random.default_rng(0)
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    da, db, dc = kiln.to_device(a, dev), kiln.to_device(b, dev), kiln.zeros(n, device=dev)
    total = kiln.zeros(1, device=dev)
    ma, mb = rng.random((mm, mm), np.float32), rng.random((mm, mm), np.float32)
    dma, dmb, dmc = kiln.to_device(ma, dev), kiln.to_device(mb, dev), kiln.zeros((mm, mm),
                                                                                device=dev)
    blocks = (n + BLOCK - 1) // BLOCK

    def add() -> None:
        for _ in range(LAUNCHES):
            vector_add[blocks, BLOCK](da, db, dc, n)
        dev.synchronize()

    def reduce() -> None:
        for _ in range(LAUNCHES):
            block_sum[min(blocks, 1024), BLOCK](da, total, n)
        dev.synchronize()

    def matmul() -> None:
        for _ in range(LAUNCHES):
            matmul_tiled_square[(mm // TILE, mm // TILE), (TILE, TILE)](dma, dmb, dmc, mm)
        dev.synchronize()

    add()
    np.testing.assert_array_equal(dc.numpy(), a + b)
    reduce()
    np.testing.assert_allclose(total.numpy()[0], LAUNCHES * a.sum(dtype=np.float64), rtol=1e-4)
    matmul()
    np.testing.assert_allclose(dmc.numpy(), ma @ mb, rtol=1e-4, atol=1e-3)
    return {"vector_add": (add, 12.0 * n), "reduce": (reduce, 4.0 * n),
            "matmul_tiled": (matmul, 2.0 * mm**3)}


def enqueue_us(dev: kiln.Device, launches: int = 200) -> float:
    """Host microseconds per queued launch of a small vector_add (median of 5 batches)."""
    n = 1024
    da, db, dc = (kiln.zeros(n, device=dev) for _ in range(3))

    def batch() -> None:
        for _ in range(launches):
            vector_add[n // BLOCK, BLOCK](da, db, dc, n)

    batch()
    dev.synchronize()
    times = []
    for _ in range(5):
        times.append(timed_ms(batch))
        dev.synchronize()
    return sorted(times)[2] * 1e3 / launches


def numpy_runs(n: int, mm: int) -> dict[str, Run]:
    rng = np.random.default_rng(0)
    a, b, c = rng.random(n, np.float32), rng.random(n, np.float32), np.empty(n, np.float32)
    ma, mb = rng.random((mm, mm), np.float32), rng.random((mm, mm), np.float32)
    return {"vector_add": lambda: np.add(a, b, out=c), "reduce": lambda: a.sum(),
            "matmul_tiled": lambda: ma @ mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few runs")
    small = parser.parse_args().quick or quick()
    dev = backend_device("webgpu", "bench_webgpu")
    if dev is None:
        return 0
    available = {e.name for e in kiln.backends() if e.available}
    n, mm, repeat = (1 << 18, 128, 3) if small else (
        1 << (26 if "cuda" in available else 22), 512, 7)
    print(f"webgpu: {dev.capabilities.name}; Python {versions()}; "
          f"{dev.handle.identity.split(' | ')[0]}")
    peers = {"webgpu": kernels(dev, n, mm)}
    for name in ("cuda", "cpu"):
        if name in available:
            peers[name] = kernels(kiln.device(name), n, mm)
    reference = numpy_runs(n, mm)
    print(f"\n| benchmark | size | {' | '.join(f'kiln {p}' for p in peers)} | NumPy | "
          f"{' | '.join(f'NumPy / {p}' for p in peers)} |")
    print("|---" * (3 + 2 * len(peers)) + "|")
    for name, numpy_run in reference.items():
        unit, scale = ("GFLOP/s" if name == "matmul_tiled" else "GB/s"), 1e-9
        work = peers["webgpu"][name][1]
        base = median_ms(numpy_run, repeat)
        times = {p: median_ms(runs[name][0], repeat) / LAUNCHES for p, runs in peers.items()}
        for p, ms in times.items():
            record(name, f"kiln {p}", n if name != "matmul_tiled" else mm,
                   work * scale / (ms * 1e-3), unit)
        size = f"{mm}^2" if name == "matmul_tiled" else f"2^{n.bit_length() - 1}"
        rates = " | ".join(f"{work * scale / (ms * 1e-3):.2f} {unit} ({ms:.2f} ms)"
                           for ms in times.values())
        ratios = " | ".join(ratio(base, ms) for ms in times.values())
        print(f"| {name} | {size} | {rates} | {work * scale / (base * 1e-3):.2f} {unit} "
              f"({base:.2f} ms) | {ratios} |")
    for name in peers:
        print(f"{name}: {enqueue_us(kiln.device(name)):.1f} µs of host time per launch "
              "(vector_add of 1024 elements, 200 launches queued)")
    print()
    for name, hand_run in hand_kernels(dev, n).items():
        hand = median_ms(hand_run, repeat) / LAUNCHES
        mine = median_ms(peers["webgpu"][name][0], repeat) / LAUNCHES
        work = peers["webgpu"][name][1]
        print(f"{name} 2^{n.bit_length() - 1}: hand-written WGSL {work / hand / 1e6:.0f} GB/s "
              f"({hand:.3f} ms), kiln webgpu {work / mine / 1e6:.0f} GB/s ({mine:.3f} ms): "
              f"kiln / hand {ratio(hand, mine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
