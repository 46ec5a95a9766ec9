"""The row codec in torch, as the reference the compiled codec (csrc/row_codec.hpp) must equal
to the bit: the same float operations in the same order, vectorised over rows."""
import torch

from dgl_sni.halo.quantize import HEADER, packed_width


def encode(x: torch.Tensor, bits: int, dither: torch.Tensor) -> torch.Tensor:
    x = x.detach().to(torch.float32)
    n, d = x.shape
    width = packed_width(d, bits)
    out = torch.empty((n, width), dtype=torch.uint8)
    levels = (1 << bits) - 1
    cols = x.t().contiguous()
    lo, hi = cols.min(0).values, cols.max(0).values
    scale = (hi - lo) / levels
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    v = (x - lo[:, None]) / safe[:, None]
    v.add_(dither[: n * d].view(v.shape))
    codes = v.to(torch.int32).clamp_(max=levels).to(torch.uint8)
    if bits < 8:
        per = 8 // bits
        if d % per:
            codes = torch.cat((codes, torch.zeros((n, per - d % per), dtype=torch.uint8)), 1)
        packed = codes[:, 0::per].clone()
        for k in range(1, per):
            packed |= codes[:, k::per] << (bits * k)
        codes = packed
    out[:, : width - HEADER] = codes
    out[:, width - HEADER:] = torch.stack((lo, scale), 1).contiguous().view(torch.uint8)
    return out


def decode(packed: torch.Tensor, dim: int, bits: int, dtype=torch.float32) -> torch.Tensor:
    n, width = packed.shape
    header = packed[:, width - HEADER:].contiguous().view(torch.float32)
    codes = packed[:, : width - HEADER]
    if bits < 8:
        per, mask = 8 // bits, (1 << bits) - 1
        codes = torch.stack([(codes >> (bits * k)) & mask for k in range(per)], 2).reshape(n, -1)[:, :dim]
    return header[:, :1].to(dtype) + codes.to(dtype) * header[:, 1:].to(dtype)
