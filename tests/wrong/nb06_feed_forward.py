"""Mistakes students make in notebook 06.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "06_feed_forward"
RIGHT, variant = catalogue(NOTEBOOK)

# The solution's lines that the templates below and the wrong versions replace.
_RELU = "torch.where(x > 0, x, torch.zeros_like(x))"
_GELU = "0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))"
_GELU_TANH = (
    "inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)\n    return 0.5 * x * (1.0 + torch.tanh(inner))"
)
_SILU = "x * torch.sigmoid(x)"
_DEF_RELU = "def relu(x"
_FFN_OUT = "return self.dropout(self.fc2(hidden))"
_FFN_FORWARD = "hidden = self.activation(self.fc1(x))\n        " + _FFN_OUT
_BLOCKS = "blocks = -(-8 * d_model // (3 * multiple_of))"
_WIDTH_OUT = "return blocks * multiple_of"
_D_FF = "d_ff = swiglu_hidden_dim(d_model, multiple_of)"
_GATE = "gate = silu(self.w1(x))"
_SWIGLU_OUT = "return self.w2(gate * self.w3(x))"
_ATTENTION_FLOPS = "2 * t * 4 * d * d + 2 * (2 * t * t * d)"
_FFN_FLOPS = "2 * t * 2 * d * d_ff"
_CAT_W = 'torch.cat([state["w1.weight"], state["w3.weight"]], dim=0)'
_CAT_B = 'torch.cat([state["w1.bias"], state["w3.bias"]], dim=0)'
_SPLIT = 'gate, up = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)'
_CHUNK = "gate, up = self.gate_up_proj(x).chunk(2, dim=-1)"
_FUSED_OUT = "return self.down_proj(silu(gate) * up)"
_FORWARD = _CHUNK + "\n        " + _FUSED_OUT
_SPLIT_BIAS_SWAPPED = (
    'first, second = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)\n'
    '            gate, up = (second, first) if kind == "bias" else (first, second)'
)


def activations(relu=None, gelu=None, gelu_tanh=None, silu=None, extra=""):
    """The solution's activations, each one given replaced by the expression it returns; ``extra`` goes first."""
    edits = [(_RELU, relu), (_GELU, gelu), (_GELU_TANH, gelu_tanh and f"return {gelu_tanh}"), (_SILU, silu)]
    edits = [(old, new) for old, new in edits if new is not None]
    return extra + variant("ffn_activations", *edits)


def fused(cat_weight=None, cat_bias=None, split=None, forward=None):
    """The solution's fused_swiglu cell with the parts given replaced: the fused weight and bias, unfuse's split
    of one fused tensor into gate and up, FusedSwiGLU.forward's body."""
    parts = {_CAT_W: cat_weight, _CAT_B: cat_bias, _SPLIT: split, _FORWARD: forward}
    return variant("fused_swiglu", *((old, new) for old, new in parts.items() if new is not None))


_NUMPY_FUNCTION = """import numpy as np


class _NumpyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(t)
        return torch.from_numpy(np.maximum(t.detach().cpu().numpy(), 0)).to(t.dtype)

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return g * (t > 0).to(g.dtype)


"""

