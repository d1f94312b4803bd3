"""Notebook 06's exercises, with their checks and adapters: the position-wise feed-forward network and SwiGLU.

Oracles: ``F.relu``, ``F.gelu(approximate="none")``, ``F.gelu(approximate="tanh")`` and
``F.silu`` (and autograd through them) for the activations; the FFN and SwiGLU written out
here as closed forms with the student's weights copied in (``act(x @ W1.T + b1) @ W2.T + b2``
and ``(F.silu(x @ W1.T) * (x @ W3.T)) @ W2.T``), their parameter gradients by autograd through
those closed forms; parameter counts from ``nn.Linear`` modules built here; FLOPs from
``torch.utils.flop_counter.FlopCounterMode`` over a block built here on the meta device.

Tolerances (float32 on CPU, any BLAS), with the largest errors measured here (40 seeds, every
input of the checks' shapes) for the reference answers and common variants (clamp / where / mask
for ReLU; erf and erfc forms of GELU; tanh and sigmoid forms of the tanh GELU; x * sigmoid(x),
x / (1 + exp(-x)) and the tanh form of SiLU; x / (1 + exp(-x)) is finite at x = -100 but its derivative there
is inf / inf = NaN, which the derivative check at large |x| rejects, as the text states; derivatives are also
compared at x = 0 and -0, where the text asks ReLU's to be 0, as F.relu's: torch.clamp(x, min=0) gives 1 there,
torch.maximum(x, 0) and (x + |x|) / 2 give 0.5, torch.where(x > 0, x, 0) and x * (x > 0) give 0):
- activations of bfloat16 and float16 inputs (x up to about ±12), against the float64 function: atol = rtol = 4
  units of rounding of the dtype (bf16 4 * 2^-8, fp16 4 * 2^-11). Measured over 40 seeds in units of
  eps * (1 + |value|): <= 0.8 for PyTorch's own functions and for a float32 computation cast back, <= 2.2 for the
  formulas computed wholly in the low dtype (x / 2 * (1 + tanh(x / 2)) for SiLU in fp16 the largest);
- activations: atol 1e-5 + rtol 1e-5 on inputs up to |x| = 100 (measured <= 9.5e-7 absolute, a few
  float32 ulps of an output near 3; the closest known mistake, the tanh GELU in place of the exact
  one, differs by 4.7e-4 on the visible check's input);
  their derivatives atol 1e-5 + rtol 1e-5 (measured <= 3.6e-6, for the tanh GELU);
- FFN and SwiGLU outputs: atol 1e-5 + rtol 1e-4 (two matmuls of width <= 96; float32 against a
  float64 evaluation of the same closed form: <= 1.0e-6, 11% of the tolerance, which bounds what
  another summation order can change); parameter gradients: atol 1e-4 + rtol 1e-4 (they sum over
  <= 60 tokens; float32 against float64: <= 3.2e-6, 7% of the tolerance);
- dropout: an entry of the train-mode output is either 0 or the eval-mode output / (1 - p),
  at atol 1e-5 + rtol 1e-4; the share of zeros is p within 0.15 (4.2 binomial standard
  deviations for 200 entries at p = 0.5; the check seeds torch's generator, so it is repeatable);
- widths, parameter counts and FLOPs are integers and compared exactly.

Exercise 6 (fused gate and up projections). Oracles: SwiGLU computed here from the unfused weights with
``F.linear`` and ``F.silu``; the fused layout made by Hugging Face's own checkpoint conversion,
``transformers.core_model_loading.Concatenate(dim=0)`` (what transformers' loading uses to fuse gate_proj and
up_proj into gate_up_proj), on w1 then w3, as the notebook states the order; Hugging Face's ``Phi3MLP``
(transformers, tiny random configs, offline) as an independent oracle of the layout and its order, gate first. The number of matrix products one forward pass
runs is observed with a torch-function mode in the adapter (``_products_made``). That the output is computed from the
fused product's result is observed by adding a known change to that result (``fused_forward_perturbed``): the
output must equal SwiGLU of the changed halves (same tolerance), so a dummy ``gate_up_proj(x)`` whose result is
thrown away shows. Tolerances: outputs
atol 1e-5 + rtol 1e-4 and gradients atol 1e-4 + rtol 1e-4, as for SwiGLU (the fused product sums over the
same d_model terms per output feature as the two separate ones; the fused float32 forward against a float64
evaluation of the closed form, 40 seeds, the checks' shapes: <= 3.9e-6); converted state dicts are compared exactly
(``torch.equal``), since concatenating and splitting copy values without arithmetic.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from autograder import expect
from autograder.adapters import (
    MATRIX_PRODUCTS,
    adapter,
    dict_call_observed,
    first_product_perturbed,
    forward_backward,
    given,
    load,
    need,
    outcome,
    summary,
    tensors_made,
)
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.rules import ACTIVATIONS as READY_MADE_ACTIVATIONS
from autograder.rules import Rule

TENSOR_EXITS = (
    "torch.Tensor.numpy",
    "torch.Tensor.__array__",
    "torch.Tensor.item",
    "torch.Tensor.tolist",
    "torch.Tensor.__float__",
    "torch.Tensor.__int__",
)

ACTIVATIONS = Exercise(
    "ffn_activations",
    "ReLU, GELU (exact and tanh) and SiLU",
    points=2,
    rules=(
        # Every route torch offers (rules.ACTIVATIONS): a ReLU is also F.threshold, F.hardtanh(x, 0, inf) or leaky_relu
        # with slope 0, a SiLU F.glu of [x, x], a GELU x times torch.special.ndtr.
        Rule(
            "do not call any of PyTorch's ready-made activations (F.relu, torch.relu, F.gelu, F.silu, F.threshold, "
            "F.hardtanh, F.leaky_relu, F.elu, F.glu, ..., nn.ReLU, nn.GELU, nn.SiLU, ..., torch.special.ndtr); "
            "torch.exp, torch.tanh, torch.erf, torch.sigmoid and arithmetic are allowed",
            READY_MADE_ACTIVATIONS,
        ),
        # Every way out of torch for a tensor's values: NumPy reaches them through .numpy() or __array__ (np.asarray,
        # np.maximum(x, 0)), Python numbers through .item(), .tolist(), float(), int(). Code that leaves torch cannot be
        # differentiated by autograd; a hand-written backward would hide that from the derivative checks.
        Rule(
            "use torch operations on x only, so that autograd differentiates them: no .item(), .tolist(), float(x), "
            "int(x), .numpy() or NumPy arrays of a tensor (np.asarray(x), np.maximum(x, 0), ...)",
            TENSOR_EXITS,
        ),
    ),
)
FFN = Exercise("feed_forward", "the position-wise FeedForward", points=3)
WIDTH = Exercise(
    "swiglu_width",
    "SwiGLU's hidden width and parameter counts",
    points=2,
    rules=(
        Rule(
            "work it out from the shapes of the nn.Linear layers; do not build the modules",
            ("torch.nn.Linear", "torch.nn.Bilinear", "torch.nn.LazyLinear"),
            names=("FeedForward", "SwiGLU"),
        ),
    ),
)
SWIGLU = Exercise("swiglu", "SwiGLU", points=3)
COSTS = Exercise("block_costs", "parameters and FLOPs of a block", points=2)
FUSED = Exercise("fused_swiglu", "fused gate and up projections", points=3)
EXERCISES = [ACTIVATIONS, FFN, WIDTH, SWIGLU, COSTS, FUSED]
ORACLE_IMPORTS = (
    "transformers.models.phi3.modeling_phi3",
)  # imported while the notebook runs (grading.grade): seconds

ACT = {"atol": 1e-5, "rtol": 1e-5}
ACT_GRAD = {"atol": 1e-5, "rtol": 1e-5}
TOL = {"atol": 1e-5, "rtol": 1e-4}
GRAD = {"atol": 1e-4, "rtol": 1e-4}


_gen, _randn = seeded(6000)


# --- Exercise 1 --------------------------------------------------------------------------

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _tanh_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


ORACLES = {
    "relu": F.relu,
    "gelu": lambda x: F.gelu(x, approximate="none"),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


def _activation_mistakes(name, x):
    exact = F.gelu(x)
    if name == "gelu":
        return [
            (
                F.gelu(x, approximate="tanh"),
                "this is the tanh approximation; `gelu` is the exact one: x * Φ(x) = 0.5 * x * (1 + erf(x / sqrt(2)))",
            ),
            (0.5 * x * (1 + torch.erf(x)), "erf needs x / sqrt(2): Φ(x) = 0.5 * (1 + erf(x / sqrt(2)))"),
            (x * (1 + torch.erf(x / math.sqrt(2))), "the factor 0.5 is missing: Φ(x) = 0.5 * (1 + erf(x / sqrt(2)))"),
            (0.5 * (1 + torch.erf(x / math.sqrt(2))), "this is Φ(x) alone; GELU multiplies it by x"),
            (x * torch.sigmoid(1.702 * x), "this is the sigmoid approximation x * σ(1.702 x); use erf"),
        ]
    if name == "gelu_tanh":
        return [
            (
                exact,
                "this is the exact GELU (erf); `gelu_tanh` is the tanh approximation "
                "0.5 * x * (1 + tanh(sqrt(2/π) * (x + 0.044715 x³)))",
            ),
            (0.5 * x * (1 + torch.tanh(SQRT_2_OVER_PI * x)), "the cubic term 0.044715 * x**3 is missing"),
            (
                0.5 * x * (1 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**2))),
                "the correction term is cubic: 0.044715 * x**3, not x**2",
            ),
            (
                0.5 * x * (1 + torch.tanh(math.sqrt(2 * math.pi) * (x + 0.044715 * x**3))),
                "the factor is sqrt(2 / π), not sqrt(2π)",
            ),
        ]
    if name == "silu":
        return [
            (torch.sigmoid(x), "this is the sigmoid σ(x) alone; SiLU is x * σ(x)"),
            (x * torch.sigmoid(1.702 * x), "SiLU is x * σ(x), with no factor inside the sigmoid"),
            (exact, "this is GELU; SiLU is x * σ(x) = x / (1 + exp(-x))"),
        ]
    return [
        (torch.where(x > 0, x, 0.01 * x), "this is a leaky ReLU; ReLU sets negative inputs to exactly 0"),
        (x.abs(), "this is |x|; ReLU sets negative inputs to 0: max(x, 0)"),
        (torch.clamp(x, -1, 1), "ReLU is max(x, 0), unbounded above and 0 below"),
    ]


def _activation_case(impl, name, shape, seed, scale=3.0, grads=False):
    x = _randn(shape, seed, scale)
    grad_output = _randn(shape, seed + 100) if grads else None
    got = impl.call(activation_forward, name, x, grad_output)
    if isinstance(got, dict) and "output" in got:
        expect.close(
            got["output"],
            ORACLES[name](x),
            f"{name}(x) for x of shape {list(shape)}",
            **ACT,
            alternatives=_activation_mistakes(name, x),
        )
    return got, x, grad_output


@ACTIVATIONS.visible
def test_activations_match_torch(impl):
    "relu, gelu, gelu_tanh and silu equal F.relu, F.gelu (exact and tanh) and F.silu, without calling them"
    for name in ORACLES:
        _activation_case(impl, name, (4, 50), 0)


@ACTIVATIONS.hidden
def test_activations_shapes_and_extremes(impl):
    "any shape; large positive and negative inputs give finite values and derivatives; the derivatives at 0 (ReLU's 0)"
    extremes = torch.tensor([-100.0, -30.0, -12.0, -1e-3, -0.0, 0.0, 1e-3, 12.0, 30.0, 100.0])
    for name in ORACLES:
        for seed, shape in ((1, (7,)), (2, (2, 3, 5))):
            _activation_case(impl, name, shape, seed)
        got = impl.call(activation_forward, name, extremes, None)
        out = expect.tensor(got["output"], f"{name}(x)", shape=extremes.shape)
        shown = ", ".join(f"{v:g}" for v in extremes.tolist())
        expect.that(
            bool(torch.isfinite(out).all()),
            f"{name}(x) gives NaN or inf for x in [{shown}]; "
            "write it so that large |x| stays finite (e.g. x * torch.sigmoid(x) for SiLU)",
        )
        expect.close(
            out,
            ORACLES[name](extremes),
            f"{name}(x) for x in [{shown}]",
            **ACT,
            alternatives=_activation_mistakes(name, extremes),
        )
        _check_derivative_at(impl, name, extremes, shown)


# bfloat16 / float16 inputs: 4 units of rounding of the dtype, atol and rtol (module docstring).
LOW_PRECISION_ACT = {
    torch.bfloat16: {"atol": 4 * 2**-8, "rtol": 4 * 2**-8},
    torch.float16: {"atol": 4 * 2**-11, "rtol": 4 * 2**-11},
}


@ACTIVATIONS.hidden
def test_activations_keep_low_precision_dtypes(impl):
    "bfloat16 and float16 inputs give results of the same dtype (as PyTorch's activations), with their values"
    for seed, dtype in ((4, torch.bfloat16), (5, torch.float16)):
        x = _randn((4, 64), seed, 3.0).to(dtype)
        for name in ORACLES:
            what = f"{name}(x) for a {dtype} x"
            out = expect.tensor(impl.call(activation_forward, name, x, None)["output"], what, shape=x.shape)
            expect.that(
                out.dtype == dtype,
                f"{what} returns {out.dtype}: the result has the dtype of x, as PyTorch's activations: a float32 "
                "tensor made inside the function (torch.zeros(x.shape), torch.tensor(0.0)) or x.float() promotes "
                "it; use Python numbers or tensors made like x (torch.zeros_like(x)), and compute in x's dtype or "
                "cast the result back with .to(x.dtype)",
            )
            expect.close(out, ORACLES[name](x.double()), what, **LOW_PRECISION_ACT[dtype])


def _relu_derivative_mistakes(x, derivative):
    """ReLU's derivative with another value at x = 0 (the text asks for 0, F.relu's), as common forms give it."""
    at_zero = x == 0
    return [
        (
            torch.where(at_zero, 1.0, derivative),
            "its derivative at x = 0 is 1 (as torch.clamp(x, min=0) or x.masked_fill(x < 0, 0) give); it must be 0 "
            "there, as F.relu's: use a strict comparison, e.g. torch.where(x > 0, x, 0)",
        ),
        (
            torch.where(at_zero, 0.5, derivative),
            "its derivative at x = 0 is 0.5 (torch.maximum(x, 0) and (x + |x|) / 2 split the gradient at the tie); "
            "it must be 0 there, as F.relu's: use a strict comparison, e.g. torch.where(x > 0, x, 0)",
        ),
    ]


def _check_derivative_at(impl, name, x, shown):
    """The derivative is finite and right at large |x| and at 0 (where ReLU's must be 0, as the text says)."""
    grad = impl.call(activation_forward, name, x, torch.ones_like(x)).get("grad")
    expect.that(grad is not None, f"no gradient reaches the input of {name}")
    grad = expect.tensor(grad, f"the derivative of {name}", shape=x.shape)
    expect.that(
        bool(torch.isfinite(grad).all()),
        f"the derivative of {name} at x in [{shown}] is "
        f"{[round(float(v), 4) for v in grad]}: NaN or inf where |x| is large (exp overflows, and inf / inf "
        "is NaN in the backward pass); write it so that its gradient stays finite too (e.g. x * "
        "torch.sigmoid(x) for SiLU)",
    )
    xr = x.clone().requires_grad_()
    ORACLES[name](xr).backward(torch.ones_like(x))
    expect.close(
        grad,
        xr.grad,
        f"the derivative of {name} at x in [{shown}]",
        **ACT_GRAD,
        alternatives=_relu_derivative_mistakes(x, xr.grad) if name == "relu" else (),
    )


@ACTIVATIONS.hidden
def test_activation_derivatives(impl):
    "autograd's derivative of each activation equals that of the torch function"
    for name in ORACLES:
        got, x, grad_output = _activation_case(impl, name, (3, 40), 3, grads=True)
        expect.that(
            got.get("grad") is not None,
            f"no gradient reaches the input of {name}: build it from torch "
            "operations on x (no .detach(), .item(), .numpy() or torch.no_grad())",
        )
        xr = x.clone().requires_grad_()
        ORACLES[name](xr).backward(grad_output)
        expect.close(got["grad"], xr.grad, f"the derivative of {name}", **ACT_GRAD)


# --- Exercise 2 --------------------------------------------------------------------------

FFN_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda h: F.gelu(h, approximate="tanh")}


