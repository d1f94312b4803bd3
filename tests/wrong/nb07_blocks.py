"""Wrong versions of notebook 07's answers (07_blocks): see ``wrong/__init__.py``."""

from autograder.notebooks.nb07_blocks import DECODER, ENCODER, PARALLEL, POST_NORM, PRE_NORM, RESIDUAL
from wrong import WrongVersion, edit

_SAYS_ONE_LAYERNORM_IS = "one LayerNorm is shared"
_SAYS_THE_MASK_DOES = "the mask does not reach the attention"

# residual ------------------------------------------------------------------------------------------------------
_RETURN_X_SELF = "return x + self.sublayer(x, *args, **kwargs)"

# pre_norm_block ------------------------------------------------------------------------------------------------
_SELF_NORM2 = "self.norm2 = norm(d_model)"
_X = """\
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ffn(self.norm2(x))
"""
_PRE_NORM_X = "x = x + self.attn(self.norm1(x), mask)"

# post_norm_block -----------------------------------------------------------------------------------------------
_RETURN_SELF_NORM2 = "return self.norm2(x + self.ffn(x))"

# encoder_block -------------------------------------------------------------------------------------------------
_MASK = "mask = None if padding_mask is None else padding_mask[:, None, None, :]  # hide padded keys"
_ENCODER_X = "x = self.norm1(x + self.self_attn(x, mask))"
_ENCODER_X_2 = "x = x + self.self_attn(self.norm1(x), mask)"
_ENCODER_MASK = "        mask = None if padding_mask is None else padding_mask[:, None, None, :]  # hide padded keys\n"

# decoder_block -------------------------------------------------------------------------------------------------
_SELF_NORM3 = "self.norm3 = norm(d_model)"
_DECODER_X = "x = self.norm2(x + self.cross_attn(x, memory, memory_mask))"
_SELF_MASK = "self_mask = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()"
_DECODER_SELF_MASK = "self_mask = self_mask & tgt_padding[:, None, None, :]"
_DECODER_SELF_NORM3 = "        self.norm3 = norm(d_model)\n"

# parallel_block ------------------------------------------------------------------------------------------------
_H = """\
        h = self.norm1(x)
        return x + self.attn(h, mask) + self.ffn(h)
"""
_PARALLEL_RETURN_X_SELF = "return x + self.attn(h, mask) + self.ffn(h)"

