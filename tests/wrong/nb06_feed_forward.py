"""Wrong versions of notebook 06's answers (06_feed_forward): see ``wrong/__init__.py``."""

from autograder.notebooks.nb06_feed_forward import ACTIVATIONS, COSTS, FFN, FUSED, SWIGLU, WIDTH
from wrong import WrongVersion, edit

_SAYS_ROUNDED_DOWN_OR = "rounded down or to the nearest"
_SAYS_IS_NOT_COMPUTED = "is not computed from that product's result"

# ffn_activations -----------------------------------------------------------------------------------------------
_RETURN_X_TORCH = "return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))"
_ACTIVATIONS_RETURN_X_TORCH = "return x * torch.sigmoid(x)"
_RETURN_TORCH_WHERE = "return torch.where(x > 0, x, torch.zeros_like(x))"
_INNER = "inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)"
_DEF_RELU = "def relu(x: torch.Tensor) -> torch.Tensor:\n"
_NEW_IMPORT_NUMPY_AS = """\
import numpy as np


def relu(x: torch.Tensor) -> torch.Tensor:
"""

# feed_forward --------------------------------------------------------------------------------------------------
_SELF_ACTIVATION = "self.activation = choices[activation]"
_SELF_FC1 = """\
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
"""
_HIDDEN = """\
        hidden = self.activation(self.fc1(x))
        return self.dropout(self.fc2(hidden))
"""
_RETURN_SELF_DROPOUT = "return self.dropout(self.fc2(hidden))"

# swiglu_width --------------------------------------------------------------------------------------------------
_BLOCKS = "blocks = -(-8 * d_model // (3 * multiple_of))  # ceil(8 d / (3 m)) in exact integers"
_RETURN_BLOCKS_MULTIPLE_OF = "return blocks * multiple_of"

# swiglu --------------------------------------------------------------------------------------------------------
_RETURN_SELF_W2 = "return self.w2(gate * self.w3(x))"
_GATE = "gate = silu(self.w1(x))"
_D_FF = "d_ff = swiglu_hidden_dim(d_model, multiple_of)"

# block_costs ---------------------------------------------------------------------------------------------------
_ATTENTION_FLOPS_T_D = (
    '"attention_flops": 2 * t * 4 * d * d + 2 * (2 * t * t * d),  # projections + scores + weighted values'
)
_FFN_PARAMS_D_D_FF = '"ffn_params": 2 * d * d_ff + d_ff + d,'

# fused_swiglu --------------------------------------------------------------------------------------------------
_RETURN_SELF_DOWN_PROJ = "return self.down_proj(silu(gate) * up)"
_GATE_UP = "        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)\n"
_FUSED = 'fused = {"gate_up_proj.weight": torch.cat([state["w1.weight"], state["w3.weight"]], dim=0),'
_FUSED_GATE_UP = 'gate, up = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)'
_FUSED_GATE_UP_PROJ_BIAS = 'fused["gate_up_proj.bias"] = torch.cat([state["w1.bias"], state["w3.bias"]], dim=0)'
_FUSED_GATE_UP_2 = '            gate, up = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)\n'
_FUSED_GATE_UP_3 = """\
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(silu(gate) * up)
"""
_NEW_FUSED_GATE_UP_PROJ_BIAS = 'fused["gate_up_proj.bias"] = torch.cat([state["w3.bias"], state["w1.bias"]], dim=0)'
_NEW_FIRST_SECOND = """\
            first, second = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)
            gate, up = (second, first) if kind == "bias" else (first, second)
"""

