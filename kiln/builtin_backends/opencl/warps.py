"""Warp operations as OpenCL subgroup functions (cl_khr_subgroups, cl_khr_subgroup_shuffle,
cl_khr_subgroup_ballot).

Only devices with all three extensions report a warp size above 1 (`runtime._warp_size`);
on the others every work-item is its own subgroup and the shared pipeline lowers warp
operations away (`kiln.ir.passes.warps`). Shuffles past the subgroup return the calling
work-item's own value, as on CUDA, by shuffling from the work-item itself.
"""

from __future__ import annotations

from ...ir.intrinsics import Spelling

SUBGROUP_EXTENSIONS = ("cl_khr_subgroups", "cl_khr_subgroup_shuffle", "cl_khr_subgroup_ballot")

LANE = "get_sub_group_local_id()"
SIZE = "get_sub_group_size()"


def _relative(op: str) -> str:
    """A shuffle from lane `LANE op offset`, or from the own lane past the subgroup."""
    source = f"({LANE} {op} (uint)({{1}}))"
    return f"sub_group_shuffle({{0}}, {source} < {SIZE} ? {source} : {LANE})"


WARP_SPELLINGS: dict[str, Spelling] = {
    "warp_size": f"(int){SIZE}",
    "lane_id": f"(int){LANE}",
    "shuffle": f"sub_group_shuffle({{0}}, (uint)({{1}}) % {SIZE})",
    "shuffle_down": _relative("+"),
    "shuffle_xor": _relative("^"),
    "vote_all": "(sub_group_all({0}) != 0)",
    "vote_any": "(sub_group_any({0}) != 0)",
    "ballot": "as_ulong(sub_group_ballot({0}).xy)",
}
