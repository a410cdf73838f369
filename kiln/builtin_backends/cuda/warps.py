"""CUDA's warp operations: `__shfl*_sync` and `__*_sync` votes over the full warp mask.

Warps are 32 consecutive threads in linear thread order (x fastest). The full mask assumes
every thread of the warp takes part: blocks should have a multiple of 32 threads (the
convergence check already rejects warp operations under thread-dependent control).
"""

from __future__ import annotations

from ...ir.intrinsics import Spelling

FULL_MASK = "0xffffffffu"
LINEAR_THREAD = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"

WARP_SPELLINGS: dict[str, Spelling] = {
    "warp_size": "warpSize",
    "lane_id": f"(int32_t)({LINEAR_THREAD} & (warpSize - 1))",
    "shuffle": f"__shfl_sync({FULL_MASK}, {{0}}, {{1}})",
    # a negative offset reads past the warp, like one too large: the own value
    "shuffle_down": f"__shfl_down_sync({FULL_MASK}, {{0}}, (unsigned)({{1}}))",
    "shuffle_xor": f"__shfl_xor_sync({FULL_MASK}, {{0}}, {{1}})",
    "vote_all": f"(__all_sync({FULL_MASK}, {{0}}) != 0)",
    "vote_any": f"(__any_sync({FULL_MASK}, {{0}}) != 0)",
    "ballot": f"(uint64_t)__ballot_sync({FULL_MASK}, {{0}})",
}
