"""The point-to-point calls the all-reduce algorithms are built of (gloo isend/irecv),
with torch imported on first use: the orchestrator reads the algorithms' names and the
tree's window without loading torch."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

__all__ = ["MIN_SLICE_BYTES", "empty", "split", "isend", "irecv", "post_recv"]

# No algorithm cuts a message below this many bytes (a slice, a chunk's part).
MIN_SLICE_BYTES = 16 * 1024


def empty(numel: int, dtype) -> torch.Tensor:
    import torch

    return torch.empty(numel, dtype=dtype)


def split(tensor: torch.Tensor, parts: int) -> list[torch.Tensor]:
    import torch

    return list(torch.tensor_split(tensor, parts))


def isend(tensor: torch.Tensor, dst: int, tag: int) -> Any:
    import torch.distributed as dist

    return dist.isend(tensor, dst=dst, tag=tag)


def irecv(tensor: torch.Tensor, src: int, tag: int) -> Any:
    import torch.distributed as dist

    return dist.irecv(tensor, src=src, tag=tag)


def post_recv(recvs: list, src: int, numel: int, dtype, tag: int, what: str) -> None:
    """Post a receive of `numel` elements from rank `src`; append (work, buffer, what)."""
    buf = empty(numel, dtype)
    recvs.append((irecv(buf, src, tag), buf, what))