def ffn_state(d_model, d_ff, seed, bias=True):
    state = {
        "fc1.weight": _randn((d_ff, d_model), seed, d_model**-0.5),
        "fc2.weight": _randn((d_model, d_ff), seed + 1, d_ff**-0.5),
    }
    if bias:
        state["fc1.bias"] = _randn((d_ff,), seed + 2, 0.5)
        state["fc2.bias"] = _randn((d_model,), seed + 3, 0.5)
    return state


def ffn_oracle(state, x, activation="gelu", act=None):
    act = act or FFN_ACTIVATIONS[activation]
    h = x @ state["fc1.weight"].T
    if "fc1.bias" in state:
        h = h + state["fc1.bias"]
    out = act(h) @ state["fc2.weight"].T
    return out + state["fc2.bias"] if "fc2.bias" in state else out


def _ffn_mistakes(state, x, activation):
    mistakes = [(ffn_oracle(state, x, act=lambda h: h), "the activation between fc1 and fc2 is missing")]
    if activation == "gelu":
        mistakes.append(
            (
                ffn_oracle(state, x, "gelu_tanh"),
                'it uses the tanh approximation of GELU where activation="gelu" asks for the exact one (erf)',
            )
        )
    if activation == "gelu_tanh":
        mistakes.append(
            (
                ffn_oracle(state, x, "gelu"),
                'it uses the exact GELU where activation="gelu_tanh" asks for the tanh approximation',
            )
        )
    # The two GELUs taken for each other have their own messages above.
    named = {activation} | ({"gelu", "gelu_tanh"} if activation in ("gelu", "gelu_tanh") else set())
    for other in FFN_ACTIVATIONS:
        if other not in named:
            mistakes.append(
                (
                    ffn_oracle(state, x, other),
                    f"it applies {other} where activation={activation!r} was asked: use the `activation` argument",
                )
            )
    mistakes.append(
        (
            F.relu(ffn_oracle(state, x, activation)),
            "an activation is applied after fc2 as well; the FFN's output is fc2's output, not activated",
        )
    )
    return mistakes


