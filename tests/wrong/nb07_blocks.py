"""Mistakes students make in notebook 07.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "07_blocks"
RIGHT, variant = catalogue(NOTEBOOK)

# The solution's forward bodies and lines that the wrong versions replace.
_SUBLAYER = "return x + self.sublayer(x, *args, **kwargs)"
PRE = "x = x + self.attn(self.norm1(x), mask)\n        return x + self.ffn(self.norm2(x))"
POST = "x = self.norm1(x + self.attn(x, mask))\n        return self.norm2(x + self.ffn(x))"
_NORM2 = "self.norm2 = norm(d_model)"
_NORM3 = "self.norm3 = norm(d_model)"
_PADDING = "else padding_mask[:, None, None, :]"
CAUSAL = "torch.ones(length, length, dtype=torch.bool, device=x.device).tril()"
_COMBINE = "self_mask = self_mask & tgt_padding[:, None, None, :]"
PARALLEL = "h = self.norm1(x)\n        return x + self.attn(h, mask) + self.ffn(h)"


def decoder(causal=CAUSAL):
    """The solution's DecoderBlock with the causal mask made by ``causal`` (tests/test_rules.py writes it otherwise)."""
    return variant("decoder_block", (CAUSAL, causal))


WRONG = [
    # The parts must be made by calling the constructor arguments (recording factories observe it).
    Wrong(
        "pre_norm_block",
        "names nn.LayerNorm instead of calling norm",
        variant("pre_norm_block", (_NORM2, "self.norm2 = nn.LayerNorm(d_model)")),
        "PreNormBlock.norm2 was not made by calling the `norm` argument",
    ),
    Wrong(
        "post_norm_block",
        "names its FeedForward class instead of calling feed_forward",
        variant(
            "post_norm_block", ("= feed_forward(d_model, d_ff, activation)", "= FeedForward(d_model, d_ff, activation)")
        ),
        "PostNormBlock.ffn was not made by calling the `feed_forward` argument",
    ),
    Wrong(
        "decoder_block",
        "names nn.LayerNorm for norm3",
        variant("decoder_block", (_NORM3, "self.norm3 = nn.LayerNorm(d_model)")),
        "DecoderBlock.norm3 was not made by calling the `norm` argument",
    ),
    # Exercise 1
    Wrong(
        "residual",
        "returns the sublayer's output alone",
        variant("residual", (_SUBLAYER, "return self.sublayer(x, *args, **kwargs)")),
        "the residual is missing",
    ),
    Wrong(
        "residual",
        "sublayer kept in a plain list: parameters not registered",
        variant(
            "residual",
            ("self.sublayer = sublayer", "self.layers = [sublayer]"),
            (_SUBLAYER, "return x + self.layers[0](x, *args, **kwargs)"),
        ),
        "the sublayer is not registered",
    ),
    Wrong(
        "residual",
        "extra arguments (the mask) not passed on",
        variant("residual", (_SUBLAYER, "return x + self.sublayer(x)")),
        "the mask does not reach the sublayer",
    ),
    Wrong(
        "residual",
        "x detached",
        variant("residual", (_SUBLAYER, "return x.detach() + self.sublayer(x, *args, **kwargs)")),
        "the identity path x carries no gradient",
    ),
    Wrong(
        "residual",
        "adds in place into the caller's x",
        variant("residual", (_SUBLAYER, "x += self.sublayer(x, *args, **kwargs)\n        return x")),
        "changes its input x in place",
    ),
    # Exercise 2
    Wrong(
        "pre_norm_block",
        "norm after the residual add (post-norm order)",
        variant("pre_norm_block", (PRE, POST)),
        "this is the post-norm order",
    ),
    Wrong(
        "pre_norm_block",
        "norm applied after the residual add as well",
        variant(
            "pre_norm_block",
            (
                PRE,
                "x = self.norm1(x + self.attn(self.norm1(x), mask))\n"
                "        return self.norm2(x + self.ffn(self.norm2(x)))",
            ),
        ),
        "the norm is applied after the residual add",
    ),
    Wrong(
        "pre_norm_block",
        "residual stream replaced by its normalized version",
        variant(
            "pre_norm_block",
            (
                PRE,
                "h = self.norm1(x)\n        x = h + self.attn(h, mask)\n"
                "        h = self.norm2(x)\n        return h + self.ffn(h)",
            ),
        ),
        "the residual adds the normalized h",
    ),
    Wrong(
        "pre_norm_block",
        "residual missing around attention",
        variant("pre_norm_block", ("x = x + self.attn(self.norm1(x), mask)", "x = self.attn(self.norm1(x), mask)")),
        "the residual connection around attention is missing",
    ),
    Wrong(
        "pre_norm_block",
        "one LayerNorm shared by both sublayers",
        variant("pre_norm_block", (_NORM2, "self.norm2 = self.norm1")),
        "one LayerNorm is shared",
    ),
    Wrong(
        "pre_norm_block",
        "norm1 used before both sublayers",
        variant("pre_norm_block", ("self.ffn(self.norm2(x))", "self.ffn(self.norm1(x))")),
        "norm1 is used for both sublayers",
    ),
    Wrong(
        "pre_norm_block",
        "mask not passed to the attention",
        variant("pre_norm_block", ("self.attn(self.norm1(x), mask)", "self.attn(self.norm1(x))")),
        "the mask does not reach the attention",
    ),
    Wrong(
        "pre_norm_block",
        "activation argument ignored",
        variant("pre_norm_block", ("feed_forward(d_model, d_ff, activation)", "feed_forward(d_model, d_ff)")),
        "pass activation on",
    ),
    # Exercise 3
    Wrong("post_norm_block", "pre-norm order", variant("post_norm_block", (POST, PRE)), "this is the pre-norm order"),
    Wrong(
        "post_norm_block",
        "residual missing around the FFN",
        variant("post_norm_block", ("return self.norm2(x + self.ffn(x))", "return self.norm2(self.ffn(x))")),
        "the residual connection around the feed-forward network is missing",
    ),
    Wrong(
        "post_norm_block",
        "one LayerNorm shared by both sublayers",
        variant("post_norm_block", (_NORM2, "self.norm2 = self.norm1")),
        "one LayerNorm is shared",
    ),
    Wrong(
        "post_norm_block",
        "mask not passed to the attention",
        variant("post_norm_block", ("self.attn(x, mask)", "self.attn(x)")),
        "the mask does not reach the attention",
    ),
    # Exercise 4
    Wrong(
        "encoder_block",
        "padding mask inverted",
        variant("encoder_block", (_PADDING, "else ~padding_mask[:, None, None, :]")),
        "the padding mask is inverted",
    ),
    Wrong(
        "encoder_block",
        "padding mask on the query axis",
        variant("encoder_block", (_PADDING, "else padding_mask[:, None, :, None]")),
        "padded keys must be hidden from every query",
    ),
    Wrong(
        "encoder_block",
        "causal mask in an encoder",
        variant(
            "encoder_block",
            (_PADDING, _PADDING + " & torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()"),
        ),
        "an encoder attends in both directions",
    ),
    Wrong(
        "encoder_block",
        "norm_first ignored (always post-norm)",
        variant("encoder_block", ("self.norm_first = norm_first", "self.norm_first = False")),
        "norm_first=True asks for the pre-norm order",
    ),
    Wrong(
        "encoder_block",
        "residual missing around attention (post-norm)",
        variant(
            "encoder_block", ("x = self.norm1(x + self.self_attn(x, mask))", "x = self.norm1(self.self_attn(x, mask))")
        ),
        "the residual connection around attention is missing",
    ),
    Wrong(
        "encoder_block",
        "attention named attn, as in PreNormBlock, not self_attn",
        variant(
            "encoder_block",
            ("self.self_attn = attention", "self.attn = attention"),
            ("x + self.self_attn(self.norm1(x), mask)", "x + self.attn(self.norm1(x), mask)"),
            ("self.norm1(x + self.self_attn(x, mask))", "self.norm1(x + self.attn(x, mask))"),
        ),
        "differ from the expected names",
    ),
    # Exercise 5
    Wrong(
        "decoder_block",
        "cross-attention reads the decoder's own states",
        variant(
            "decoder_block",
            ("self.cross_attn(self.norm2(x), memory, memory_mask)", "self.cross_attn(self.norm2(x), x, memory_mask)"),
            ("self.cross_attn(x, memory, memory_mask)", "self.cross_attn(x, x, memory_mask)"),
        ),
        "the cross-attention reads the decoder's own states",
    ),
    Wrong(
        "decoder_block",
        "no causal mask in the self-attention",
        variant(
            "decoder_block",
            (CAUSAL, "None"),
            (_COMBINE, "self_mask = tgt_padding[:, None, None, :]"),
        ),
        "the self-attention has no causal mask",
    ),
    Wrong(
        "decoder_block",
        "norm3 shared with norm2",
        variant("decoder_block", (_NORM3, "self.norm3 = self.norm2")),
        "one LayerNorm is shared",
    ),
    Wrong(
        "decoder_block",
        "memory padding ignored",
        variant("decoder_block", ("else memory_padding[:, None, None, :]", "else None")),
        "the cross-attention must hide padded memory keys",
    ),
    Wrong(
        "decoder_block",
        "target padding ignored",
        variant("decoder_block", (_COMBINE, "self_mask = self_mask")),
        "tgt_padding does not reach",
    ),
    Wrong(
        "decoder_block",
        "cross-attention before self-attention",
        variant(
            "decoder_block",
            (
                "x = self.norm1(x + self.self_attn(x, self_mask))\n"
                "        x = self.norm2(x + self.cross_attn(x, memory, memory_mask))",
                "x = self.norm1(x + self.cross_attn(x, memory, memory_mask))\n"
                "        x = self.norm2(x + self.self_attn(x, self_mask))",
            ),
        ),
        "the sublayers are in the wrong order",
    ),
    Wrong(
        "decoder_block",
        "causal mask built on the default device (no device=)",
        variant("decoder_block", (CAUSAL, "torch.ones(length, length, dtype=torch.bool).tril()")),
        "build the causal mask in forward on the device of x",
    ),
    Wrong(
        "decoder_block",
        "a CPU causal mask made in __init__ as a plain attribute",
        variant(
            "decoder_block",
            (_NORM3, _NORM3 + "\n        self._causal = torch.ones(64, 64, dtype=torch.bool).tril()"),
            (CAUSAL, "self._causal[:length, :length]"),
        ),
        "build the causal mask in forward on the device of x",
    ),
    # Exercise 6
    Wrong(
        "parallel_block",
        "sequential: the FFN reads the stream after attention (the pre-norm order)",
        variant(
            "parallel_block",
            (PARALLEL, "x = x + self.attn(self.norm1(x), mask)\n        return x + self.ffn(self.norm1(x))"),
        ),
        "the sublayers run one after the other",
    ),
    Wrong(
        "parallel_block",
        "two separate norms (GPT-NeoX's variant)",
        variant(
            "parallel_block",
            (
                "self.attn = attention(d_model, num_heads)",
                "self.attn = attention(d_model, num_heads)\n        " + _NORM2,
            ),
            (PARALLEL, "return x + self.attn(self.norm1(x), mask) + self.ffn(self.norm2(x))"),
        ),
        "has a second norm (norm2)",
    ),
    Wrong(
        "parallel_block",
        "residual missing",
        variant("parallel_block", ("return x + self.attn(h, mask)", "return self.attn(h, mask)")),
        "the residual is missing",
    ),
    Wrong(
        "parallel_block",
        "FFN applied to the attention's output",
        variant("parallel_block", (PARALLEL, "a = self.attn(self.norm1(x), mask)\n        return x + a + self.ffn(a)")),
        "the FFN reads the attention's output",
    ),
    Wrong(
        "parallel_block",
        "norm applied after the sum",
        variant("parallel_block", (PARALLEL, "return self.norm1(x + self.attn(x, mask) + self.ffn(x))")),
        "the norm is applied after the sum",
    ),
    Wrong(
        "parallel_block",
        "FFN reads x unnormalized",
        variant("parallel_block", ("+ self.ffn(h)", "+ self.ffn(x)")),
        "the FFN reads x unnormalized",
    ),
    Wrong(
        "parallel_block",
        "mask not passed to the attention",
        variant("parallel_block", ("self.attn(h, mask)", "self.attn(h)")),
        "the mask does not reach the attention",
    ),
]
