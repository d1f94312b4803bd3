"""Wrong versions of notebook 16's answers (16_serving_scaling): see ``wrong/__init__.py``."""

from autograder.notebooks.nb16_serving_scaling import (
    INT4,
    INT8,
    MOE_LAYER,
    MOE_LOSS,
    MOE_ROUTE,
    QLINEAR,
    SPEC_ACCEPT,
    SPEC_GENERATE,
    SPEC_ROLLBACK,
)
from wrong import WrongVersion, edit

# --- Section 1: weight-only quantization ----------------------------------------------------------------------------

_Q8_AMAX = "amax = weight.abs().amax(dim=1)  # over the input features: one value per output channel"
_Q8_SCALE = "scale = torch.clamp(amax / 127.5, min=torch.finfo(torch.float32).eps)"
_Q8_Q = "q = torch.clamp(torch.round(weight * (1.0 / scale)[:, None]), -128, 127).to(torch.int8)"
_Q8_DEQ = "return q.float() * scale[:, None]"

_Q4_CHECK = "    if in_features % group_size or group_size % 2:\n        raise ValueError("
_Q4_SCALES = "scales = torch.clamp((high - low) / 15, min=torch.finfo(torch.float32).smallest_normal)"
_Q4_ZEROS = "zeros = low + scales * 8"
_Q4_Q = "q = torch.clamp(torch.round((groups - (zeros - scales * 8)[..., None]) / scales[..., None]), 0, 15)"
_Q4_RETURN = "return q.reshape(out_features, in_features).to(torch.uint8), scales, zeros"
_Q4_DEQ = "return ((groups - 8) * scales[..., None] + zeros[..., None]).reshape(out_features, in_features)"
_Q4_PACK = "return (q[:, 0::2] << 4) | q[:, 1::2]"
_Q4_UNPACK = "return torch.stack([packed >> 4, packed & 15], dim=-1).flatten(-2)"

_QL_BITS = "        if bits not in (8, 4):\n            raise ValueError("
_QL_PACKED = 'self.register_buffer("qweight", pack_int4(q))'
_QL_INT4 = "q, scales, zeros = quantize_int4(weight, group_size)"
_QL_BIAS = 'self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())'
_QL_UNPACK = "return dequantize_int4(unpack_int4(self.qweight), self.scales, self.zeros)"
_QL_OUT = "out = x @ self.weight_hat().T"
_QL_RETURN = "return out if self.bias is None else out + self.bias"

