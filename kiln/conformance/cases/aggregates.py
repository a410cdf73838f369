"""Records (`@kiln.struct`), variants (`kiln.variant`, `match`) and vector types.

Host data is built with the types' NumPy dtypes (`Particle.dtype`, `Shape.array(...)`,
(n, 4) float32 arrays for `f32x4[:]`), so these cases also check that every backend lays
records out as NumPy's `align=True` rule says.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln import f32, f32x2, f32x3, f32x4, f64, f64x2, i32, i32x4, u8, u32x2

from ..checks import assert_close, assert_equal, blocks, rng, run
from ..registry import FP64, case

BLOCK = 64


@kiln.struct
class Vec2:
    x: f32
    y: f32


@kiln.struct
class Particle:
    pos: Vec2
    vel: f32x2
    mass: f32
    alive: i32 = 1


@kiln.struct
class Mixed:
    """Fields of every size, so that padding is exercised (f64 at offset 8, u8 at 16)."""

    flag: u8
    wide: f64
    small: u8
    count: i32
    dir: f32x3


@kiln.struct
class Circle:
    r: f32


@kiln.struct
class Rect:
    w: f32
    h: f32


@kiln.struct
class Empty:
    """A unit case: no fields."""


Shape = kiln.variant("Shape", Circle, Rect, Empty)


@kiln.func
def kinetic(p: Particle) -> f32:
    """A record parameter of a device function."""
    return 0.5 * p.mass * kiln.dot(p.vel, p.vel)


@kiln.kernel
def step_particles(ps: Particle[:], energy: f32[:], gravity: Vec2, dt: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        p = ps[i]
        before = p  # a copy: changing p leaves it alone
        p.vel.x += gravity.x * dt
        p.vel.y = p.vel.y + gravity.y * dt
        p.pos = Vec2(p.pos.x + p.vel.x * dt, y=p.pos.y + p.vel.y * dt)
        if p.pos.y < 0.0:
            p.alive = 0
        ps[i] = p
        ps[i].mass += 1.0
        energy[i] = kinetic(p) - kinetic(before) + before.pos.x * 0.0
        if i == 0:
            ps[i] = Particle(Vec2(-1.0, -2.0), kiln.f32x2(3.0, 4.0), mass=5.0)


@kiln.func
def nudged(p: Particle, dx: f32) -> Vec2:
    return Vec2(p.pos.x + dx, p.pos.y)


@kiln.kernel
def nudge_particles(ps: Particle[:], dx: f32, n: i32):
    i = kiln.global_id(0)
    if i < n:
        ps[i].pos = nudged(ps[i], dx)  # a field of an element written from a record call
        ps[i].mass = nudged(ps[i], dx).x  # and from a field of one


@kiln.kernel
def copy_mixed(src: Mixed[:], dst: Mixed[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        m = src[i]
        m.count += 1
        m.wide = m.wide * 2.0
        m.dir = m.dir * f32(m.small)
        dst[i] = m
        dst[i].flag = src[i].flag + 1


@kiln.func
def area(s: Shape) -> f32:
    """`match` with class patterns, positional and keyword."""
    match s:
        case Circle(r):
            return 3.0 * r * r
        case Rect(w=w, h=h):
            return w * h
        case _:
            return -1.0


@kiln.kernel
def shape_areas(shapes: Shape[:], areas: f32[:], grown: Shape[:], extra: Shape, n: i32):
    i = kiln.global_id(0)
    if i < n:
        areas[i] = area(shapes[i]) + area(extra)
        s: Shape = Empty()
        match shapes[i]:
            case Circle(r=r):
                s = Rect(r, 2.0 * r)
            case Rect(w=w):
                s = Circle(w)
            case Empty():
                pass
        grown[i] = s
        if i == 0:
            grown[i] = Circle(9.0)


@kiln.kernel
def vector_math(a: f32x4[:], b: f32x4[:], out: f32x4[:], dots: f32[:], flags: i32[:],
                offset: f32x4, n: i32):
    i = kiln.global_id(0)
    if i < n:
        u = a[i]
        v = b[i]
        w = (u + v) * 2.0 - offset / 4.0
        w = kiln.max(w, -v) + kiln.abs(-u) * 0.5
        w.y = kiln.sqrt(kiln.abs(w.y))
        out[i] = -w
        dots[i] = kiln.dot(u, v) + kiln.length(u) + u.x * v.w
        flags[i] = i32(all(u < v)) + 2 * i32(any(u == v)) + 4 * i32((u >= 0.5).z)


@kiln.kernel
def vector_geometry(a: f32x3[:], b: f32x3[:], crossed: f32x3[:], unit: f32x3[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        crossed[i] = kiln.cross(a[i], b[i])
        unit[i] = kiln.normalize(a[i] + f32x3(0.0, 0.0, 1.0))


@kiln.kernel
def vector_integers(a: i32x4[:], out: i32x4[:], m: u32x2[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        v = a[i]
        out[i] = (v * 3 + i32x4(1, 2, 3, 4)) // 2 % 7 ^ (v << 1)
        k = m[i]
        m[i] = kiln.u32x2(k.y, k.x) + u32x2(1)


@kiln.kernel
def vector_doubles(a: f64x2[:], out: f64x2[:], n: i32):
    i = kiln.global_id(0)
    if i < n:
        d = a[i] + f64x2(f32x2(1.5, 2.5))  # a conversion between vector types
        out[i] = d * f64(0.5)


@kiln.kernel
def vector_copy(src: f32x4[:], dst: f32x4[:], scale: f32, n: i32):
    """Whole-vector loads and stores (16 bytes per access where the backend has them)."""
    i = kiln.global_id(0)
    if i < n:
        dst[i] = src[i] * scale


@kiln.kernel
def block_records(out: f32[:], n: i32):
    """Records in shared memory and vectors in private arrays."""
    s = kiln.shared(Circle, BLOCK)
    private = kiln.local(f32x3, 4)
    t = kiln.thread_idx.x
    s[t] = Circle(f32(kiln.global_id(0)))
    for j in range(4):
        private[j] = f32x3(f32(j), 1.0, 2.0)
    kiln.barrier()
    i = kiln.global_id(0)
    if i < n:
        out[i] = s[BLOCK - 1 - t].r + private[3].x + kiln.dot(private[1], private[2])


# ---------------------------------------------------------------- cases


@case()
def records(device: kiln.Device) -> None:
    """Records: arrays of nested records with vector fields, copies, record arguments"""
    n = 300
    g = rng(40)
    ps: np.ndarray = np.zeros(n, Particle.dtype)
    ps["pos"]["x"], ps["pos"]["y"] = g.uniform(-1, 1, n), g.uniform(0, 1, n)
    ps["vel"] = g.uniform(-1, 1, (n, 2))
    ps["mass"] = g.uniform(1, 2, n)
    ps["alive"] = 1
    energy = np.zeros(n, np.float32)
    dt, gravity = np.float32(0.5), Vec2(0.25, -1.5)
    expected = ps.copy()
    vel = expected["vel"]
    vel[:, 0] += np.float32(0.25) * dt
    vel[:, 1] += np.float32(-1.5) * dt
    expected["pos"]["x"] += vel[:, 0] * dt
    expected["pos"]["y"] += vel[:, 1] * dt
    expected["alive"] = np.where(expected["pos"]["y"] < 0, 0, 1)
    expected["mass"] += 1
    before = 0.5 * ps["mass"] * (ps["vel"] ** 2).sum(1)
    after = 0.5 * ps["mass"] * (vel ** 2).sum(1)
    expected[0] = ((-1.0, -2.0), (3.0, 4.0), 5.0, 1)
    run(device, step_particles, blocks(n, BLOCK), BLOCK, ps, energy, gravity, dt, n)
    for name in ("vel", "mass", "alive"):
        assert_close(ps[name], expected[name], f"particle field {name}")
    assert_close(ps["pos"]["x"], expected["pos"]["x"], "particle pos.x")
    assert_close(ps["pos"]["y"], expected["pos"]["y"], "particle pos.y")
    assert_close(energy, after - before, "energy change", rtol=1e-4, atol=1e-5)


@case()
def record_fields_from_calls(device: kiln.Device) -> None:
    """Records: a field of an array element written from a function returning a record"""
    n = 100
    ps: np.ndarray = np.zeros(n, Particle.dtype)
    ps["pos"]["x"], ps["pos"]["y"] = np.arange(n), -np.arange(n)
    x, y = ps["pos"]["x"].copy(), ps["pos"]["y"].copy()
    run(device, nudge_particles, blocks(n, BLOCK), BLOCK, ps, np.float32(0.5), n)
    assert_equal(ps["pos"]["x"], x + np.float32(0.5), "pos.x written from a call")
    assert_equal(ps["pos"]["y"], y, "pos.y written from a call")
    assert_equal(ps["mass"], x + np.float32(1.0), "mass written from a call's field")


@case(requires=(FP64,))
def record_layout(device: kiln.Device) -> None:
    """Records: C layout with padding (u8, f64, i32, f32x3 fields) round-trips"""
    n = 100
    g = rng(41)
    src: np.ndarray = np.zeros(n, Mixed.dtype)
    src["flag"] = g.integers(0, 200, n)
    src["wide"] = g.uniform(-1e10, 1e10, n)
    src["small"] = g.integers(0, 5, n)
    src["count"] = g.integers(-1000, 1000, n)
    src["dir"] = g.uniform(-1, 1, (n, 3))
    dst: np.ndarray = np.zeros(n, Mixed.dtype)
    run(device, copy_mixed, blocks(n, BLOCK), BLOCK, src, dst, n)
    assert_equal(dst["flag"], src["flag"] + 1, "u8 field")
    assert_equal(dst["wide"], src["wide"] * 2, "f64 field")
    assert_equal(dst["small"], src["small"], "second u8 field")
    assert_equal(dst["count"], src["count"] + 1, "i32 field")
    assert_equal(dst["dir"], src["dir"] * src["small"][:, None].astype(np.float32),
                 "f32x3 field")


@case()
def variants(device: kiln.Device) -> None:
    """Variants: arrays of a tagged union, match (positional, keyword, unit, _ cases)"""
    n = 200
    g = rng(42)
    kinds = g.integers(0, 3, n)
    a, b = g.uniform(0.5, 2, n).astype(np.float32), g.uniform(0.5, 2, n).astype(np.float32)
    values = [Circle(a[i]) if k == 0 else Rect(a[i], b[i]) if k == 1 else Empty()
              for i, k in enumerate(kinds)]
    shapes, grown = Shape.array(values), np.zeros(n, Shape.dtype)
    areas = np.zeros(n, np.float32)
    run(device, shape_areas, blocks(n, BLOCK), BLOCK, shapes, areas, grown, Rect(2.0, 0.5), n)
    expected = np.where(kinds == 0, 3 * a * a, np.where(kinds == 1, a * b, -1)) + 1.0
    assert_close(areas, expected, "areas")
    want = Shape.array([Circle(9.0)] + [Rect(a[i], 2 * a[i]) if k == 0 else Circle(a[i])
                                        if k == 1 else Empty() for i, k in
                                        enumerate(kinds)][1:])
    assert_equal(grown["tag"], want["tag"], "tags")
    for tag, case_name, fields in ((0, "Circle", ("r",)), (1, "Rect", ("w", "h"))):
        rows = want["tag"] == tag
        for f in fields:
            assert_close(grown[case_name][f][rows], want[case_name][f][rows],
                         f"{case_name}.{f}")


@case()
def vectors(device: kiln.Device) -> None:
    """Vectors: f32x4 arithmetic with scalars, comparisons, math, dot and length"""
    n = 257
    g = rng(43)
    a = g.uniform(-1, 1, (n, 4)).astype(np.float32)
    b = g.uniform(-1, 1, (n, 4)).astype(np.float32)
    b[::7] = a[::7]
    out = np.zeros((n, 4), np.float32)
    dots, flags = np.zeros(n, np.float32), np.zeros(n, np.int32)
    offset = (1.0, -2.0, 3.0, 0.5)
    run(device, vector_math, blocks(n, BLOCK), BLOCK, a, b, out, dots, flags, offset, n)
    w = (a + b) * 2 - np.array(offset, np.float32) / 4
    w = np.fmax(w, -b) + np.abs(a) * 0.5
    w[:, 1] = np.sqrt(np.abs(w[:, 1]))
    assert_close(out, -w, "element-wise vector arithmetic", rtol=1e-5, atol=1e-6)
    expected = (a * b).sum(1) + np.sqrt((a * a).sum(1)) + a[:, 0] * b[:, 3]
    assert_close(dots, expected, "dot and length", rtol=1e-5, atol=1e-6)
    want = ((a < b).all(1) + 2 * (a == b).any(1) + 4 * (a[:, 2] >= 0.5)).astype(np.int32)
    assert_equal(flags, want, "vector comparisons")


@case()
def vector_geometry_ops(device: kiln.Device) -> None:
    """Vectors: f32x3 cross and normalize"""
    n = 100
    g = rng(44)
    a = g.uniform(-1, 1, (n, 3)).astype(np.float32)
    b = g.uniform(-1, 1, (n, 3)).astype(np.float32)
    crossed, unit = np.zeros_like(a), np.zeros_like(a)
    run(device, vector_geometry, blocks(n, BLOCK), BLOCK, a, b, crossed, unit, n)
    assert_close(crossed, np.cross(a, b), "cross", rtol=1e-5, atol=1e-6)
    shifted = a + np.array([0, 0, 1], np.float32)
    assert_close(unit, shifted / np.linalg.norm(shifted, axis=1, keepdims=True), "normalize",
                 rtol=1e-5, atol=1e-6)


@case()
def vector_integer_ops(device: kiln.Device) -> None:
    """Vectors: i32x4 and u32x2 arithmetic (floor division, modulo, shifts, xor)"""
    n = 150
    g = rng(45)
    a = g.integers(-1000, 1000, (n, 4)).astype(np.int32)
    m = g.integers(0, 2**32 - 1, (n, 2), dtype=np.uint32)
    out = np.zeros_like(a)
    expected_m = m[:, ::-1] + np.uint32(1)
    run(device, vector_integers, blocks(n, BLOCK), BLOCK, a, out, m, n)
    want = (a * 3 + np.array([1, 2, 3, 4], np.int32)) // 2 % 7 ^ (a << 1)
    assert_equal(out, want, "i32x4 arithmetic")
    assert_equal(m, expected_m, "u32x2 swizzle and wrap-around")


@case(requires=(FP64,))
def vector_f64(device: kiln.Device) -> None:
    """Vectors: f64x2 arithmetic and a conversion from f32x2"""
    n = 70
    a = rng(46).uniform(-1, 1, (n, 2))
    out = np.zeros_like(a)
    run(device, vector_doubles, blocks(n, BLOCK), BLOCK, a, out, n)
    assert_close(out, (a + np.array([1.5, 2.5])) * 0.5, "f64x2", rtol=1e-12)


@case()
def vector_copies(device: kiln.Device) -> None:
    """Vectors: whole f32x4 loads and stores through device arrays"""
    n = 1000
    src = kiln.to_device(rng(47).uniform(-1, 1, (n, 4)).astype(np.float32), device)
    dst = kiln.zeros(n, f32x4, device)
    run(device, vector_copy, blocks(n, BLOCK), BLOCK, src, dst, np.float32(3.0), n)
    assert_close(dst.numpy(), src.numpy() * 3, "scaled f32x4 copy")


@case()
def block_arrays_of_records(device: kiln.Device) -> None:
    """Records: shared arrays of records and private arrays of vectors"""
    n = 200
    out = np.zeros(n, np.float32)
    run(device, block_records, blocks(n, BLOCK), BLOCK, out, n)
    i = np.arange(n)
    mirrored = i - i % BLOCK + BLOCK - 1 - i % BLOCK
    assert_equal(out, (mirrored + 3 + 7).astype(np.float32), "shared records")


@kiln.kernel
def variant_tags(shapes: Shape[:], out: i32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        s = shapes[i]
        out[i, 0] = s.tag
        out[i, 1] = i32(s.tag == Shape.tag(Rect))
        out[i, 2] = i32(isinstance(s, Empty))
        out[i, 3] = shapes[i].tag * 10


@case()
def variant_tag_reads(device):
    """A variant's tag read in kernels: s.tag, Shape.tag(Case) as a constant, and
    isinstance(s, Case), as on the host."""
    values = [Circle(1.0), Rect(2.0, 3.0), Empty(), Rect(1.0, 1.0), Circle(0.5)]
    tags = np.array([Shape.tag(type(v)) for v in values], np.int32)
    out = np.zeros((len(values), 4), np.int32)
    run(device, variant_tags, 1, 64, Shape.array(values), out, len(values))
    expected = np.stack([tags, tags == 1, tags == 2, tags * 10], axis=1).astype(np.int32)
    assert_equal(out, expected, "tags")


@kiln.func
def polar(x: f32, y: f32):
    r = kiln.sqrt(x * x + y * y)
    if r == 0.0:
        return f32(0.0), f32(0.0)  # an early return of a tuple
    return r, kiln.atan2(y, x)


@kiln.func
def scaled(v: f32x3, k: f32) -> f32x3:
    if k < 0.0:
        return -v * (-k)
    return v * k


@kiln.func
def step_of(p: Vec2, dt: f32) -> Vec2:
    return Vec2(p.x + dt, p.y * 2.0)


@kiln.func
def shape_for(i: i32) -> Shape:
    if i % 3 == 0:
        return Circle(f32(i))
    if i % 3 == 1:
        return Rect(f32(i), 2.0)
    return Empty()


@kiln.kernel
def aggregate_results(xy: f32[:, :], vs: f32x3[:], out: f32[:, :], n: i32):
    i = kiln.global_id(0)
    if i < n:
        r, theta = polar(xy[i, 0], xy[i, 1])
        out[i, 0] = r
        out[i, 1] = theta
        out[i, 2] = scaled(vs[i], f32(i) - 2.0).z      # a returned vector in an expression
        p = step_of(Vec2(xy[i, 0], xy[i, 1]), 0.5)
        out[i, 3] = p.x + p.y
        out[i, 4] = area(shape_for(i))                   # a returned variant, passed on


@case()
def aggregate_returns(device):
    """Device functions return tuples (unpacked by the caller), vectors, records and
    variants, early returns included."""
    n = 9
    r = rng(63)
    xy = r.uniform(-1, 1, (n, 2)).astype(np.float32)
    xy[4] = 0.0
    vs = r.random((n, 3), np.float32)
    out = np.zeros((n, 5), np.float32)
    run(device, aggregate_results, 1, 32, xy, vs, out, n)
    k = np.arange(n, dtype=np.float32) - 2
    areas = [3.0 * i * i if i % 3 == 0 else 2.0 * i if i % 3 == 1 else -1.0 for i in range(n)]
    radius = np.hypot(xy[:, 0], xy[:, 1])
    expected = np.stack([radius, np.where(radius == 0, 0, np.arctan2(xy[:, 1], xy[:, 0])),
                         vs[:, 2] * k,  # both branches of scaled are v * k
                         xy[:, 0] + 0.5 + xy[:, 1] * 2, areas], axis=1)
    assert_close(out, expected, "out", rtol=1e-5, atol=1e-6)
