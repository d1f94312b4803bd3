"""Mistakes students make in notebook 06."""

from wrong import Wrong

_ACTIVATIONS = """
def relu(x):
    return {relu}


def gelu(x):
    return {gelu}


def gelu_tanh(x):
    return {gelu_tanh}


def silu(x):
    return {silu}
"""
_RELU = "torch.where(x > 0, x, torch.zeros_like(x))"
_GELU = "0.5 * x * (1 + torch.erf(x / math.sqrt(2)))"
_GELU_TANH = "0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))"
_SILU = "x * torch.sigmoid(x)"


def activations(relu=_RELU, gelu=_GELU, gelu_tanh=_GELU_TANH, silu=_SILU, extra=""):
    return extra + _ACTIVATIONS.format(relu=relu, gelu=gelu, gelu_tanh=gelu_tanh, silu=silu)


_FFN = """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, activation="gelu", bias=True, dropout=0.0):
        super().__init__()
        if activation not in {choices}:
            raise ValueError(f'unknown activation {{activation!r}}')
        self.activation = {choices}[activation]
        self.fc1 = {fc1}
        self.fc2 = {fc2}
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        {body}
"""
_CHOICES = '{"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}'
_BODY = "return self.dropout(self.fc2(self.activation(self.fc1(x))))"


def ffn(
    choices=_CHOICES, fc1="nn.Linear(d_model, d_ff, bias=bias)", fc2="nn.Linear(d_ff, d_model, bias=bias)", body=_BODY
):
    return _FFN.format(choices=choices, fc1=fc1, fc2=fc2, body=body)


_WIDTH = """
def swiglu_hidden_dim(d_model, multiple_of=64):
    return {width}


def ffn_param_count(d_model, d_ff, gated=False, bias={default_bias}):
    layers = 3 if gated else 2
    return {count}
"""
_CEIL = "-(-8 * d_model // (3 * multiple_of)) * multiple_of"
_COUNT = "layers * d_model * d_ff + (((layers - 1) * d_ff + d_model) if bias else 0)"


def width(width=_CEIL, count=_COUNT, default_bias="True"):
    return _WIDTH.format(width=width, count=count, default_bias=default_bias)


_SWIGLU = """
class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff=None, multiple_of=64, bias=False):
        super().__init__()
        if d_ff is None:
            d_ff = {width}
        self.w1 = nn.Linear(d_model, d_ff, bias={bias})
        self.w3 = nn.Linear(d_model, d_ff, bias={bias})
        self.w2 = {w2}

    def forward(self, x):
        return {out}
"""


def swiglu(
    width="swiglu_hidden_dim(d_model, multiple_of)",
    bias="bias",
    w2="nn.Linear(d_ff, d_model, bias=bias)",
    out="self.w2(silu(self.w1(x)) * self.w3(x))",
):
    return _SWIGLU.format(width=width, bias=bias, w2=w2, out=out)


_COSTS = """
def block_costs(d_model, d_ff, seq_len):
    d, t = d_model, seq_len
    return {{
        "attention_params": {attention_params},
        "ffn_params": {ffn_params},
        "attention_flops": {attention_flops},
        "ffn_flops": {ffn_flops},
    }}
"""


def costs(
    attention_params="4 * (d * d + d)",
    ffn_params="2 * d * d_ff + d_ff + d",
    attention_flops="8 * t * d * d + 4 * t * t * d",
    ffn_flops="4 * t * d * d_ff",
):
    return _COSTS.format(
        attention_params=attention_params, ffn_params=ffn_params, attention_flops=attention_flops, ffn_flops=ffn_flops
    )


_FUSED = """
def fuse_swiglu_state(state):
    fused = {{"gate_up_proj.weight": {cat_weight}, "down_proj.weight": state["w2.weight"]}}
    if "w1.bias" in state:
        fused["gate_up_proj.bias"] = {cat_bias}
        fused["down_proj.bias"] = state["w2.bias"]
    return fused


def unfuse_swiglu_state(state):
    out = {{}}
    for kind in ("weight", "bias"):
        if f"gate_up_proj.{{kind}}" in state:
            {split}
            out[f"w1.{{kind}}"], out[f"w3.{{kind}}"], out[f"w2.{{kind}}"] = gate, up, state[f"down_proj.{{kind}}"]
    return out


class FusedSwiGLU(nn.Module):
    def __init__(self, d_model, d_ff=None, multiple_of=64, bias=False):
        super().__init__()
        if d_ff is None:
            d_ff = swiglu_hidden_dim(d_model, multiple_of)
        self.gate_up_proj = nn.Linear(d_model, 2 * d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x):
        {forward}
"""
_CAT_W = 'torch.cat([state["w1.weight"], state["w3.weight"]], dim=0)'
_CAT_B = 'torch.cat([state["w1.bias"], state["w3.bias"]])'
_SPLIT = 'gate, up = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)'
_FORWARD = "gate, up = self.gate_up_proj(x).chunk(2, dim=-1)\n        return self.down_proj(F.silu(gate) * up)"
_SPLIT_BIAS_SWAPPED = (
    'first, second = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)\n'
    '            gate, up = (second, first) if kind == "bias" else (first, second)'
)


