"""Wrong versions of notebook 13's answers (13_tinystories): see ``wrong/__init__.py``."""

from autograder.notebooks.nb13_tinystories import BITS_PER_BYTE, FLOPS, GENERATE, MAPS, MFU, MICRO, TRAIN_STEP
from wrong import WrongVersion, edit

_SAYS_CACHE_GREW_TO = "cache grew to"

# bits_per_byte -------------------------------------------------------------------------------------------------
_RETURN_LOSS_TOKENS = "return loss * tokens / (n_bytes * math.log(2))"

# flops_per_token -----------------------------------------------------------------------------------------------
_RETURN_FORWARD = "return 3 * forward"
_FORWARD = "forward = 2 * matmul_weights + 4 * config.n_layers * context_length * d  # + q k^T and weights @ v"

# mfu -----------------------------------------------------------------------------------------------------------
_RETURN_TOKENS_PER_SECOND_FLOPS_PER_TOKEN = "return tokens_per_second * flops_per_token / peak_flops"

# rank_micro_batches --------------------------------------------------------------------------------------------
_RETURN_LIST_MINE = "return list(mine.split(per_rank // accumulation_steps))"

# train_step ----------------------------------------------------------------------------------------------------
_WITH_TORCH_AUTOCAST = "with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):"
_NEW_X = ""

# attention_maps ------------------------------------------------------------------------------------------------
_MAPS_APPEND_SCORES = 'maps.append(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1))'
_CAUSAL = "causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()"

# generate_with_cache -------------------------------------------------------------------------------------------
_IF_CACHE_LENGTH = """\
        if cache.length >= window:  # full: start again from the recent half
            cache, step_input = new_cache(), sequence[-(window // 2):]
        else:
            step_input = sequence[-1:]
"""
_CACHE_STEP_INPUT = "cache, step_input = new_cache(), sequence[-(window // 2):]"
_GENERATE_CACHE_STEP_INPUT = "cache, step_input = new_cache(), prompt[-window:]"
_NEW_GENERATE_X = ""

