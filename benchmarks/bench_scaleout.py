"""Scale-out: one device against several (sharded launches) and a Dask cluster of one
process against two, on a stencil and an n-body step; plus the overheads (a Dask task, a
copy between devices).

    python benchmarks/bench_scaleout.py [--quick]

Devices: every CUDA GPU when there are two or more (one GPU against all), else the CPU
against its two halves (`kiln.device("cpu").split(2)`). Wall-clock medians after warm-up,
random data; each sharded run ends with a gather, so it includes waiting for every device.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np
from common import markdown_table, median_ms, ratio, versions

import kiln
from kiln import f32, i32
from kiln.examples import smooth_shard


@kiln.kernel
def nbody_step(pos: f32[:, :], everyone: f32[:, :], vel: f32[:, :], start: i32, rows: i32,
               n: i32, dt: f32):
    """Velocities of this shard's bodies after one step, from all n bodies' positions."""
    i = kiln.global_id(0)
    if i < rows:
        ax = f32(0)
        ay = f32(0)
        az = f32(0)
        for j in range(n):
            dx = everyone[j, 0] - pos[i, 0]
            dy = everyone[j, 1] - pos[i, 1]
            dz = everyone[j, 2] - pos[i, 2]
            inv = kiln.rsqrt(dx * dx + dy * dy + dz * dz + 0.01)
            s = inv * inv * inv
            ax += dx * s
            ay += dy * s
            az += dz * s
        vel[i, 0] += ax * dt
        vel[i, 1] += ay * dt
        vel[i, 2] += az * dt


def stencil_ms(devices: list[kiln.Device], x: np.ndarray, steps: int, repeat: int) -> float:
    n = len(x)
    a, b = kiln.shard(x, devices, halo=1), kiln.shard_empty(n, f32, devices, halo=1)

    def run() -> None:
        nonlocal a, b
        for _ in range(steps):
            kiln.launch_sharded(smooth_shard, (a, b, kiln.shard_start, kiln.shard_rows, n))
            b.refresh_halo()
            a, b = b, a
        for d in devices:
            d.synchronize()

    return median_ms(run, repeat, warmup=1)


def nbody_ms(devices: list[kiln.Device], pos: np.ndarray, repeat: int) -> float:
    n = len(pos)
    shards = kiln.shard(pos, devices)
    everyone = [kiln.to_device(pos, d) for d in devices]
    vel = kiln.shard(np.zeros_like(pos), devices)

    def run() -> None:
        for k, s in enumerate(shards.shards):
            kiln.launch(nbody_step, dim=s.rows,
                        args=(s.array, everyone[k], vel.shards[k].array, s.start, s.rows, n,
                              np.float32(0.01)), device=s.device)
        for d in devices:
            d.synchronize()

    return median_ms(run, repeat, warmup=1)


def sharded_rows(one: list[kiln.Device], many: list[kiln.Device], quick: bool
                 ) -> list[list[object]]:
    """Work that fills every device: GPUs get 16-32x the stencil and 16x the bodies that CPUs
    get (on one H200 a 2^24-float stencil step takes about 50 us, mostly launch and halo
    latency, and 16384 bodies are 128 blocks, fewer than its 132 SMs)."""
    rng = np.random.default_rng(0)
    gpus = one[0].backend.name == "cuda"
    base = 22 if quick else 24
    sizes = [base + 4, base + 5] if gpus else [base]
    bodies = rng.random(((4096 if quick else 16384) * (16 if gpus else 1), 3)).astype(np.float32)
    rows = []
    for log_n in sizes:
        x = rng.random(1 << log_n).astype(np.float32)
        rows.append(timed_row(f"stencil, 2^{log_n} f32, 10 steps",
                              lambda devs, x=x: stencil_ms(devs, x, 10, 3 if quick else 5),
                              one, many))
        del x
    rows.append(timed_row(f"n-body step, {len(bodies)} bodies",
                          lambda devs: nbody_ms(devs, bodies, 3 if quick else 5), one, many))
    return rows


def timed_row(what: str, fn: Callable[[list[kiln.Device]], float], one: list[kiln.Device],
              many: list[kiln.Device]) -> list[object]:
    t1, tn = fn(one), fn(many)
    return [what, f"{t1:.1f}", f"{tn:.1f}", ratio(t1, tn)]


def transfer_rows(many: list[kiln.Device]) -> list[list[object]]:
    """A copy between two devices, each into a new array (allocation included): the
    backend's own copy (peer-to-peer between GPUs), and through the host for comparison."""
    rows = []
    for log_n in (22, 26):
        x = kiln.to_device(np.ones(1 << log_n, np.float32), many[0])
        ways = {"direct": lambda x=x: x.to(many[1]),
                "through the host": lambda x=x: kiln.to_device(x.numpy(), many[1])}
        for how, copy in ways.items():
            t = median_ms(lambda copy=copy: (copy(), many[1].synchronize()), 5)
            rows.append([f"{many[0].name} -> {many[1].name}, {x.nbytes >> 20} MiB, {how}",
                         f"{t:.2f} ms", f"{x.nbytes / t / 1e6:.1f} GB/s"])
    return rows