def _ffn_parameters(d_model, d_ff, bias=True):
    shapes = {"fc1.weight": [d_ff, d_model], "fc2.weight": [d_model, d_ff]}
    if bias:
        shapes |= {"fc1.bias": [d_ff], "fc2.bias": [d_model]}
    return shapes


def _check_parameters(impl, class_name, args, kwargs, expected, names):
    summary = impl.call(ffn_summary, class_name, args, kwargs)
    call = f"{class_name}({', '.join([*map(str, args), *(f'{k}={v!r}' for k, v in kwargs.items())])})"
    expect.that("parameters" in summary, f"{call} is not an nn.Module")
    got = summary["parameters"]
    if got == expected:
        return
    transposed = [k for k, v in expected.items() if k.endswith("weight") and got.get(k) == v[::-1] != v]
    if transposed and set(got) == set(expected):
        expect.fail(
            f"{call} has {' and '.join(transposed)} transposed: {got}. nn.Linear(in_features, out_features) "
            f"stores its weight as [out_features, in_features]; {names}"
        )
    expect.fail(f"{call} has parameters {got}; expected {expected}. {names}")


FFN_NAMES = (
    "fc1 = nn.Linear(d_model, d_ff, bias=bias) and fc2 = nn.Linear(d_ff, d_model, bias=bias); "
    "the names matter, checkpoints load by name"
)


@FFN.visible
def test_ffn_parameters(impl):
    "fc1 = nn.Linear(d_model, d_ff) and fc2 = nn.Linear(d_ff, d_model), with or without bias"
    _check_parameters(impl, "FeedForward", [8, 32], {}, _ffn_parameters(8, 32), FFN_NAMES)
    _check_parameters(impl, "FeedForward", [6, 10], {"bias": False}, _ffn_parameters(6, 10, bias=False), FFN_NAMES)


@FFN.visible
def test_ffn_forward(impl):
    "FeedForward(8, 32)(x) equals fc2(gelu(fc1(x))) with exact GELU, for x of shape [2, 5, 8]"
    state, x = ffn_state(8, 32, 0), _randn((2, 5, 8), 10)
    got = impl.call(ffn_forward, "FeedForward", [8, 32], {}, state, x)
    expect.close(
        got["output"],
        ffn_oracle(state, x),
        "FeedForward(8, 32)(x)",
        **TOL,
        alternatives=_ffn_mistakes(state, x, "gelu"),
    )


@FFN.hidden
def test_ffn_activations_shapes_and_bias(impl):
    "each activation option, 2-D and 3-D inputs, other widths, bias=False"
    cases = [
        ("relu", True, (7, 12), 48, 1),
        ("gelu", True, (3, 4, 16), 40, 2),
        ("gelu_tanh", True, (2, 6, 8), 24, 3),
        ("gelu_tanh", False, (10, 12), 20, 4),
        ("relu", False, (1, 3, 24), 96, 5),
    ]
    for activation, bias, shape, d_ff, seed in cases:
        d = shape[-1]
        state, x = ffn_state(d, d_ff, seed * 10, bias), _randn(shape, seed * 10 + 5, 2.0)
        got = impl.call(ffn_forward, "FeedForward", [d, d_ff], {"activation": activation, "bias": bias}, state, x)
        expect.close(
            got["output"],
            ffn_oracle(state, x, activation),
            f"FeedForward({d}, {d_ff}, activation={activation!r}, bias={bias})(x) for x of shape {list(shape)}",
            **TOL,
            alternatives=_ffn_mistakes(state, x, activation),
        )


@FFN.visible
def test_ffn_unknown_activation(impl):
    "an unknown activation name raises ValueError (no silent fallback)"
    for name in ("swish", "GELU", ""):
        got = impl.call(ffn_outcome, [8, 32], {"activation": name}, _randn((2, 8), 11))
        expect.that(
            got["raised"] == "ValueError",
            f"FeedForward(8, 32, activation={name!r}) "
            + (f"raised {got['raised']}" if got["raised"] else "built and ran")
            + "; an activation other than 'relu', 'gelu' or 'gelu_tanh' must raise ValueError",
        )


@FFN.hidden
def test_ffn_gradients(impl):
    "parameter gradients equal autograd's through the closed form"
    for seed, activation, shape in ((6, "gelu", (3, 5, 12)), (7, "relu", (20, 12))):
        state, x = ffn_state(12, 36, seed * 10), _randn(shape, seed * 10 + 5)
        grad_output = _randn(shape, seed * 10 + 6)
        got = impl.call(ffn_forward, "FeedForward", [12, 36], {"activation": activation}, state, x, grad_output)
        grads = expect.gradients(got, f"FeedForward(12, 36, activation={activation!r})")
        params = {k: v.clone().requires_grad_() for k, v in state.items()}
        ffn_oracle(params, x, activation).backward(grad_output)
        for name, p in params.items():
            expect.close(grads.get(name), p.grad, f"the gradient of {name}", **GRAD)