WRONG_VERSIONS = (
    # bits_per_byte
    WrongVersion(
        BITS_PER_BYTE,
        "nats, not bits (ln 2 missing)",
        "divide by ln 2",
        edit(_RETURN_LOSS_TOKENS, "return loss * tokens / n_bytes"),
    ),
    WrongVersion(
        BITS_PER_BYTE,
        "tokens and bytes swapped",
        "tokens and bytes are swapped",
        edit(_RETURN_LOSS_TOKENS, "return loss * n_bytes / (tokens * math.log(2))"),
    ),
    WrongVersion(
        BITS_PER_BYTE, "bits per token", "bits per token", edit(_RETURN_LOSS_TOKENS, "return loss / math.log(2)")
    ),
    WrongVersion(
        BITS_PER_BYTE,
        "a tensor returned",
        "returned a tensor",
        edit(_RETURN_LOSS_TOKENS, "return torch.tensor(loss * tokens / n_bytes) / math.log(2)"),
    ),
    WrongVersion(
        BITS_PER_BYTE,
        "log base 10",
        "ln 10",
        edit(_RETURN_LOSS_TOKENS, "return loss * tokens / (n_bytes * math.log(10))"),
    ),
    # flops_per_token
    WrongVersion(FLOPS, "a float", "a float, expected an int", edit(_RETURN_FORWARD, "return 3.0 * forward")),
    WrongVersion(FLOPS, "forward only (no backward)", "forward pass only", edit(_RETURN_FORWARD, "return forward")),
    WrongVersion(
        FLOPS,
        "the embedding counted as a matmul",
        "embedding table is counted",
        edit(
            "matmul_weights = config.n_layers * per_layer + d * config.vocab_size  # + lm_head (the embedding is a lookup)",
            "matmul_weights = config.n_layers * per_layer + 2 * d * config.vocab_size  # + lm_head (the embedding is a lookup)",
        ),
    ),
    WrongVersion(
        FLOPS,
        "attention's matmuls left out",
        "attention's own matmuls are missing",
        edit(_FORWARD, "forward = 2 * matmul_weights  # + q k^T and weights @ v"),
    ),
    WrongVersion(
        FLOPS,
        "attention counted for the causal half",
        "causal half",
        edit(
            _FORWARD,
            "forward = 2 * matmul_weights + 2 * config.n_layers * context_length * d  # + q k^T and weights @ v",
        ),
    ),
    WrongVersion(
        FLOPS,
        "grouped-query attention ignored (k, v as d x d)",
        "k_proj and v_proj are counted",
        edit("kv_width = (config.n_kv_heads or config.n_heads) * head_dim", "kv_width = d"),
    ),
    # mfu
    WrongVersion(
        MFU,
        "a percentage",
        "not a percentage",
        edit(
            _RETURN_TOKENS_PER_SECOND_FLOPS_PER_TOKEN, "return 100 * tokens_per_second * flops_per_token / peak_flops"
        ),
    ),
    WrongVersion(
        MFU,
        "upside down",
        "upside down",
        edit(_RETURN_TOKENS_PER_SECOND_FLOPS_PER_TOKEN, "return peak_flops / (tokens_per_second * flops_per_token)"),
    ),
    WrongVersion(
        MFU,
        "FLOPs per token left out",
        "expected tokens_per_second",
        edit(_RETURN_TOKENS_PER_SECOND_FLOPS_PER_TOKEN, "return tokens_per_second / peak_flops"),
    ),
    # rank_micro_batches
    WrongVersion(
        MICRO,
        "rows interleaved across ranks",
        "interleaved",
        edit("mine = batch[rank * per_rank:(rank + 1) * per_rank]", "mine = batch[rank::world_size]"),
    ),
    WrongVersion(
        MICRO,
        "micro-batches interleaved within a rank",
        "not in order",
        edit(_RETURN_LIST_MINE, "return [mine[i::accumulation_steps] for i in range(accumulation_steps)]"),
    ),
    WrongVersion(
        MICRO,
        "micro-batches of accumulation_steps rows",
        "expected accumulation_steps",
        edit(_RETURN_LIST_MINE, "return list(mine.split(accumulation_steps))"),
    ),
    WrongVersion(
        MICRO,
        "only world_size checked (uneven micro-batches)",
        "returned without an error",
        edit("if n % (world_size * accumulation_steps):", "if n % world_size:"),
    ),
    WrongVersion(
        MICRO,
        "torch.split's tuple returned",
        "returned a tuple",
        edit(_RETURN_LIST_MINE, "return mine.split(per_rank // accumulation_steps)"),
    ),
    WrongVersion(
        MICRO,
        "an assert instead of ValueError",
        "raised AssertionError",
        edit(
            "    if n % (world_size * accumulation_steps):\n",
            """\
    assert n % (world_size * accumulation_steps) == 0
    if False:
""",
        ),
    ),
    # train_step
    WrongVersion(
        TRAIN_STEP,
        "loss not divided by k",
        "divided by the number of micro-batches",
        edit(
            "loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()) / k",
            "loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())",
        ),
    ),
    WrongVersion(
        TRAIN_STEP,
        "zero_grad before every micro-batch",
        "only the last micro-batch",
        edit(
            "    for inputs, targets in micro_batches:\n",
            """\
    for inputs, targets in micro_batches:
        optimizer.zero_grad()
""",
        ),
    ),
    WrongVersion(
        TRAIN_STEP,
        "a step after every micro-batch",
        "stepped after every micro-batch",
        edit(
            """\
    if scaler is not None:
        scaler.unscale_(optimizer)  # clipping must see the true gradients
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if scaler is not None:
        scaler.step(optimizer)  # skipped when a gradient is inf or nan
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""",
            """\
        if scaler is not None:
            scaler.unscale_(optimizer)  # clipping must see the true gradients
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        if scaler is not None:
            scaler.step(optimizer)  # skipped when a gradient is inf or nan
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
""",
        ),
    ),
    WrongVersion(
        TRAIN_STEP,
        "gradients never zeroed",
        "previous step's gradients",
        edit("    optimizer.zero_grad(set_to_none=True)\n", _NEW_X),
    ),
    WrongVersion(
        TRAIN_STEP, "scaler.step without scaler.update", "scaler.update()", edit("        scaler.update()\n", _NEW_X)
    ),
    WrongVersion(
        TRAIN_STEP,
        "clipping the scaled gradients",
        "clipped while still scaled",
        edit("scaler.unscale_(optimizer)  # clipping must see the true gradients", "pass"),
    ),
    WrongVersion(
        TRAIN_STEP,
        "autocast hard-wired to float16",
        "asked for",
        edit(_WITH_TORCH_AUTOCAST, "with torch.autocast(device_type, dtype=torch.float16, enabled=dtype is not None):"),
    ),
    WrongVersion(
        TRAIN_STEP,
        "no autocast",
        "without autocast",
        edit(_WITH_TORCH_AUTOCAST, "with torch.autocast(device_type, dtype=dtype, enabled=False):"),
    ),
    WrongVersion(
        TRAIN_STEP,
        "optimizer.step() after unscale_, not scaler.step",
        "skips",
        edit(
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)\n",
            """\
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
""",
        ),
        edit("        scaler.step(optimizer)  # skipped when a gradient is inf or nan\n", _NEW_X),
        edit(
            """\
    else:
        optimizer.step()
""",
            _NEW_X,
        ),
    ),
    WrongVersion(
        TRAIN_STEP,
        "backward inside the autocast block",
        "backward pass ran inside the autocast block",
        edit(
            "(scaler.scale(loss) if scaler is not None else loss).backward()  # gradients add up in .grad",
            "    (scaler.scale(loss) if scaler is not None else loss).backward()  # gradients add up in .grad",
        ),
    ),
    WrongVersion(
        TRAIN_STEP,
        "returns the last micro-batch's loss",
        "expected the mean loss",
        edit("total += loss.item()", "total = loss.item() * k"),
    ),
    WrongVersion(
        TRAIN_STEP,
        "the loss computed after the with block, on bfloat16 logits",
        "ran on the logits outside autocast",
        edit(
            "            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()) / k\n",
            "        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / k\n",
        ),
    ),
    WrongVersion(
        TRAIN_STEP,
        "gradients zeroed at the start of the call, not after the step",
        ".grad still held gradients",
        edit("    optimizer.zero_grad(set_to_none=True)\n", ""),
        edit("    total = 0.0\n", "    total = 0.0\n    optimizer.zero_grad(set_to_none=True)\n"),
    ),
    WrongVersion(
        TRAIN_STEP,
        "one forward and backward on the micro-batches concatenated",
        "micro-batches concatenated",
        edit(
            """\
    for inputs, targets in micro_batches:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()) / k
        (scaler.scale(loss) if scaler is not None else loss).backward()  # gradients add up in .grad
        total += loss.item()
""",
            """\
    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
    (scaler.scale(loss) if scaler is not None else loss).backward()
    total = loss.item()
""",
        ),
    ),
    WrongVersion(
        TRAIN_STEP,
        "the micro-batches' losses added up, one backward",
        "one backward pass",
        edit(
            """\
        (scaler.scale(loss) if scaler is not None else loss).backward()  # gradients add up in .grad
        total += loss.item()
""",
            """\
        total = total + loss
    (scaler.scale(total) if scaler is not None else total).backward()
    total = total.item()
""",
        ),
    ),
    # attention_maps
    WrongVersion(
        MAPS,
        "no causal mask",
        "attends to a later one",
        edit(_MAPS_APPEND_SCORES, "maps.append(scores.softmax(dim=-1))"),
    ),
    WrongVersion(
        MAPS,
        "no RoPE",
        "RoPE is missing",
        edit("q, k = attn.rope(q, positions).float(), attn.rope(k, positions).float()", "q, k = q.float(), k.float()"),
    ),
    WrongVersion(
        MAPS,
        "no 1/sqrt(head_dim)",
        "not divided by sqrt(head_dim)",
        edit("scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)", "scores = q @ k.transpose(-2, -1)"),
    ),
    WrongVersion(
        MAPS,
        "kv heads repeated 0 1 0 1",
        "repeat: 0 1 0 1",
        edit(
            "k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)  # kv heads 0 0 1 1 ...",
            "k = k.repeat(1, attn.num_heads // attn.num_kv_heads, 1, 1)  # kv heads 0 0 1 1 ...",
        ),
    ),
    WrongVersion(
        MAPS,
        "hooks left on the model",
        "hooks on the model",
        edit(
            """\
        for handle in handles:
            handle.remove()
""",
            "        pass\n",
        ),
    ),
    WrongVersion(
        MAPS,
        "hooks removed only when the model succeeds (no finally)",
        "failed in the middle of its forward",
        edit(
            """\
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
""",
            """\
    model(tokens)
    for handle in handles:
        handle.remove()
""",
        ),
    ),
    WrongVersion(
        MAPS,
        "each hook removes itself when it fires (no finally)",
        "failed in the middle of its forward",
        edit(
            """\
    inputs = []  # (attention module, the normalised hidden states it was called with), one per layer

""",
            """\
    inputs = []  # (attention module, the normalised hidden states it was called with), one per layer

    handles = []

""",
        ),
        edit(
            "        inputs.append((module, args[0]))\n",
            """\
        inputs.append((module, args[0]))
        handles[len(inputs) - 1].remove()  # done with this layer
""",
        ),
        edit(
            """\
    handles = [block.attn.register_forward_hook(grab) for block in model.blocks]
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
""",
            """\
    handles.extend(block.attn.register_forward_hook(grab) for block in model.blocks)
    model(tokens)
""",
        ),
    ),
    WrongVersion(
        MAPS,
        "gradients on (no @torch.no_grad())",
        "with gradients on",
        edit("@torch.no_grad()\n", ""),
        edit("return torch.stack(maps)", "return torch.stack(maps).detach()"),
    ),
    WrongVersion(
        MAPS,
        "the model run twice (a warm-up before the hooks)",
        "ran the model 2 times",
        edit(
            """\
        inputs.append((module, args[0]))

""",
            """\
        inputs.append((module, args[0]))

    model(tokens)  # warm-up
""",
        ),
    ),
    WrongVersion(
        MAPS,
        "softmax over the queries",
        "rows sum to",
        edit(_MAPS_APPEND_SCORES, 'maps.append(scores.masked_fill(~causal, float("-inf")).softmax(dim=-2))'),
    ),
    WrongVersion(
        MAPS,
        "positions made on the CPU, whatever the device of tokens",
        "on the device of tokens",
        edit("positions = torch.arange(length, device=tokens.device)", "positions = torch.arange(length)"),
    ),
    WrongVersion(
        MAPS,
        "the causal mask made on the CPU",
        "on the device of tokens",
        edit(_CAUSAL, "causal = torch.ones(length, length, dtype=torch.bool).tril()"),
    ),
    WrongVersion(
        MAPS,
        "a causal mask made once for 256 positions (the GPU run's context_length) and sliced",
        "for their length",
        edit(_CAUSAL, "causal = torch.ones(256, 256, dtype=torch.bool, device=tokens.device).tril()[:length, :length]"),
    ),
    # generate_with_cache
    WrongVersion(
        GENERATE,
        "no cache reuse: the whole window fed to a new cache every step",
        "new cache for every call",
        edit(_IF_CACHE_LENGTH, "        cache, step_input = new_cache(), sequence[-window:]\n"),
    ),
    WrongVersion(
        GENERATE,
        "never restarts: the cache outgrows the window",
        _SAYS_CACHE_GREW_TO,
        edit(_IF_CACHE_LENGTH, "        step_input = sequence[-1:]\n"),
    ),
    WrongVersion(
        GENERATE,
        "restarts into the same cache",
        _SAYS_CACHE_GREW_TO,
        edit(_CACHE_STEP_INPUT, "step_input = sequence[-(window // 2):]"),
    ),
    WrongVersion(
        GENERATE,
        "restarts with the whole window",
        "expected the last window // 2",
        edit(_CACHE_STEP_INPUT, "cache, step_input = new_cache(), sequence[-window:]"),
    ),
    WrongVersion(
        GENERATE,
        "restarts one position late",
        _SAYS_CACHE_GREW_TO,
        edit(
            "if cache.length >= window:  # full: start again from the recent half",
            "if cache.length > window:  # full: start again from the recent half",
        ),
    ),
    WrongVersion(
        GENERATE,
        "the prompt fed whole, not its last window tokens",
        "the prompt's last window tokens",
        edit(_GENERATE_CACHE_STEP_INPUT, "cache, step_input = new_cache(), prompt"),
    ),
    WrongVersion(
        GENERATE, "gradients left on (no @torch.no_grad())", "gradients on", edit("@torch.no_grad()\n", _NEW_GENERATE_X)
    ),
    WrongVersion(
        GENERATE,
        "eos dropped",
        "dropped it",
        edit("        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])\n", _NEW_GENERATE_X),
        edit(
            "            break\n",
            """\
            break
        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])
""",
        ),
    ),
    WrongVersion(
        GENERATE,
        "the new tokens added in pick's int64: an int32 prompt comes back int64",
        "tokens for a torch.int32 prompt",
        edit(
            "sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])",
            "sequence = torch.cat([sequence, token.view(1)])",
        ),
    ),
    WrongVersion(
        GENERATE,
        "a wasted call after the last token (the next logits computed ahead)",
        "model calls for",
        edit(
            "    cache, step_input = new_cache(), prompt[-window:]\n",
            """\
    cache = new_cache()
    logits = model(prompt[-window:][None], cache=cache)[:, -1]
""",
        ),
        edit("        logits = model(step_input[None], cache=cache)[:, -1]\n", _NEW_GENERATE_X),
        edit(
            """\
        if cache.length >= window:  # full: start again from the recent half
            cache, step_input = new_cache(), sequence[-(window // 2):]
""",
            """\
        if cache.length >= window:
            cache = new_cache()
            logits = model(sequence[-(window // 2):][None], cache=cache)[:, -1]
""",
        ),
        edit("step_input = sequence[-1:]", "logits = model(sequence[-1:][None], cache=cache)[:, -1]"),
    ),
    WrongVersion(
        GENERATE,
        "the context capped at the demo's 256 tokens",
        "the first call fed 256 tokens, expected 296",
        edit(_GENERATE_CACHE_STEP_INPUT, "cache, step_input = new_cache(), prompt[-min(window, 256):]"),
    ),
)