WRONG_VERSIONS = (
    # residual
    WrongVersion(
        RESIDUAL,
        "returns the sublayer's output alone",
        "the residual is missing",
        edit(_RETURN_X_SELF, "return self.sublayer(x, *args, **kwargs)"),
    ),
    WrongVersion(
        RESIDUAL,
        "sublayer kept in a plain list: parameters not registered",
        "the sublayer is not registered",
        edit("self.sublayer = sublayer", "self.layers = [sublayer]"),
        edit(_RETURN_X_SELF, "return x + self.layers[0](x, *args, **kwargs)"),
    ),
    WrongVersion(
        RESIDUAL,
        "extra arguments (the mask) not passed on",
        "the mask does not reach the sublayer",
        edit(_RETURN_X_SELF, "return x + self.sublayer(x)"),
    ),
    WrongVersion(
        RESIDUAL,
        "x detached",
        "the identity path x carries no gradient",
        edit(_RETURN_X_SELF, "return x.detach() + self.sublayer(x, *args, **kwargs)"),
    ),
    WrongVersion(
        RESIDUAL,
        "adds in place into the caller's x",
        "changes its input x in place",
        edit(
            "        return x + self.sublayer(x, *args, **kwargs)\n",
            """\
        x += self.sublayer(x, *args, **kwargs)
        return x
""",
        ),
    ),
    WrongVersion(
        RESIDUAL,
        "sum computed, x returned",
        "the sublayer's output is not added",
        edit(
            "        return x + self.sublayer(x, *args, **kwargs)\n",
            """\
        out = x + self.sublayer(x, *args, **kwargs)
        return x
""",
        ),
    ),
    WrongVersion(
        RESIDUAL,
        "x added to a sum that already holds it",
        "x is added twice",
        edit(
            "        return x + self.sublayer(x, *args, **kwargs)\n",
            """\
        out = x + self.sublayer(x, *args, **kwargs)
        return x + out
""",
        ),
    ),
    # pre_norm_block
    # The parts must be made by calling the constructor arguments (recording factories observe it).
    WrongVersion(
        PRE_NORM,
        "names nn.LayerNorm instead of calling norm",
        "PreNormBlock.norm2 was not made by calling the `norm` argument",
        edit(_SELF_NORM2, "self.norm2 = nn.LayerNorm(d_model)"),
    ),
    WrongVersion(
        PRE_NORM,
        "norm after the residual add (post-norm order)",
        "this is the post-norm order",
        edit(
            _X,
            """\
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.ffn(x))
""",
        ),
    ),
    WrongVersion(
        PRE_NORM,
        "norm applied after the residual add as well",
        "the norm is applied after the residual add",
        edit(
            _X,
            """\
        x = self.norm1(x + self.attn(self.norm1(x), mask))
        return self.norm2(x + self.ffn(self.norm2(x)))
""",
        ),
    ),
    WrongVersion(
        PRE_NORM,
        "residual stream replaced by its normalized version",
        "the residual adds the normalized h",
        edit(
            _X,
            """\
        h = self.norm1(x)
        x = h + self.attn(h, mask)
        h = self.norm2(x)
        return h + self.ffn(h)
""",
        ),
    ),
    WrongVersion(
        PRE_NORM,
        "residual missing around attention",
        "the residual connection around attention is missing",
        edit(_PRE_NORM_X, "x = self.attn(self.norm1(x), mask)"),
    ),
    WrongVersion(
        PRE_NORM,
        "one LayerNorm shared by both sublayers",
        _SAYS_ONE_LAYERNORM_IS,
        edit(_SELF_NORM2, "self.norm2 = self.norm1"),
    ),
    WrongVersion(
        PRE_NORM,
        "norm1 used before both sublayers",
        "norm1 is used for both sublayers",
        edit("return x + self.ffn(self.norm2(x))", "return x + self.ffn(self.norm1(x))"),
    ),
    WrongVersion(
        PRE_NORM,
        "mask not passed to the attention",
        _SAYS_THE_MASK_DOES,
        edit(_PRE_NORM_X, "x = x + self.attn(self.norm1(x))"),
    ),
    WrongVersion(
        PRE_NORM,
        "activation argument ignored",
        "pass activation on",
        edit("self.ffn = feed_forward(d_model, d_ff, activation)", "self.ffn = feed_forward(d_model, d_ff)"),
    ),
    WrongVersion(
        PRE_NORM,
        "LayerNorm computed with norm1's weights instead of calling self.norm1",
        "does not compute with self.norm1",
        edit(_PRE_NORM_X, "x = x + self.attn(F.layer_norm(x, x.shape[-1:], self.norm1.weight, self.norm1.bias), mask)"),
    ),
    WrongVersion(
        PRE_NORM,
        "attention written out with self.attn's projections instead of calling self.attn",
        "does not compute with self.attn",
        edit(
            f"        {_PRE_NORM_X}\n",
            """\
        a, h = self.attn, self.norm1(x)
        b, t, d = h.shape
        q, k, v = (p(h).view(b, t, a.num_heads, -1).transpose(1, 2) for p in (a.q_proj, a.k_proj, a.v_proj))
        x = x + a.out_proj(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, t, d))
""",
        ),
    ),
    # post_norm_block
    WrongVersion(
        POST_NORM,
        "names its FeedForward class instead of calling feed_forward",
        "PostNormBlock.ffn was not made by calling the `feed_forward` argument",
        edit("self.ffn = feed_forward(d_model, d_ff, activation)", "self.ffn = FeedForward(d_model, d_ff, activation)"),
    ),
    WrongVersion(
        POST_NORM,
        "pre-norm order",
        "this is the pre-norm order",
        edit(
            """\
        x = self.norm1(x + self.attn(x, mask))
        return self.norm2(x + self.ffn(x))
""",
            """\
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ffn(self.norm2(x))
""",
        ),
    ),
    WrongVersion(
        POST_NORM,
        "residual missing around the FFN",
        "the residual connection around the feed-forward network is missing",
        edit(_RETURN_SELF_NORM2, "return self.norm2(self.ffn(x))"),
    ),
    WrongVersion(
        POST_NORM,
        "one LayerNorm shared by both sublayers",
        _SAYS_ONE_LAYERNORM_IS,
        edit("self.norm2 = norm(d_model)", "self.norm2 = self.norm1"),
    ),
    WrongVersion(
        POST_NORM,
        "mask not passed to the attention",
        _SAYS_THE_MASK_DOES,
        edit("x = self.norm1(x + self.attn(x, mask))", "x = self.norm1(x + self.attn(x))"),
    ),
    WrongVersion(
        POST_NORM,
        "FFN written out with self.ffn's layers instead of calling self.ffn",
        "does not compute with self.ffn",
        edit(_RETURN_SELF_NORM2, "return self.norm2(x + self.ffn.fc2(F.relu(self.ffn.fc1(x))))"),
    ),
    # encoder_block
    WrongVersion(
        ENCODER,
        "padding mask inverted",
        "the padding mask is inverted",
        edit(_MASK, "mask = None if padding_mask is None else ~padding_mask[:, None, None, :]  # hide padded keys"),
    ),
    WrongVersion(
        ENCODER,
        "padding mask on the query axis",
        "padded keys must be hidden from every query",
        edit(_MASK, "mask = None if padding_mask is None else padding_mask[:, None, :, None]  # hide padded keys"),
    ),
    WrongVersion(
        ENCODER,
        "causal mask in an encoder",
        "an encoder attends in both directions",
        edit(
            _MASK,
            "mask = None if padding_mask is None else padding_mask[:, None, None, :] & torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()  # hide padded keys",
        ),
    ),
    WrongVersion(
        ENCODER,
        "norm_first ignored (always post-norm)",
        "norm_first=True asks for the pre-norm order",
        edit("self.norm_first = norm_first", "self.norm_first = False"),
    ),
    WrongVersion(
        ENCODER,
        "residual missing around attention (post-norm)",
        "the residual connection around attention is missing",
        edit(_ENCODER_X, "x = self.norm1(self.self_attn(x, mask))"),
    ),
    WrongVersion(
        ENCODER,
        "attention named attn, as in PreNormBlock, not self_attn",
        "differ from the expected names",
        edit("self.self_attn = attention(d_model, num_heads)", "self.attn = attention(d_model, num_heads)"),
        edit(_ENCODER_X_2, "x = x + self.attn(self.norm1(x), mask)"),
        edit(_ENCODER_X, "x = self.norm1(x + self.attn(x, mask))"),
    ),
    WrongVersion(
        ENCODER,
        "self-attention written out with self.self_attn's projections instead of calling it",
        "does not compute with self.self_attn",
        edit(
            "        self.norm_first = norm_first\n",
            """\
        self.norm_first = norm_first
        self.num_heads = num_heads
""",
        ),
        edit(
            _ENCODER_MASK,
            """\
        mask = None if padding_mask is None else padding_mask[:, None, None, :]  # hide padded keys

        def attend(h, mask):
            a, (b, t, d) = self.self_attn, h.shape
            q, k, v = (p(h).view(b, t, self.num_heads, -1).transpose(1, 2) for p in (a.q_proj, a.k_proj, a.v_proj))
            return a.out_proj(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, t, d))
""",
        ),
        edit(_ENCODER_X_2, "x = x + attend(self.norm1(x), mask)"),
        edit(_ENCODER_X, "x = self.norm1(x + attend(x, mask))"),
    ),
    WrongVersion(
        ENCODER,
        "padding_mask=None replaced by an all-True mask made without device= (on the CPU)",
        "with padding_mask=None, pass no mask (None) to the attention, or make any mask on the device of x",
        edit(
            _ENCODER_MASK,
            """\
        if padding_mask is None:
            padding_mask = torch.ones(x.shape[0], x.shape[1], dtype=torch.bool)
        mask = padding_mask[:, None, None, :]  # hide padded keys
""",
        ),
    ),
    WrongVersion(
        ENCODER,
        "norm_first ignored (always pre-norm)",
        "norm_first=False asks for the post-norm order: x = norm1(x + self_attn(x))",
        edit("self.norm_first = norm_first", "self.norm_first = True"),
    ),
    WrongVersion(
        ENCODER,
        "padding mask built but not passed to the attention",
        "the padding mask does not reach the attention",
        edit(_ENCODER_X_2, "x = x + self.self_attn(self.norm1(x))"),
        edit(_ENCODER_X, "x = self.norm1(x + self.self_attn(x))"),
    ),
    # decoder_block
    WrongVersion(
        DECODER,
        "names nn.LayerNorm for norm3",
        "DecoderBlock.norm3 was not made by calling the `norm` argument",
        edit(_SELF_NORM3, "self.norm3 = nn.LayerNorm(d_model)"),
    ),
    WrongVersion(
        DECODER,
        "cross-attention reads the decoder's own states",
        "the cross-attention reads the decoder's own states",
        edit(
            "x = x + self.cross_attn(self.norm2(x), memory, memory_mask)",
            "x = x + self.cross_attn(self.norm2(x), x, memory_mask)",
        ),
        edit(_DECODER_X, "x = self.norm2(x + self.cross_attn(x, x, memory_mask))"),
    ),
    WrongVersion(
        DECODER,
        "no causal mask in the self-attention",
        "the self-attention has no causal mask",
        edit(_SELF_MASK, "self_mask = None"),
        edit(_DECODER_SELF_MASK, "self_mask = tgt_padding[:, None, None, :]"),
    ),
    WrongVersion(
        DECODER, "norm3 shared with norm2", _SAYS_ONE_LAYERNORM_IS, edit(_SELF_NORM3, "self.norm3 = self.norm2")
    ),
    WrongVersion(
        DECODER,
        "memory padding ignored",
        "the cross-attention must hide padded memory keys",
        edit(
            "memory_mask = None if memory_padding is None else memory_padding[:, None, None, :]",
            "memory_mask = None if memory_padding is None else None",
        ),
    ),
    WrongVersion(
        DECODER,
        "target padding ignored",
        "tgt_padding does not reach",
        edit(_DECODER_SELF_MASK, "self_mask = self_mask"),
    ),
    WrongVersion(
        DECODER,
        "cross-attention before self-attention",
        "the sublayers are in the wrong order",
        edit(
            """\
        x = self.norm1(x + self.self_attn(x, self_mask))
        x = self.norm2(x + self.cross_attn(x, memory, memory_mask))
""",
            """\
        x = self.norm1(x + self.cross_attn(x, memory, memory_mask))
        x = self.norm2(x + self.self_attn(x, self_mask))
""",
        ),
    ),
    WrongVersion(
        DECODER,
        "causal mask built on the default device (no device=)",
        "build the causal mask in forward on the device of x",
        edit(_SELF_MASK, "self_mask = torch.ones(length, length, dtype=torch.bool).tril()"),
    ),
    WrongVersion(
        DECODER,
        "a CPU causal mask made in __init__ as a plain attribute",
        "build the causal mask in forward on the device of x",
        edit(
            _DECODER_SELF_NORM3,
            """\
        self.norm3 = norm(d_model)
        self._causal = torch.ones(64, 64, dtype=torch.bool).tril()
""",
        ),
        edit(_SELF_MASK, "self_mask = self._causal[:length, :length]"),
    ),
    WrongVersion(
        DECODER,
        "causal mask cut from a non-persistent buffer made for 512 positions",
        "fixed maximum length",
        edit(
            _DECODER_SELF_NORM3,
            """\
        self.norm3 = norm(d_model)
        self.register_buffer("causal", torch.ones(512, 512, dtype=torch.bool).tril(), persistent=False)
""",
        ),
        edit(_SELF_MASK, "self_mask = self.causal[:length, :length]"),
    ),
    WrongVersion(
        DECODER,
        "norm2 computed with its weights (F.layer_norm) in the post-norm order",
        "does not compute with self.norm2",
        edit(
            _DECODER_X,
            "x = F.layer_norm(x + self.cross_attn(x, memory, memory_mask), x.shape[-1:], self.norm2.weight, self.norm2.bias)",
        ),
    ),
    WrongVersion(
        DECODER,
        "norm_first ignored (always pre-norm)",
        "norm_first=False asks for the post-norm order in all three sublayers",
        edit("self.norm_first = norm_first", "self.norm_first = True"),
    ),
    WrongVersion(
        DECODER,
        "norm_first ignored (always post-norm)",
        "norm_first=True asks for the pre-norm order in all three sublayers",
        edit("self.norm_first = norm_first", "self.norm_first = False"),
    ),
    WrongVersion(
        DECODER,
        "residual missing around the cross-attention (post-norm)",
        "the residual connection around the cross-attention is missing",
        edit(_DECODER_X, "x = self.norm2(self.cross_attn(x, memory, memory_mask))"),
    ),
    WrongVersion(
        DECODER,
        "norm2 again after the FFN instead of norm3 (post-norm)",
        "norm2 is used twice",
        edit("return self.norm3(x + self.ffn(x))", "return self.norm2(x + self.ffn(x))"),
    ),
    WrongVersion(
        DECODER,
        "cross-attention written out with self.cross_attn's projections instead of calling it",
        "does not compute with self.cross_attn",
        edit(
            "        memory_mask = None if memory_padding is None else memory_padding[:, None, None, :]\n",
            """\
        memory_mask = None if memory_padding is None else memory_padding[:, None, None, :]

        def attend_memory(h):
            a, (b, t, d) = self.cross_attn, h.shape
            q = a.q_proj(h).view(b, t, a.num_heads, -1).transpose(1, 2)
            k, v = (p(memory).view(b, memory.shape[1], a.num_heads, -1).transpose(1, 2) for p in (a.k_proj, a.v_proj))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=memory_mask)
            return a.out_proj(out.transpose(1, 2).reshape(b, t, d))
""",
        ),
        edit("x = x + self.cross_attn(self.norm2(x), memory, memory_mask)", "x = x + attend_memory(self.norm2(x))"),
        edit(_DECODER_X, "x = self.norm2(x + attend_memory(x))"),
    ),
    # parallel_block
    WrongVersion(
        PARALLEL,
        "sequential: the FFN reads the stream after attention (the pre-norm order)",
        "the sublayers run one after the other",
        edit(
            _H,
            """\
        x = x + self.attn(self.norm1(x), mask)
        return x + self.ffn(self.norm1(x))
""",
        ),
    ),
    WrongVersion(
        PARALLEL,
        "two separate norms (GPT-NeoX's variant)",
        "has a second norm (norm2)",
        edit(
            "        self.attn = attention(d_model, num_heads)\n",
            """\
        self.attn = attention(d_model, num_heads)
        self.norm2 = norm(d_model)
""",
        ),
        edit(_H, "        return x + self.attn(self.norm1(x), mask) + self.ffn(self.norm2(x))\n"),
    ),
    WrongVersion(
        PARALLEL,
        "residual missing",
        "the residual is missing",
        edit(_PARALLEL_RETURN_X_SELF, "return self.attn(h, mask) + self.ffn(h)"),
    ),
    WrongVersion(
        PARALLEL,
        "FFN applied to the attention's output",
        "the FFN reads the attention's output",
        edit(
            _H,
            """\
        a = self.attn(self.norm1(x), mask)
        return x + a + self.ffn(a)
""",
        ),
    ),
    WrongVersion(
        PARALLEL,
        "norm applied after the sum",
        "the norm is applied after the sum",
        edit(_H, "        return self.norm1(x + self.attn(x, mask) + self.ffn(x))\n"),
    ),
    WrongVersion(
        PARALLEL,
        "norm applied to the sum as well",
        "the norm is applied after the sum as well",
        edit(_PARALLEL_RETURN_X_SELF, "return self.norm1(x + self.attn(h, mask) + self.ffn(h))"),
    ),
    WrongVersion(
        PARALLEL,
        "residual adds the normalized h",
        "the residual adds the normalized h = norm1(x) instead of x",
        edit(_PARALLEL_RETURN_X_SELF, "return h + self.attn(h, mask) + self.ffn(h)"),
    ),
    WrongVersion(
        PARALLEL,
        "FFN reads x unnormalized",
        "the FFN reads x unnormalized",
        edit(_PARALLEL_RETURN_X_SELF, "return x + self.attn(h, mask) + self.ffn(x)"),
    ),
    WrongVersion(
        PARALLEL,
        "mask not passed to the attention",
        _SAYS_THE_MASK_DOES,
        edit(_PARALLEL_RETURN_X_SELF, "return x + self.attn(h) + self.ffn(h)"),
    ),
    WrongVersion(
        PARALLEL,
        "LayerNorm computed with norm1's weights instead of calling self.norm1",
        "does not compute with self.norm1",
        edit("h = self.norm1(x)", "h = F.layer_norm(x, x.shape[-1:], self.norm1.weight, self.norm1.bias)"),
    ),
)
