"""Mistakes students make in notebook 07."""

from wrong import Wrong

_RESIDUAL = """
class Residual(nn.Module):
    def __init__(self, sublayer):
        super().__init__()
        {store}

    def forward(self, x, *args, **kwargs):
        {body}
"""


def residual(store="self.sublayer = sublayer", body="return x + self.sublayer(x, *args, **kwargs)"):
    return _RESIDUAL.format(store=store, body=body)


_BLOCK = """
class {name}(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, activation="relu", *, attention=MultiHeadAttention,
                 feed_forward=FeedForward, norm=LayerNorm):
        super().__init__()
        self.norm1 = norm(d_model)
        self.attn = attention(d_model, num_heads)
        self.norm2 = {norm2}
        self.ffn = {ffn}

    def forward(self, x, mask=None):
        {body}
"""
PRE = "x = x + self.attn(self.norm1(x), mask)\n        return x + self.ffn(self.norm2(x))"
POST = "x = self.norm1(x + self.attn(x, mask))\n        return self.norm2(x + self.ffn(x))"


def block(name, body, norm2="norm(d_model)", ffn="feed_forward(d_model, d_ff, activation)"):
    return _BLOCK.format(name=name, body=body, norm2=norm2, ffn=ffn)


_ENCODER = """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, activation="relu", norm_first=False, *,
                 attention=MultiHeadAttention, feed_forward=FeedForward, norm=LayerNorm):
        super().__init__()
        self.norm_first = {norm_first}
        self.self_attn = attention(d_model, num_heads)
        self.norm1 = norm(d_model)
        self.ffn = feed_forward(d_model, d_ff, activation)
        self.norm2 = norm(d_model)

    def forward(self, x, padding_mask=None):
        mask = None if padding_mask is None else {mask}
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), mask)
            return x + self.ffn(self.norm2(x))
        {post}
"""
ENCODER_POST = "x = self.norm1(x + self.self_attn(x, mask))\n        return self.norm2(x + self.ffn(x))"


def encoder(mask="padding_mask[:, None, None, :]", norm_first="norm_first", post=ENCODER_POST, rename=False):
    code = _ENCODER.format(mask=mask, norm_first=norm_first, post=post)
    return code.replace("self.self_attn", "self.attn") if rename else code


_DECODER = """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, activation="relu", norm_first=False, *,
                 attention=MultiHeadAttention, cross_attention=CrossAttention, feed_forward=FeedForward,
                 norm=LayerNorm):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = attention(d_model, num_heads)
        self.norm1 = norm(d_model)
        self.cross_attn = cross_attention(d_model, num_heads)
        self.norm2 = norm(d_model)
        self.ffn = feed_forward(d_model, d_ff, activation)
        self.norm3 = {norm3}

    def forward(self, x, memory, tgt_padding=None, memory_padding=None):
        length = x.shape[1]
        self_mask = {causal}
        if tgt_padding is not None:
            self_mask = {combine}
        memory_mask = None if memory_padding is None else {memory_mask}
        if self.norm_first:
            x = x + self.self_attn(self.norm1(x), self_mask)
            x = x + self.cross_attn(self.norm2(x), {kv}, memory_mask)
            return x + self.ffn(self.norm3(x))
        {post}
"""
DECODER_POST = (
    "x = self.norm1(x + self.self_attn(x, self_mask))\n"
    "        x = self.norm2(x + self.cross_attn(x, {kv}, memory_mask))\n"
    "        return self.norm3(x + self.ffn(x))"
)
CAUSAL = "torch.ones(length, length, dtype=torch.bool, device=x.device).tril()"


def decoder(
    causal=CAUSAL,
    combine="self_mask & tgt_padding[:, None, None, :]",
    kv="memory",
    memory_mask="memory_padding[:, None, None, :]",
    norm3="norm(d_model)",
    post=None,
):
    post = (post or DECODER_POST).format(kv=kv)
    return _DECODER.format(causal=causal, combine=combine, kv=kv, memory_mask=memory_mask, norm3=norm3, post=post)


_PARALLEL = """
class ParallelBlock(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, activation="relu", *, attention=MultiHeadAttention,
                 feed_forward=FeedForward, norm=LayerNorm):
        super().__init__()
        self.norm1 = norm(d_model)
        self.attn = attention(d_model, num_heads){extra}
        self.ffn = feed_forward(d_model, d_ff, activation)

    def forward(self, x, mask=None):
        {body}
"""
PARALLEL = "h = self.norm1(x)\n        return x + self.attn(h, mask) + self.ffn(h)"


def parallel(body=PARALLEL, extra=""):
    return _PARALLEL.format(body=body, extra=extra)