@FFN.hidden
def test_ffn_dropout(impl):
    "dropout on the output: active in train mode (entries 0 or scaled by 1/(1-p)), off in eval mode"
    submodules = impl.call(ffn_summary, "FeedForward", [8, 32], {"activation": "relu", "dropout": 0.5}).get(
        "submodules", {}
    )
    expect.that(
        submodules.get("dropout") == "Dropout",
        f"FeedForward(8, 32, dropout=0.5) has the submodules "
        f"{submodules}; the exercise asks for self.dropout = nn.Dropout(dropout)",
    )
    state, x = ffn_state(8, 32, 80), _randn((5, 5, 8), 85)
    expected = ffn_oracle(state, x, "relu")
    got = impl.call(ffn_dropout, [8, 32], {"activation": "relu", "dropout": 0.5}, state, x)
    for key in ("eval_a", "eval_b"):
        expect.close(
            got[key],
            expected,
            "FeedForward(8, 32, activation='relu', dropout=0.5) in eval mode",
            **TOL,
            alternatives=_ffn_mistakes(state, x, "relu"),
            hint="In eval mode dropout must do nothing: use nn.Dropout (it follows .train()/.eval()) "
            "or pass training=self.training to F.dropout.",
        )
    train_a = expect.tensor(got["train_a"], "the output in train mode", shape=expected.shape)
    train_b = expect.tensor(got["train_b"], "the output in train mode", shape=expected.shape)
    expect.that(
        not torch.equal(train_a, train_b) and not torch.allclose(train_a, expected),
        "FeedForward(8, 32, dropout=0.5) gives the same output on every call in train mode: dropout "
        "is not applied (store nn.Dropout(dropout) and call it in forward)",
    )
    zeros = train_a == 0
    share = float(zeros.float().mean())
    scaled = torch.where(zeros, torch.zeros_like(expected), expected / 0.5)
    kept = bool(torch.allclose(train_a, scaled, **TOL))
    expect.that(
        kept,
        "with dropout=0.5 in train mode each output entry should be either 0 or twice its eval-mode "
        "value: dropout acts on the FFN's output (after fc2), like GPT-2's MLP, and scales the kept "
        "entries by 1/(1-p)",
    )
    expect.that(
        abs(share - 0.5) < 0.15,
        f"with dropout=0.5, {share:.0%} of the output entries are zero; expected "
        "about half: pass the `dropout` argument to nn.Dropout",
    )
    got = impl.call(ffn_dropout, [8, 32], {"activation": "relu"}, state, x)
    expect.close(
        got["train_a"],
        expected,
        "FeedForward(8, 32) (dropout=0.0 by default) in train mode",
        **TOL,
        hint="With p = 0 the module must be deterministic.",
    )


# --- Exercise 3 --------------------------------------------------------------------------


