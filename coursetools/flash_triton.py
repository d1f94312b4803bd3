"""FlashAttention-2's forward pass as a Triton kernel: notebook 14's tiles and online softmax, run on a GPU.

One program computes one tile of BLOCK_Q queries of one (batch, head): it loads its queries once, then walks
over the key tiles, keeping the running maximum m_i, the running sum l_i and the unnormalized output acc in the
GPU's on-chip memory (registers and SRAM). A [BLOCK_Q, BLOCK_K] tile of scores exists only there, never in the
GPU's main memory, which is what makes the kernel fast: attention is bound by memory traffic, not arithmetic.

Restrictions: q, k, v are [B, H, T, d] on a CUDA GPU (or on the CPU under TRITON_INTERPRET=1, for testing);
d is a power of two from 16 to 128 (tl.dot needs every side of a product to be a power of two and at least
16, and a wider head no longer fits a tile in on-chip memory); float32, float16 or bfloat16, summed in float32.
float32 tiles take twice the shared memory: with d = 128, 64 x 64 tiles fit an H100's but not an A100's or a
T4's (use block_q=32, block_k=32 there).
Causal attention aligns bottom-right, as in the notebook: query i sees the keys j <= i + T_k - T_q.
"""

import math
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _attend_to_key_tile(q, acc, m_i, l_i, k_start, v_start, first_key, rows, t_k, shift, scale,
                        D: tl.constexpr, BLOCK_K: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                        PRECISION: tl.constexpr):
    keys = first_key + tl.arange(0, BLOCK_K)
    dims = tl.arange(0, D)
    real = keys < t_k  # the last key tile may run past T_k: those keys are not loaded
    k = tl.load(k_start + keys[:, None] * D + dims[None, :], mask=real[:, None], other=0.0)
    v = tl.load(v_start + keys[:, None] * D + dims[None, :], mask=real[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale  # [BLOCK_Q, BLOCK_K] scores, float32
    if MASKED:  # only the tiles across the diagonal or past T_k pay for a mask
        visible = real[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None] + shift)
        s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    # exp(m_i - m_new) <= 1 rescales what was summed relative to the old maximum to the new one; every exponent
    # is <= 0, so nothing overflows. Each row sees key 0 in its first tile, so m_new is never -inf.
    alpha = tl.exp(m_i - m_new)
    p = tl.exp(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    # P V on the tensor cores in the inputs' dtype, added to a float32 accumulator
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return acc, m_new, l_i


@triton.jit
def _flash_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, t_q, t_k, scale,
                          D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, CAUSAL: tl.constexpr,
                          PRECISION: tl.constexpr):
    tile, head = tl.program_id(0), tl.program_id(1)  # head: the flat (batch, head) index
    first_row = tile * BLOCK_Q
    rows = first_row + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, D)
    q_start = q_ptr + head.to(tl.int64) * t_q * D
    k_start = k_ptr + head.to(tl.int64) * t_k * D
    v_start = v_ptr + head.to(tl.int64) * t_k * D
    q = tl.load(q_start + rows[:, None] * D + dims[None, :], mask=rows[:, None] < t_q, other=0.0)

    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)  # running maximum of each query's scores
    l_i = tl.zeros([BLOCK_Q], tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)  # running sum of exp(score - m_i) * v

    shift = t_k - t_q  # bottom-right alignment: query i attends to the keys j <= i + shift
    if CAUSAL:
        unmasked_end = (first_row + shift + 1) // BLOCK_K * BLOCK_K  # whole tiles the tile's first query sees
        end = tl.minimum(first_row + BLOCK_Q, t_q) + shift  # one past the last key its last query sees
    else:
        unmasked_end = t_k // BLOCK_K * BLOCK_K
        end = t_k
    # The key tiles every query of the tile sees entirely: no mask. Tiles past `end` (the future) are skipped.
    for first_key in range(0, unmasked_end, BLOCK_K):
        acc, m_i, l_i = _attend_to_key_tile(q, acc, m_i, l_i, k_start, v_start, first_key, rows, t_k, shift, scale,
                                            D, BLOCK_K, False, CAUSAL, PRECISION)
    for first_key in range(unmasked_end, end, BLOCK_K):  # across the diagonal, or the last partial tile
        acc, m_i, l_i = _attend_to_key_tile(q, acc, m_i, l_i, k_start, v_start, first_key, rows, t_k, shift, scale,
                                            D, BLOCK_K, True, CAUSAL, PRECISION)

    real = rows < t_q
    o_start = o_ptr + head.to(tl.int64) * t_q * D
    tl.store(o_start + rows[:, None] * D + dims[None, :], (acc / l_i[:, None]).to(o_ptr.dtype.element_ty),
             mask=real[:, None])
    # lse = log sum_j exp(s_j), one float32 number per query: all the backward pass needs to recompute any
    # probability, P_ij = exp(S_ij - lse_i), instead of keeping the [T_q, T_k] matrix P.
    tl.store(lse_ptr + head.to(tl.int64) * t_q + rows, m_i + tl.log(l_i), mask=real)


def flash_attention_triton(q, k, v, causal=False, block_q=64, block_k=64):
    """q [B, H, T_q, d], k and v [B, H, T_k, d] -> (out [B, H, T_q, d] in q's dtype, lse [B, H, T_q] float32)."""
    assert q.dim() == k.dim() == v.dim() == 4 and k.shape == v.shape and q.shape[:2] == k.shape[:2], \
        "q is [B, H, T_q, d], k and v [B, H, T_k, d]"
    (b, h, t_q, d), t_k = q.shape, k.shape[2]
    assert d == k.shape[3] and d in (16, 32, 64, 128), f"head dim d must be a power of two from 16 to 128, not {d}"
    assert q.dtype == k.dtype == v.dtype and q.dtype in (torch.float32, torch.float16, torch.bfloat16), \
        f"q, k, v must share one dtype among float32, float16, bfloat16, not {q.dtype}, {k.dtype}, {v.dtype}"
    assert all(n >= 16 and n & (n - 1) == 0 for n in (block_q, block_k)), "tiles: powers of two, at least 16"
    assert t_k > 0 and (t_q <= t_k or not causal), "causal attention needs T_q <= T_k (bottom-right alignment)"
    assert q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1", "a CUDA tensor, or TRITON_INTERPRET=1 on the CPU"
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the kernel indexes [B*H, T, d] rows directly
    o = torch.empty_like(q)
    lse = torch.empty((b, h, t_q), dtype=torch.float32, device=q.device)
    # float32 products as float32 ("ieee"), not TF32's 10-bit mantissas; the flag changes nothing for 16-bit inputs
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    grid = (triton.cdiv(t_q, block_q), b * h)  # one program per (query tile, batch * head)
    _flash_forward_kernel[grid](q, k, v, o, lse, t_q, t_k, 1 / math.sqrt(d), D=d, BLOCK_Q=block_q,
                                BLOCK_K=block_k, CAUSAL=causal, PRECISION=precision)
    return o, lse
