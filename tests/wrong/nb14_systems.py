"""Wrong versions of notebook 14's answers (14_systems): see ``wrong/__init__.py``."""

from autograder.notebooks.nb14_systems import (
    ACTIVATIONS,
    AVERAGE,
    BUCKETS,
    COMPILED_ADAMW,
    FLASH_BACKWARD,
    FLASH_FORWARD,
    MASKED_LOSS,
    OVERLAP,
    SHARDED,
    TOP_OPERATORS,
)
from wrong import WrongVersion, edit

_RULE = "this exercise's rule is: no ready-made attention or softmax"
_MEMORY = "that is a quadratic tensor"

# top_operators ---------------------------------------------------------------------------------------------------
_KEEP = 'if event.get("cat") == "cpu_op" and event.get("ph") == "X":'
_GROUP = 'threads[event["pid"], event["tid"]].append(event)'
_SORT = 'events.sort(key=lambda e: (e["ts"], -e["dur"]))'
_PARENT = """            if open_events:  # its time is its parent's total, not the parent's own
                self_time[open_events[-1]["name"]] -= event["dur"]"""
_RANK = "ranked = sorted(self_time.items(), key=lambda item: (-item[1], item[0]))"

# block_activation_bytes ------------------------------------------------------------------------------------------
_QKV_OUT = "+ 3 * tokens * width  # q and k (the first product's operands) and v (the second's): qkv's output"
_P_KEPT = "+ batch * heads * seq * seq  # softmax's output P, also the second product's operand: kept once"
_LN_STATS = "+ 2 * tokens  # ln1's mean and 1/sigma, [B, T, 1] each"
_GELU_OUT = "+ 4 * tokens * width  # down's input: gelu's output"
_INPUT = "tokens * width  # ln1's input: the block's input"
_BYTES = "return 4 * floats + seq * seq  # 4 bytes per float32 number, and the causal mask's one byte per entry"

# flash_attention_forward -----------------------------------------------------------------------------------------
_Q_TILE = "q_tile = q[..., i : i + block_q, :] * scale"
_ROWS = "rows = torch.arange(i, i + q_tile.shape[-2]) + offset  # the tile's queries, as positions among the keys"
_CAUSAL_MASK = "scores = scores.masked_fill(cols[None, :] > rows[:, None], -math.inf)"
_ACC = "acc = acc * correction + p @ v[..., j : j + block_k, :]"
_OUT = "out[..., i : i + block_q, :] = acc / running_sum"
_LSE = "lse[..., i : i + block_q] = (running_max + torch.log(running_sum)).squeeze(-1)"
_P = "p = torch.exp(scores - new_max)"
_NEW_MAX = "new_max = torch.maximum(running_max, scores.amax(-1, keepdim=True))"
_SKIP = """            if causal and j > rows[-1]:
                break  # every key from here on is in the future of every query of the tile"""

# flash_attention_backward ----------------------------------------------------------------------------------------
_SAVE = "ctx.save_for_backward(q, k, v, out, lse)"
_DELTA = "delta = (grad_out * out).sum(-1, keepdim=True)  # D_i = sum_j P_ij dP_ij = dO_i . O_i"
_DQ = "dq[..., rows, :] += ds @ k_tile * scale"
_DK = "dk[..., cols, :] += ds.transpose(-2, -1) @ q_tile * scale"
_DV = "dv[..., cols, :] += p.transpose(-2, -1) @ do_tile"
_SCORES_BACK = "scores = (q_tile @ k_tile.transpose(-2, -1)) * scale"
_BACK_MASK = """                if ctx.causal:
                    scores = scores.masked_fill(cols[None, :] > rows[:, None] + offset, -math.inf)"""

# average_gradients, OverlappedGradientSync, BucketedGradientSync -------------------------------------------------
_ALL_REDUCE = "dist.all_reduce(parameter.grad)  # the sum over the ranks, in place"
_DIVIDE = "parameter.grad /= world_size"
_HOOK_SEND = "self.pending.append((parameter, dist.all_reduce(parameter.grad, async_op=True)))"
_OVERLAP_DIVIDE = "parameter.grad /= self.world_size"
_REGISTER = "parameter.register_post_accumulate_grad_hook(self.hook)"
_BUCKET_RULE = "if not self.buckets or size + nbytes > bucket_bytes:"
_BUCKET_ORDER = "for parameter in reversed([p for p in model.parameters() if p.requires_grad]):"
_BUCKET_SEND = "self.pending.append((b, flat, dist.all_reduce(flat, async_op=True)))"
_COPY_BACK = "parameter.grad.copy_(flat[offset : offset + parameter.numel()].view_as(parameter.grad))"