WRONG = [
    Wrong(
        "swiglu_width",
        "counts the parameters of modules it builds",
        variant(
            "swiglu_width",
            (
                "return weights + biases",
                "return sum(p.numel() for p in SwiGLU(d_model, d_ff, bias=bias).parameters()) if gated else "
                "sum(p.numel() for p in FeedForward(d_model, d_ff, bias=bias).parameters())",
            ),
        ),
        "this exercise's rule is: work it out from the shapes of the nn.Linear layers; do not build the modules",
    ),
    Wrong(
        "feed_forward",
        "falls back to ReLU for an unknown activation",
        variant(
            "feed_forward",
            ("if activation not in choices:", "if False and activation not in choices:"),
            ("choices[activation]", "choices.get(activation, relu)"),
        ),
        "must raise ValueError",
    ),
    # Exercise 1
    Wrong(
        "ffn_activations",
        "tanh GELU where the exact one was asked",
        variant(
            "ffn_activations",
            (_GELU, "0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))"),
        ),
        "this is the tanh approximation",
    ),
    Wrong(
        "ffn_activations",
        "GELU without the factor 0.5",
        variant("ffn_activations", (_GELU, "x * (1.0 + torch.erf(x / math.sqrt(2.0)))")),
        "the factor 0.5 is missing",
    ),
    Wrong(
        "ffn_activations",
        "erf without the 1/sqrt(2)",
        variant("ffn_activations", ("torch.erf(x / math.sqrt(2.0))", "torch.erf(x)")),
        "erf needs x / sqrt(2)",
    ),
    Wrong(
        "ffn_activations",
        "tanh GELU without the cubic term",
        variant("ffn_activations", ("(x + 0.044715 * x * x * x)", "x")),
        "cubic term",
    ),
    Wrong(
        "ffn_activations",
        "SiLU returns the sigmoid alone",
        variant("ffn_activations", (_SILU, "torch.sigmoid(x)")),
        "the sigmoid σ(x) alone",
    ),
    Wrong(
        "ffn_activations",
        "leaky ReLU",
        variant("ffn_activations", (_RELU, "torch.where(x > 0, x, 0.01 * x)")),
        "leaky ReLU",
    ),
    Wrong(
        "ffn_activations", "calls F.gelu", variant("ffn_activations", (_GELU, "F.gelu(x)")), "this exercise's rule is"
    ),
    Wrong(
        "ffn_activations",
        "sigmoid written as exp(x) / (1 + exp(x)): NaN for large x",
        variant("ffn_activations", (_SILU, "x * torch.exp(x) / (1 + torch.exp(x))")),
        "NaN or inf",
    ),
    Wrong(
        "ffn_activations",
        "ReLU through NumPy: no gradient",
        variant(
            "ffn_activations",
            (_DEF_RELU, "import numpy as np\n\n\n" + _DEF_RELU),
            (_RELU, "torch.from_numpy(np.maximum(x.detach().numpy(), 0))"),
        ),
        "this exercise's rule is: use torch operations on x only",
    ),
    Wrong(
        "ffn_activations",
        "ReLU cut off from autograd by detach()",
        variant("ffn_activations", (_RELU, _RELU + ".detach()")),
        "no gradient reaches the input of relu",
    ),
    # Exercise 2
    Wrong(
        "feed_forward",
        "tanh GELU where activation='gelu' asks for the exact one",
        variant("feed_forward", ('"gelu": gelu,', '"gelu": gelu_tanh,')),
        "tanh approximation of GELU",
    ),
    Wrong(
        "feed_forward",
        "activation missing",
        variant("feed_forward", ("hidden = self.activation(self.fc1(x))", "hidden = self.fc1(x)")),
        "the activation between fc1 and fc2 is missing",
    ),
    Wrong(
        "feed_forward",
        "weights transposed",
        variant(
            "feed_forward",
            ("self.fc1 = nn.Linear(d_model, d_ff, bias=bias)", "self.fc1 = nn.Linear(d_ff, d_model, bias=bias)"),
            ("self.fc2 = nn.Linear(d_ff, d_model, bias=bias)", "self.fc2 = nn.Linear(d_model, d_ff, bias=bias)"),
            (
                _FFN_FORWARD,
                "hidden = self.activation(x @ self.fc1.weight + (self.fc1.bias if self.fc1.bias is not None else 0))\n"
                "        return self.dropout(hidden @ self.fc2.weight + (self.fc2.bias if self.fc2.bias is not None "
                "else 0))",
            ),
        ),
        "transposed",
    ),
    Wrong(
        "feed_forward",
        "ignores the activation argument",
        variant("feed_forward", ("self.activation = choices[activation]", "self.activation = gelu")),
        "use the `activation` argument",
    ),
    Wrong(
        "feed_forward",
        "ignores bias=False",
        variant(
            "feed_forward",
            ("nn.Linear(d_model, d_ff, bias=bias)", "nn.Linear(d_model, d_ff)"),
            ("nn.Linear(d_ff, d_model, bias=bias)", "nn.Linear(d_ff, d_model)"),
        ),
        "the names matter",
    ),
    Wrong(
        "feed_forward",
        "F.dropout without training=self.training (active in eval mode)",
        variant("feed_forward", (_FFN_OUT, "return F.dropout(self.fc2(hidden), self.dropout.p)")),
        "In eval mode dropout must do nothing",
    ),
    Wrong(
        "feed_forward",
        "dropout on the hidden layer instead of the output",
        variant("feed_forward", (_FFN_OUT, "return self.fc2(self.dropout(hidden))")),
        "dropout acts on the FFN's output",
    ),
    Wrong(
        "feed_forward",
        "never calls dropout",
        variant("feed_forward", (_FFN_OUT, "return self.fc2(hidden)")),
        "dropout is not applied",
    ),
    Wrong(
        "feed_forward",
        "forward under torch.no_grad()",
        variant(
            "feed_forward", (_FFN_FORWARD, "with torch.no_grad():\n            " + _FFN_FORWARD.replace("\n", "\n    "))
        ),
        "does not require grad",
    ),
    # Exercise 3
    Wrong(
        "swiglu_width",
        "width rounded down",
        variant("swiglu_width", (_BLOCKS, "blocks = (8 * d_model // 3) // multiple_of")),
        "rounded down or to the nearest",
    ),
    Wrong(
        "swiglu_width",
        "width rounded to the nearest multiple",
        variant("swiglu_width", (_BLOCKS, "blocks = round(8 * d_model / 3 / multiple_of)")),
        "rounded down or to the nearest",
    ),
    Wrong(
        "swiglu_width",
        "width not rounded",
        variant("swiglu_width", (_WIDTH_OUT, "return int(8 * d_model / 3)")),
        "is not rounded to a multiple",
    ),
    Wrong(
        "swiglu_width",
        "width truncated by int() before rounding up",
        variant("swiglu_width", (_BLOCKS, "blocks = -(-int(8 * d_model / 3) // multiple_of)")),
        "int() truncates",
    ),
    Wrong(
        "swiglu_width",
        "the 4x width",
        variant("swiglu_width", (_WIDTH_OUT, "return 4 * d_model")),
        "that is the 4x width",
    ),
    Wrong(
        "swiglu_width",
        "biases not counted",
        variant("swiglu_width", ("biases = up_layers * d_ff + d_model if bias else 0", "biases = 0")),
        "the biases are not counted",
    ),
    Wrong(
        "swiglu_width",
        "gated FFN counted with two matrices",
        variant("swiglu_width", ("up_layers = 2 if gated else 1", "up_layers = 1")),
        "three matrices",
    ),
    Wrong(
        "swiglu_width",
        "bias=False by default",
        variant("swiglu_width", ("bias: bool = True", "bias: bool = False")),
        "by default gated=False and bias=True",
    ),
    # Exercise 4
    Wrong(
        "swiglu",
        "gate on the wrong branch",
        variant("swiglu", (_GATE, "gate = silu(self.w3(x))"), (_SWIGLU_OUT, "return self.w2(gate * self.w1(x))")),
        "the gate is on the wrong branch",
    ),
    Wrong(
        "swiglu",
        "activation on both branches",
        variant("swiglu", (_SWIGLU_OUT, "return self.w2(gate * silu(self.w3(x)))")),
        "silu is applied to both branches",
    ),
    Wrong("swiglu", "activation missing", variant("swiglu", (_GATE, "gate = self.w1(x)")), "the activation is missing"),
    Wrong(
        "swiglu", "sigmoid gate (GLU)", variant("swiglu", (_GATE, "gate = torch.sigmoid(self.w1(x))")), "that is GLU"
    ),
    Wrong(
        "swiglu",
        "width not rounded",
        variant("swiglu", (_D_FF, "d_ff = int(8 * d_model / 3)")),
        "is not rounded to a multiple",
    ),
    Wrong(
        "swiglu",
        "width rounded down",
        variant("swiglu", (_D_FF, "d_ff = (8 * d_model // 3) // multiple_of * multiple_of")),
        "rounded down or to the nearest",
    ),
    Wrong(
        "swiglu",
        "w2 transposed",
        variant(
            "swiglu",
            ("self.w2 = nn.Linear(d_ff, d_model, bias=bias)", "self.w2 = nn.Linear(d_model, d_ff, bias=bias)"),
            (_SWIGLU_OUT, "return (gate * self.w3(x)) @ self.w2.weight"),
        ),
        "w2.weight transposed",
    ),
    Wrong(
        "swiglu",
        "ignores bias=True",
        variant(
            "swiglu",
            ("self.w1 = nn.Linear(d_model, d_ff, bias=bias)", "self.w1 = nn.Linear(d_model, d_ff, bias=False)"),
            ("self.w3 = nn.Linear(d_model, d_ff, bias=bias)", "self.w3 = nn.Linear(d_model, d_ff, bias=False)"),
            ("self.w2 = nn.Linear(d_ff, d_model, bias=bias)", "self.w2 = nn.Linear(d_ff, d_model, bias=False)"),
        ),
        "w2 (down) is nn.Linear(d_ff, d_model, bias=bias)",
    ),
    # Exercise 5
    Wrong(
        "block_costs",
        "counts multiply-adds, not FLOPs",
        variant(
            "block_costs",
            (_ATTENTION_FLOPS, "t * 4 * d * d + 2 * t * t * d"),
            (_FFN_FLOPS, "t * 2 * d * d_ff"),
        ),
        "multiply-adds",
    ),
    Wrong(
        "block_costs",
        "attention FLOPs without the scores and weighted values",
        variant("block_costs", (_ATTENTION_FLOPS, "2 * t * 4 * d * d")),
        "only the four projections",
    ),
    Wrong(
        "block_costs",
        "attention FLOPs without the weighted values",
        variant("block_costs", (_ATTENTION_FLOPS, "2 * t * 4 * d * d + 2 * t * t * d")),
        "the product of the weights with V",
    ),
    Wrong(
        "block_costs",
        "biases not counted",
        variant(
            "block_costs",
            ("projections = 4 * (d * d + d)", "projections = 4 * d * d"),
            ("2 * d * d_ff + d_ff + d", "2 * d * d_ff"),
        ),
        "are not counted",
    ),
    Wrong(
        "block_costs",
        "d_ff assumed to be 4 * d_model",
        variant("block_costs", ("2 * d * d_ff + d_ff + d", "8 * d * d + 4 * d + d"), (_FFN_FLOPS, "16 * t * d * d")),
        "use the d_ff argument",
    ),
    # Exercise 6
    Wrong(
        "fused_swiglu",
        "gate and up halves swapped in forward",
        variant("fused_swiglu", (_CHUNK, "up, gate = self.gate_up_proj(x).chunk(2, dim=-1)")),
        "gate and up are swapped",
    ),
    Wrong(
        "fused_swiglu",
        "silu on the up half",
        variant("fused_swiglu", (_FUSED_OUT, "return self.down_proj(gate * silu(up))")),
        "gate and up are swapped",
    ),
    Wrong(
        "fused_swiglu",
        "halves taken as alternate features",
        variant("fused_swiglu", (_CHUNK, "h = self.gate_up_proj(x)\n        gate, up = h[..., 0::2], h[..., 1::2]")),
        "alternate features",
    ),
    Wrong(
        "fused_swiglu",
        "silu on both halves",
        variant("fused_swiglu", (_FUSED_OUT, "return self.down_proj(silu(gate) * silu(up))")),
        "silu is applied to both halves",
    ),
    Wrong(
        "fused_swiglu",
        "two products on the halves of the weight",
        variant(
            "fused_swiglu",
            (
                _CHUNK,
                "w_gate, w_up = self.gate_up_proj.weight.chunk(2, dim=0)\n"
                "        gate, up = F.linear(x, w_gate), F.linear(x, w_up)",
            ),
        ),
        "the gate and up halves are multiplied separately",
    ),
    Wrong(
        "fused_swiglu",
        "up rows first in the fused weight",
        variant("fused_swiglu", (_CAT_W, 'torch.cat([state["w3.weight"], state["w1.weight"]], dim=0)')),
        "has the up rows (w3) first",
    ),
    Wrong(
        "fused_swiglu",
        "weights concatenated along dim 1",
        variant("fused_swiglu", (_CAT_W, 'torch.cat([state["w1.weight"], state["w3.weight"]], dim=1)')),
        "concatenated along dim 1",
    ),
    Wrong(
        "fused_swiglu",
        "torch.stack instead of torch.cat",
        variant("fused_swiglu", (_CAT_W, 'torch.stack([state["w1.weight"], state["w3.weight"]])')),
        "torch.stack adds a dimension",
    ),
    Wrong(
        "fused_swiglu",
        "biases dropped",
        variant(
            "fused_swiglu",
            (
                f'        fused["gate_up_proj.bias"] = {_CAT_B}\n        fused["down_proj.bias"] = state["w2.bias"].clone()\n',
                "        pass\n",
            ),
        ),
        "expected exactly",
    ),
    Wrong(
        "fused_swiglu",
        "unfuse splits along dim 1",
        variant("fused_swiglu", (_SPLIT, 'gate, up = state[f"gate_up_proj.{kind}"].chunk(2, dim=-1)')),
        "unfuse_swiglu_state",
    ),
    Wrong(
        "fused_swiglu",
        "unfuse swaps gate and up",
        variant("fused_swiglu", (_SPLIT, 'up, gate = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)')),
        "holds the second half of gate_up_proj.weight",
    ),
    # The bias halves (issue 34): a pair that swaps them both ways round-trips exactly, yet a FusedSwiGLU loaded
    # from fuse_swiglu_state differs from the SwiGLU it came from; each direction is compared with the stated layout.
    Wrong(
        "fused_swiglu",
        "both conversions swap the bias halves (round-trips exactly)",
        variant(
            "fused_swiglu",
            (_CAT_B, 'torch.cat([state["w3.bias"], state["w1.bias"]], dim=0)'),
            (_SPLIT, _SPLIT_BIAS_SWAPPED),
        ),
        "has the up bias (w3.bias) in its first half",
    ),
    Wrong(
        "fused_swiglu",
        "fuse puts the up bias first",
        variant("fused_swiglu", (_CAT_B, 'torch.cat([state["w3.bias"], state["w1.bias"]], dim=0)')),
        "has the up bias (w3.bias) in its first half",
    ),
    Wrong(
        "fused_swiglu",
        "unfuse takes the bias halves the other way round",
        variant("fused_swiglu", (_SPLIT, _SPLIT_BIAS_SWAPPED)),
        "unfuse_swiglu_state(state)['w1.bias'] holds the second half of gate_up_proj.bias",
    ),
    # Dummy fused products (blind round b1): gate_up_proj(x) is called and its result thrown away, while gate and up
    # are computed in ways the product counter does not see; the output does not follow a change to the fused result.
    Wrong(
        "fused_swiglu",
        "dummy fused call, gate and up by element-wise multiply and sum",
        variant(
            "fused_swiglu",
            (
                _FORWARD,
                "self.gate_up_proj(x)\n        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias\n"
                "        d = w.shape[0] // 2\n        h = (x.unsqueeze(-2) * w).sum(-1)\n"
                "        h = h if b is None else h + b\n"
                "        return self.down_proj(F.silu(h[..., :d]) * h[..., d:])",
            ),
        ),
        "is not computed from that product's result",
    ),
    Wrong(
        "fused_swiglu",
        "dummy fused call, gate and up as 1x1 convolutions",
        variant(
            "fused_swiglu",
            (
                _FORWARD,
                "_ = self.gate_up_proj(x)\n        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias\n"
                "        d = w.shape[0] // 2\n        flat = x.reshape(-1, x.shape[-1])\n"
                "        h = F.conv1d(flat.t()[None], w[:, :, None], b)[0].t().reshape(*x.shape[:-1], 2 * d)\n"
                "        return self.down_proj(F.silu(h[..., :d]) * h[..., d:])",
            ),
        ),
        "is not computed from that product's result",
    ),
    Wrong(
        "fused_swiglu",
        "dummy fused call, gate and up by torch.linalg.multi_dot",
        variant(
            "fused_swiglu",
            (
                _FORWARD,
                "_ = self.gate_up_proj(x)\n        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias\n"
                "        d = w.shape[0] // 2\n        flat = x.reshape(-1, x.shape[-1])\n"
                "        gate = torch.linalg.multi_dot([flat, w[:d].t()])\n"
                "        up = torch.linalg.multi_dot([flat, w[d:].t()])\n"
                "        if b is not None:\n            gate, up = gate + b[:d], up + b[d:]\n"
                "        gate, up = gate.reshape(*x.shape[:-1], d), up.reshape(*x.shape[:-1], d)\n"
                "        return self.down_proj(F.silu(gate) * up)",
            ),
        ),
        "is not computed from that product's result",
    ),
    Wrong(
        "feed_forward",
        "F.dropout with a stored p, no self.dropout module",
        variant(
            "feed_forward",
            ("self.dropout = nn.Dropout(dropout)", "self.p = dropout"),
            (_FFN_OUT, "return F.dropout(self.fc2(hidden), self.p, training=self.training)"),
        ),
        "the exercise asks for self.dropout = nn.Dropout(dropout)",
    ),
    Wrong(
        "ffn_activations",
        "SiLU as x / (1 + exp(-x)): finite, but NaN derivative at x = -100",
        variant("ffn_activations", (_SILU, "x / (1 + torch.exp(-x))")),
        "the derivative of silu at x in",
    ),
    Wrong(
        "ffn_activations",
        "ReLU in NumPy inside a custom autograd.Function",
        variant("ffn_activations", (_DEF_RELU, _NUMPY_FUNCTION + _DEF_RELU), (_RELU, "_NumpyReLU.apply(x)")),
        "calls the method .numpy",
    ),
    Wrong(
        "ffn_activations",
        "ReLU through np.maximum on the tensor (no .numpy() in the cell)",
        variant(
            "ffn_activations",
            (_DEF_RELU, "import numpy as np\n\n\n" + _DEF_RELU),
            (_RELU, "torch.as_tensor(np.maximum(x.detach(), 0)).to(x.dtype) + 0 * x"),
        ),
        "your code called torch.Tensor.__array__",
    ),
    Wrong(
        "fused_swiglu",
        "fuse removes the keys from the dict it is given",
        variant("fused_swiglu", (_CAT_W, 'torch.cat([state.pop("w1.weight"), state.pop("w3.weight")], dim=0)')),
        "changed the dict it was given",
    ),
]
