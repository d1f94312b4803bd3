"""Mistakes students make in notebook 13.

Each wrong version is the solution's answer cell with one edit (``variant`` insists that the edited text is
there), so it differs from the right one only by the mistake. The code runs in the solution notebook's
namespace after ``PRELUDE`` (``math``, ``torch``, ``F``, ``nn``).
"""

from wrong import Wrong, catalogue

NOTEBOOK = "13_tinystories"
RIGHT, variant = catalogue(NOTEBOOK)


_BPB = "return loss * tokens / (n_bytes * math.log(2))"
_FORWARD = "forward = 2 * matmul_weights + 4 * config.n_layers * context_length * d"
_MFU = "return tokens_per_second * flops_per_token / peak_flops"
_LOSS = "loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()) / k"
_STEP = """    if scaler is not None:
        scaler.step(optimizer)  # skipped when a gradient is inf or nan
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""
_AFTER = (
    """    if scaler is not None:
        scaler.unscale_(optimizer)  # clipping must see the true gradients
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
"""
    + _STEP
)
_RESTART = """        if cache.length >= window:  # full: start again from the recent half
            cache, step_input = new_cache(), sequence[-(window // 2):]
        else:
            step_input = sequence[-1:]"""
_ROPE = "q, k = attn.rope(q, positions).float(), attn.rope(k, positions).float()"

WRONG = [
    # Exercise 1
    Wrong(
        "bits_per_byte",
        "nats, not bits (ln 2 missing)",
        variant("bits_per_byte", (_BPB, "return loss * tokens / n_bytes")),
        "divide by ln 2",
    ),
    Wrong(
        "bits_per_byte",
        "tokens and bytes swapped",
        variant("bits_per_byte", (_BPB, "return loss * n_bytes / (tokens * math.log(2))")),
        "tokens and bytes are swapped",
    ),
    Wrong(
        "bits_per_byte",
        "bits per token",
        variant("bits_per_byte", (_BPB, "return loss / math.log(2)")),
        "bits per token",
    ),
    Wrong(
        "bits_per_byte",
        "a tensor returned",
        variant("bits_per_byte", (_BPB, "return torch.tensor(loss * tokens / n_bytes) / math.log(2)")),
        "returned a tensor",
    ),
    Wrong("bits_per_byte", "log base 10", variant("bits_per_byte", ("math.log(2)", "math.log(10)")), "ln 10"),
    # Exercise 2
    Wrong(
        "flops_per_token",
        "a float",
        variant("flops_per_token", ("return 3 * forward", "return 3.0 * forward")),
        "a float, expected an int",
    ),
    Wrong(
        "flops_per_token",
        "forward only (no backward)",
        variant("flops_per_token", ("return 3 * forward", "return forward")),
        "forward pass only",
    ),
    Wrong(
        "flops_per_token",
        "the embedding counted as a matmul",
        variant("flops_per_token", ("+ d * config.vocab_size", "+ 2 * d * config.vocab_size")),
        "embedding table is counted",
    ),
    Wrong(
        "flops_per_token",
        "attention's matmuls left out",
        variant("flops_per_token", (_FORWARD, "forward = 2 * matmul_weights")),
        "attention's own matmuls are missing",
    ),
    Wrong(
        "flops_per_token",
        "attention counted for the causal half",
        variant("flops_per_token", (_FORWARD, _FORWARD.replace("4 * config", "2 * config"))),
        "causal half",
    ),
    Wrong(
        "flops_per_token",
        "grouped-query attention ignored (k, v as d x d)",
        variant("flops_per_token", ("kv_width = (config.n_kv_heads or config.n_heads) * head_dim", "kv_width = d")),
        "k_proj and v_proj are counted",
    ),
    # Exercise 3
    Wrong(
        "mfu",
        "a percentage",
        variant("mfu", (_MFU, "return 100 * tokens_per_second * flops_per_token / peak_flops")),
        "not a percentage",
    ),
    Wrong(
        "mfu",
        "upside down",
        variant("mfu", (_MFU, "return peak_flops / (tokens_per_second * flops_per_token)")),
        "upside down",
    ),
    Wrong(
        "mfu",
        "FLOPs per token left out",
        variant("mfu", (_MFU, "return tokens_per_second / peak_flops")),
        "expected tokens_per_second",
    ),
    # Exercise 4
    Wrong(
        "rank_micro_batches",
        "rows interleaved across ranks",
        variant(
            "rank_micro_batches",
            ("mine = batch[rank * per_rank:(rank + 1) * per_rank]", "mine = batch[rank::world_size]"),
        ),
        "interleaved",
    ),
    Wrong(
        "rank_micro_batches",
        "micro-batches interleaved within a rank",
        variant(
            "rank_micro_batches",
            (
                "return list(mine.split(per_rank // accumulation_steps))",
                "return [mine[i::accumulation_steps] for i in range(accumulation_steps)]",
            ),
        ),
        "not in order",
    ),
    Wrong(
        "rank_micro_batches",
        "micro-batches of accumulation_steps rows",
        variant("rank_micro_batches", ("mine.split(per_rank // accumulation_steps)", "mine.split(accumulation_steps)")),
        "expected accumulation_steps",
    ),
    Wrong(
        "rank_micro_batches",
        "only world_size checked (uneven micro-batches)",
        variant("rank_micro_batches", ("if n % (world_size * accumulation_steps):", "if n % world_size:")),
        "returned without an error",
    ),
    Wrong(
        "rank_micro_batches",
        "torch.split's tuple returned",
        variant(
            "rank_micro_batches",
            (
                "return list(mine.split(per_rank // accumulation_steps))",
                "return mine.split(per_rank // accumulation_steps)",
            ),
        ),
        "returned a tuple",
    ),
    Wrong(
        "rank_micro_batches",
        "an assert instead of ValueError",
        variant(
            "rank_micro_batches",
            (
                "if n % (world_size * accumulation_steps):",
                "assert n % (world_size * accumulation_steps) == 0\n    if False:",
            ),
        ),
        "raised AssertionError",
    ),
    # Exercise 5
    Wrong(
        "train_step",
        "loss not divided by k",
        variant("train_step", (_LOSS, _LOSS.replace(" / k", ""))),
        "divided by the number of micro-batches",
    ),
    Wrong(
        "train_step",
        "zero_grad before every micro-batch",
        variant(
            "train_step",
            (
                "    for inputs, targets in micro_batches:\n",
                "    for inputs, targets in micro_batches:\n        optimizer.zero_grad()\n",
            ),
        ),
        "only the last micro-batch",
    ),
    Wrong(
        "train_step",
        "a step after every micro-batch",
        variant("train_step", (_AFTER, "".join("    " + line + "\n" for line in _AFTER.splitlines()))),
        "stepped after every micro-batch",
    ),
    Wrong(
        "train_step",
        "gradients never zeroed",
        variant("train_step", ("    optimizer.zero_grad(set_to_none=True)\n", "")),
        "previous step's gradients",
    ),
    Wrong(
        "train_step",
        "scaler.step without scaler.update",
        variant("train_step", ("        scaler.update()\n", "")),
        "scaler.update()",
    ),
    Wrong(
        "train_step",
        "clipping the scaled gradients",
        variant(
            "train_step",
            ("        scaler.unscale_(optimizer)  # clipping must see the true gradients\n", "        pass\n"),
        ),
        "clipped while still scaled",
    ),
    Wrong(
        "train_step",
        "autocast hard-wired to float16",
        variant("train_step", ("dtype=dtype, enabled", "dtype=torch.float16, enabled")),
        "asked for",
    ),
    Wrong(
        "train_step",
        "no autocast",
        variant("train_step", ("enabled=dtype is not None", "enabled=False")),
        "without autocast",
    ),
    Wrong(
        "train_step",
        "optimizer.step() after unscale_, not scaler.step",
        variant(
            "train_step",
            (
                _STEP,
                "    optimizer.step()\n    if scaler is not None:\n        scaler.update()\n"
                "    optimizer.zero_grad(set_to_none=True)\n",
            ),
        ),
        "skips",
    ),
    Wrong(
        "train_step",
        "backward inside the autocast block",
        variant(
            "train_step",
            (
                "        (scaler.scale(loss) if scaler is not None else loss).backward()",
                "            (scaler.scale(loss) if scaler is not None else loss).backward()",
            ),
        ),
        "backward pass ran inside the autocast block",
    ),
    Wrong(
        "train_step",
        "returns the last micro-batch's loss",
        variant("train_step", ("        total += loss.item()", "        total = loss.item() * k")),
        "expected the mean loss",
    ),
    Wrong(
        "train_step",
        "the loss computed after the with block, on bfloat16 logits",
        variant(
            "train_step",
            (
                "            logits = model(inputs)\n            " + _LOSS,
                "            logits = model(inputs)\n"
                "        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten()) / k",
            ),
        ),
        "ran on the logits outside autocast",
    ),
    Wrong(
        "train_step",
        "gradients zeroed at the start of the call, not after the step",
        variant(
            "train_step",
            ("    optimizer.zero_grad(set_to_none=True)\n", ""),
            ("    total = 0.0\n", "    total = 0.0\n    optimizer.zero_grad(set_to_none=True)\n"),
        ),
        ".grad still held gradients",
    ),
    Wrong(
        "train_step",
        "one forward and backward on the micro-batches concatenated",
        variant(
            "train_step",
            (
                """    for inputs, targets in micro_batches:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()) / k
        (scaler.scale(loss) if scaler is not None else loss).backward()  # gradients add up in .grad
        total += loss.item()
""",
                """    inputs = torch.cat([x for x, _ in micro_batches])
    targets = torch.cat([y for _, y in micro_batches])
    with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
        logits = model(inputs)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
    (scaler.scale(loss) if scaler is not None else loss).backward()
    total = loss.item()
""",
            ),
        ),
        "micro-batches concatenated",
    ),
    Wrong(
        "train_step",
        "the micro-batches' losses added up, one backward",
        variant(
            "train_step",
            (
                """        (scaler.scale(loss) if scaler is not None else loss).backward()  # gradients add up in .grad
        total += loss.item()
""",
                """        total = total + loss
    (scaler.scale(total) if scaler is not None else total).backward()
    total = total.item()
""",
            ),
        ),
        "one backward pass",
    ),
    # Exercise 6
    Wrong(
        "attention_maps",
        "no causal mask",
        variant(
            "attention_maps", ('scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)', "scores.softmax(dim=-1)")
        ),
        "attends to a later one",
    ),
    Wrong(
        "attention_maps",
        "no RoPE",
        variant("attention_maps", (_ROPE, "q, k = q.float(), k.float()")),
        "RoPE is missing",
    ),
    Wrong(
        "attention_maps",
        "no 1/sqrt(head_dim)",
        variant("attention_maps", (" / math.sqrt(attn.head_dim)", "")),
        "not divided by sqrt(head_dim)",
    ),
    Wrong(
        "attention_maps",
        "kv heads repeated 0 1 0 1",
        variant(
            "attention_maps",
            (
                "k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)",
                "k = k.repeat(1, attn.num_heads // attn.num_kv_heads, 1, 1)",
            ),
        ),
        "repeat: 0 1 0 1",
    ),
    Wrong(
        "attention_maps",
        "hooks left on the model",
        variant("attention_maps", ("        for handle in handles:\n            handle.remove()", "        pass")),
        "hooks on the model",
    ),
    Wrong(
        "attention_maps",
        "hooks removed only when the model succeeds (no finally)",
        variant(
            "attention_maps",
            (
                """    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()""",
                """    model(tokens)
    for handle in handles:
        handle.remove()""",
            ),
        ),
        "failed in the middle of its forward",
    ),
    Wrong(
        "attention_maps",
        "each hook removes itself when it fires (no finally)",
        variant(
            "attention_maps",
            (
                """    def grab(module, args, output):
        inputs.append((module, args[0]))

    handles = [block.attn.register_forward_hook(grab) for block in model.blocks]
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()""",
                """    handles = []

    def grab(module, args, output):
        inputs.append((module, args[0]))
        handles[len(inputs) - 1].remove()  # done with this layer

    handles.extend(block.attn.register_forward_hook(grab) for block in model.blocks)
    model(tokens)""",
            ),
        ),
        "failed in the middle of its forward",
    ),
    Wrong(
        "attention_maps",
        "gradients on (no @torch.no_grad())",
        variant(
            "attention_maps",
            ("@torch.no_grad()\ndef attention_maps", "def attention_maps"),
            ("return torch.stack(maps)", "return torch.stack(maps).detach()"),
        ),
        "with gradients on",
    ),
    Wrong(
        "attention_maps",
        "the model run twice (a warm-up before the hooks)",
        variant("attention_maps", ("    handles = [", "    model(tokens)  # warm-up\n    handles = [")),
        "ran the model 2 times",
    ),
    Wrong(
        "attention_maps",
        "softmax over the queries",
        variant("attention_maps", (".softmax(dim=-1)", ".softmax(dim=-2)")),
        "rows sum to",
    ),
    # Exercise 7
    Wrong(
        "generate_with_cache",
        "no cache reuse: the whole window fed to a new cache every step",
        variant("generate_with_cache", (_RESTART, "        cache, step_input = new_cache(), sequence[-window:]")),
        "new cache for every call",
    ),
    Wrong(
        "generate_with_cache",
        "never restarts: the cache outgrows the window",
        variant("generate_with_cache", (_RESTART, "        step_input = sequence[-1:]")),
        "cache grew to",
    ),
    Wrong(
        "generate_with_cache",
        "restarts into the same cache",
        variant(
            "generate_with_cache",
            ("cache, step_input = new_cache(), sequence[-(window // 2):]", "step_input = sequence[-(window // 2):]"),
        ),
        "cache grew to",
    ),
    Wrong(
        "generate_with_cache",
        "restarts with the whole window",
        variant("generate_with_cache", ("sequence[-(window // 2):]", "sequence[-window:]")),
        "expected the last window // 2",
    ),
    Wrong(
        "generate_with_cache",
        "restarts one position late",
        variant("generate_with_cache", ("if cache.length >= window:", "if cache.length > window:")),
        "cache grew to",
    ),
    Wrong(
        "generate_with_cache",
        "the prompt fed whole, not its last window tokens",
        variant("generate_with_cache", ("prompt[-window:]", "prompt")),
        "the prompt's last window tokens",
    ),
    Wrong(
        "generate_with_cache",
        "gradients left on (no @torch.no_grad())",
        variant("generate_with_cache", ("@torch.no_grad()\ndef generate_with_cache", "def generate_with_cache")),
        "gradients on",
    ),
    Wrong(
        "generate_with_cache",
        "eos dropped",
        variant(
            "generate_with_cache",
            (
                """        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])
        if eos_id is not None and int(token) == eos_id:
            break""",
                """        if eos_id is not None and int(token) == eos_id:
            break
        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])""",
            ),
        ),
        "dropped it",
    ),
    Wrong(
        "generate_with_cache",
        "the new tokens added in pick's int64: an int32 prompt comes back int64",
        variant("generate_with_cache", ("token.view(1).to(sequence.dtype)", "token.view(1)")),
        "tokens for a torch.int32 prompt",
    ),
    Wrong(
        "generate_with_cache",
        "a wasted call after the last token (the next logits computed ahead)",
        variant(
            "generate_with_cache",
            (
                """    cache, step_input = new_cache(), prompt[-window:]
    for _ in range(max_new_tokens):
        logits = model(step_input[None], cache=cache)[:, -1]
""",
                """    cache = new_cache()
    logits = model(prompt[-window:][None], cache=cache)[:, -1]
    for _ in range(max_new_tokens):
""",
            ),
            (
                _RESTART,
                """        if cache.length >= window:
            cache = new_cache()
            logits = model(sequence[-(window // 2):][None], cache=cache)[:, -1]
        else:
            logits = model(sequence[-1:][None], cache=cache)[:, -1]""",
            ),
        ),
        "model calls for",
    ),
]