WRONG_VERSIONS = (
    # ffn_activations
    WrongVersion(
        ACTIVATIONS,
        "tanh GELU where the exact one was asked",
        "this is the tanh approximation",
        edit(
            _RETURN_X_TORCH,
            "return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))",
        ),
    ),
    WrongVersion(
        ACTIVATIONS,
        "GELU without the factor 0.5",
        "the factor 0.5 is missing",
        edit(_RETURN_X_TORCH, "return x * (1.0 + torch.erf(x / math.sqrt(2.0)))"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "erf without the 1/sqrt(2)",
        "erf needs x / sqrt(2)",
        edit(_RETURN_X_TORCH, "return 0.5 * x * (1.0 + torch.erf(x))"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "tanh GELU without the cubic term",
        "cubic term",
        edit(_INNER, "inner = math.sqrt(2.0 / math.pi) * x"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "SiLU returns the sigmoid alone",
        "the sigmoid σ(x) alone",
        edit(_ACTIVATIONS_RETURN_X_TORCH, "return torch.sigmoid(x)"),
    ),
    WrongVersion(
        ACTIVATIONS, "leaky ReLU", "leaky ReLU", edit(_RETURN_TORCH_WHERE, "return torch.where(x > 0, x, 0.01 * x)")
    ),
    WrongVersion(ACTIVATIONS, "calls F.gelu", "this exercise's rule is", edit(_RETURN_X_TORCH, "return F.gelu(x)")),
    WrongVersion(
        ACTIVATIONS,
        "sigmoid written as exp(x) / (1 + exp(x)): NaN for large x",
        "NaN or inf",
        edit(_ACTIVATIONS_RETURN_X_TORCH, "return x * torch.exp(x) / (1 + torch.exp(x))"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU through NumPy: no gradient",
        "this exercise's rule is: use torch operations on x only",
        edit(_DEF_RELU, _NEW_IMPORT_NUMPY_AS),
        edit(_RETURN_TORCH_WHERE, "return torch.from_numpy(np.maximum(x.detach().numpy(), 0))"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU cut off from autograd by detach()",
        "no gradient reaches the input of relu",
        edit(_RETURN_TORCH_WHERE, "return torch.where(x > 0, x, torch.zeros_like(x)).detach()"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "SiLU as x / (1 + exp(-x)): finite, but NaN derivative at x = -100",
        "the derivative of silu at x in",
        edit(_ACTIVATIONS_RETURN_X_TORCH, "return x / (1 + torch.exp(-x))"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU in NumPy inside a custom autograd.Function",
        "calls the method .numpy",
        edit(
            _DEF_RELU,
            """\
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


def relu(x: torch.Tensor) -> torch.Tensor:
""",
        ),
        edit(_RETURN_TORCH_WHERE, "return _NumpyReLU.apply(x)"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU through np.maximum on the tensor (no .numpy() in the cell)",
        "your code called torch.Tensor.__array__",
        edit(_DEF_RELU, _NEW_IMPORT_NUMPY_AS),
        edit(_RETURN_TORCH_WHERE, "return torch.as_tensor(np.maximum(x.detach(), 0)).to(x.dtype) + 0 * x"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU as torch.clamp(x, min=0): derivative 1 at x = 0",
        "its derivative at x = 0 is 1",
        edit(_RETURN_TORCH_WHERE, "return torch.clamp(x, min=0)"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU as (x + |x|) / 2: derivative 0.5 at x = 0",
        "its derivative at x = 0 is 0.5",
        edit(_RETURN_TORCH_WHERE, "return (x + x.abs()) / 2"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU as torch.maximum(x, 0): the gradient split 0.5 / 0.5 at x = 0",
        "torch.maximum(x, 0) and (x + |x|) / 2 split the gradient",
        edit(_RETURN_TORCH_WHERE, "return torch.maximum(x, torch.zeros_like(x))"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "relu with torch.where(x > 0, x, torch.zeros(x.shape)): a float32 zero tensor promotes low-precision inputs",
        "the result has the dtype of x, as PyTorch's activations",
        edit(_RETURN_TORCH_WHERE, "return torch.where(x > 0, x, torch.zeros(x.shape))"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "silu with the sigmoid computed in float32 'for accuracy' and not cast back",
        "the result has the dtype of x, as PyTorch's activations",
        edit(_ACTIVATIONS_RETURN_X_TORCH, "return x * torch.sigmoid(x.float())"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU negates the negative inputs (|x|)",
        "this is |x|",
        edit(_RETURN_TORCH_WHERE, "return torch.where(x > 0, x, -x)"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "ReLU as a clamp to [-1, 1]",
        "ReLU is max(x, 0), unbounded above and 0 below",
        edit(_RETURN_TORCH_WHERE, "return torch.clamp(x, -1.0, 1.0)"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "GELU returns Φ(x) without the factor x",
        "this is Φ(x) alone",
        edit(_RETURN_X_TORCH, "return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "GELU as the sigmoid approximation",
        "this is the sigmoid approximation",
        edit(_RETURN_X_TORCH, "return x * torch.sigmoid(1.702 * x)"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "gelu_tanh returns the exact GELU",
        "this is the exact GELU (erf)",
        edit(f"    {_INNER}\n    return 0.5 * x * (1.0 + torch.tanh(inner))\n", "    return gelu(x)\n"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "gelu_tanh with a square for the cube",
        "the correction term is cubic",
        edit(_INNER, "inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x)"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "gelu_tanh with sqrt(2π) for sqrt(2 / π)",
        "the factor is sqrt(2 / π), not sqrt(2π)",
        edit(_INNER, "inner = math.sqrt(2.0 * math.pi) * (x + 0.044715 * x * x * x)"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "SiLU with GELU's sigmoid factor 1.702",
        "SiLU is x * σ(x), with no factor inside the sigmoid",
        edit(_ACTIVATIONS_RETURN_X_TORCH, "return x * torch.sigmoid(1.702 * x)"),
    ),
    WrongVersion(
        ACTIVATIONS,
        "SiLU taken for GELU",
        "this is GELU; SiLU is x * σ(x)",
        edit(_ACTIVATIONS_RETURN_X_TORCH, "return gelu(x)"),
    ),
    # feed_forward
    WrongVersion(
        FFN,
        "falls back to ReLU for an unknown activation",
        "must raise ValueError",
        edit("if activation not in choices:", "if False and activation not in choices:"),
        edit(_SELF_ACTIVATION, "self.activation = choices.get(activation, relu)"),
    ),
    WrongVersion(
        FFN,
        "tanh GELU where activation='gelu' asks for the exact one",
        "tanh approximation of GELU",
        edit(
            'choices = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh}',
            'choices = {"relu": relu, "gelu": gelu_tanh, "gelu_tanh": gelu_tanh}',
        ),
    ),
    WrongVersion(
        FFN,
        "activation missing",
        "the activation between fc1 and fc2 is missing",
        edit("hidden = self.activation(self.fc1(x))", "hidden = self.fc1(x)"),
    ),
    WrongVersion(
        FFN,
        "weights transposed",
        "transposed",
        edit(
            _SELF_FC1,
            """\
        self.fc1 = nn.Linear(d_ff, d_model, bias=bias)
        self.fc2 = nn.Linear(d_model, d_ff, bias=bias)
""",
        ),
        edit(
            _HIDDEN,
            """\
        hidden = self.activation(x @ self.fc1.weight + (self.fc1.bias if self.fc1.bias is not None else 0))
        return self.dropout(hidden @ self.fc2.weight + (self.fc2.bias if self.fc2.bias is not None else 0))
""",
        ),
    ),
    WrongVersion(
        FFN,
        "ignores the activation argument",
        "use the `activation` argument",
        edit(_SELF_ACTIVATION, "self.activation = gelu"),
    ),
    WrongVersion(
        FFN,
        "ignores bias=False",
        "the names matter",
        edit(
            _SELF_FC1,
            """\
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
""",
        ),
    ),
    WrongVersion(
        FFN,
        "F.dropout without training=self.training (active in eval mode)",
        "In eval mode dropout must do nothing",
        edit(_RETURN_SELF_DROPOUT, "return F.dropout(self.fc2(hidden), self.dropout.p)"),
    ),
    WrongVersion(
        FFN,
        "dropout on the hidden layer instead of the output",
        "dropout acts on the FFN's output",
        edit(_RETURN_SELF_DROPOUT, "return self.fc2(self.dropout(hidden))"),
    ),
    WrongVersion(
        FFN, "never calls dropout", "dropout is not applied", edit(_RETURN_SELF_DROPOUT, "return self.fc2(hidden)")
    ),
    WrongVersion(
        FFN,
        "forward under torch.no_grad()",
        "does not require grad",
        edit(
            _HIDDEN,
            """\
        with torch.no_grad():
            hidden = self.activation(self.fc1(x))
            return self.dropout(self.fc2(hidden))
""",
        ),
    ),
    WrongVersion(
        FFN,
        "F.dropout with a stored p, no self.dropout module",
        "the exercise asks for self.dropout = nn.Dropout(dropout)",
        edit("self.dropout = nn.Dropout(dropout)", "self.p = dropout"),
        edit(_RETURN_SELF_DROPOUT, "return F.dropout(self.fc2(hidden), self.p, training=self.training)"),
    ),
    WrongVersion(
        FFN,
        "always ReLU, whatever the activation asked",
        "it applies relu where activation='gelu' was asked",
        edit(_HIDDEN, "        hidden = relu(self.fc1(x))\n        return self.dropout(self.fc2(hidden))\n"),
    ),
    WrongVersion(
        FFN,
        "every activation but gelu falls back to ReLU",
        "it applies relu where activation='gelu_tanh' was asked",
        edit(_SELF_ACTIVATION, 'self.activation = gelu if activation == "gelu" else relu'),
    ),
    WrongVersion(
        FFN,
        "every activation but gelu taken as the tanh GELU",
        "it applies gelu_tanh where activation='relu' was asked",
        edit(_SELF_ACTIVATION, 'self.activation = gelu if activation == "gelu" else gelu_tanh'),
    ),
    WrongVersion(
        FFN,
        "gelu_tanh mapped to the exact GELU",
        'it uses the exact GELU where activation="gelu_tanh"',
        edit('"gelu_tanh": gelu_tanh}', '"gelu_tanh": gelu}'),
    ),
    WrongVersion(
        FFN,
        "ReLU after fc2 too",
        "an activation is applied after fc2 as well",
        edit(_RETURN_SELF_DROPOUT, "return self.dropout(relu(self.fc2(hidden)))"),
    ),
    # swiglu_width
    WrongVersion(
        WIDTH,
        "counts the parameters of modules it builds",
        "this exercise's rule is: work it out from the shapes of the nn.Linear layers; do not build the modules",
        edit(
            "return weights + biases",
            "return sum(p.numel() for p in SwiGLU(d_model, d_ff, bias=bias).parameters()) if gated else sum(p.numel() for p in FeedForward(d_model, d_ff, bias=bias).parameters())",
        ),
    ),
    WrongVersion(
        WIDTH,
        "width rounded down",
        _SAYS_ROUNDED_DOWN_OR,
        edit(_BLOCKS, "blocks = (8 * d_model // 3) // multiple_of  # ceil(8 d / (3 m)) in exact integers"),
    ),
    WrongVersion(
        WIDTH,
        "width rounded to the nearest multiple",
        _SAYS_ROUNDED_DOWN_OR,
        edit(_BLOCKS, "blocks = round(8 * d_model / 3 / multiple_of)  # ceil(8 d / (3 m)) in exact integers"),
    ),
    WrongVersion(
        WIDTH,
        "width not rounded",
        "is not rounded to a multiple",
        edit(_RETURN_BLOCKS_MULTIPLE_OF, "return int(8 * d_model / 3)"),
    ),
    WrongVersion(
        WIDTH,
        "width truncated by int() before rounding up",
        "int() truncates",
        edit(_BLOCKS, "blocks = -(-int(8 * d_model / 3) // multiple_of)  # ceil(8 d / (3 m)) in exact integers"),
    ),
    WrongVersion(WIDTH, "the 4x width", "that is the 4x width", edit(_RETURN_BLOCKS_MULTIPLE_OF, "return 4 * d_model")),
    WrongVersion(
        WIDTH,
        "biases not counted",
        "the biases are not counted",
        edit("biases = up_layers * d_ff + d_model if bias else 0", "biases = 0"),
    ),
    WrongVersion(
        WIDTH,
        "gated FFN counted with two matrices",
        "three matrices",
        edit(
            "up_layers = 2 if gated else 1  # d_model -> d_ff: fc1, or w1 and w3",
            "up_layers = 1  # d_model -> d_ff: fc1, or w1 and w3",
        ),
    ),
    WrongVersion(
        WIDTH,
        "bias=False by default",
        "by default gated=False and bias=True",
        edit(
            "def ffn_param_count(d_model: int, d_ff: int, gated: bool = False, bias: bool = True) -> int:\n",
            "def ffn_param_count(d_model: int, d_ff: int, gated: bool = False, bias: bool = False) -> int:\n",
        ),
    ),
    # swiglu
    WrongVersion(
        SWIGLU,
        "gate on the wrong branch",
        "the gate is on the wrong branch",
        edit(
            """\
        gate = silu(self.w1(x))
        return self.w2(gate * self.w3(x))
""",
            """\
        gate = silu(self.w3(x))
        return self.w2(gate * self.w1(x))
""",
        ),
    ),
    WrongVersion(
        SWIGLU,
        "activation on both branches",
        "silu is applied to both branches",
        edit(_RETURN_SELF_W2, "return self.w2(gate * silu(self.w3(x)))"),
    ),
    WrongVersion(SWIGLU, "activation missing", "the activation is missing", edit(_GATE, "gate = self.w1(x)")),
    WrongVersion(SWIGLU, "sigmoid gate (GLU)", "that is GLU", edit(_GATE, "gate = torch.sigmoid(self.w1(x))")),
    WrongVersion(
        SWIGLU, "width not rounded", "is not rounded to a multiple", edit(_D_FF, "d_ff = int(8 * d_model / 3)")
    ),
    WrongVersion(
        SWIGLU,
        "width rounded down",
        _SAYS_ROUNDED_DOWN_OR,
        edit(_D_FF, "d_ff = (8 * d_model // 3) // multiple_of * multiple_of"),
    ),
    WrongVersion(
        SWIGLU,
        "w2 transposed",
        "w2.weight transposed",
        edit("self.w2 = nn.Linear(d_ff, d_model, bias=bias)", "self.w2 = nn.Linear(d_model, d_ff, bias=bias)"),
        edit(_RETURN_SELF_W2, "return (gate * self.w3(x)) @ self.w2.weight"),
    ),
    WrongVersion(
        SWIGLU,
        "ignores bias=True",
        "w2 (down) is nn.Linear(d_ff, d_model, bias=bias)",
        edit(
            """\
        self.w1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w3 = nn.Linear(d_model, d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d_model, bias=bias)
""",
            """\
        self.w1 = nn.Linear(d_model, d_ff, bias=False)
        self.w3 = nn.Linear(d_model, d_ff, bias=False)
        self.w2 = nn.Linear(d_ff, d_model, bias=False)
""",
        ),
    ),
    WrongVersion(
        SWIGLU,
        "GELU gate (GEGLU)",
        "the gate uses GELU (that is GEGLU)",
        edit(_GATE, "gate = gelu(self.w1(x))"),
    ),
    # block_costs
    WrongVersion(
        COSTS,
        "counts multiply-adds, not FLOPs",
        "multiply-adds",
        edit(
            """\
        "attention_flops": 2 * t * 4 * d * d + 2 * (2 * t * t * d),  # projections + scores + weighted values
        "ffn_flops": 2 * t * 2 * d * d_ff,  # fc1 and fc2
""",
            """\
        "attention_flops": t * 4 * d * d + 2 * t * t * d,  # projections + scores + weighted values
        "ffn_flops": t * 2 * d * d_ff,  # fc1 and fc2
""",
        ),
    ),
    WrongVersion(
        COSTS,
        "attention FLOPs without the scores and weighted values",
        "only the four projections",
        edit(_ATTENTION_FLOPS_T_D, '"attention_flops": 2 * t * 4 * d * d,  # projections + scores + weighted values'),
    ),
    WrongVersion(
        COSTS,
        "attention FLOPs without the weighted values",
        "the product of the weights with V",
        edit(
            _ATTENTION_FLOPS_T_D,
            '"attention_flops": 2 * t * 4 * d * d + 2 * t * t * d,  # projections + scores + weighted values',
        ),
    ),
    WrongVersion(
        COSTS,
        "biases not counted",
        "are not counted",
        edit(
            "projections = 4 * (d * d + d)  # q_proj, k_proj, v_proj, out_proj",
            "projections = 4 * d * d  # q_proj, k_proj, v_proj, out_proj",
        ),
        edit(_FFN_PARAMS_D_D_FF, '"ffn_params": 2 * d * d_ff,'),
    ),
    WrongVersion(
        COSTS,
        "d_ff assumed to be 4 * d_model",
        "use the d_ff argument",
        edit(_FFN_PARAMS_D_D_FF, '"ffn_params": 8 * d * d + 4 * d + d,'),
        edit('"ffn_flops": 2 * t * 2 * d * d_ff,  # fc1 and fc2', '"ffn_flops": 16 * t * d * d,  # fc1 and fc2'),
    ),
    # fused_swiglu
    WrongVersion(
        FUSED,
        "gate and up halves swapped in forward",
        "gate and up are swapped",
        edit("gate, up = self.gate_up_proj(x).chunk(2, dim=-1)", "up, gate = self.gate_up_proj(x).chunk(2, dim=-1)"),
    ),
    WrongVersion(
        FUSED,
        "silu on the up half",
        "gate and up are swapped",
        edit(_RETURN_SELF_DOWN_PROJ, "return self.down_proj(gate * silu(up))"),
    ),
    WrongVersion(
        FUSED,
        "halves taken as alternate features",
        "alternate features",
        edit(
            _GATE_UP,
            """\
        h = self.gate_up_proj(x)
        gate, up = h[..., 0::2], h[..., 1::2]
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "silu on both halves",
        "silu is applied to both halves",
        edit(_RETURN_SELF_DOWN_PROJ, "return self.down_proj(silu(gate) * silu(up))"),
    ),
    WrongVersion(
        FUSED,
        "two products on the halves of the weight",
        "the gate and up halves are multiplied separately",
        edit(
            _GATE_UP,
            """\
        w_gate, w_up = self.gate_up_proj.weight.chunk(2, dim=0)
        gate, up = F.linear(x, w_gate), F.linear(x, w_up)
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "up rows first in the fused weight",
        "has the up rows (w3) first",
        edit(_FUSED, 'fused = {"gate_up_proj.weight": torch.cat([state["w3.weight"], state["w1.weight"]], dim=0),'),
    ),
    WrongVersion(
        FUSED,
        "weights concatenated along dim 1",
        "concatenated along dim 1",
        edit(_FUSED, 'fused = {"gate_up_proj.weight": torch.cat([state["w1.weight"], state["w3.weight"]], dim=1),'),
    ),
    WrongVersion(
        FUSED,
        "torch.stack instead of torch.cat",
        "torch.stack adds a dimension",
        edit(_FUSED, 'fused = {"gate_up_proj.weight": torch.stack([state["w1.weight"], state["w3.weight"]]),'),
    ),
    WrongVersion(
        FUSED,
        "biases dropped",
        "expected exactly",
        edit(
            """\
        fused["gate_up_proj.bias"] = torch.cat([state["w1.bias"], state["w3.bias"]], dim=0)
        fused["down_proj.bias"] = state["w2.bias"].clone()
""",
            "        pass\n",
        ),
    ),
    WrongVersion(
        FUSED,
        "unfuse splits along dim 1",
        "unfuse_swiglu_state",
        edit(_FUSED_GATE_UP, 'gate, up = state[f"gate_up_proj.{kind}"].chunk(2, dim=-1)'),
    ),
    WrongVersion(
        FUSED,
        "unfuse swaps gate and up",
        "holds the second half of gate_up_proj.weight",
        edit(_FUSED_GATE_UP, 'up, gate = state[f"gate_up_proj.{kind}"].chunk(2, dim=0)'),
    ),
    WrongVersion(
        FUSED,
        "no silu on the gate half",
        "the activation is missing: the gate is silu(first half)",
        edit(_RETURN_SELF_DOWN_PROJ, "return self.down_proj(gate * up)"),
    ),
    # The bias halves (issue 34): a pair that swaps them both ways round-trips exactly, yet a FusedSwiGLU loaded
    # from fuse_swiglu_state differs from the SwiGLU it came from; each direction is compared with the stated layout.
    WrongVersion(
        FUSED,
        "both conversions swap the bias halves (round-trips exactly)",
        "has the up bias (w3.bias) in its first half",
        edit(_FUSED_GATE_UP_PROJ_BIAS, _NEW_FUSED_GATE_UP_PROJ_BIAS),
        edit(_FUSED_GATE_UP_2, _NEW_FIRST_SECOND),
    ),
    WrongVersion(
        FUSED,
        "fuse puts the up bias first",
        "has the up bias (w3.bias) in its first half",
        edit(_FUSED_GATE_UP_PROJ_BIAS, _NEW_FUSED_GATE_UP_PROJ_BIAS),
    ),
    WrongVersion(
        FUSED,
        "unfuse takes the bias halves the other way round",
        "unfuse_swiglu_state(state)['w1.bias'] holds the second half of gate_up_proj.bias",
        edit(_FUSED_GATE_UP_2, _NEW_FIRST_SECOND),
    ),
    # Dummy fused products (blind round b1): gate_up_proj(x) is called and its result thrown away, while gate and up
    # are computed in ways the product counter does not see; the output does not follow a change to the fused result.
    WrongVersion(
        FUSED,
        "dummy fused call, gate and up by element-wise multiply and sum",
        _SAYS_IS_NOT_COMPUTED,
        edit(
            _FUSED_GATE_UP_3,
            """\
        self.gate_up_proj(x)
        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias
        d = w.shape[0] // 2
        h = (x.unsqueeze(-2) * w).sum(-1)
        h = h if b is None else h + b
        return self.down_proj(F.silu(h[..., :d]) * h[..., d:])
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "dummy fused call, gate and up as 1x1 convolutions",
        _SAYS_IS_NOT_COMPUTED,
        edit(
            _FUSED_GATE_UP_3,
            """\
        _ = self.gate_up_proj(x)
        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias
        d = w.shape[0] // 2
        flat = x.reshape(-1, x.shape[-1])
        h = F.conv1d(flat.t()[None], w[:, :, None], b)[0].t().reshape(*x.shape[:-1], 2 * d)
        return self.down_proj(F.silu(h[..., :d]) * h[..., d:])
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "dummy fused call, gate and up by torch.linalg.multi_dot",
        _SAYS_IS_NOT_COMPUTED,
        edit(
            _FUSED_GATE_UP_3,
            """\
        _ = self.gate_up_proj(x)
        w, b = self.gate_up_proj.weight, self.gate_up_proj.bias
        d = w.shape[0] // 2
        flat = x.reshape(-1, x.shape[-1])
        gate = torch.linalg.multi_dot([flat, w[:d].t()])
        up = torch.linalg.multi_dot([flat, w[d:].t()])
        if b is not None:
            gate, up = gate + b[:d], up + b[d:]
        gate, up = gate.reshape(*x.shape[:-1], d), up.reshape(*x.shape[:-1], d)
        return self.down_proj(F.silu(gate) * up)
""",
        ),
    ),
    WrongVersion(
        FUSED,
        "fuse removes the keys from the dict it is given",
        "changed the dict it was given",
        edit(
            _FUSED,
            'fused = {"gate_up_proj.weight": torch.cat([state.pop("w1.weight"), state.pop("w3.weight")], dim=0),',
        ),
    ),
    WrongVersion(
        FUSED,
        "unfuse drops the biases",
        "expected exactly",
        edit('for kind in ("weight", "bias"):', 'for kind in ("weight",):'),
    ),
)