QUANT_WRONG = (
    # quantize_int8
    WrongVersion(INT8, "scale over the wrong axis", "the scale is taken over the wrong axis",
                 edit(_Q8_AMAX, "amax = weight.abs().amax(dim=0)")),
    WrongVersion(INT8, "scale max / 127", "the scale is max|row| / 127",
                 edit(_Q8_SCALE, "scale = torch.clamp(amax / 127, min=torch.finfo(torch.float32).eps)")),
    WrongVersion(INT8, "divides by the scale", "the integers are round(W / scale)",
                 edit(_Q8_Q, "q = torch.clamp(torch.round(weight / scale[:, None]), -128, 127).to(torch.int8)")),
    WrongVersion(INT8, "truncates", "truncated toward zero",
                 edit(_Q8_Q, "q = torch.clamp(weight * (1.0 / scale)[:, None], -128, 127).to(torch.int8)")),
    WrongVersion(INT8, "rounds halves up", "ties are rounded up",
                 edit(_Q8_Q, "q = torch.clamp(torch.floor(weight * (1.0 / scale)[:, None] + 0.5), -128, 127)"
                             ".to(torch.int8)")),
    WrongVersion(INT8, "no clamp", "not clamped to [-128, 127]",
                 edit(_Q8_Q, "q = torch.round(weight * (1.0 / scale)[:, None]).to(torch.int32).to(torch.int8)")),
    WrongVersion(INT8, "no floor on the scale", "a row of zeros",
                 edit(_Q8_SCALE, "scale = amax / 127.5")),
    WrongVersion(INT8, "dequantizes by columns", "each row by its own scale", edit(_Q8_DEQ, "return q.float() * scale")),
    # quantize_int4
    WrongVersion(INT4, "zero point at 7 steps", "off by 1 step", edit(_Q4_ZEROS, "zeros = low + scales * 7")),
    WrongVersion(INT4, "integers one step off", "counted one step off",
                 edit(_Q4_Q, _Q4_Q.replace("(zeros - scales * 8)", "(zeros - scales * 7)"))),
    WrongVersion(INT4, "dequantizes around 7", "dequantize as (q - 8) * scale + zero",
                 edit(_Q4_DEQ, _Q4_DEQ.replace("(groups - 8)", "(groups - 7)"))),
    WrongVersion(INT4, "16 steps", "(max - min) / 16",
                 edit(_Q4_SCALES, _Q4_SCALES.replace("/ 15", "/ 16"))),
    WrongVersion(INT4, "no floor on the scale", "at least the smallest normal float32",
                 edit(_Q4_SCALES, "scales = (high - low) / 15")),
    WrongVersion(INT4, "int8 integers", "expected torch.uint8",
                 edit(_Q4_RETURN, _Q4_RETURN.replace("torch.uint8", "torch.int8"))),
    WrongVersion(INT4, "nibbles in the other order", "uses the other nibble order",
                 edit(_Q4_PACK, "return q[:, 0::2] | (q[:, 1::2] << 4)"),
                 edit(_Q4_UNPACK, "return torch.stack([packed & 15, packed >> 4], dim=-1).flatten(-2)")),
    WrongVersion(INT4, "pairs the two halves", "pairs column j with column j +",
                 edit(_Q4_PACK, "half = q.shape[1] // 2\n    return (q[:, :half] << 4) | q[:, half:]")),
    WrongVersion(INT4, "pairs rows", "it pairs rows",
                 edit(_Q4_PACK, "return (q[0::2] << 4) | q[1::2]")),
    WrongVersion(INT4, "unpacks into halves", "unpack_int4(pack_int4(q))",
                 edit(_Q4_UNPACK, "return torch.cat([packed >> 4, packed & 15], dim=-1)")),
    WrongVersion(INT4, "no ValueError", "expected a ValueError", edit(_Q4_CHECK, "    if False:\n        raise ValueError(")),
    # QuantizedLinear
    WrongVersion(QLINEAR, "keeps the float weight", "holds a float tensor as large as the weight",
                 edit(_QL_BIAS, _QL_BIAS + "\n        self.weight = linear.weight")),
    WrongVersion(QLINEAR, "caches the dequantized weight", "holds a float tensor as large as the weight",
                 edit(_QL_OUT, "self.cached = self.weight_hat()\n        out = x @ self.cached.T")),
    WrongVersion(QLINEAR, "bias not added", "the bias is not added", edit(_QL_RETURN, "return out")),
    WrongVersion(QLINEAR, "bias kept as a parameter", "keep everything as buffers",
                 edit(_QL_BIAS, "self.bias = linear.bias")),
    WrongVersion(QLINEAR, "int4 not packed", "expected a buffer `qweight`",
                 edit(_QL_PACKED, 'self.register_buffer("qweight", q)'),
                 edit(_QL_UNPACK, "return dequantize_int4(self.qweight, self.scales, self.zeros)")),
    WrongVersion(INT4, "q from (W - min) / scale (the blind round)", "differs from torchao's tinygemm integers",
                 edit(_Q4_Q, "q = torch.clamp(torch.round((groups - low[..., None]) / scales[..., None]), 0, 15)")),
    WrongVersion(INT4, "multiplies by 1 / scale (the blind round)", "differs from torchao's tinygemm integers",
                 edit(_Q4_Q, "q = torch.clamp(torch.round((groups - (zeros - scales * 8)[..., None]) * "
                             "(1 / scales[..., None])), 0, 15)")),
    WrongVersion(QLINEAR, "bias shares the Linear's memory (the blind round)", "shares the Linear's memory",
                 edit(_QL_BIAS, 'self.register_buffer("bias", None if linear.bias is None else linear.bias.detach())')),
    WrongVersion(QLINEAR, "group size not passed on", "was called with group_size=32, but the layer's is",
                 edit(_QL_INT4, "q, scales, zeros = quantize_int4(weight)")),
    WrongVersion(QLINEAR, "group size not kept", "has the attributes",
                 edit("self.bits, self.group_size = bits, group_size", "self.bits = bits")),
    WrongVersion(QLINEAR, "other bits accepted", "expected a ValueError",
                 edit(_QL_BITS, "        if False:\n            raise ValueError(")),
)  # fmt: skip


