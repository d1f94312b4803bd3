"""Mistakes students make in notebook 13.

Each wrong version is a right answer with one edit (``_edit`` insists that the edited text is there),
so it differs from the right one only by the mistake. The code runs in the solution notebook's
namespace after ``PRELUDE`` (``math``, ``torch``, ``F``, ``nn``).
"""

from wrong import Wrong

BITS_PER_BYTE = '''
def bits_per_byte(loss: float, tokens: int, n_bytes: int) -> float:
    """Mean cross-entropy `loss` (nats per token) over `tokens` tokens that encode `n_bytes` bytes -> bits per byte."""
    return loss * tokens / (n_bytes * math.log(2))

'''

FLOPS = '''
def flops_per_token(config, context_length: int) -> int:
    """Training FLOPs per token (forward + backward) of the course's ModernDecoder with this DecoderConfig."""
    d, head_dim = config.d_model, config.d_model // config.n_heads
    kv_width = (config.n_kv_heads or config.n_heads) * head_dim
    per_layer = d * d + 2 * d * kv_width + d * d + 3 * d * config.d_ff  # q, k and v, out; w1, w3, w2
    matmul_weights = config.n_layers * per_layer + d * config.vocab_size  # + lm_head (the embedding is a lookup)
    forward = 2 * matmul_weights + 4 * config.n_layers * context_length * d  # + q k^T and weights @ v
    return 3 * forward

'''

MFU = '''
def mfu(tokens_per_second: float, flops_per_token: int, peak_flops: float) -> float:
    """Model FLOPs utilisation: the fraction of the accelerator's peak that the training actually uses."""
    return tokens_per_second * flops_per_token / peak_flops

'''

MICRO = '''
def rank_micro_batches(batch: torch.Tensor, rank: int, world_size: int, accumulation_steps: int) -> list[torch.Tensor]:
    """Rank `rank`'s contiguous share of the global batch, cut into `accumulation_steps` equal micro-batches."""
    n = batch.shape[0]
    if n % (world_size * accumulation_steps):
        raise ValueError(f"a batch of {n} sequences does not split into {world_size} ranks x {accumulation_steps} "
                         f"equal micro-batches: make it a multiple of {world_size * accumulation_steps}")
    per_rank = n // world_size
    mine = batch[rank * per_rank:(rank + 1) * per_rank]
    return list(mine.split(per_rank // accumulation_steps))

'''

TRAIN_STEP = '''
def train_step(model: nn.Module, micro_batches: list, optimizer: torch.optim.Optimizer, *,
               dtype: torch.dtype | None = None, scaler=None, grad_clip: float | None = None) -> float:
    """One optimizer step on k micro-batches [(inputs, targets), ...] of token ids [batch, T]; returns the mean loss."""
    device_type = next(model.parameters()).device.type
    k = len(micro_batches)
    total = 0.0
    for inputs, targets in micro_batches:
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            logits = model(inputs)
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()) / k
        (scaler.scale(loss) if scaler is not None else loss).backward()  # gradients add up in .grad
        total += loss.item()
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
    return total

'''

MAPS = '''
@torch.no_grad()
def attention_maps(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Causal attention weights [n_layers, batch, n_heads, T, T] (float32) of every layer of a ModernDecoder."""
    inputs = []  # (attention module, the normalised hidden states it was called with), one per layer

    def grab(module, args, output):
        inputs.append((module, args[0]))

    handles = [block.attn.register_forward_hook(grab) for block in model.blocks]
    try:
        model(tokens)
    finally:
        for handle in handles:
            handle.remove()
    batch, length = tokens.shape
    positions = torch.arange(length, device=tokens.device)
    causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()
    maps = []
    for attn, x in inputs:
        q = attn.q_proj(x).view(batch, length, attn.num_heads, attn.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(batch, length, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
        q, k = attn.rope(q, positions).float(), attn.rope(k, positions).float()
        k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)  # kv heads 0 0 1 1 ...
        scores = q @ k.transpose(-2, -1) / math.sqrt(attn.head_dim)
        maps.append(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1))
    return torch.stack(maps)

'''


GENERATE = """
@torch.no_grad()
def generate_with_cache(model, prompt: torch.Tensor, *, max_new_tokens: int, window: int, new_cache,
                        eos_id: int | None = None, pick) -> torch.Tensor:
    sequence = prompt.clone()
    cache, step_input = new_cache(), prompt[-window:]
    for _ in range(max_new_tokens):
        logits = model(step_input[None], cache=cache)[:, -1]
        token = pick(logits)[0]
        sequence = torch.cat([sequence, token.view(1).to(sequence.dtype)])
        if eos_id is not None and int(token) == eos_id:
            break
        if cache.length >= window:  # full: start again from the recent half
            cache, step_input = new_cache(), sequence[-(window // 2):]
        else:
            step_input = sequence[-1:]
    return sequence

"""


def _edit(code, *pairs):
    for old, new in pairs:
        assert old in code, old
        code = code.replace(old, new)
    return code