def fused(cat_weight=_CAT_W, cat_bias=_CAT_B, split=_SPLIT, forward=_FORWARD):
    return _FUSED.format(cat_weight=cat_weight, cat_bias=cat_bias, split=split, forward=forward)


RIGHT = {
    "ffn_activations": activations(),
    "feed_forward": ffn(),
    "swiglu_width": width(),
    "swiglu": swiglu(),
    "block_costs": costs(),
    "fused_swiglu": fused(),
}

WRONG = [
    Wrong(
        "swiglu_width",
        "counts the parameters of modules it builds",
        width(
            count="sum(p.numel() for p in SwiGLU(d_model, d_ff, bias=bias).parameters()) if gated else "
            "sum(p.numel() for p in FeedForward(d_model, d_ff, bias=bias).parameters())"
        ),
        "this exercise's rule is: work it out from the shapes of the nn.Linear layers; do not build the modules",
    ),
    Wrong(
        "feed_forward",
        "falls back to ReLU for an unknown activation",
        ffn()
        .replace("if activation not in", "if False and activation not in")
        .replace("}[activation]", "}.get(activation, relu)"),
        "must raise ValueError",
    ),
    # Exercise 1
    Wrong(
        "ffn_activations",
        "tanh GELU where the exact one was asked",
        activations(gelu=_GELU_TANH),
        "this is the tanh approximation",
    ),
    Wrong(
        "ffn_activations",
        "GELU without the factor 0.5",
        activations(gelu="x * (1 + torch.erf(x / math.sqrt(2)))"),
        "the factor 0.5 is missing",
    ),
    Wrong(
        "ffn_activations",
        "erf without the 1/sqrt(2)",
        activations(gelu="0.5 * x * (1 + torch.erf(x))"),
        "erf needs x / sqrt(2)",
    ),
    Wrong(
        "ffn_activations",
        "tanh GELU without the cubic term",
        activations(gelu_tanh="0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * x))"),
        "cubic term",
    ),
    Wrong(
        "ffn_activations",
        "SiLU returns the sigmoid alone",
        activations(silu="torch.sigmoid(x)"),
        "the sigmoid σ(x) alone",
    ),
    Wrong("ffn_activations", "leaky ReLU", activations(relu="torch.where(x > 0, x, 0.01 * x)"), "leaky ReLU"),
    Wrong("ffn_activations", "calls F.gelu", activations(gelu="F.gelu(x)"), "this exercise's rule is"),
    Wrong(
        "ffn_activations",
        "sigmoid written as exp(x) / (1 + exp(x)): NaN for large x",
        activations(silu="x * torch.exp(x) / (1 + torch.exp(x))"),
        "NaN or inf",
    ),
    Wrong(
        "ffn_activations",
        "ReLU through NumPy: no gradient",
        activations(relu="torch.from_numpy(np.maximum(x.detach().numpy(), 0))", extra="import numpy as np\n"),
        "this exercise's rule is: use torch operations on x only",
    ),
    Wrong(
        "ffn_activations",
        "ReLU cut off from autograd by detach()",
        activations(relu="torch.where(x > 0, x, torch.zeros_like(x)).detach()"),
        "no gradient reaches the input of relu",
    ),
    # Exercise 2
    Wrong(
        "feed_forward",
        "tanh GELU where activation='gelu' asks for the exact one",
        ffn(choices='{"relu": relu, "gelu": gelu_tanh, "gelu_tanh": gelu_tanh}'),
        "tanh approximation of GELU",
    ),
    Wrong(
        "feed_forward",
        "activation missing",
        ffn(body="return self.dropout(self.fc2(self.fc1(x)))"),
        "the activation between fc1 and fc2 is missing",
    ),
    Wrong(
        "feed_forward",
        "weights transposed",
        ffn(
            fc1="nn.Linear(d_ff, d_model, bias=bias)",
            fc2="nn.Linear(d_model, d_ff, bias=bias)",
            body="h = self.activation(x @ self.fc1.weight + (self.fc1.bias if self.fc1.bias is not None else 0))\n"
            "        return self.dropout(h @ self.fc2.weight + (self.fc2.bias if self.fc2.bias is not None "
            "else 0))",
        ),
        "transposed",
    ),
    Wrong(
        "feed_forward",
        "ignores the activation argument",
        ffn(choices='{"relu": gelu, "gelu": gelu, "gelu_tanh": gelu}'),
        "use the `activation` argument",
    ),
    Wrong(
        "feed_forward",
        "ignores bias=False",
        ffn(fc1="nn.Linear(d_model, d_ff)", fc2="nn.Linear(d_ff, d_model)"),
        "the names matter",
    ),
    Wrong(
        "feed_forward",
        "F.dropout without training=self.training (active in eval mode)",
        ffn(body="return F.dropout(self.fc2(self.activation(self.fc1(x))), self.dropout.p)"),
        "In eval mode dropout must do nothing",
    ),
    Wrong(
        "feed_forward",
        "dropout on the hidden layer instead of the output",
        ffn(body="return self.fc2(self.dropout(self.activation(self.fc1(x))))"),
        "dropout acts on the FFN's output",
    ),
    Wrong(
        "feed_forward",
        "never calls dropout",
        ffn(body="return self.fc2(self.activation(self.fc1(x)))"),
        "dropout is not applied",
    ),
    Wrong(
        "feed_forward",
        "forward under torch.no_grad()",
        ffn(body="with torch.no_grad():\n            return self.dropout(self.fc2(self.activation(self.fc1(x))))"),
        "does not require grad",
    ),
    # Exercise 3
    Wrong(
        "swiglu_width",
        "width rounded down",
        width(width="(8 * d_model // 3) // multiple_of * multiple_of"),
        "rounded down or to the nearest",
    ),
    Wrong(
        "swiglu_width",
        "width rounded to the nearest multiple",
        width(width="round(8 * d_model / 3 / multiple_of) * multiple_of"),
        "rounded down or to the nearest",
    ),
    Wrong("swiglu_width", "width not rounded", width(width="int(8 * d_model / 3)"), "is not rounded to a multiple"),
    Wrong(
        "swiglu_width",
        "width truncated by int() before rounding up",
        width(width="-(-int(8 * d_model / 3) // multiple_of) * multiple_of"),
        "int() truncates",
    ),
    Wrong("swiglu_width", "the 4x width", width(width="4 * d_model"), "that is the 4x width"),
    Wrong("swiglu_width", "biases not counted", width(count="layers * d_model * d_ff"), "the biases are not counted"),
    Wrong(
        "swiglu_width",
        "gated FFN counted with two matrices",
        width(count="2 * d_model * d_ff + ((d_ff + d_model) if bias else 0)"),
        "three matrices",
    ),
    Wrong("swiglu_width", "bias=False by default", width(default_bias="False"), "by default gated=False and bias=True"),
    # Exercise 4
    Wrong(
        "swiglu",
        "gate on the wrong branch",
        swiglu(out="self.w2(silu(self.w3(x)) * self.w1(x))"),
        "the gate is on the wrong branch",
    ),
    Wrong(
        "swiglu",
        "activation on both branches",
        swiglu(out="self.w2(silu(self.w1(x)) * silu(self.w3(x)))"),
        "silu is applied to both branches",
    ),
    Wrong("swiglu", "activation missing", swiglu(out="self.w2(self.w1(x) * self.w3(x))"), "the activation is missing"),
    Wrong("swiglu", "sigmoid gate (GLU)", swiglu(out="self.w2(torch.sigmoid(self.w1(x)) * self.w3(x))"), "that is GLU"),
    Wrong("swiglu", "width not rounded", swiglu(width="int(8 * d_model / 3)"), "is not rounded to a multiple"),
    Wrong(
        "swiglu",
        "width rounded down",
        swiglu(width="(8 * d_model // 3) // multiple_of * multiple_of"),
        "rounded down or to the nearest",
    ),
    Wrong(
        "swiglu",
        "w2 transposed",
        swiglu(w2="nn.Linear(d_model, d_ff, bias=bias)", out="(silu(self.w1(x)) * self.w3(x)) @ self.w2.weight"),
        "w2.weight transposed",
    ),
    Wrong(
        "swiglu",
        "ignores bias=True",
        swiglu(bias="False", w2="nn.Linear(d_ff, d_model, bias=False)"),
        "w2 (down) is nn.Linear(d_ff, d_model, bias=bias)",
    ),
    # Exercise 5
    Wrong(
        "block_costs",
        "counts multiply-adds, not FLOPs",
        costs(attention_flops="4 * t * d * d + 2 * t * t * d", ffn_flops="2 * t * d * d_ff"),
        "multiply-adds",
    ),
    Wrong(
        "block_costs",
        "attention FLOPs without the scores and weighted values",
        costs(attention_flops="8 * t * d * d"),
        "only the four projections",
    ),
    Wrong(
        "block_costs",
        "attention FLOPs without the weighted values",
        costs(attention_flops="8 * t * d * d + 2 * t * t * d"),
        "the product of the weights with V",
    ),
    Wrong(
        "block_costs",
        "biases not counted",
        costs(attention_params="4 * d * d", ffn_params="2 * d * d_ff"),
        "are not counted",
    ),
    Wrong(
        "block_costs",
        "d_ff assumed to be 4 * d_model",
        costs(ffn_params="8 * d * d + 4 * d + d", ffn_flops="16 * t * d * d"),
        "use the d_ff argument",
    ),
    # Exercise 6
    Wrong(
        "fused_swiglu",
        "gate and up halves swapped in forward",
        fused(
            forward="up, gate = self.gate_up_proj(x).chunk(2, dim=-1)\n        return self.down_proj(F.silu(gate) * up)"
        ),
        "gate and up are swapped",
    ),
    Wrong(
        "fused_swiglu",
        "silu on the up half",
        fused(
            forward="gate, up = self.gate_up_proj(x).chunk(2, dim=-1)\n        return self.down_proj(gate * F.silu(up))"
        ),
        "gate and up are swapped",
    ),
    Wrong(
        "fused_swiglu",
        "halves taken as alternate features",
        fused(forward="h = self.gate_up_proj(x)\n        return self.down_proj(F.silu(h[..., 0::2]) * h[..., 1::2])"),
        "alternate features",
    ),
    Wrong(
        "fused_swiglu",
        "silu on both halves",
        fused(
            forward="gate, up = self.gate_up_proj(x).chunk(2, dim=-1)\n        "
            "return self.down_proj(F.silu(gate) * F.silu(up))"
        ),
        "silu is applied to both halves",
    ),
    Wrong(
        "fused_swiglu",
        "two products on the halves of the weight",
        fused(
            forward="w_gate, w_up = self.gate_up_proj.weight.chunk(2, dim=0)\n        "
            "return self.down_proj(F.silu(F.linear(x, w_gate)) * F.linear(x, w_up))"
        ),
        "the gate and up halves are multiplied separately",
    ),
    Wrong(
        "fused_swiglu",
        "up rows first in the fused weight",
        fused(cat_weight='torch.cat([state["w3.weight"], state["w1.weight"]], dim=0)'),
        "has the up rows (w3) first",
    ),
    Wrong(
        "fused_swiglu",
        "weights concatenated along dim 1",
        fused(cat_weight='torch.cat([state["w1.weight"], state["w3.weight"]], dim=1)'),
        "concatenated along dim 1",
    ),
    Wrong(
        "fused_swiglu",
        "torch.stack instead of torch.cat",
        fused(cat_weight='torch.stack([state["w1.weight"], state["w3.weight"]])'),
        "torch.stack adds a dimension",
    ),
    Wrong(
        "fused_swiglu",
        "biases dropped",
        fused(cat_bias="None").replace(
            '        fused["gate_up_proj.bias"] = None\n        fused["down_proj.bias"] = state["w2.bias"]\n',
            "        pass\n",
        ),
        "expected exactly",
    ),
    Wrong(
        "fused_swiglu",
        "unfuse splits along dim 1",
        fused(split='gate, up = state[f"gate_up_proj.{kind}"].chunk(2, dim=-1)'),
        "unfuse_swiglu_state",
    ),
    Wrong(
        "fused_swiglu",
        "unfuse swaps gate and up",
        fused(split='up, gate = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)'),
        "holds the second half of gate_up_proj.weight",
    ),
    # The bias halves (issue 34): a pair that swaps them both ways round-trips exactly, yet a FusedSwiGLU loaded
    # from fuse_swiglu_state differs from the SwiGLU it came from; each direction is compared with the stated layout.
    Wrong(
        "fused_swiglu",
        "both conversions swap the bias halves (round-trips exactly)",
        fused(cat_bias='torch.cat([state["w3.bias"], state["w1.bias"]])', split=_SPLIT_BIAS_SWAPPED),
        "has the up bias (w3.bias) in its first half",
    ),
    Wrong(
        "fused_swiglu",
        "fuse puts the up bias first",
        fused(cat_bias='torch.cat([state["w3.bias"], state["w1.bias"]])'),
        "has the up bias (w3.bias) in its first half",
    ),
    Wrong(
        "fused_swiglu",
        "unfuse takes the bias halves the other way round",
        fused(split=_SPLIT_BIAS_SWAPPED),
        "unfuse_swiglu_state(state)['w1.bias'] holds the second half of gate_up_proj.bias",
    ),
    # Dummy fused products (blind round b1): gate_up_proj(x) is called and its result thrown away, while gate and up
    # are computed in ways the product counter does not see; the output does not follow a change to the fused result.
    Wrong(
        "fused_swiglu",
        "dummy fused call, gate and up by element-wise multiply and sum",
        fused(
            forward="self.gate_up_proj(x)\n        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias\n"
            "        d = w.shape[0] // 2\n        h = (x.unsqueeze(-2) * w).sum(-1)\n"
            "        h = h if b is None else h + b\n"
            "        return self.down_proj(F.silu(h[..., :d]) * h[..., d:])"
        ),
        "is not computed from that product's result",
    ),
    Wrong(
        "fused_swiglu",
        "dummy fused call, gate and up as 1x1 convolutions",
        fused(
            forward="_ = self.gate_up_proj(x)\n        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias\n"
            "        d = w.shape[0] // 2\n        flat = x.reshape(-1, x.shape[-1])\n"
            "        h = F.conv1d(flat.t()[None], w[:, :, None], b)[0].t().reshape(*x.shape[:-1], 2 * d)\n"
            "        return self.down_proj(F.silu(h[..., :d]) * h[..., d:])"
        ),
        "is not computed from that product's result",
    ),
    Wrong(
        "fused_swiglu",
        "dummy fused call, gate and up by torch.linalg.multi_dot",
        fused(
            forward="_ = self.gate_up_proj(x)\n        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias\n"
            "        d = w.shape[0] // 2\n        flat = x.reshape(-1, x.shape[-1])\n"
            "        gate = torch.linalg.multi_dot([flat, w[:d].t()])\n"
            "        up = torch.linalg.multi_dot([flat, w[d:].t()])\n"
            "        if b is not None:\n            gate, up = gate + b[:d], up + b[d:]\n"
            "        gate, up = gate.reshape(*x.shape[:-1], d), up.reshape(*x.shape[:-1], d)\n"
            "        return self.down_proj(F.silu(gate) * up)"
        ),
        "is not computed from that product's result",
    ),
    Wrong(
        "feed_forward",
        "F.dropout with a stored p, no self.dropout module",
        ffn(body="return F.dropout(self.fc2(self.activation(self.fc1(x))), self.p, training=self.training)").replace(
            "self.dropout = nn.Dropout(dropout)", "self.p = dropout"
        ),
        "the exercise asks for self.dropout = nn.Dropout(dropout)",
    ),
    Wrong(
        "ffn_activations",
        "SiLU as x / (1 + exp(-x)): finite, but NaN derivative at x = -100",
        activations(silu="x / (1 + torch.exp(-x))"),
        "the derivative of silu at x in",
    ),
    Wrong(
        "ffn_activations",
        "ReLU in NumPy inside a custom autograd.Function",
        activations(
            relu="_NumpyReLU.apply(x)",
            extra="""
import numpy as np


class _NumpyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(t)
        return torch.from_numpy(np.maximum(t.detach().cpu().numpy(), 0)).to(t.dtype)

    @staticmethod
    def backward(ctx, g):
        (t,) = ctx.saved_tensors
        return g * (t > 0).to(g.dtype)
""",
        ),
        "calls the method .numpy",
    ),
    Wrong(
        "ffn_activations",
        "ReLU through np.maximum on the tensor (no .numpy() in the cell)",
        activations(
            relu="torch.as_tensor(np.maximum(x.detach(), 0)).to(x.dtype) + 0 * x", extra="import numpy as np\n"
        ),
        "your code called torch.Tensor.__array__",
    ),
    Wrong(
        "fused_swiglu",
        "fuse removes the keys from the dict it is given",
        fused(cat_weight='torch.cat([state.pop("w1.weight"), state.pop("w3.weight")], dim=0)'),
        "changed the dict it was given",
    ),
]