def hidden_dim_oracle(d_model, multiple_of=64):
    """The smallest multiple of ``multiple_of`` that is >= 8/3 * d_model, in integers."""
    return -(-8 * d_model // (3 * multiple_of)) * multiple_of


def param_count_oracle(d_model, d_ff, gated=False, bias=True):
    layers = [nn.Linear(d_model, d_ff, bias=bias, device="meta"), nn.Linear(d_ff, d_model, bias=bias, device="meta")]
    if gated:
        layers.append(nn.Linear(d_model, d_ff, bias=bias, device="meta"))
    return sum(p.numel() for layer in layers for p in layer.parameters())


def _int_result(got, call):
    expect.that(got["type"] == "int", f"{call} returned a {got['type']} ({got['value']!r}); return an int")
    return got["value"]


def _width_diagnosis(d_model, multiple_of, value):
    exact = 8 * d_model / 3
    if value == int(exact) and value != hidden_dim_oracle(d_model, multiple_of):
        if multiple_of == 1:
            return (
                " (int() truncates 8/3 * d_model; round it UP: with multiple_of=1 the width is ceil(8 * d_model / 3))"
            )
        return " (8/3 * d_model is not rounded to a multiple of multiple_of)"
    if value % multiple_of == 0 and value < exact:
        return (
            " (rounded down or to the nearest multiple; the width is rounded UP to the next multiple, so it is "
            "never below 8/3 * d_model)"
        )
    if value == 4 * d_model:
        return " (that is the 4x width of the plain FFN; SwiGLU uses 2/3 of it: 8/3 * d_model)"
    return ""


@WIDTH.visible
def test_hidden_dim_examples(impl):
    "swiglu_hidden_dim: 8/3 * d_model rounded up to a multiple of multiple_of (768 -> 2048, 512 -> 1408)"
    for d_model in (768, 512, 4096):
        value = _int_result(
            impl.call(function_value, "swiglu_hidden_dim", [d_model], {}), f"swiglu_hidden_dim({d_model})"
        )
        expected = hidden_dim_oracle(d_model)
        expect.that(
            value == expected,
            f"swiglu_hidden_dim({d_model}) = {value}, expected {expected}" + _width_diagnosis(d_model, 64, value),
        )


@WIDTH.hidden
def test_hidden_dim_multiple_of(impl):
    "other d_model and multiple_of values, as keyword arguments"
    for d_model, multiple_of in ((100, 64), (288, 32), (5120, 256), (10, 1), (1000, 100), (7, 1)):
        call = f"swiglu_hidden_dim({d_model}, multiple_of={multiple_of})"
        value = _int_result(
            impl.call(function_value, "swiglu_hidden_dim", [d_model], {"multiple_of": multiple_of}), call
        )
        expected = hidden_dim_oracle(d_model, multiple_of)
        expect.that(
            value == expected, f"{call} = {value}, expected {expected}" + _width_diagnosis(d_model, multiple_of, value)
        )


def _count_diagnosis(d_model, d_ff, gated, bias, value):
    weights = param_count_oracle(d_model, d_ff, gated, bias=False)
    if bias and value == weights:
        return " (the biases are not counted)"
    if not bias and value == param_count_oracle(d_model, d_ff, gated, bias=True):
        return " (bias=False: no biases to count)"
    if gated and value in (
        param_count_oracle(d_model, d_ff, False, bias),
        param_count_oracle(d_model, d_ff, False, False),
    ):
        return " (a gated FFN has three matrices: w1 and w3 of [d_ff, d_model] and w2 of [d_model, d_ff])"
    if bias and value - weights in (2 * d_ff, 2 * d_model, 3 * d_ff, 3 * d_model, d_ff, d_model):
        return (
            " (the biases: each layer's bias has one entry per output feature, d_ff for fc1, w1 and w3, "
            "d_model for fc2 and w2)"
        )
    return ""


@WIDTH.visible
def test_param_counts(impl):
    "ffn_param_count: a plain FFN at 4 * d_model and SwiGLU at its rounded width, with and without biases"
    for d_model, d_ff, gated, bias in (
        (768, 3072, False, True),
        (768, 2048, True, False),
        (512, 1408, True, False),
        (8, 32, False, False),
    ):
        call = f"ffn_param_count({d_model}, {d_ff}, gated={gated}, bias={bias})"
        value = _int_result(
            impl.call(function_value, "ffn_param_count", [d_model, d_ff], {"gated": gated, "bias": bias}), call
        )
        expected = param_count_oracle(d_model, d_ff, gated, bias)
        expect.that(
            value == expected,
            f"{call} = {value}, expected {expected}" + _count_diagnosis(d_model, d_ff, gated, bias, value),
        )


@WIDTH.hidden
def test_param_counts_defaults_and_more(impl):
    "defaults gated=False, bias=True; gated with biases; small sizes"
    value = _int_result(impl.call(function_value, "ffn_param_count", [16, 64], {}), "ffn_param_count(16, 64)")
    expect.that(
        value == param_count_oracle(16, 64),
        f"ffn_param_count(16, 64) = {value}, expected "
        f"{param_count_oracle(16, 64)} (by default gated=False and bias=True)"
        + _count_diagnosis(16, 64, False, True, value),
    )
    for d_model, d_ff, gated, bias in ((10, 27, True, True), (1, 1, True, True), (300, 832, False, True)):
        call = f"ffn_param_count({d_model}, {d_ff}, gated={gated}, bias={bias})"
        value = _int_result(
            impl.call(function_value, "ffn_param_count", [d_model, d_ff], {"gated": gated, "bias": bias}), call
        )
        expected = param_count_oracle(d_model, d_ff, gated, bias)
        expect.that(
            value == expected,
            f"{call} = {value}, expected {expected}" + _count_diagnosis(d_model, d_ff, gated, bias, value),
        )


# --- Exercise 4 --------------------------------------------------------------------------


def swiglu_state(d_model, d_ff, seed, bias=False):
    state = {
        "w1.weight": _randn((d_ff, d_model), seed, d_model**-0.5),
        "w2.weight": _randn((d_model, d_ff), seed + 1, d_ff**-0.5),
        "w3.weight": _randn((d_ff, d_model), seed + 2, d_model**-0.5),
    }
    if bias:  # a seed of its own for each bias: equal w1 and w3 biases would hide their order (gate first)
        for i, (name, size) in enumerate((("w1", d_ff), ("w2", d_model), ("w3", d_ff))):
            state[f"{name}.bias"] = _randn((size,), seed + 7 + i, 0.3)
    return state


def swiglu_oracle(state, x, gate=F.silu, up=lambda u: u):
    def linear(name, inp):
        out = inp @ state[f"{name}.weight"].T
        return out + state[f"{name}.bias"] if f"{name}.bias" in state else out

    return linear("w2", gate(linear("w1", x)) * up(linear("w3", x)))


def _swiglu_mistakes(state, x):
    swapped = dict(state, **{"w1.weight": state["w3.weight"], "w3.weight": state["w1.weight"]})
    if "w1.bias" in state:
        swapped |= {"w1.bias": state["w3.bias"], "w3.bias": state["w1.bias"]}
    return [
        (
            swiglu_oracle(swapped, x),
            "the gate is on the wrong branch: silu goes on w1(x) (the gate), and w3(x) "
            "(the 'up' branch) stays linear: w2(silu(w1(x)) * w3(x))",
        ),
        (
            swiglu_oracle(state, x, up=F.silu),
            "silu is applied to both branches; only the gate w1(x) goes through silu, w3(x) stays linear",
        ),
        (swiglu_oracle(state, x, gate=lambda u: u), "the activation is missing: the gate is silu(w1(x))"),
        (
            swiglu_oracle(state, x, gate=torch.sigmoid),
            "the gate uses the sigmoid σ(w1 x) (that is GLU); SwiGLU uses silu(w1 x) = w1 x * σ(w1 x)",
        ),
        (swiglu_oracle(state, x, gate=F.gelu), "the gate uses GELU (that is GEGLU); SwiGLU uses silu"),
    ]


SWIGLU_NAMES = (
    "w1 (gate) and w3 (up) are nn.Linear(d_model, d_ff, bias=bias), w2 (down) is nn.Linear(d_ff, d_model, bias=bias)"
)


def _swiglu_parameters(d_model, d_ff, bias=False):
    shapes = {"w1.weight": [d_ff, d_model], "w2.weight": [d_model, d_ff], "w3.weight": [d_ff, d_model]}
    if bias:
        shapes |= {"w1.bias": [d_ff], "w2.bias": [d_model], "w3.bias": [d_ff]}
    return shapes


@SWIGLU.visible
def test_swiglu_parameters(impl):
    "w1, w3: nn.Linear(d_model, d_ff), w2: nn.Linear(d_ff, d_model), no bias by default; d_ff from swiglu_hidden_dim"
    _check_parameters(impl, "SwiGLU", [16, 40], {}, _swiglu_parameters(16, 40), SWIGLU_NAMES)
    for d_model, multiple_of in ((96, 64), (100, 64), (40, 16)):
        kwargs = {} if multiple_of == 64 else {"multiple_of": multiple_of}
        width = hidden_dim_oracle(d_model, multiple_of)
        summary = impl.call(ffn_summary, "SwiGLU", [d_model], kwargs)
        got = summary.get("parameters", {}).get("w1.weight", ["?", "?"])[0]
        call = f"SwiGLU({d_model}{', multiple_of=' + str(multiple_of) if kwargs else ''})"
        expect.that(
            got == width,
            f"{call} has a hidden width of {got}, expected {width}: with d_ff=None the width "
            f"is swiglu_hidden_dim(d_model, multiple_of)"
            + (_width_diagnosis(d_model, multiple_of, got) if isinstance(got, int) else ""),
        )
        _check_parameters(impl, "SwiGLU", [d_model], kwargs, _swiglu_parameters(d_model, width), SWIGLU_NAMES)


@SWIGLU.visible
def test_swiglu_forward(impl):
    "SwiGLU(16, 40)(x) equals w2(silu(w1 x) * w3 x), for x of shape [2, 5, 16]"
    state, x = swiglu_state(16, 40, 0), _randn((2, 5, 16), 1)
    got = impl.call(ffn_forward, "SwiGLU", [16, 40], {}, state, x)
    expect.close(
        got["output"], swiglu_oracle(state, x), "SwiGLU(16, 40)(x)", **TOL, alternatives=_swiglu_mistakes(state, x)
    )


@SWIGLU.hidden
def test_swiglu_shapes_bias_and_gradients(impl):
    "2-D and 3-D inputs, other widths, bias=True; parameter gradients equal autograd's through the closed form"
    _check_parameters(impl, "SwiGLU", [24, 64], {"bias": True}, _swiglu_parameters(24, 64, bias=True), SWIGLU_NAMES)
    for seed, shape, d_ff, bias in ((2, (9, 12), 32, False), (3, (2, 3, 24), 64, True), (4, (1, 7, 8), 20, False)):
        d = shape[-1]
        state, x = swiglu_state(d, d_ff, seed * 10, bias), _randn(shape, seed * 10 + 5, 1.5)
        grad_output = _randn(shape, seed * 10 + 6)
        got = impl.call(ffn_forward, "SwiGLU", [d, d_ff], {"bias": bias}, state, x, grad_output)
        expect.close(
            got["output"],
            swiglu_oracle(state, x),
            f"SwiGLU({d}, {d_ff}, bias={bias})(x) for x of shape {list(shape)}",
            **TOL,
            alternatives=_swiglu_mistakes(state, x),
        )
        grads = expect.gradients(got, f"SwiGLU({d}, {d_ff})")
        params = {k: v.clone().requires_grad_() for k, v in state.items()}
        swiglu_oracle(params, x).backward(grad_output)
        for name, p in params.items():
            expect.close(grads.get(name), p.grad, f"the gradient of {name}", **GRAD)


# --- Exercise 5 --------------------------------------------------------------------------

COST_KEYS = ("attention_params", "ffn_params", "attention_flops", "ffn_flops")


def costs_oracle(d_model, d_ff, seq_len):
    """Parameters of the block's linear layers; FLOPs counted by FlopCounterMode on the meta device."""
    with torch.device("meta"):
        q, k, v, o = (nn.Linear(d_model, d_model) for _ in range(4))
        fc1, fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        x = torch.empty(1, seq_len, d_model)
    with FlopCounterMode(display=False) as attention:
        weights = (q(x) @ k(x).transpose(-1, -2)).softmax(-1)  # one head of width d_model: same count as h heads
        o(weights @ v(x))
    with FlopCounterMode(display=False) as ffn:
        fc2(F.gelu(fc1(x)))
    count = lambda *modules: sum(p.numel() for m in modules for p in m.parameters())  # noqa: E731
    return {
        "attention_params": count(q, k, v, o),
        "ffn_params": count(fc1, fc2),
        "attention_flops": attention.get_total_flops(),
        "ffn_flops": ffn.get_total_flops(),
    }


def _costs_diagnosis(key, value, d_model, d_ff, seq_len, expected):
    t, d = seq_len, d_model
    if key.endswith("flops") and value * 2 == expected:
        return " (that counts multiply-adds; a multiply-add is 2 FLOPs)"
    if key == "attention_flops" and value == 8 * t * d * d:
        return " (only the four projections; the scores Q K^T and weights @ V add 2 * seq_len² * d_model each)"
    if key == "attention_flops" and value == 8 * t * d * d + 2 * t * t * d:
        return " (the product of the weights with V costs 2 * seq_len² * d_model as well)"
    if key == "attention_params" and value == 4 * d * d:
        return " (the biases of q_proj, k_proj, v_proj and out_proj are not counted)"
    if key == "ffn_params" and value == 2 * d * d_ff:
        return " (the biases of fc1 and fc2 are not counted)"
    if key == "attention_params" and value == 3 * d * d + 3 * d:
        return " (out_proj is part of attention: four d_model x d_model projections)"
    return ""


def _check_costs(impl, d_model, d_ff, seq_len):
    call = f"block_costs({d_model}, {d_ff}, {seq_len})"
    got = impl.call(function_value, "block_costs", [d_model, d_ff, seq_len], {})
    value = got["value"]
    expect.that(
        got["type"] == "dict" and isinstance(value, dict),
        f"{call} returned a {got['type']}; return a dict with keys {list(COST_KEYS)}",
    )
    expect.that(sorted(value) == sorted(COST_KEYS), f"{call} has keys {sorted(value)}; expected {list(COST_KEYS)}")
    expected = costs_oracle(d_model, d_ff, seq_len)
    four_times = costs_oracle(d_model, 4 * d_model, seq_len) if d_ff != 4 * d_model else {}
    for key in COST_KEYS:
        if value[key] != expected[key] and value[key] == four_times.get(key):
            expect.fail(
                f"{call}[{key!r}] = {value[key]:,}, expected {expected[key]:,}: that is the count for "
                f"d_ff = 4 * d_model = {4 * d_model}; use the d_ff argument, which is not always 4 * d_model"
            )
        expect.that(
            isinstance(value[key], int) and not isinstance(value[key], bool),
            f"{call}[{key!r}] is {value[key]!r}; return an int",
        )
        expect.that(
            value[key] == expected[key],
            f"{call}[{key!r}] = {value[key]:,}, expected {expected[key]:,}"
            + _costs_diagnosis(key, value[key], d_model, d_ff, seq_len, expected[key]),
        )


@COSTS.visible
def test_costs_gpt2_small(impl):
    "GPT-2 small's block (d_model 768, d_ff 3072) at 1024 tokens: parameters and forward FLOPs of attention and FFN"
    _check_costs(impl, 768, 3072, 1024)


@COSTS.hidden
def test_costs_other_sizes(impl):
    "other widths and sequence lengths, where the seq_len² terms dominate or vanish"
    for args in ((64, 256, 4096), (512, 1408, 1), (12, 48, 7)):
        _check_costs(impl, *args)


# --- Exercise 6 --------------------------------------------------------------------------


def fuse_oracle(state):
    """The fused layout as Hugging Face's checkpoint loading makes it: its ``Concatenate(dim=0)`` conversion, the one
    transformers' conversion mapping applies to fuse ``gate_proj`` and ``up_proj`` into ``gate_up_proj`` (MiniMax-M3-VL),
    here on w1 (gate) then w3 (up), weights and biases alike; w2 becomes down_proj unchanged (a rename). Phi-3's
    ``Phi3MLP`` checks the gate-first order independently (``test_against_phi3``)."""
    from transformers.core_model_loading import Concatenate

    fused = {}
    for kind in ("weight", "bias"):
        if f"w1.{kind}" in state:
            sources, target = [f"w1.{kind}", f"w3.{kind}"], f"gate_up_proj.{kind}"
            # ``convert`` takes each source's list of tensors and empties the dict it is given: a new one each time
            fused |= Concatenate(dim=0).convert(
                {source: [state[source]] for source in sources}, source_patterns=sources, target_patterns=[target]
            )
            fused[f"down_proj.{kind}"] = state[f"w2.{kind}"]
    return fused


def fused_oracle(state, x):
    """SwiGLU from the unfused weights with F.silu and F.linear."""
    gate = F.linear(x, state["w1.weight"], state.get("w1.bias"))
    up = F.linear(x, state["w3.weight"], state.get("w3.bias"))
    return F.linear(F.silu(gate) * up, state["w2.weight"], state.get("w2.bias"))


def _fused_mistakes(state, x):
    d_ff = state["w1.weight"].shape[0]
    fused = fuse_oracle(state)
    h = F.linear(x, fused["gate_up_proj.weight"], fused.get("gate_up_proj.bias"))
    down = lambda u: F.linear(u, state["w2.weight"], state.get("w2.bias"))  # noqa: E731
    first, second = h[..., :d_ff], h[..., d_ff:]
    return [
        (
            down(first * F.silu(second)),
            "gate and up are swapped (silu is on the second half): the first d_ff "
            "features of gate_up_proj(x) are the gate, which goes through silu; the last d_ff are the up branch",
        ),
        (
            down(F.silu(h[..., 0::2]) * h[..., 1::2]),
            "the halves are taken as alternate features (0::2 and 1::2); "
            "the gate is the first d_ff features and up the last d_ff: gate_up_proj(x).chunk(2, dim=-1)",
        ),
        (
            down(F.silu(first) * F.silu(second)),
            "silu is applied to both halves; only the gate (first half) goes through silu",
        ),
        (down(first * second), "the activation is missing: the gate is silu(first half)"),
    ]


FUSED_NAMES = (
    "gate_up_proj is nn.Linear(d_model, 2 * d_ff, bias=bias) and down_proj is nn.Linear(d_ff, d_model, bias=bias)"
)


def _fused_parameters(d_model, d_ff, bias=False):
    shapes = {"gate_up_proj.weight": [2 * d_ff, d_model], "down_proj.weight": [d_model, d_ff]}
    if bias:
        shapes |= {"gate_up_proj.bias": [2 * d_ff], "down_proj.bias": [d_model]}
    return shapes


def _check_fused_parameters(impl, args, kwargs, expected):
    summary = impl.call(fused_summary, args, kwargs)
    call = f"FusedSwiGLU({', '.join([*map(str, args), *(f'{k}={v!r}' for k, v in kwargs.items())])})"
    expect.that("parameters" in summary, f"{call} is not an nn.Module")
    got = summary["parameters"]
    expect.that(got == expected, f"{call} has parameters {got}; expected {expected}. {FUSED_NAMES}")


def _check_products(products, call, d_ff):
    said = ", ".join(f"{p['name']} -> {p['shape']}" for p in products) or "none"
    expect.that(
        len(products) == 2 and products[0]["shape"][-1] == 2 * d_ff,
        f"{call}'s forward ran {len(products)} matrix products ({said}); the exercise asks for exactly two: "
        f"one for gate and up together (x times gate_up_proj's whole weight, {2 * d_ff} output features, "
        "then chunk), and down_proj"
        + (": the gate and up halves are multiplied separately" if len(products) > 2 else ""),
    )


def _check_fused_forward(impl, d_model, d_ff, shape, seed, bias=False, grads=False, default_width=False):
    """``default_width``: build ``FusedSwiGLU(d_model)``, whose width must then be ``d_ff``."""
    state, x = swiglu_state(d_model, d_ff, seed, bias), _randn(shape, seed + 5, 1.5)
    grad_output = _randn(shape, seed + 6) if grads else None
    args = [d_model] if default_width else [d_model, d_ff]
    call = f"FusedSwiGLU({', '.join(map(str, args))}{', bias=True' if bias else ''})"
    got = impl.call(fused_forward, args, {"bias": bias}, fuse_oracle(state), x, grad_output)
    expect.close(
        got["output"],
        fused_oracle(state, x),
        f"{call}(x) for x of shape {list(shape)}, loaded with the fused weights of a SwiGLU",
        **TOL,
        alternatives=_fused_mistakes(state, x),
    )
    _check_products(got["products"], call, d_ff)
    _check_uses_fused_output(impl, args, bias, state, x, call)
    if grads:
        grads_got = expect.gradients(got, call)
        params = {k: v.clone().requires_grad_() for k, v in fuse_oracle(state).items()}
        d = params["gate_up_proj.weight"].shape[0] // 2
        gate, up = F.linear(x, params["gate_up_proj.weight"], params.get("gate_up_proj.bias")).split(d, dim=-1)
        F.linear(F.silu(gate) * up, params["down_proj.weight"], params.get("down_proj.bias")).backward(grad_output)
        for name, p in params.items():
            expect.close(grads_got.get(name), p.grad, f"the gradient of {name}", **GRAD)


def _check_uses_fused_output(impl, args, bias, state, x, call):
    """The output is computed from the fused product's result: the adapter adds a known ``delta`` to the result of
    the first matrix product with 2 * d_ff output features, and the output must follow, as SwiGLU of the changed
    gate and up halves. A product whose result is thrown away (a dummy gate_up_proj(x) call, with gate and up then
    computed another way) leaves the output as it was."""
    d_ff = state["w1.weight"].shape[0]
    delta = _randn((*x.shape[:-1], 2 * d_ff), 9000 + d_ff)
    got = impl.call(fused_forward_perturbed, args, {"bias": bias}, fuse_oracle(state), x, delta)
    fused = fuse_oracle(state)
    gate, up = (F.linear(x, fused["gate_up_proj.weight"], fused.get("gate_up_proj.bias")) + delta).split(d_ff, dim=-1)
    expected = F.linear(F.silu(gate) * up, state["w2.weight"], state.get("w2.bias"))
    what = f"{call}(x) when the grader adds a known change to the result of its fused product (2 * d_ff features)"
    output = expect.tensor(got["output"], what, shape=expected.shape)
    if torch.allclose(output, fused_oracle(state, x), **TOL):
        expect.fail(
            f"{what}: the output did not change, so it is not computed from that product's result; compute "
            "gate and up by splitting gate_up_proj(x) (chunk(2, dim=-1)), not separately"
        )
    expect.close(
        got["output"],
        expected,
        what,
        **TOL,
        hint="gate and up must be the two halves of the fused product's result: gate_up_proj(x).chunk(2, dim=-1).",
    )


def _fused_keys(bias):
    return {"gate_up_proj.weight", "down_proj.weight"} | ({"gate_up_proj.bias", "down_proj.bias"} if bias else set())


def _unfused_keys(bias):
    return {f"w{i}.{kind}" for i in (1, 2, 3) for kind in (("weight", "bias") if bias else ("weight",))}


def _check_conversion(impl, name, given, expected, what):
    """``name(given)`` must equal ``expected`` exactly (concatenating and splitting copies values, it rounds nothing)."""
    got = impl.call(convert, name, given)
    value = got["value"]
    expect.that(isinstance(value, dict), f"{name}(state) returned a {got['type']}; return a dict of tensors")
    expect.that(
        set(value) == set(expected), f"{name}({what}) has keys {sorted(value)}; expected exactly {sorted(expected)}"
    )
    for key, want in expected.items():
        have = expect.tensor(value[key], f"{name}(state)[{key!r}]")
        if key.startswith("gate_up_proj") and list(have.shape) != list(want.shape):
            d_ff, rest = want.shape[0] // 2, list(want.shape[1:])
            if list(have.shape) == [2, d_ff, *rest]:
                expect.fail(
                    f"{name}(state)[{key!r}] has shape {list(have.shape)}: torch.stack adds a dimension; "
                    f"torch.cat along dim 0 gives {list(want.shape)}"
                )
            if len(rest) == 1 and list(have.shape) == [d_ff, 2 * rest[0]]:
                expect.fail(
                    f"{name}(state)[{key!r}] has shape {list(have.shape)}: w1 and w3 are concatenated along "
                    f"dim 1 (input features); nn.Linear's weight is [out_features, in_features], so gate and "
                    f"up are stacked along dim 0: shape {list(want.shape)}"
                )
        expect.that(
            list(have.shape) == list(want.shape),
            f"{name}(state)[{key!r}] has shape {list(have.shape)}, expected {list(want.shape)}",
        )
        if not torch.equal(have, want) and key.startswith("gate_up_proj"):
            half = want.shape[0] // 2
            swapped = torch.cat([want[half:], want[:half]])
            part = "bias (w3.bias) in its first half" if key.endswith("bias") else "rows (w3) first"
            expect.that(
                not torch.equal(have, swapped),
                f"{name}(state)[{key!r}] has the up {part}; the gate (w1) comes first, then up (w3), "
                "in the bias as in the weight, as in Phi-3's gate_up_proj",
            )
        other = {"w1": "w3", "w3": "w1"}.get(key[:2])
        if other and not torch.equal(have, want) and torch.equal(have, expected[other + key[2:]]):
            expect.fail(
                f"{name}(state)[{key!r}] holds the {'second' if key[:2] == 'w1' else 'first'} half of "
                f"gate_up_proj.{key[3:]}: the gate (w1) is the first half and up (w3) the second, in the bias "
                "as in the weight"
            )
        expect.that(
            torch.equal(have, want),
            f"{name}(state)[{key!r}] does not hold the values it should: "
            + (
                "rows 0..d_ff-1 are w1's, rows d_ff..2*d_ff-1 w3's"
                if key.startswith("gate_up_proj")
                else "down_proj is w2, unchanged"
                if key.startswith("down_proj")
                else "w1 is the first half of gate_up_proj (dim 0), w3 the second, w2 is down_proj"
            ),
        )
    expect.that(
        got["input_unchanged"],
        f"{name}(state) changed the dict it was given; return a new dict and leave the input as it was",
    )


@FUSED.visible
def test_fused_parameters_and_forward(impl):
    "gate_up_proj: nn.Linear(d_model, 2 * d_ff), down_proj: nn.Linear(d_ff, d_model); FusedSwiGLU(16, 40)(x) equals SwiGLU, with two matrix products"
    _check_fused_parameters(impl, [16, 40], {}, _fused_parameters(16, 40))
    _check_fused_parameters(impl, [100], {}, _fused_parameters(100, hidden_dim_oracle(100)))
    _check_fused_forward(impl, 16, 40, (2, 5, 16), 600)


@FUSED.visible
def test_fuse_and_unfuse_state(impl):
    "fuse_swiglu_state: gate rows (w1) then up rows (w3) along dim 0, w2 -> down_proj; unfuse_swiglu_state inverts it"
    state = swiglu_state(16, 40, 610)
    _check_conversion(impl, "fuse_swiglu_state", state, fuse_oracle(state), "a SwiGLU(16, 40) state dict")
    _check_conversion(impl, "unfuse_swiglu_state", fuse_oracle(state), state, "a FusedSwiGLU(16, 40) state dict")


@FUSED.hidden
def test_fused_shapes_bias_and_gradients(impl):
    "2-D and 3-D inputs, other widths, bias=True, d_ff=None; parameter gradients equal autograd's; conversions with biases"
    _check_fused_parameters(impl, [24, 64], {"bias": True}, _fused_parameters(24, 64, bias=True))
    _check_fused_parameters(impl, [40], {"multiple_of": 16}, _fused_parameters(40, hidden_dim_oracle(40, 16)))
    for seed, shape, d_ff, bias in (
        (620, (9, 12), 32, False),
        (630, (2, 3, 24), 64, True),
        (640, (1, 7, 8), 20, False),
    ):
        _check_fused_forward(impl, shape[-1], d_ff, shape, seed, bias, grads=True)
    _check_fused_forward(impl, 24, hidden_dim_oracle(24), (3, 24), 650, default_width=True)
    state = swiglu_state(12, 20, 660, bias=True)
    _check_conversion(impl, "fuse_swiglu_state", state, fuse_oracle(state), "a SwiGLU(12, 20, bias=True) state dict")
    _check_conversion(
        impl, "unfuse_swiglu_state", fuse_oracle(state), state, "a FusedSwiGLU(12, 20, bias=True) state dict"
    )


def _phi3_mlp(hidden, intermediate, seed):
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3MLP

    mlp = Phi3MLP(Phi3Config(hidden_size=hidden, intermediate_size=intermediate, hidden_act="silu"))
    g = _gen(seed)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
    return mlp.eval()


@FUSED.hidden
def test_against_phi3(impl):
    "Hugging Face's Phi3MLP: its weights load into FusedSwiGLU and give its output; fused SwiGLU weights load into it"
    for hidden, intermediate, seed in ((24, 64, 670), (16, 40, 680)):
        mlp, x = _phi3_mlp(hidden, intermediate, seed), _randn((2, 5, hidden), seed + 1)
        phi3_state = {k: v.detach().clone() for k, v in mlp.state_dict().items()}
        with torch.no_grad():
            expected = mlp(x)
        got = impl.call(fused_forward, [hidden, intermediate], {}, phi3_state, x)
        expect.close(
            got["output"],
            expected,
            f"FusedSwiGLU({hidden}, {intermediate})(x) with the weights of a Phi3MLP",
            **TOL,
            hint="Phi-3's gate_up_proj holds the gate in its first half, up in its second.",
        )
        state = swiglu_state(hidden, intermediate, seed + 2)
        fused = impl.call(convert, "fuse_swiglu_state", state)["value"]
        expect.that(
            isinstance(fused, dict) and set(fused) == _fused_keys(False),
            "fuse_swiglu_state(state) must return a dict with the keys of FusedSwiGLU's state dict",
        )
        wanted = {k: list(v.shape) for k, v in mlp.state_dict().items()}
        shapes = {k: list(getattr(v, "shape", [])) for k, v in fused.items()}
        expect.that(shapes == wanted, f"fuse_swiglu_state(state) gives shapes {shapes}; a Phi3MLP has {wanted}")
        mlp.load_state_dict(fused, strict=True)
        with torch.no_grad():
            expect.close(
                mlp(x),
                fused_oracle(state, x),
                "a Phi3MLP loaded with fuse_swiglu_state(a SwiGLU state)",
                **TOL,
                alternatives=_fused_mistakes(state, x)[:1],
            )
        unfused = impl.call(convert, "unfuse_swiglu_state", phi3_state)["value"]
        expect.that(
            isinstance(unfused, dict) and set(unfused) == _unfused_keys(False),
            "unfuse_swiglu_state(state) must return a dict with keys w1.weight, w2.weight, w3.weight",
        )
        expect.close(fused_oracle(unfused, x), expected, "SwiGLU with unfuse_swiglu_state(a Phi3MLP's weights)", **TOL)


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 06: activations, the position-wise FeedForward and SwiGLU.


@adapter
def activation_forward(ns, name: str, x, grad_output=None):
    """``name(x)``, and with ``grad_output`` the input's gradient (the exercise's rule switches the library's off)."""
    function = need(ns, name)
    x = x.clone().requires_grad_(grad_output is not None)
    output = function(x)
    result = {"output": output, "grad": None}
    if (
        grad_output is not None
        and isinstance(output, torch.Tensor)
        and output.requires_grad
        and output.shape == grad_output.shape
    ):
        output.backward(grad_output)
        result["grad"] = x.grad
    return result


# Exercise 1's functions, as PyTorch computes them: the FeedForward and SwiGLU exercises are graded with these in
# the student's namespace, so a mistake in Exercise 1 costs Exercise 1 only.
_REFERENCE_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


@adapter
def ffn_summary(ns, class_name: str, args: list, kwargs: dict):
    with given(ns, **_REFERENCE_ACTIVATIONS):
        return summary(need(ns, class_name)(*args, **kwargs))


@adapter
def ffn_forward(ns, class_name: str, args: list, kwargs: dict, state: dict, x, grad_output=None):
    """Build ``class_name(*args, **kwargs)``, load ``state`` by name, return its output (and parameter gradients)."""
    with given(ns, **_REFERENCE_ACTIVATIONS):
        module = load(need(ns, class_name)(*args, **kwargs), state)
        return forward_backward(module, grad_output, x)


@adapter
def ffn_outcome(ns, args: list, kwargs: dict, x):
    """What building ``FeedForward(*args, **kwargs)`` and calling it on ``x`` raised, if anything."""
    with given(ns, **_REFERENCE_ACTIVATIONS):
        return outcome(lambda: need(ns, "FeedForward")(*args, **kwargs)(x))


@adapter
def ffn_dropout(ns, args: list, kwargs: dict, state: dict, x):
    """Two calls in train mode (different random numbers) and two in eval mode."""
    with given(ns, **_REFERENCE_ACTIVATIONS):
        module = load(need(ns, "FeedForward")(*args, **kwargs), state)
    if not isinstance(module, nn.Module):
        return {}
    results = {}
    with torch.no_grad():
        module.train()
        torch.manual_seed(0)
        results["train_a"] = module(x)
        torch.manual_seed(1)
        results["train_b"] = module(x)
        module.eval()
        results["eval_a"] = module(x)
        results["eval_b"] = module(x)
    return results


@adapter
def function_value(ns, name: str, args: list, kwargs: dict):
    """The value a plain function returns, and the name of its type (a check may insist on int)."""
    value = need(ns, name)(*args, **kwargs)
    return {"value": value, "type": type(value).__name__}


# Exercise 6 is graded with the course's activations and width (Exercises 1 and 3), for the same reason.
_FUSED_GIVEN = {
    **_REFERENCE_ACTIVATIONS,
    "swiglu_hidden_dim": lambda d_model, multiple_of=64: -(-8 * d_model // (3 * multiple_of)) * multiple_of,
}


def _products_made(function, *args, **kwargs) -> dict:
    """``function(*args, **kwargs)`` and, for every matrix product a torch function ran, its name and output shape."""
    value, made = tensors_made(function, *args, **kwargs)
    return {
        "value": value,
        "products": [{"name": name, "shape": shape} for name, shape in made if name in MATRIX_PRODUCTS],
    }


@adapter
def fused_summary(ns, args: list, kwargs: dict):
    with given(ns, **_FUSED_GIVEN):
        return summary(need(ns, "FusedSwiGLU")(*args, **kwargs))


@adapter
def fused_forward(ns, args: list, kwargs: dict, state: dict, x, grad_output=None):
    """``FusedSwiGLU(*args, **kwargs)`` with ``state`` loaded by name: its output (and parameter gradients), and
    the matrix products one forward pass ran."""
    with given(ns, **_FUSED_GIVEN):
        module = load(need(ns, "FusedSwiGLU")(*args, **kwargs), state)
        with torch.no_grad():
            products = _products_made(module, x)["products"]
        result = forward_backward(module, grad_output, x)
    return result | {"products": products}


@adapter
def fused_forward_perturbed(ns, args: list, kwargs: dict, state: dict, x, delta):
    """``FusedSwiGLU``'s output when ``delta`` is added to the result of the first matrix product with
    ``delta.shape[-1]`` (2 * d_ff) output features, however it is computed (``gate_up_proj(x)``, ``F.linear``, ``@``;
    flattened rows too: ``delta`` is laid out row by row like them)."""
    with given(ns, **_FUSED_GIVEN):
        module = load(need(ns, "FusedSwiGLU")(*args, **kwargs), state)
        with torch.no_grad(), first_product_perturbed(delta):
            output = module(x)
    return {"output": output}


@adapter
def convert(ns, name: str, state: dict):
    """``name(state)`` for a state-dict conversion: its result, and whether the input dict came back unchanged."""
    value, caller = dict_call_observed(need(ns, name), state)
    unchanged = not (caller["removed"] or caller["added"] or caller["replaced"] or caller["edited"])
    if isinstance(value, dict):
        value = {key: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for key, v in value.items()}
    return {"value": value, "type": type(value).__name__, "input_unchanged": unchanged}