RIGHT = {
    "bits_per_byte": BITS_PER_BYTE,
    "flops_per_token": FLOPS,
    "mfu": MFU,
    "rank_micro_batches": MICRO,
    "train_step": TRAIN_STEP,
    "attention_maps": MAPS,
    "generate_with_cache": GENERATE,
}

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
        _edit(BITS_PER_BYTE, (_BPB, "return loss * tokens / n_bytes")),
        "divide by ln 2",
    ),
    Wrong(
        "bits_per_byte",
        "tokens and bytes swapped",
        _edit(BITS_PER_BYTE, (_BPB, "return loss * n_bytes / (tokens * math.log(2))")),
        "tokens and bytes are swapped",
    ),
    Wrong(
        "bits_per_byte", "bits per token", _edit(BITS_PER_BYTE, (_BPB, "return loss / math.log(2)")), "bits per token"
    ),
    Wrong(
        "bits_per_byte",
        "a tensor returned",
        _edit(BITS_PER_BYTE, (_BPB, "return torch.tensor(loss * tokens / n_bytes) / math.log(2)")),
        "returned a tensor",
    ),
    Wrong("bits_per_byte", "log base 10", _edit(BITS_PER_BYTE, ("math.log(2)", "math.log(10)")), "ln 10"),
    # Exercise 2
    Wrong(
        "flops_per_token",
        "a float",
        _edit(FLOPS, ("return 3 * forward", "return 3.0 * forward")),
        "a float, expected an int",
    ),
    Wrong(
        "flops_per_token",
        "forward only (no backward)",
        _edit(FLOPS, ("return 3 * forward", "return forward")),
        "forward pass only",
    ),
    Wrong(
        "flops_per_token",
        "the embedding counted as a matmul",
        _edit(FLOPS, ("+ d * config.vocab_size", "+ 2 * d * config.vocab_size")),
        "embedding table is counted",
    ),
    Wrong(
        "flops_per_token",
        "attention's matmuls left out",
        _edit(FLOPS, (_FORWARD, "forward = 2 * matmul_weights")),
        "attention's own matmuls are missing",
    ),
    Wrong(
        "flops_per_token",
        "attention counted for the causal half",
        _edit(FLOPS, (_FORWARD, _FORWARD.replace("4 * config", "2 * config"))),
        "causal half",
    ),
    Wrong(
        "flops_per_token",
        "grouped-query attention ignored (k, v as d x d)",
        _edit(FLOPS, ("kv_width = (config.n_kv_heads or config.n_heads) * head_dim", "kv_width = d")),
        "k_proj and v_proj are counted",
    ),
    # Exercise 3
    Wrong(
        "mfu",
        "a percentage",
        _edit(MFU, (_MFU, "return 100 * tokens_per_second * flops_per_token / peak_flops")),
        "not a percentage",
    ),
    Wrong(
        "mfu",
        "upside down",
        _edit(MFU, (_MFU, "return peak_flops / (tokens_per_second * flops_per_token)")),
        "upside down",
    ),
    Wrong(
        "mfu",
        "FLOPs per token left out",
        _edit(MFU, (_MFU, "return tokens_per_second / peak_flops")),
        "expected tokens_per_second",
    ),
    # Exercise 4
    Wrong(
        "rank_micro_batches",
        "rows interleaved across ranks",
        _edit(MICRO, ("mine = batch[rank * per_rank:(rank + 1) * per_rank]", "mine = batch[rank::world_size]")),
        "interleaved",
    ),
    Wrong(
        "rank_micro_batches",
        "micro-batches interleaved within a rank",
        _edit(
            MICRO,
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
        _edit(MICRO, ("mine.split(per_rank // accumulation_steps)", "mine.split(accumulation_steps)")),
        "expected accumulation_steps",
    ),
    Wrong(
        "rank_micro_batches",
        "only world_size checked (uneven micro-batches)",
        _edit(MICRO, ("if n % (world_size * accumulation_steps):", "if n % world_size:")),
        "returned without an error",
    ),
    Wrong(
        "rank_micro_batches",
        "torch.split's tuple returned",
        _edit(
            MICRO,
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
        _edit(
            MICRO,
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
        _edit(TRAIN_STEP, (_LOSS, _LOSS.replace(" / k", ""))),
        "divided by the number of micro-batches",
    ),
    Wrong(
        "train_step",
        "zero_grad before every micro-batch",
        _edit(
            TRAIN_STEP,
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
        _edit(TRAIN_STEP, (_AFTER, "".join("    " + line + "\n" for line in _AFTER.splitlines()))),
        "stepped after every micro-batch",
    ),
    Wrong(
        "train_step",
        "gradients never zeroed",
        _edit(TRAIN_STEP, ("    optimizer.zero_grad(set_to_none=True)\n", "")),
        "previous step's gradients",
    ),
    Wrong(
        "train_step",
        "scaler.step without scaler.update",
        _edit(TRAIN_STEP, ("        scaler.update()\n", "")),
        "scaler.update()",
    ),
    Wrong(
        "train_step",
        "clipping the scaled gradients",
        _edit(
            TRAIN_STEP,
            ("        scaler.unscale_(optimizer)  # clipping must see the true gradients\n", "        pass\n"),
        ),
        "clipped while still scaled",
    ),
    Wrong(
        "train_step",
        "autocast hard-wired to float16",
        _edit(TRAIN_STEP, ("dtype=dtype, enabled", "dtype=torch.float16, enabled")),
        "asked for",
    ),
    Wrong(
        "train_step",
        "no autocast",
        _edit(TRAIN_STEP, ("enabled=dtype is not None", "enabled=False")),
        "without autocast",
    ),
    Wrong(
        "train_step",
        "optimizer.step() after unscale_, not scaler.step",
        _edit(
            TRAIN_STEP,
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
        _edit(
            TRAIN_STEP,
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
        _edit(TRAIN_STEP, ("        total += loss.item()", "        total = loss.item() * k")),
        "expected the mean loss",
    ),
    Wrong(
        "train_step",
        "the loss computed after the with block, on bfloat16 logits",
        _edit(
            TRAIN_STEP,
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
        _edit(
            TRAIN_STEP,
            ("    optimizer.zero_grad(set_to_none=True)\n", ""),
            ("    total = 0.0\n", "    total = 0.0\n    optimizer.zero_grad(set_to_none=True)\n"),
        ),
        ".grad still held gradients",
    ),
    Wrong(
        "train_step",
        "one forward and backward on the micro-batches concatenated",
        _edit(
            TRAIN_STEP,
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
        _edit(
            TRAIN_STEP,
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
        _edit(MAPS, ('scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)', "scores.softmax(dim=-1)")),
        "attends to a later one",
    ),
    Wrong("attention_maps", "no RoPE", _edit(MAPS, (_ROPE, "q, k = q.float(), k.float()")), "RoPE is missing"),
    Wrong(
        "attention_maps",
        "no 1/sqrt(head_dim)",
        _edit(MAPS, (" / math.sqrt(attn.head_dim)", "")),
        "not divided by sqrt(head_dim)",
    ),
    Wrong(
        "attention_maps",
        "kv heads repeated 0 1 0 1",
        _edit(
            MAPS,
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
        _edit(MAPS, ("        for handle in handles:\n            handle.remove()", "        pass")),
        "hooks on the model",
    ),
    Wrong(
        "attention_maps",
        "hooks removed only when the model succeeds (no finally)",
        _edit(
            MAPS,
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
        _edit(
            MAPS,
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
        _edit(
            MAPS,
            ("@torch.no_grad()\ndef attention_maps", "def attention_maps"),
            ("return torch.stack(maps)", "return torch.stack(maps).detach()"),
        ),
        "with gradients on",
    ),
    Wrong(
        "attention_maps",
        "the model run twice (a warm-up before the hooks)",
        _edit(MAPS, ("    handles = [", "    model(tokens)  # warm-up\n    handles = [")),
        "ran the model 2 times",
    ),
    Wrong(
        "attention_maps",
        "softmax over the queries",
        _edit(MAPS, (".softmax(dim=-1)", ".softmax(dim=-2)")),
        "rows sum to",
    ),
    # Exercise 7
    Wrong(
        "generate_with_cache",
        "no cache reuse: the whole window fed to a new cache every step",
        _edit(GENERATE, (_RESTART, "        cache, step_input = new_cache(), sequence[-window:]")),
        "new cache for every call",
    ),
    Wrong(
        "generate_with_cache",
        "never restarts: the cache outgrows the window",
        _edit(GENERATE, (_RESTART, "        step_input = sequence[-1:]")),
        "cache grew to",
    ),
    Wrong(
        "generate_with_cache",
        "restarts into the same cache",
        _edit(
            GENERATE,
            ("cache, step_input = new_cache(), sequence[-(window // 2):]", "step_input = sequence[-(window // 2):]"),
        ),
        "cache grew to",
    ),
    Wrong(
        "generate_with_cache",
        "restarts with the whole window",
        _edit(GENERATE, ("sequence[-(window // 2):]", "sequence[-window:]")),
        "expected the last window // 2",
    ),
    Wrong(
        "generate_with_cache",
        "restarts one position late",
        _edit(GENERATE, ("if cache.length >= window:", "if cache.length > window:")),
        "cache grew to",
    ),
    Wrong(
        "generate_with_cache",
        "the prompt fed whole, not its last window tokens",
        _edit(GENERATE, ("prompt[-window:]", "prompt")),
        "the prompt's last window tokens",
    ),
    Wrong(
        "generate_with_cache",
        "gradients left on (no @torch.no_grad())",
        _edit(GENERATE, ("@torch.no_grad()\ndef generate_with_cache", "def generate_with_cache")),
        "gradients on",
    ),
    Wrong(
        "generate_with_cache",
        "eos dropped",
        _edit(
            GENERATE,
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
        _edit(GENERATE, ("token.view(1).to(sequence.dtype)", "token.view(1)")),
        "tokens for a torch.int32 prompt",
    ),
    Wrong(
        "generate_with_cache",
        "a wasted call after the last token (the next logits computed ahead)",
        _edit(
            GENERATE,
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