def dask_rows(quick: bool) -> list[list[object]]:
    try:
        import dask.array as da
        from distributed import Client, LocalCluster

        import kiln.dask as kd
    except ImportError as exc:
        return [[f"dask skipped: {exc}", "", "", ""]]
    n = 1 << (22 if quick else 24)
    rows = []
    timings = {}
    cores = len(os.sched_getaffinity(0))
    for workers in (1, 2):
        share = {"KILN_NUM_THREADS": str(max(1, cores // workers))}  # no oversubscription
        with LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None,
                          env=share) as c, Client(c):
            x = da.random.random(n, chunks=n // 16).astype(np.float32).persist()
            work = x
            for _ in range(5):
                work = kd.map_overlap(smooth_shard, work, kiln.shard_start, kiln.shard_rows, n,
                                      out="y", depth=1)
            timings[workers] = median_ms(lambda work=work: work.compute(), 3, warmup=1)
            tiny = da.ones(64 * 16, chunks=16, dtype=np.float32)
            chain = kd.map_blocks(smooth_copy, tiny, kiln.shard_rows, out="out")
            per_task = median_ms(chain.compute, 3, warmup=1) / 64  # warm: compiled on each worker
            rows.append([f"{workers} process(es): one tiny kiln task", f"{per_task:.2f} ms",
                         "", ""])
    rows.insert(0, [f"stencil 2^{int(np.log2(n))} f32, 5 map_overlap steps, 16 chunks",
                    f"{timings[1]:.0f}", f"{timings[2]:.0f}", ratio(timings[1], timings[2])])
    return rows


@kiln.kernel
def smooth_copy(x: f32[:], out: f32[:], rows: i32):
    i = kiln.global_id(0)
    if i < rows:
        out[i] = x[i]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    quick = parser.parse_args().quick
    gpus = [d for d in kiln.devices() if d.backend.name == "cuda"]
    if len(gpus) >= 2:
        one, many = gpus[:1], gpus
    else:
        cpu = kiln.device("cpu")
        one, many = [cpu], cpu.split(2)
    print(f"# Scale-out, {time.strftime('%Y-%m-%d')}, Python {versions()}")
    print(f"one: {[d.name for d in one]} ({one[0].capabilities.name}); "
          f"many: {[d.name for d in many]}\n")
    print(markdown_table(["sharded launch", "one device ms", f"{len(many)} devices ms",
                          "speedup"], sharded_rows(one, many, quick), "lrrr"))
    print()
    print(markdown_table(["copy between devices", "time", "rate"], transfer_rows(many), "lrr"))
    print()
    print(markdown_table(["kiln.dask (local cluster)", "1 process ms", "2 processes ms",
                          "speedup"], dask_rows(quick), "lrrr"))


if __name__ == "__main__":
    main()