# ShardedAdamW ----------------------------------------------------------------------------------------------------
_MINE = "mine = [p for p in self.params if self.owner[id(p)] == self.rank]"
_BROADCAST = "dist.broadcast(parameter, src=self.owner[id(parameter)])  # from the rank that owns it"

# masked_cross_entropy, adamw_step_ ---------------------------------------------------------------------------------
_WEIGHT = "weight = (targets != ignore_index).to(logits.dtype)  # 1 for a token that counts, 0 for one that does not"
_LOSS_RETURN = "return (nll * weight).sum() / weight.sum()"
_LOG_PROBS = "log_probs = torch.log_softmax(logits.float(), dim=-1)"
_BIAS1 = "bias1 = 1 - beta1**step  # tensors: the step is an input of the compiled graph, not a constant"
_DECAY = "p.mul_(1 - lr * weight_decay)"
_UPDATE = "p.sub_(lr * (m / bias1) / ((v / bias2).sqrt() + eps))"

WRONG_VERSIONS = (
    # top_operators
    WrongVersion(
        TOP_OPERATORS,
        "ranks total times",
        "it ranks total times",
        edit(_PARENT, "            pass"),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "subtracts grandchildren too",
        "grandchildren too",
        edit(
            _PARENT,
            """            for outer in open_events:  # every operator this one is inside
                self_time[outer["name"]] -= event["dur"]""",
        ),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "nests operators of different threads",
        "group the events by (pid, tid) first",
        edit(_GROUP, "threads[0].append(event)"),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "counts annotations as operators",
        "keep the events whose cat is 'cpu_op'",
        edit(_KEEP, 'if event.get("ph") == "X":'),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "sorts by start time only",
        "the longer one is the parent",
        edit(_SORT, 'events.sort(key=lambda e: e["ts"])'),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "ties ranked by name backwards",
        "in another order",
        edit(_RANK, "ranked = sorted(self_time.items(), key=lambda item: (item[1], item[0]), reverse=True)"),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "threads grouped by tid alone",
        "a thread is (pid, tid), not tid alone",
        edit(_GROUP, 'threads[event["tid"]].append(event)'),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "annotations nested among the operators, then dropped",
        "it lets annotations take part in the nesting",
        edit(_KEEP, 'if event.get("ph") == "X":'),
        edit(
            _RANK,
            """ops = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    ranked = sorted(((n, t) for n, t in self_time.items() if n in ops), key=lambda item: (-item[1], item[0]))""",
        ),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "a child must end inside its parent",
        "a child may end a nanosecond after its parent",
        edit(
            'while open_events and event["ts"] >= open_events[-1]["ts"] + open_events[-1]["dur"]:',
            'while open_events and (event["ts"] >= open_events[-1]["ts"] + open_events[-1]["dur"] '
            'or event["ts"] + event["dur"] > open_events[-1]["ts"] + open_events[-1]["dur"]):',
        ),
    ),
    WrongVersion(
        TOP_OPERATORS,
        "nests an operator that starts where another ends",
        "on a hand-made trace",
        edit(
            'while open_events and event["ts"] >= open_events[-1]["ts"]',
            'while open_events and event["ts"] > open_events[-1]["ts"]',
        ),
    ),
    # block_activation_bytes
    WrongVersion(
        ACTIVATIONS,
        "forgets the probabilities",
        "1 [batch, heads, seq, seq] float32 tensor (attention scores or probabilities) too few",
        edit(_P_KEPT, "+ 0"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "counts scores and probabilities",
        "1 [batch, heads, seq, seq] float32 tensor (attention scores or probabilities) too many",
        edit(_P_KEPT, "+ 2 * batch * heads * seq * seq  # the scores and P"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "forgets LayerNorm's statistics",
        "2 [batch, seq, 1] float32 tensors (a LayerNorm keeps its mean and 1/sigma) too few",
        edit(_LN_STATS, "+ 0"),
    ),
    WrongVersion(
        ACTIVATIONS, "counts elements", "it counts elements, not bytes", edit(_BYTES, "return floats + seq * seq")
    ),
    WrongVersion(
        ACTIVATIONS, "counts bf16 bytes", "2 bytes per element", edit(_BYTES, "return 2 * floats + seq * seq")
    ),
    WrongVersion(
        ACTIVATIONS, "forgets the mask", "byte per entry of a [seq, seq] tensor", edit(_BYTES, "return 4 * floats")
    ),
    WrongVersion(ACTIVATIONS, "the mask as float32", "3 bytes", edit(_BYTES, "return 4 * floats + 4 * seq * seq")),
    WrongVersion(
        ACTIVATIONS, "a mask per head", "too many", edit(_BYTES, "return 4 * floats + batch * heads * seq * seq")
    ),
    WrongVersion(
        ACTIVATIONS,
        "GELU's input and output once",
        "4 [batch, seq, width] float32 tensors too few",
        edit(_GELU_OUT, "+ 0"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "the qkv output and q, k, v copies",
        "3 [batch, seq, width] float32 tensors too many",
        edit(_QKV_OUT, "+ 6 * tokens * width"),
    ),
    WrongVersion(
        ACTIVATIONS, "forgets the block's input", "1 [batch, seq, width] float32 tensor too few", edit(_INPUT, "0")
    ),
    WrongVersion(
        ACTIVATIONS,
        "counts the parameters",
        "the parameters",
        edit(_BYTES, "return 4 * floats + seq * seq + 4 * (12 * width * width + 13 * width)"),
    ),
    WrongVersion(ACTIVATIONS, "returns a float", "expected an int", edit(_BYTES, "return 4.0 * floats + seq * seq")),
    WrongVersion(
        ACTIVATIONS,
        "runs the block",
        "without running the block or making tensors",
        code="""def block_activation_bytes(batch, seq, width, heads):
    from coursetools.block_memory import measured_block_bytes

    return measured_block_bytes(batch, seq, width, heads)
""",
    ),
    WrongVersion(
        ACTIVATIONS,
        "heads times the width",
        "not whole numbers of the block's tensors",
        edit(_QKV_OUT, "+ 3 * tokens * width * heads"),
    ),
    # flash_attention_forward
    WrongVersion(
        FLASH_FORWARD,
        "calls F.scaled_dot_product_attention on each tile",
        _RULE,
        code="""def flash_attention_forward(q, k, v, causal=False, block_q=32, block_k=32):
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return out, torch.logsumexp(scores, -1)
""",
    ),
    WrongVersion(
        FLASH_FORWARD,
        "a softmax per key tile",
        _RULE,
        edit(
            _P,
            "p = torch.softmax(scores, -1) * torch.exp(scores.amax(-1, keepdim=True) - new_max) * torch.exp(scores - new_max).sum(-1, keepdim=True)",
        ),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "forgets the scale",
        "not scaled by 1/sqrt(d)",
        edit(_Q_TILE, "q_tile = q[..., i : i + block_q, :]"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "does not divide by the running sum",
        "is not divided by the running sum",
        edit(_OUT, "out[..., i : i + block_q, :] = acc"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "no causal mask inside the diagonal tiles",
        "the causal mask is missing",
        edit(_CAUSAL_MASK, "pass"),
        edit(
            _SKIP,
            """            if False:
                break""",
        ),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "top-left causal alignment, as SDPA's is_causal",
        "aligned top-left",
        edit(_ROWS, "rows = torch.arange(i, i + q_tile.shape[-2])"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "no rescaling of the accumulator",
        "rescale the sum and the output accumulated so far",
        edit(_ACC, "acc = acc + p @ v[..., j : j + block_k, :]"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "returns the running max as lse",
        "it returns the running max m",
        edit(_LSE, "lse[..., i : i + block_q] = running_max.squeeze(-1)"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "returns log(l) as lse",
        "it returns log(l) alone",
        edit(_LSE, "lse[..., i : i + block_q] = torch.log(running_sum).squeeze(-1)"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "lse in bits",
        "it is in bits (log2)",
        edit(_LSE, "lse[..., i : i + block_q] = (running_max / math.log(2) + torch.log2(running_sum)).squeeze(-1)"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "no running max: exp of the raw scores",
        "contains NaN or inf",
        edit(_NEW_MAX, "new_max = torch.zeros_like(running_max)"),
        edit("correction = torch.exp(running_max - new_max)", "correction = torch.ones_like(running_max)"),
        edit(
            "lse[..., i : i + block_q] = (running_max + torch.log(running_sum))",
            "lse[..., i : i + block_q] = torch.log(running_sum)",
        ),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "the running max starts at 0",
        "contains NaN or inf",
        edit(
            "running_max = torch.full((*batch, q_tile.shape[-2], 1), -math.inf, dtype=q.dtype)",
            "running_max = torch.zeros(*batch, q_tile.shape[-2], 1, dtype=q.dtype)",
        ),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "skips the key tile that starts at the query tile's last row",
        "causal",
        edit(
            _SKIP,
            """            if causal and j >= rows[-1]:
                break""",
        ),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "only four-dimensional inputs",
        "your code raised",
        edit("    *batch, t_q, d = q.shape\n", "    b, h, t_q, d = q.shape\n    batch = [b, h]\n"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "returns float64",
        "expected torch.float32",
        edit("    return out, lse\n", "    return out.double(), lse.double()\n"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "key tiles of block_q keys",
        "larger than a tile of block_q x block_k",
        edit("for j in range(0, t_k, block_k):", "for j in range(0, t_k, block_q):"),
        edit(
            "scores = q_tile @ k[..., j : j + block_k, :].transpose(-2, -1)",
            "scores = q_tile @ k[..., j : j + block_q, :].transpose(-2, -1)",
        ),
        edit(_ACC, "acc = acc * correction + p @ v[..., j : j + block_q, :]"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "the attention computed in NumPy",
        _RULE,
        code="""import numpy as np


def flash_attention_forward(q, k, v, causal=False, block_q=32, block_k=32):
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    scores = qn @ np.swapaxes(kn, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], bool), k.shape[-2] - q.shape[-2]), scores, -np.inf)
    row_max = scores.max(-1, keepdims=True)
    weights = np.exp(scores - row_max)
    total = weights.sum(-1, keepdims=True)
    return torch.from_numpy(weights / total @ vn), torch.from_numpy((row_max + np.log(total))[..., 0])
""",
    ),
    WrongVersion(
        FLASH_FORWARD,
        "each row's max taken out in Python, number by number",
        "Python numbers out of tensors",
        edit(
            _NEW_MAX,
            "row_max = torch.tensor([[float(row.max())] for row in scores.reshape(-1, scores.shape[-1])])\n"
            "            new_max = torch.maximum(running_max, row_max.reshape(running_max.shape))",
        ),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "the naive [T, T] attention without a softmax call",
        _MEMORY,
        code="""def flash_attention_forward(q, k, v, causal=False, block_q=32, block_k=32):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
        scores = scores.masked_fill(~allowed, -math.inf)
    row_max = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - row_max)
    total = weights.sum(-1, keepdim=True)
    return weights / total @ v, (row_max + torch.log(total)).squeeze(-1)
""",
    ),
    WrongVersion(
        FLASH_FORWARD,
        "a [T, T] causal mask built once",
        _MEMORY,
        edit(
            "    out = torch.empty_like(q)\n",
            "    out = torch.empty_like(q)\n    allowed = torch.ones(t_q, t_k, dtype=torch.bool).tril(offset)\n",
        ),
        edit(_CAUSAL_MASK, "scores = scores.masked_fill(~allowed[i : i + block_q, j : j + block_k], -math.inf)"),
    ),
    WrongVersion(
        FLASH_FORWARD,
        "tiles over queries only, a strip of scores against every key",
        _MEMORY,
        code="""def flash_attention_forward(q, k, v, causal=False, block_q=32, block_k=32):
    t_q, t_k = q.shape[-2], k.shape[-2]
    out, lse = torch.empty_like(q), torch.empty(q.shape[:-1])
    for i in range(0, t_q, block_q):
        scores = q[..., i : i + block_q, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            rows = torch.arange(i, i + scores.shape[-2]) + t_k - t_q
            scores = scores.masked_fill(torch.arange(t_k)[None, :] > rows[:, None], -math.inf)
        row_max = scores.amax(-1, keepdim=True)
        weights = torch.exp(scores - row_max)
        total = weights.sum(-1, keepdim=True)
        out[..., i : i + block_q, :] = weights / total @ v
        lse[..., i : i + block_q] = (row_max + torch.log(total)).squeeze(-1)
    return out, lse
""",
    ),
    WrongVersion(
        FLASH_FORWARD,
        "keeps every tile's scores",
        "do not keep every tile's scores",
        edit("    out = torch.empty_like(q)\n", "    out = torch.empty_like(q)\n    seen_tiles = []\n"),
        edit(_P, "p = torch.exp(scores - new_max)\n            seen_tiles.append(p)"),
    ),
    # flash_attention_backward
    WrongVersion(
        FLASH_BACKWARD,
        "forgets D = rowsum(dO * O)",
        "D = rowsum(dO * O) per query; it is missing",
        edit(_DELTA, "delta = torch.zeros_like(out[..., :1])"),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "dQ without the scale",
        "dQ = dS K * scale",
        edit(_DQ, "dq[..., rows, :] += ds @ k_tile"),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "dK without the scale",
        "dK = dS^T Q * scale",
        edit(_DK, "dk[..., cols, :] += ds.transpose(-2, -1) @ q_tile"),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "recomputes the scores without the scale",
        "FlashAttention's gradients",
        edit(_SCORES_BACK, "scores = q_tile @ k_tile.transpose(-2, -1)"),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "dK and dV swapped",
        "dK and dV are swapped",
        edit("return dq, dk, dv, None, None, None", "return dq, dv, dk, None, None, None"),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "no causal mask in the backward pass",
        "FlashAttention's gradients",
        edit(_BACK_MASK, "                pass"),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "top-left causal mask in the backward pass",
        "T_q != T_k",
        edit("offset = t_k - t_q  # causal: query i sees keys j <= i + offset", "offset = 0"),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "P as exp(S) / exp(lse)",
        "contains NaN or inf",
        edit("p = torch.exp(scores - lse_tile)", "p = torch.exp(scores) / torch.exp(lse_tile)"),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "only four-dimensional inputs in backward",
        "your code raised",
        edit(
            "t_q, t_k, d = q.shape[-2], k.shape[-2], q.shape[-1]", "b, h, t_q, d = q.shape\n        t_k = k.shape[-2]"
        ),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "keeps the probability tiles in a list on ctx",
        "lists included",
        edit(
            _SAVE,
            """ctx.save_for_backward(q, k, v, out, lse)
        ctx.tiles = []
        for i in range(0, q.shape[-2], block_q):
            scores = q[..., i : i + block_q, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            ctx.tiles.append(torch.exp(scores - lse[..., i : i + block_q, None]))""",
        ),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "saves the probabilities",
        "recomputes the probabilities from the saved log-sum-exp",
        edit(
            _SAVE,
            """scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
            scores = scores.masked_fill(~allowed, -math.inf)
        ctx.probabilities = torch.exp(scores - lse[..., None])
        ctx.save_for_backward(q, k, v, out, lse)""",
        ),
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "autograd through a naive attention in backward",
        _MEMORY,
        code="""class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=32, block_k=32):
        out, lse = flash_attention_forward(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if ctx.causal:
                allowed = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - q.shape[-2])
                scores = scores.masked_fill(~allowed, -math.inf)
            probabilities = torch.exp(scores - scores.amax(-1, keepdim=True))
            probabilities = probabilities / probabilities.sum(-1, keepdim=True)
            dq, dk, dv = torch.autograd.grad(probabilities @ v, (q, k, v), grad_out)
        return dq, dk, dv, None, None, None
""",
    ),
    WrongVersion(
        FLASH_BACKWARD,
        "calls F.scaled_dot_product_attention's autograd in backward",
        _RULE,
        code="""class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=32, block_k=32):
        out, lse = flash_attention_forward(q, k, v, causal, block_q, block_k)
        ctx.save_for_backward(q, k, v)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=ctx.causal)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_out)
        return dq, dk, dv, None, None, None
""",
    ),
    # average_gradients
    WrongVersion(AVERAGE, "sums without averaging", "summed over the ranks, not averaged", edit(_DIVIDE, "pass")),
    WrongVersion(
        AVERAGE,
        "divides twice",
        "divided by the world size twice",
        edit(_DIVIDE, "parameter.grad /= world_size * world_size"),
    ),
    WrongVersion(
        AVERAGE,
        "averages locally, never all-reduces",
        "the ranks trained on different gradients",
        edit(_ALL_REDUCE, "pass"),
    ),
    WrongVersion(
        AVERAGE,
        "all-reduces a copy",
        "the ranks trained on different gradients",
        edit(_ALL_REDUCE, "dist.all_reduce(parameter.grad.clone())"),
    ),
    WrongVersion(
        AVERAGE,
        "forgets the frozen parameters",
        "rank 0 raised TypeError",
        edit("        if parameter.grad is not None:\n", "        if True:\n"),
    ),
    # OverlappedGradientSync
    WrongVersion(OVERLAP, "never divides", "summed over the ranks, not averaged", edit(_OVERLAP_DIVIDE, "pass")),
    WrongVersion(
        OVERLAP,
        "blocking all-reduce in the hook",
        "async_op=False",
        edit(_HOOK_SEND, "dist.all_reduce(parameter.grad)\n        self.pending.append((parameter, None))"),
        edit("            work.wait()\n", "            pass\n"),
    ),
    WrongVersion(
        OVERLAP,
        "sends everything in wait()",
        "after the backward pass had finished",
        edit(_HOOK_SEND, "self.pending.append((parameter, None))"),
        edit("            work.wait()\n", "            dist.all_reduce(parameter.grad)\n"),
    ),
    WrongVersion(
        OVERLAP,
        "a tensor hook, which runs before .grad is written",
        "rank 0 raised",
        edit(_REGISTER, "parameter.register_hook(lambda grad, parameter=parameter: self.hook(parameter))"),
    ),
    WrongVersion(
        OVERLAP,
        "hooks registered twice",
        "2 ranks",
        edit(_REGISTER, f"{_REGISTER}\n                {_REGISTER}"),
    ),
    # BucketedGradientSync
    WrongVersion(
        BUCKETS,
        "one all-reduce per parameter",
        "one all-reduce each per step",
        edit(_BUCKET_RULE, "if True:"),
    ),
    WrongVersion(
        BUCKETS,
        "buckets filled in forward order",
        "fill them from the last parameter",
        edit(_BUCKET_ORDER, "for parameter in [p for p in model.parameters() if p.requires_grad]:"),
    ),
    WrongVersion(
        BUCKETS,
        "blocking all-reduce of each bucket",
        "async_op=False",
        edit(_BUCKET_SEND, "dist.all_reduce(flat)\n            self.pending.append((b, flat, None))"),
        edit("            work.wait()\n            flat /= self.world_size", "            flat /= self.world_size"),
    ),
    WrongVersion(
        BUCKETS,
        "never copies back",
        "the ranks trained on different gradients",
        edit(_COPY_BACK, "pass"),
    ),
    WrongVersion(
        BUCKETS,
        "forgets to reset the counts",
        "2 ranks",
        edit(
            "        self.pending = []\n        self.ready = [0] * len(self.buckets)\n", "        self.pending = []\n"
        ),
    ),
    # ShardedAdamW
    WrongVersion(
        SHARDED,
        "every rank steps every parameter",
        "it keeps state for every parameter",
        edit(_MINE, "mine = self.params"),
    ),
    WrongVersion(
        SHARDED,
        "owners by index, i % world_size",
        "the owners: from the largest parameter to the smallest",
        edit(_MINE, "mine = [p for i, p in enumerate(self.params) if i % self.world_size == self.rank]"),
        edit(
            _BROADCAST,
            "pass\n            for i, p in enumerate(self.params):\n                dist.broadcast(p, src=i % self.world_size)",
        ),
    ),
    WrongVersion(
        SHARDED,
        "never broadcasts",
        "each parameter is broadcast from its owner",
        edit(_BROADCAST, "pass"),
    ),
    WrongVersion(
        SHARDED,
        "broadcasts everything from rank 0",
        "each parameter is broadcast from its owner",
        edit(_BROADCAST, "dist.broadcast(parameter, src=0)"),
    ),
    # masked_cross_entropy
    WrongVersion(
        MASKED_LOSS,
        "indexes the kept tokens",
        "splits the graph there",
        code="""def masked_cross_entropy(logits, targets, ignore_index=-100):
    kept = targets != ignore_index
    kept_logits, kept_targets = logits[kept], targets[kept]
    log_probs = torch.log_softmax(kept_logits.float(), dim=-1)
    return -log_probs.gather(-1, kept_targets.unsqueeze(-1)).mean()
""",
    ),
    WrongVersion(
        MASKED_LOSS,
        "divides by every token",
        "it divides by every token",
        edit(_LOSS_RETURN, "return (nll * weight).sum() / weight.numel()"),
    ),
    WrongVersion(
        MASKED_LOSS, "returns the sum", "it returns the sum", edit(_LOSS_RETURN, "return (nll * weight).sum()")
    ),
    WrongVersion(
        MASKED_LOSS,
        "counts the ignored tokens",
        "the ignored tokens are counted",
        edit(_WEIGHT, "weight = torch.ones_like(targets, dtype=logits.dtype)"),
    ),
    WrongVersion(
        MASKED_LOSS,
        "log of softmax",
        "contains NaN or inf",
        edit(
            _LOG_PROBS,
            "log_probs = torch.log(torch.exp(logits.float()) / torch.exp(logits.float()).sum(-1, keepdim=True))",
        ),
    ),
    WrongVersion(
        MASKED_LOSS,
        "the count read with .item()",
        "splits the graph there",
        edit(_LOSS_RETURN, "return (nll * weight).sum() / weight.sum().item()"),
    ),
    WrongVersion(
        MASKED_LOSS,
        "calls F.cross_entropy",
        "do not call F.cross_entropy",
        code="""def masked_cross_entropy(logits, targets, ignore_index=-100):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)
""",
    ),
    # adamw_step_
    WrongVersion(
        COMPILED_ADAMW,
        "no bias correction",
        "not bias-corrected",
        edit(_UPDATE, "p.sub_(lr * m / (v.sqrt() + eps))"),
    ),
    WrongVersion(
        COMPILED_ADAMW,
        "weight decay after the update",
        "the weight decay is applied after the update",
        edit(_DECAY, "pass"),
        edit(_UPDATE, f"{_UPDATE}\n        p.mul_(1 - lr * weight_decay)"),
    ),
    WrongVersion(
        COMPILED_ADAMW,
        "the learning rate read once, as a Python number, and kept",
        "torch.compile compiled",
        edit("    step += 1\n", "    step += 1\n    lr = lr.item()\n"),
    ),
    WrongVersion(
        COMPILED_ADAMW,
        "a Python step count",
        "torch.compile compiled",
        edit(_BIAS1, "t = int(step)\n    bias1 = 1 - beta1**t"),
        edit("bias2 = 1 - beta2**step", "bias2 = 1 - beta2**t"),
    ),
    WrongVersion(
        COMPILED_ADAMW,
        "a fresh step counter, not the tensor",
        "the step tensor reads",
        edit("    step += 1\n", "    step = step + 1\n"),
    ),
    WrongVersion(
        COMPILED_ADAMW,
        "calls torch.optim.adamw",
        "do not call torch.optim",
        code="""def adamw_step_(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    steps = [step.clone() for _ in params]
    torch.optim.adamw.adamw(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=beta1, beta2=beta2,
                            eps=eps, weight_decay=weight_decay, amsgrad=False, maximize=False)
    step += 1
""",
    ),
    # blind round 2
    WrongVersion(
        AVERAGE,
        "reduce to rank 0, then broadcast",
        "the exercise averages with all-reduces",
        edit(_ALL_REDUCE, "dist.reduce(parameter.grad, dst=0)\n            dist.broadcast(parameter.grad, src=0)"),
    ),
    WrongVersion(
        OVERLAP,
        "waits in the hook",
        "waited for",
        edit(
            _HOOK_SEND,
            "work = dist.all_reduce(parameter.grad, async_op=True)\n        work.wait()\n"
            "        self.pending.append((parameter, work))",
        ),
    ),
    WrongVersion(
        OVERLAP,
        "a hook on the frozen parameters too",
        "rank 0 raised",
        edit(
            "            if parameter.requires_grad:\n                parameter.register",
            "            if True:\n                parameter.register",
        ),
    ),
    WrongVersion(
        BUCKETS,
        "a bucket may not reach bucket_bytes",
        "the buckets hold",
        edit(_BUCKET_RULE, "if not self.buckets or size + nbytes >= bucket_bytes:"),
    ),
    WrongVersion(
        BUCKETS,
        "sends a bucket when its last-listed parameter is ready",
        "head registered first",
        edit("        if self.ready[b] == len(self.buckets[b]):", "        if parameter is self.buckets[b][-1]:"),
    ),
    WrongVersion(
        BUCKETS,
        "waits in the hook",
        "waited for",
        edit(
            _BUCKET_SEND,
            "work = dist.all_reduce(flat, async_op=True)\n            work.wait()\n"
            "            self.pending.append((b, flat, work))",
        ),
    ),
    WrongVersion(
        SHARDED,
        "ZeroRedundancyOptimizer inside",
        "not ZeroRedundancyOptimizer",
        code="""from torch.distributed.optim import ZeroRedundancyOptimizer


class ShardedAdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        self.inner = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, lr=lr, betas=betas, eps=eps,
                                             weight_decay=weight_decay)

    def step(self):
        self.inner.step()
""",
    ),
    WrongVersion(
        SHARDED,
        "updates every parameter, then drops the state of the others",
        "a rank computes nothing for the parameters others own",
        edit(
            _MINE,
            "mine = [p for p in self.params if self.owner[id(p)] == self.rank]\n"
            "        self.everything = torch.optim.AdamW(self.params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)",
        ),
        edit(
            "        self.optimizer.step()  # this rank's shard only; its state exists only for that shard\n",
            "        self.everything.step()\n"
            "        for p in self.params:\n"
            "            if self.owner[id(p)] != self.rank:\n"
            "                self.everything.state.pop(p, None)\n",
        ),
    ),
    WrongVersion(
        SHARDED,
        "ties broken in reverse list order",
        "ties between parameters in list order",
        edit(
            "for parameter in sorted(self.params, key=lambda p: p.numel(), reverse=True):",
            "for parameter in reversed(sorted(self.params, key=lambda p: p.numel())):",
        ),
    ),
    WrongVersion(
        SHARDED,
        "zeroes what it does not own and all-reduces",
        "each parameter is broadcast from its owner",
        edit(
            _BROADCAST,
            "if self.owner[id(parameter)] != self.rank:\n                    parameter.zero_()\n"
            "                dist.all_reduce(parameter)",
        ),
    ),
    # blind round 3
    WrongVersion(
        COMPILED_ADAMW,
        "eps inside the square root",
        "eps is added inside the square root",
        edit(_UPDATE, "p.sub_(lr * (m / bias1) / (v / bias2 + eps).sqrt())"),
    ),
    WrongVersion(
        COMPILED_ADAMW,
        "new tensors in the lists",
        "put new tensors in the list of parameters",
        code="""def adamw_step_(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01):
    step += 1
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs, strict=True)):
        p = p * (1 - lr * weight_decay)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        params[i] = p - lr * (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + eps)
        exp_avgs[i], exp_avg_sqs[i] = m, v
""",
    ),
    WrongVersion(
        MASKED_LOSS,
        "gathers at targets.clamp(min=0)",
        "your code raised",
        edit(
            "safe = torch.where(targets == ignore_index, 0, targets)  # any valid class in place of ignore_index",
            "safe = targets.clamp(min=0)",
        ),
    ),
    WrongVersion(
        MASKED_LOSS,
        "nll_loss reached through torch._C",
        "do not call F.cross_entropy or F.nll_loss",
        code="""def masked_cross_entropy(logits, targets, ignore_index=-100):
    log_probs = torch.log_softmax(logits.float(), dim=-1).reshape(-1, logits.shape[-1])
    return torch._C._nn.nll_loss_nd(log_probs, targets.reshape(-1), None, 1, ignore_index)
""",
    ),
)