# --- Section 2: speculative decoding ---------------------------------------------------------------------------------

# speculative_accept
_S_TEST = "if u * q < p:  # accepted with probability min(1, p / q)"
_S_U = "u = torch.rand((), generator=generator, dtype=torch.float64)"
_S_RESIDUAL = "residual = (target_probs[i] - draft_probs[i]).clamp(min=0)  # torch.multinomial normalises it"
_S_BONUS = "bonus = torch.multinomial(target_probs[k], 1, generator=generator)"
_S_REPLACED = "return torch.cat([drafted[:i].long(), replacement])"

# rollback
_S_KEYS = "cache.keys[layer] = cache.keys[layer][:, :, :length]"
_S_VALUES = "cache.values[layer] = cache.values[layer][:, :, :length]"
_S_LOOP = "for layer in range(len(cache.keys)):"
_S_NONE = "        if cache.keys[layer] is not None:\n"
_S_REFUSE = (
    "    if not 0 <= length <= cache.length:\n"
    '        raise ValueError(f"cannot roll a cache of {cache.length} positions back to {length}")\n'
)

# speculative_generate
_S_ROLL_TARGET = "rollback(target_cache, len(tokens) - 1)  # the last emitted token is fed next round"
_S_ROLL_DRAFT = "rollback(draft_cache, min(draft_cache.length, len(tokens) - 1))"
_S_TARGET_CALL = (
    "logits = target(torch.tensor([sequence[target_cache.length :]]), cache=target_cache)[0, -(n_drafts + 1) :]"
)
_S_DRAW = "sequence.append(int(torch.multinomial(q, 1, generator=generator)))"
_S_N_DRAFTS = "n_drafts = min(k, end - len(tokens) - 1)  # the round emits at most n_drafts + 1 tokens"