RIGHT = {
    "residual": residual(),
    "pre_norm_block": block("PreNormBlock", PRE),
    "post_norm_block": block("PostNormBlock", POST),
    "encoder_block": encoder(),
    "decoder_block": decoder(),
    "parallel_block": parallel(),
}

WRONG = [
    # The parts must be made by calling the constructor arguments (recording factories observe it).
    Wrong(
        "pre_norm_block",
        "names nn.LayerNorm instead of calling norm",
        block("PreNormBlock", PRE, norm2="nn.LayerNorm(d_model)"),
        "PreNormBlock.norm2 was not made by calling the `norm` argument",
    ),
    Wrong(
        "post_norm_block",
        "names its FeedForward class instead of calling feed_forward",
        block("PostNormBlock", POST, ffn="FeedForward(d_model, d_ff, activation)"),
        "PostNormBlock.ffn was not made by calling the `feed_forward` argument",
    ),
    Wrong(
        "decoder_block",
        "names nn.LayerNorm for norm3",
        decoder(norm3="nn.LayerNorm(d_model)"),
        "DecoderBlock.norm3 was not made by calling the `norm` argument",
    ),
    # Exercise 1
    Wrong(
        "residual",
        "returns the sublayer's output alone",
        residual(body="return self.sublayer(x, *args, **kwargs)"),
        "the residual is missing",
    ),
    Wrong(
        "residual",
        "sublayer kept in a plain list: parameters not registered",
        residual(store="self.layers = [sublayer]", body="return x + self.layers[0](x, *args, **kwargs)"),
        "the sublayer is not registered",
    ),
    Wrong(
        "residual",
        "extra arguments (the mask) not passed on",
        residual(body="return x + self.sublayer(x)"),
        "the mask does not reach the sublayer",
    ),
    Wrong(
        "residual",
        "x detached",
        residual(body="return x.detach() + self.sublayer(x, *args, **kwargs)"),
        "the identity path x carries no gradient",
    ),
    Wrong(
        "residual",
        "adds in place into the caller's x",
        residual(body="x += self.sublayer(x, *args, **kwargs)\n        return x"),
        "changes its input x in place",
    ),
    # Exercise 2
    Wrong(
        "pre_norm_block",
        "norm after the residual add (post-norm order)",
        block("PreNormBlock", POST),
        "this is the post-norm order",
    ),
    Wrong(
        "pre_norm_block",
        "norm applied after the residual add as well",
        block(
            "PreNormBlock",
            "x = self.norm1(x + self.attn(self.norm1(x), mask))\n"
            "        return self.norm2(x + self.ffn(self.norm2(x)))",
        ),
        "the norm is applied after the residual add",
    ),
    Wrong(
        "pre_norm_block",
        "residual stream replaced by its normalized version",
        block(
            "PreNormBlock",
            "h = self.norm1(x)\n        x = h + self.attn(h, mask)\n"
            "        h = self.norm2(x)\n        return h + self.ffn(h)",
        ),
        "the residual adds the normalized h",
    ),
    Wrong(
        "pre_norm_block",
        "residual missing around attention",
        block("PreNormBlock", "x = self.attn(self.norm1(x), mask)\n        return x + self.ffn(self.norm2(x))"),
        "the residual connection around attention is missing",
    ),
    Wrong(
        "pre_norm_block",
        "one LayerNorm shared by both sublayers",
        block("PreNormBlock", PRE, norm2="self.norm1"),
        "one LayerNorm is shared",
    ),
    Wrong(
        "pre_norm_block",
        "norm1 used before both sublayers",
        block("PreNormBlock", "x = x + self.attn(self.norm1(x), mask)\n        return x + self.ffn(self.norm1(x))"),
        "norm1 is used for both sublayers",
    ),
    Wrong(
        "pre_norm_block",
        "mask not passed to the attention",
        block("PreNormBlock", "x = x + self.attn(self.norm1(x))\n        return x + self.ffn(self.norm2(x))"),
        "the mask does not reach the attention",
    ),
    Wrong(
        "pre_norm_block",
        "activation argument ignored",
        block("PreNormBlock", PRE, ffn="feed_forward(d_model, d_ff)"),
        "pass activation on",
    ),
    # Exercise 3
    Wrong("post_norm_block", "pre-norm order", block("PostNormBlock", PRE), "this is the pre-norm order"),
    Wrong(
        "post_norm_block",
        "residual missing around the FFN",
        block("PostNormBlock", "x = self.norm1(x + self.attn(x, mask))\n        return self.norm2(self.ffn(x))"),
        "the residual connection around the feed-forward network is missing",
    ),
    Wrong(
        "post_norm_block",
        "one LayerNorm shared by both sublayers",
        block("PostNormBlock", POST, norm2="self.norm1"),
        "one LayerNorm is shared",
    ),
    Wrong(
        "post_norm_block",
        "mask not passed to the attention",
        block("PostNormBlock", "x = self.norm1(x + self.attn(x))\n        return self.norm2(x + self.ffn(x))"),
        "the mask does not reach the attention",
    ),
    # Exercise 4
    Wrong(
        "encoder_block",
        "padding mask inverted",
        encoder(mask="~padding_mask[:, None, None, :]"),
        "the padding mask is inverted",
    ),
    Wrong(
        "encoder_block",
        "padding mask on the query axis",
        encoder(mask="padding_mask[:, None, :, None]"),
        "padded keys must be hidden from every query",
    ),
    Wrong(
        "encoder_block",
        "causal mask in an encoder",
        encoder(mask="padding_mask[:, None, None, :] & torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()"),
        "an encoder attends in both directions",
    ),
    Wrong(
        "encoder_block",
        "norm_first ignored (always post-norm)",
        encoder(norm_first="False"),
        "norm_first=True asks for the pre-norm order",
    ),
    Wrong(
        "encoder_block",
        "residual missing around attention (post-norm)",
        encoder(post="x = self.norm1(self.self_attn(x, mask))\n        return self.norm2(x + self.ffn(x))"),
        "the residual connection around attention is missing",
    ),
    Wrong(
        "encoder_block",
        "attention named attn, as in PreNormBlock, not self_attn",
        encoder(rename=True),
        "differ from the expected names",
    ),
    # Exercise 5
    Wrong(
        "decoder_block",
        "cross-attention reads the decoder's own states",
        decoder(kv="x"),
        "the cross-attention reads the decoder's own states",
    ),
    Wrong(
        "decoder_block",
        "no causal mask in the self-attention",
        decoder(causal="None", combine="tgt_padding[:, None, None, :]"),
        "the self-attention has no causal mask",
    ),
    Wrong("decoder_block", "norm3 shared with norm2", decoder(norm3="self.norm2"), "one LayerNorm is shared"),
    Wrong(
        "decoder_block",
        "memory padding ignored",
        decoder(memory_mask="None"),
        "the cross-attention must hide padded memory keys",
    ),
    Wrong("decoder_block", "target padding ignored", decoder(combine="self_mask"), "tgt_padding does not reach"),
    Wrong(
        "decoder_block",
        "cross-attention before self-attention",
        decoder(
            post="x = self.norm1(x + self.cross_attn(x, {kv}, memory_mask))\n"
            "        x = self.norm2(x + self.self_attn(x, self_mask))\n        return self.norm3(x + self.ffn(x))"
        ),
        "the sublayers are in the wrong order",
    ),
    Wrong(
        "decoder_block",
        "causal mask built on the default device (no device=)",
        decoder(causal="torch.ones(length, length, dtype=torch.bool).tril()"),
        "build the causal mask in forward on the device of x",
    ),
    Wrong(
        "decoder_block",
        "a CPU causal mask made in __init__ as a plain attribute",
        decoder(
            causal="self._causal[:length, :length]",
            norm3="norm(d_model)\n        self._causal = torch.ones(64, 64, dtype=torch.bool).tril()",
        ),
        "build the causal mask in forward on the device of x",
    ),
    # Exercise 6
    Wrong(
        "parallel_block",
        "sequential: the FFN reads the stream after attention (the pre-norm order)",
        parallel("x = x + self.attn(self.norm1(x), mask)\n        return x + self.ffn(self.norm1(x))"),
        "the sublayers run one after the other",
    ),
    Wrong(
        "parallel_block",
        "two separate norms (GPT-NeoX's variant)",
        parallel(
            "return x + self.attn(self.norm1(x), mask) + self.ffn(self.norm2(x))",
            extra="\n        self.norm2 = norm(d_model)",
        ),
        "has a second norm (norm2)",
    ),
    Wrong(
        "parallel_block",
        "residual missing",
        parallel("h = self.norm1(x)\n        return self.attn(h, mask) + self.ffn(h)"),
        "the residual is missing",
    ),
    Wrong(
        "parallel_block",
        "FFN applied to the attention's output",
        parallel("a = self.attn(self.norm1(x), mask)\n        return x + a + self.ffn(a)"),
        "the FFN reads the attention's output",
    ),
    Wrong(
        "parallel_block",
        "norm applied after the sum",
        parallel("return self.norm1(x + self.attn(x, mask) + self.ffn(x))"),
        "the norm is applied after the sum",
    ),
    Wrong(
        "parallel_block",
        "FFN reads x unnormalized",
        parallel("return x + self.attn(self.norm1(x), mask) + self.ffn(x)"),
        "the FFN reads x unnormalized",
    ),
    Wrong(
        "parallel_block",
        "mask not passed to the attention",
        parallel("h = self.norm1(x)\n        return x + self.attn(h) + self.ffn(h)"),
        "the mask does not reach the attention",
    ),
]
