"""Buffers that outlive a plan, so that a captured CUDA graph replays launches whose pointers stay valid.

A plan without a workspace allocates its split-decode states and its page-list offsets per call, which is
right for one-off launches and wrong under CUDA graphs: a graph keeps the addresses it was captured with,
and the next plan's fresh tensors would live elsewhere (FlashInfer's wrappers take caller-owned workspace
buffers for the same reason). A `DecodeWorkspace` is allocated once for the largest batch an engine runs; each
plan takes views of it. The arrival counters start at zero and every combining program re-arms its own, so
they are zero again after each launch, replays included.
"""

from __future__ import annotations

import torch

from . import heuristics as K
from .dispatch import decode_regions
from .errors import UnsupportedLayoutError

__all__ = ["DecodeWorkspace"]


class DecodeWorkspace:
    """Split-decode states, arrival counters, decode-cascade states and page-list offsets for batches up to `max_batch`.

    Parameters
    ----------
    max_batch : int
        The most requests one step plans (an engine's ``max_num_seqs``).
    num_qo_heads, num_kv_heads, head_dim, cartridge_len : int
        The problem the plans will have (checked again by each plan).
    max_live : int
        The longest live suffix a plan may name as its bound (an engine's ``max_model_len``): the split count
        grows with the keys, so this bounds the states a plan can need.
    device : torch.device or str
        Where the plans' tensors live.
    decode_cascade : bool or None
        The planning wrapper's ``decode_cascade`` (`CartridgeAttention`), whose configurations the states must fit.
    """

    def __init__(
        self,
        *,
        max_batch: int,
        num_qo_heads: int,
        num_kv_heads: int,
        head_dim: int,
        cartridge_len: int,
        max_live: int,
        device: torch.device | str,
        decode_cascade: bool | None = None,
    ) -> None:
        if max_batch < 1 or max_live < 1 or num_kv_heads < 1 or num_qo_heads % num_kv_heads:
            raise UnsupportedLayoutError(
                "DecodeWorkspace", "max_batch, max_live >= 1 and num_qo_heads a multiple of num_kv_heads",
                f"max_batch={max_batch}, max_live={max_live}, heads {num_qo_heads}/{num_kv_heads}",
            )  # fmt: skip
        group = num_qo_heads // num_kv_heads
        self.max_batch = max_batch
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        # The largest state any decode configuration inside the bounds asks for: the dispatch's regions over
        # (batch, live) each hold one configuration, whose states grow with the batch. Not only the bound's: the
        # configuration is not monotone in the live keys (below the packing batch a cascade only up to
        # CASCADE_UNPACKED_MAX_LIVE).
        rows = ml = cart = 1
        for region in decode_regions(
            group, head_dim, max_batch, max_live, num_kv_heads=num_kv_heads, cartridge_len=cartridge_len,
            cascade=decode_cascade,
        ):  # fmt: skip
            cfg, batch = region.config, region.batch[1] if region.batch else max_batch
            if cfg.splits > 1:
                states = batch * num_kv_heads * cfg.splits
                rows = max(rows, states * cfg.block_m * head_dim)
                ml = max(ml, states * 2 * cfg.block_m)
            cart = max(cart, K.cascade_state_rows(cfg, batch, num_qo_heads))
        f32 = {"dtype": torch.float32, "device": self.device}
        self.num_qo_heads = num_qo_heads
        self.decode_cascade = decode_cascade  # its states fit only a wrapper with the same setting
        self.split_o = torch.empty(rows, **f32)
        self.split_ml = torch.empty(ml, **f32)
        self.cart_o = torch.empty(cart * head_dim, **f32)
        self.cart_ml = torch.empty(cart * 2, **f32)
        self.split_count = torch.zeros(max_batch * num_kv_heads, dtype=torch.int32, device=self.device)
        self.unused = torch.zeros(1, dtype=torch.int32, device=self.device)  # decode's prefill-tile arguments
        self._row_starts: dict[int, torch.Tensor] = {}

    def row_starts(self, row_stride: int, batch: int) -> torch.Tensor:
        """``[0, row_stride, 2 * row_stride, ...]`` (``batch + 1`` entries): row b of a block table as request
        b's page list. Made once per stride (an engine's block table keeps one)."""
        self.check_batch(batch)
        starts = self._row_starts.get(row_stride)
        if starts is None:
            end = (self.max_batch + 1) * row_stride
            starts = torch.arange(0, end, row_stride, dtype=torch.int32, device=self.device)
            self._row_starts[row_stride] = starts
        return starts[: batch + 1]

    def split_views(self, config: K.KernelConfig, batch: int) -> dict[str, torch.Tensor]:
        """The split-decode arguments of one launch, as views of the workspace."""
        self.check_batch(batch)
        views = self._cascade_views(config, batch)
        if config.splits == 1:
            views.update(split_o=self.split_o[:1], split_ml=self.split_ml[:1], split_count=self.split_count[:1])
            return views
        states = batch * self.num_kv_heads * config.splits
        need_o, need_ml = states * config.block_m * self.head_dim, states * 2 * config.block_m
        if need_o > self.split_o.numel() or need_ml > self.split_ml.numel():
            raise UnsupportedLayoutError(
                "decode workspace",
                f"room for {states} split states of {config.block_m} rows (allocate it for this batch and bound)",
                f"{self.split_o.numel() // (config.block_m * self.head_dim)} states",
            )
        views.update(
            split_o=self.split_o[:need_o],
            split_ml=self.split_ml[:need_ml],
            split_count=self.split_count[: batch * self.num_kv_heads],
        )
        return views

    def _cascade_views(self, config: K.KernelConfig, batch: int) -> dict[str, torch.Tensor]:
        """A decode cascade's cartridge states (one-element stand-ins without a cascade)."""
        if not config.cart_rows:
            return {"cart_o": self.cart_o[:1], "cart_ml": self.cart_ml[:1]}
        rows = K.cascade_state_rows(config, batch, self.num_qo_heads)
        if rows * self.head_dim > self.cart_o.numel():
            raise UnsupportedLayoutError(
                "decode workspace",
                f"room for {rows} cascade rows (allocate it for this batch and bound)",
                f"{self.cart_o.numel() // self.head_dim} rows",
            )
        return {"cart_o": self.cart_o[: rows * self.head_dim], "cart_ml": self.cart_ml[: rows * 2]}

    def check_batch(self, batch: int) -> None:
        if not 1 <= batch <= self.max_batch:
            raise UnsupportedLayoutError("batch for this decode workspace", f"1 to {self.max_batch}", batch)