SPEC_WRONG = (
    # speculative_accept
    WrongVersion(
        SPEC_ACCEPT,
        "accepts with probability min(1, q / p)",
        "min(1, q / p)",
        edit(_S_TEST, "if u * p < q:"),
    ),
    WrongVersion(SPEC_ACCEPT, "accepts with probability p", "with probability p(x)", edit(_S_TEST, "if u < p:")),
    WrongVersion(
        SPEC_ACCEPT,
        "the test reversed: accepts a token the target rejects",
        "a rejection never happens",
        edit(_S_TEST, "if u * q > p:"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "accepts every drafted token",
        "which the target gives probability",
        edit(_S_TEST, "if q > 0:"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "the replacement drawn from p, not the residual",
        "draw the replacement from the residual",
        edit(_S_RESIDUAL, "residual = target_probs[i]"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "the residual max(0, q - p)",
        "draw the replacement from the residual",
        edit(_S_RESIDUAL, "residual = (draft_probs[i] - target_probs[i]).clamp(min=0)"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "the residual p - q not clamped at 0",
        "element < 0",
        edit(_S_RESIDUAL, "residual = target_probs[i] - draft_probs[i]"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "no bonus token when all k are accepted",
        "Did you forget the bonus token?",
        edit(_S_BONUS + "\n    return torch.cat([drafted.long(), bonus])", "return drafted.long()"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "the bonus drawn from target_probs[k - 1]",
        "draw the bonus from target_probs[k]",
        edit(_S_BONUS, "bonus = torch.multinomial(target_probs[k - 1], 1, generator=generator)"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "the rejected token kept before its replacement",
        "which the target gives probability",
        edit(_S_REPLACED, "return torch.cat([drafted[: i + 1].long(), replacement])"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "one uniform draw for every position",
        "do not follow the expected distribution",
        edit("    for i in range(k):\n", "    " + _S_U + "\n    for i in range(k):\n"),
        edit("        " + _S_U + "\n", ""),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "torch's global generator",
        "seeded alike",
        edit(_S_U, "u = torch.rand((), dtype=torch.float64)"),
    ),
    WrongVersion(
        SPEC_ACCEPT,
        "the residual computed in place, in target_probs",
        "changed its inputs",
        edit(_S_RESIDUAL, "residual = target_probs[i].sub_(draft_probs[i]).clamp_(min=0)"),
    ),
    # rollback
    WrongVersion(SPEC_ROLLBACK, "only layer 0", "layer 1's keys still hold", edit(_S_LOOP, "for layer in range(1):")),
    WrongVersion(SPEC_ROLLBACK, "the keys only", "values still hold", edit("            " + _S_VALUES + "\n", "")),
    WrongVersion(
        SPEC_ROLLBACK,
        "keeps the last positions",
        "holds the LAST",
        edit(_S_KEYS, "cache.keys[layer] = cache.keys[layer][:, :, -length:]"),
        edit(_S_VALUES, "cache.values[layer] = cache.values[layer][:, :, -length:]"),
    ),
    WrongVersion(
        SPEC_ROLLBACK,
        "cuts the batch axis",
        "still hold all",
        edit(_S_KEYS, "cache.keys[layer] = cache.keys[layer][:length]"),
        edit(_S_VALUES, "cache.values[layer] = cache.values[layer][:length]"),
    ),
    WrongVersion(
        SPEC_ROLLBACK,
        "cuts copies, not the cache",
        "left the cache it was given unchanged",
        edit(_S_KEYS, "keys = cache.keys[layer][:, :, :length]"),
        edit(_S_VALUES, "values = cache.values[layer][:, :, :length]"),
    ),
    WrongVersion(SPEC_ROLLBACK, "no ValueError", "raise ValueError", edit(_S_REFUSE, "")),
    WrongVersion(
        SPEC_ROLLBACK,
        "a layer that holds None",
        "'NoneType' object is not subscriptable",
        edit(_S_NONE, "        if True:\n"),
    ),
    # speculative_generate
    WrongVersion(
        SPEC_GENERATE, "the target's cache not rolled back", "was not rolled back", edit(_S_ROLL_TARGET, "pass")
    ),
    WrongVersion(
        SPEC_GENERATE,
        "the draft's cache not rolled back",
        "when the draft was called",
        edit(_S_ROLL_DRAFT, "pass"),
    ),
    WrongVersion(
        SPEC_GENERATE,
        "the whole sequence fed to the target each round",
        "feed it only what its cache lacks",
        edit(
            "    while len(tokens) < end:\n",
            "    while len(tokens) < end:\n        target_cache = KVCache(len(target.blocks))  # a fresh cache each round\n",
        ),
    ),
    WrongVersion(
        SPEC_GENERATE,
        "a fresh draft cache each round",
        "keep its cache from round to round",
        edit(
            "    while len(tokens) < end:\n",
            "    while len(tokens) < end:\n        draft_cache = KVCache(len(draft.blocks))  # a fresh cache each round\n",
        ),
    ),
    WrongVersion(
        SPEC_GENERATE,
        "one target forward per drafted token",
        "one forward per round",
        edit(
            _S_TARGET_CALL,
            "rows = [target(torch.tensor([[t]]), cache=target_cache)[0, -1] for t in sequence[target_cache.length :]]"
            "\n        logits = torch.stack(rows)[-(n_drafts + 1) :]",
        ),
    ),
    WrongVersion(
        SPEC_GENERATE,
        "the target's first k + 1 logits, the prompt forgotten",
        "first difference",
        edit(_S_TARGET_CALL, _S_TARGET_CALL.replace("[0, -(n_drafts + 1) :]", "[0, : n_drafts + 1]")),
    ),
    WrongVersion(
        SPEC_GENERATE,
        "the draft's argmax drafted while sampling",
        "do not follow the expected distribution",
        edit(_S_DRAW, "sequence.append(int(q.argmax()))"),
    ),
    WrongVersion(
        SPEC_GENERATE,
        "drafts drawn from torch's global generator",
        "seeded alike",
        edit(_S_DRAW, "sequence.append(int(torch.multinomial(q, 1)))"),
    ),
    WrongVersion(
        SPEC_GENERATE,
        "k drafts even in the last round, nothing cut",
        "exactly max_new_tokens",
        edit(_S_N_DRAFTS, "n_drafts = k"),
    ),
)


# Section 3, a mixture of experts: wrong versions of route, MoELayer and load_balancing_loss.


# route -----------------------------------------------------------------------------------------------------------
_M_SOFTMAX = "probabilities = torch.softmax(router_logits.float(), dim=-1)"
_M_TOPK = "weights, experts = torch.topk(probabilities, k, dim=-1)"
_M_RENORM = "return weights / weights.sum(dim=-1, keepdim=True), experts"

# MoELayer --------------------------------------------------------------------------------------------------------
_M_BIAS = "self.router = nn.Linear(d_model, n_experts, bias=False)"
_M_KEEP = "self.router_logits = logits\n"
_M_ROUTE = "weights, experts = route(logits, self.top_k)"
_M_WEIGHTED = "weighted = weights[token_ids, slot, None].to(tokens.dtype) * expert(tokens[token_ids])"
_M_DISPATCH = """        for i, expert in enumerate(self.experts):
            token_ids, slot = torch.where(experts == i)  # the tokens routed to expert i, and which of their k
            if token_ids.numel() == 0:
                continue
            weighted = weights[token_ids, slot, None].to(tokens.dtype) * expert(tokens[token_ids])
            out = out.index_add(0, token_ids, weighted)
"""
_M_TOKEN_LOOP = """        rows = []
        for t in range(tokens.shape[0]):
            chosen = [weights[t, j] * self.experts[int(experts[t, j])](tokens[t : t + 1])[0] for j in range(self.top_k)]
            rows.append(sum(chosen))
        out = torch.stack(rows)
"""
_M_DENSE = """        for i, expert in enumerate(self.experts):
            gate = (weights * (experts == i)).sum(dim=-1, keepdim=True).to(tokens.dtype)  # 0 where not routed
            out = out + gate * expert(tokens)
"""
_M_LISTS = """        for i, expert in enumerate(self.experts):
            pairs = [(t, j) for t in range(experts.shape[0]) for j in range(self.top_k) if int(experts[t, j]) == i]
            if not pairs:
                continue
            token_ids = torch.tensor([t for t, _ in pairs])
            slot = torch.tensor([j for _, j in pairs])
            weighted = weights[token_ids, slot, None].to(tokens.dtype) * expert(tokens[token_ids])
            out = out.index_add(0, token_ids, weighted)
"""

# load_balancing_loss ---------------------------------------------------------------------------------------------

_M_CHOSEN = "chosen = probabilities.topk(top_k, dim=-1).indices"
_M_LOSS_RETURN = "return n_experts * (counts / n_tokens * probabilities.mean(dim=0)).sum()"

MOE_WRONG = (
    WrongVersion(
        MOE_ROUTE,
        "softmax in the logits' dtype (the blind round)",
        "take the softmax in float32",
        edit(_M_SOFTMAX, "probabilities = torch.softmax(router_logits, dim=-1)"),
    ),
    # route
    WrongVersion(MOE_ROUTE, "weights not renormalised", "not renormalised", edit(_M_RENORM, "return weights, experts")),
    WrongVersion(
        MOE_ROUTE,
        "softmax over the tokens",
        "over the tokens (dim 0)",
        edit(_M_SOFTMAX, "probabilities = torch.softmax(router_logits.float(), dim=0)"),
    ),
    WrongVersion(
        MOE_ROUTE,
        "the k least likely experts",
        "least likely experts",
        edit(_M_TOPK, "weights, experts = torch.topk(probabilities, k, dim=-1, largest=False)"),
    ),
    WrongVersion(
        MOE_ROUTE,
        "weights detached from the logits",
        "no graph back to the logits",
        edit(_M_SOFTMAX, "probabilities = torch.softmax(router_logits.detach().float(), dim=-1)"),
    ),
    # MoELayer
    WrongVersion(MOE_LAYER, "a loop over tokens", "that is a loop over tokens", edit(_M_DISPATCH, _M_TOKEN_LOOP)),
    WrongVersion(
        MOE_LAYER, "every expert on every token, masked", "only on its own tokens", edit(_M_DISPATCH, _M_DENSE)
    ),
    WrongVersion(
        MOE_LAYER, "a Python loop over tokens to find each expert's", "loops over the data", edit(_M_DISPATCH, _M_LISTS)
    ),
    WrongVersion(
        MOE_LAYER,
        "outputs not weighted",
        "without the router's weights",
        edit(_M_WEIGHTED, "weighted = expert(tokens[token_ids])"),
    ),
    WrongVersion(
        MOE_LAYER,
        "the weight multiplies the input",
        "multiplied by its weight before the expert",
        edit(_M_WEIGHTED, "weighted = expert(weights[token_ids, slot, None].to(tokens.dtype) * tokens[token_ids])"),
    ),
    WrongVersion(
        MOE_LAYER,
        "top-k of the softmax, not renormalised",
        "not renormalised",
        edit(_M_ROUTE, "weights, experts = torch.softmax(logits, dim=-1).topk(self.top_k, dim=-1)"),
    ),
    WrongVersion(
        MOE_LAYER,
        "a router with a bias",
        "the router has a bias",
        edit(_M_BIAS, "self.router = nn.Linear(d_model, n_experts)"),
    ),
    WrongVersion(
        MOE_LAYER,
        "router logits kept detached",
        "has no graph back to the router",
        edit(_M_KEEP, "self.router_logits = logits.detach()\n"),
    ),
    # load_balancing_loss
    WrongVersion(
        MOE_LOSS,
        "counts divided by tokens x k",
        "divided by tokens × k",
        edit(_M_LOSS_RETURN, "return n_experts * (counts / (n_tokens * top_k) * probabilities.mean(dim=0)).sum()"),
    ),
    WrongVersion(
        MOE_LOSS,
        "only the top-1 counted",
        "only each token's first choice is counted",
        edit(_M_CHOSEN, "chosen = probabilities.argmax(dim=-1, keepdim=True)"),
    ),
    WrongVersion(
        MOE_LOSS,
        "mean probability after top-k",
        "taken after top-k",
        edit(
            _M_LOSS_RETURN,
            "kept = probabilities.gather(-1, chosen)\n"
            "    after = torch.zeros_like(probabilities).scatter(-1, chosen, kept / kept.sum(-1, keepdim=True))\n"
            "    return n_experts * (counts / n_tokens * after.mean(dim=0)).sum()",
        ),
    ),
    WrongVersion(
        MOE_LOSS,
        "fractions are probabilities",
        "f_i are mean probabilities",
        edit(_M_LOSS_RETURN, "return n_experts * (probabilities.mean(dim=0) ** 2).sum()"),
    ),
    WrongVersion(
        MOE_LOSS,
        "no factor E",
        "not multiplied by the number of experts",
        edit(_M_LOSS_RETURN, "return (counts / n_tokens * probabilities.mean(dim=0)).sum()"),
    ),
    WrongVersion(
        MOE_LOSS,
        "probabilities detached",
        "no graph back to the logits",
        edit(_M_SOFTMAX, "probabilities = torch.softmax(router_logits.float(), dim=-1).detach()"),
    ),
)


WRONG_VERSIONS = (*QUANT_WRONG, *SPEC_WRONG, *MOE_WRONG)
