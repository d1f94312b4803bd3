"""Notebook 02's exercises, with their checks and adapters: LayerNorm and RMSNorm.

Oracles: ``torch.nn.functional.layer_norm`` and ``torch.nn.functional.rms_norm`` (and
autograd through them), evaluated in float32 or float64 here.

Tolerances (stated per comparison):
- float32: atol 1e-5 + rtol 1e-5 on outputs of order 1 (float32 rounding in a mean over
  <= 64 features is ~1e-6); gradients atol 1e-4 (they sum over features and tokens);
- bfloat16 outputs: atol 1e-2 + rtol 1e-2, about 2.5 bf16 ulps (2^-8 relative), since a
  right answer computed in float32 may round to the neighbouring bf16 value;
- float16 outputs: atol 2e-3 + rtol 2e-3 (fp16 has 2^-11 relative precision).
- LayerNorm on bfloat16 / float16 inputs with float32 parameters (the text asks for x's dtype back, not for a
  float32 computation, so the statistics may be computed in x's dtype): atol = rtol = 8 units of rounding of the
  dtype (bf16: 8 * 2^-8 = 3e-2; fp16: 8 * 2^-11 = 4e-3). The mean, the subtraction, the variance, sqrt and the
  division each round once in x's dtype; measured over 20 seeds on the check's inputs: <= 4.2 units (bf16 1.65e-2,
  fp16 1.43e-3) for a computation done wholly in x's dtype, <= 0.8 units for one done in float32.
- RMSNorm rounds once: for bfloat16 and float16 inputs with float32 weights (not 1), the result must equal the
  float64 formula rounded to x's dtype except for at most 1% of the entries, each off by one step of the dtype.
  Any float32 order of the text's formula (division or rsqrt, the weight multiplied first or last, sum / d or
  mean, torch.linalg.vector_norm) moves the value before the final rounding by a few float32 ulps, 2^-16 of a bf16
  step (2^-13 of an fp16 step), so it rarely changes the rounded result: measured <= 3 of 81,920 entries (20 seeds
  of [16, 256]), never more than 1 in 4,096. Rounding twice (the normalized x cast to x's dtype, then multiplied
  by the weight, Hugging Face Llama's order; or the weight rounded to x's dtype) changes 26-35% of them.

- LayerNorm of float32 tokens with a large common offset (near 1000, spread 1): atol 32 * 2^-14 = 2e-3, 32
  float32 steps at 1000. The float32 mean of such values is off by a few of those steps, and so is every centred
  value, whatever the formula: F.layer_norm itself is off by up to 1.7e-4 (40 seeds, widths 16 to 256), the
  two-pass variance, torch.var(unbiased=False) and sum / d by 1.5e-4, torch.var_mean by 4.7e-5, a mean by matmul
  2.4e-4 (the float32 bound above, 1e-5, is missed by all of them). The one-pass variance E[x²] - E[x]², whose
  terms near 1e6 are 0.06 apart in float32, is off by at least 0.089.

Sizes: the hidden checks include a width of 1024, beyond the notebook's widest (512); float32 means over 1024
features round at ~1e-6 relative, inside the float32 bound.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autograder import expect
from autograder.adapters import adapter, forward_backward_inputs, load, need, summary
from autograder.exercises import Exercise
from autograder.notebooks._seeds import seeded
from autograder.rules import NORMS, Rule

# Every route to a normalization that torch offers (``rules.NORMS``): LayerNorm is also instance_norm or batch_norm on
# the tokens as channels, group_norm with one group, normalize of the centred x.
_READY_MADE = (
    "do not call any of PyTorch's ready-made normalizations: F.layer_norm, F.rms_norm, F.group_norm, "
    "F.instance_norm, F.batch_norm, F.local_response_norm, F.normalize or their nn modules"
)
LAYER_NORM = Exercise("layer_norm", "LayerNorm from scratch", points=3, rules=(Rule(_READY_MADE, NORMS),))
RMS_NORM = Exercise("rms_norm", "RMSNorm", points=3, rules=(Rule(_READY_MADE, NORMS),))
EXERCISES = [LAYER_NORM, RMS_NORM]

F32 = {"atol": 1e-5, "rtol": 1e-5}
GRAD = {"atol": 1e-4, "rtol": 1e-4}
BF16 = {"atol": 1e-2, "rtol": 1e-2}
F16 = {"atol": 2e-3, "rtol": 2e-3}


_gen, _ = seeded(2000)


def _x(shape, seed, *, scale=1.0, shift=0.0, dtype=torch.float32):
    """Activations with a per-token offset, as real ones have; LayerNorm must remove it."""
    g = _gen(seed)
    x = torch.randn(*shape, generator=g) * scale + shift * torch.randn(*shape[:-1], 1, generator=g)
    return x.to(dtype)


def _params(d, seed, *names):
    g = _gen(100 + seed)
    return {name: torch.randn(d, generator=g) * 0.5 + (1.0 if name == "weight" else 0.0) for name in names}


def _check_params(impl, class_name, expected_names):
    info = impl.call(norm_init, class_name, 6)
    summary = info["summary"]
    expect.that("parameters" in summary, f"{class_name}(6) is not an nn.Module")
    expect.that(
        summary["parameters"] == {name: [6] for name in expected_names},
        f"{class_name}(6) has parameters {summary['parameters']}; expected "
        + " and ".join(f"`{n}` of shape [6]" for n in expected_names)
        + " (the names torch uses, so checkpoints load; not `gamma`/`beta`)",
    )
    state = info["state"]
    expect.that(
        bool((state["weight"] == 1).all()),
        "weight (the gain) must start at ones: the layer starts as a pure normalization",
    )
    if "bias" in expected_names:
        expect.that(bool((state["bias"] == 0).all()), "bias must start at zeros")


# --- LayerNorm ---------------------------------------------------------------------------


def _layer_norm_mistakes(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    centred = x - mean
    var = centred.pow(2).mean(-1, keepdim=True)
    mistakes = [
        (
            centred / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight + bias,
            "it uses the unbiased variance (divide by d - 1, torch.var's default); LayerNorm divides by d "
            "(use unbiased=False / correction=0)",
        ),
        (
            centred / (torch.sqrt(var) + eps) * weight + bias,
            "eps is added outside the square root; it belongs inside: sqrt(var + eps)",
        ),
        (centred / torch.sqrt(var + eps), "the learnable gain `weight` and `bias` are not applied"),
        (centred / torch.sqrt(var + eps) * weight, "the `bias` is not added"),
    ]
    if x.dim() >= 2 and x.shape[-2] > 1:
        m2 = x.mean(-2, keepdim=True)
        v2 = (x - m2).pow(2).mean(-2, keepdim=True)
        mistakes.append(
            (
                (x - m2) / torch.sqrt(v2 + eps) * weight + bias,
                "it normalizes over the wrong dimension; statistics are taken over the last "
                "dimension (the features of each token)",
            )
        )
    return mistakes


def _layer_norm_case(impl, shape, seed, *, eps=1e-5, scale=2.0, shift=3.0, dtype=torch.float32, grads=False):
    d = shape[-1]
    x = _x(shape, seed, scale=scale, shift=shift, dtype=dtype)
    state = _params(d, seed, "weight", "bias")
    grad_output = _x(shape, seed + 50, dtype=dtype) if grads else None
    got = impl.call(norm_forward, "LayerNorm", {k: v.to(dtype) for k, v in state.items()}, x, eps, grad_output)
    return got, x, state, grad_output


@LAYER_NORM.visible
def test_layer_norm_parameters(impl):
    "parameters `weight` (ones) and `bias` (zeros), each of shape [d_model]"
    _check_params(impl, "LayerNorm", ["weight", "bias"])


@LAYER_NORM.visible
def test_layer_norm_forward(impl):
    "output equals F.layer_norm over the last dimension, with gain and bias"
    got, x, state, _ = _layer_norm_case(impl, (2, 5, 8), 0)
    w, b = state["weight"], state["bias"]
    expect.close(
        got["output"],
        F.layer_norm(x, (8,), w, b, 1e-5),
        "LayerNorm(8)(x) for x of shape [2, 5, 8]",
        **F32,
        alternatives=_layer_norm_mistakes(x, w, b, 1e-5),
    )


@LAYER_NORM.hidden
def test_layer_norm_eps_inside_sqrt(impl):
    "eps sits inside the square root and the constructor's eps is used"
    for seed, eps in zip((1, 2), (1e-3, 0.1), strict=True):
        got, x, state, _ = _layer_norm_case(impl, (4, 16), seed, eps=eps, scale=0.01, shift=0.0)
        w, b = state["weight"], state["bias"]
        expect.close(
            got["output"],
            F.layer_norm(x, (16,), w, b, eps),
            f"LayerNorm(16, eps={eps}) on small activations",
            **F32,
            alternatives=_layer_norm_mistakes(x, w, b, eps),
            hint="With activations this small, eps matters: check where it goes and that self.eps is used.",
        )


@LAYER_NORM.hidden
def test_layer_norm_shapes_and_dtypes(impl):
    "any number of leading dimensions; float64 stays float64; a width of 1024, beyond the notebook's 512"
    for seed, shape, dtype in [
        (3, (7,), torch.float32),
        (4, (3, 2, 4, 5), torch.float32),
        (5, (6, 33), torch.float64),
        (8, (3, 1024), torch.float32),
    ]:
        got, x, state, _ = _layer_norm_case(impl, shape, seed, dtype=dtype)
        expected = F.layer_norm(x, shape[-1:], state["weight"].to(dtype), state["bias"].to(dtype), 1e-5)
        out = expect.tensor(got["output"], f"the output for x of shape {list(shape)}", dtype=dtype)
        expect.close(
            out,
            expected,
            f"the output for x of shape {list(shape)} ({dtype})",
            **F32,
            alternatives=_layer_norm_mistakes(x, state["weight"].to(dtype), state["bias"].to(dtype), 1e-5),
        )


_OFFSET = 1000.0  # a common offset of every feature of a token, where float32 numbers are 2**-14 = 6.1e-5 apart
# Tokens near _OFFSET with spread 1 (module docstring): 32 float32 steps there, what a float32 mean may be off by.
OFFSET_TOL = 32 * 2**-14


@LAYER_NORM.hidden
def test_layer_norm_large_offset(impl):
    "tokens with a large common offset (near 1000, spread 1) in float32: the variance of the centred x keeps its digits"
    d = 64
    x = _x((8, d), 11, scale=1.0) + _OFFSET
    centred = x - _OFFSET  # exact in float32 (Sterbenz): the same spreads near the origin
    state = {"weight": torch.ones(d), "bias": torch.zeros(d)}
    what = f"LayerNorm({d}) for float32 tokens near {_OFFSET:g} with spread 1"
    out = expect.tensor(impl.call(norm_forward, "LayerNorm", state, x, 1e-5)["output"], what, shape=x.shape)
    expected = F.layer_norm(x.double(), (d,), eps=1e-5)
    error = float((out.detach().double() - expected).abs().max())
    if not error <= OFFSET_TOL:  # also NaN
        near = impl.call(norm_forward, "LayerNorm", state, centred, 1e-5)["output"]
        right_near = isinstance(near, torch.Tensor) and near.shape == x.shape
        if right_near:
            expected_near = F.layer_norm(centred.double(), (d,), eps=1e-5)
            error_near = (near.detach().double() - expected_near).abs()
            right_near = bool((error_near <= F32["atol"] + F32["rtol"] * expected_near.abs()).all())
        expect.that(
            not right_near,
            f"{what} is off by up to {error:.3g} (tolerance {OFFSET_TOL:.3g}), though the same tokens moved to the "
            "origin give the right result: digits were lost to cancellation, as in the one-pass variance "
            "E[x²] - E[x]² (in float32 both terms are near 1e6, where numbers are 0.06 apart, and the variance is 1); "
            "compute the variance of the centred values, ((x - mean) ** 2).mean(-1)",
        )
    expect.close(out, expected, what, atol=OFFSET_TOL)


# Low-precision inputs with float32 parameters: 8 units of rounding of the dtype (module docstring).
LOW_PRECISION_LAYER_NORM = {
    torch.bfloat16: {"atol": 8 * 2**-8, "rtol": 8 * 2**-8},
    torch.float16: {"atol": 8 * 2**-11, "rtol": 8 * 2**-11},
}


@LAYER_NORM.hidden
def test_layer_norm_low_precision_input(impl):
    "a bfloat16 or float16 x with float32 parameters gives a result of x's dtype"
    for seed, dtype in ((9, torch.bfloat16), (10, torch.float16)):
        x = _x((4, 3, 64), seed, scale=2.0, dtype=dtype)
        state = _params(64, seed, "weight", "bias")  # float32, as the module's own parameters are
        got = impl.call(norm_forward, "LayerNorm", state, x, 1e-5)
        what = f"LayerNorm(64) with float32 parameters, for a {dtype} x"
        out = expect.tensor(got["output"], what, shape=x.shape)
        expect.that(
            out.dtype == dtype,
            f"{what} returns {out.dtype}; the result has x's dtype: the float32 parameters promote it to float32, "
            "so cast it back with .to(x.dtype)",
        )
        expected = F.layer_norm(x.double(), (64,), state["weight"].double(), state["bias"].double(), 1e-5)
        expect.close(out, expected, what, **LOW_PRECISION_LAYER_NORM[dtype])


@LAYER_NORM.hidden
def test_layer_norm_gradients(impl):
    "gradients for the input, weight and bias match autograd through F.layer_norm"
    for seed in (6, 7):
        got, x, state, grad_output = _layer_norm_case(impl, (3, 4, 12), seed, grads=True)
        xr = x.clone().requires_grad_()
        w, b = (state[n].clone().requires_grad_() for n in ("weight", "bias"))
        F.layer_norm(xr, (12,), w, b, 1e-5).backward(grad_output)
        grads = expect.gradients(got, "LayerNorm")
        for name, expected in (("input", xr.grad), ("weight", w.grad), ("bias", b.grad)):
            expect.close(grads.get(name), expected, f"the gradient of the {name}", **GRAD)


# --- RMSNorm -----------------------------------------------------------------------------


def _rms_oracle(x, weight, eps):
    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)


def _rms_mistakes(x, weight, eps):
    x = x.float()
    ms = x.pow(2).mean(-1, keepdim=True)
    centred = x - x.mean(-1, keepdim=True)
    return [
        (
            x / (torch.sqrt(ms) + eps) * weight,
            "eps is added outside the square root; it belongs inside: sqrt(mean(x²) + eps)",
        ),
        (x / torch.sqrt(ms + eps), "the learnable gain `weight` is not applied"),
        (
            centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight,
            "it subtracts the mean; RMSNorm does not re-centre, it only divides by the root mean square",
        ),
        (
            x / torch.sqrt(x.mean(-1, keepdim=True).abs() + eps) * weight,
            "it uses the mean of x; RMS is the square root of the mean of x squared",
        ),
    ]


def _rms_case(impl, shape, seed, *, eps=1e-5, scale=1.5, dtype=torch.float32, grads=False):
    x = _x(shape, seed, scale=scale, shift=0.5, dtype=dtype)
    state = _params(shape[-1], seed, "weight")
    grad_output = _x(shape, seed + 50) if grads else None
    return impl.call(norm_forward, "RMSNorm", state, x, eps, grad_output), x, state["weight"], grad_output


@RMS_NORM.visible
def test_rms_norm_parameters(impl):
    "one parameter `weight` (ones) of shape [d_model], no bias"
    _check_params(impl, "RMSNorm", ["weight"])


@RMS_NORM.visible
def test_rms_norm_forward(impl):
    "output equals F.rms_norm over the last dimension, times weight"
    got, x, weight, _ = _rms_case(impl, (2, 5, 8), 0)
    expect.close(
        got["output"],
        _rms_oracle(x, weight, 1e-5),
        "RMSNorm(8)(x) for x of shape [2, 5, 8]",
        **F32,
        alternatives=_rms_mistakes(x, weight, 1e-5),
        hint="RMS is sqrt(mean(x**2 over the last dimension) + eps).",
    )


@RMS_NORM.hidden
def test_rms_norm_low_precision_inputs(impl):
    "bfloat16 and float16 inputs come back in their own dtype, computed in float32"
    for seed, dtype, tol, scale in [(1, torch.bfloat16, BF16, 1.5), (2, torch.float16, F16, 300.0)]:
        got, x, weight, _ = _rms_case(impl, (4, 3, 64), seed, dtype=dtype, scale=scale)
        out = got["output"]
        expect.tensor(out, "the output", shape=x.shape)
        expect.that(
            out.dtype == dtype,
            f"RMSNorm returns {out.dtype} for a {dtype} input; compute in float32, then cast back with .to(x.dtype)",
        )
        expect.close(
            out,
            _rms_oracle(x, weight, 1e-5),
            f"the output for a {dtype} input (values up to ±{scale * 4:g})",
            **tol,
            hint="Square in float32: in float16, 300² is already beyond the largest number (65504).",
        )


# RMSNorm rounds once, at the end: at most this fraction of the entries may differ from the float64 formula rounded to
# x's dtype (module docstring: a float32 reordering changes <= 3e-5 of them, rounding twice 26-35%).
ROUNDED_ONCE_FLIPS = 0.01


def _rounding_steps_apart(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many representable values of their (16-bit) dtype lie between a and b, entry by entry."""

    def ordered(t):  # the bit patterns of a float16 / bfloat16 as integers that sort like the values
        bits = t.view(torch.int16).int()
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (ordered(a) - ordered(b)).abs()


@RMS_NORM.hidden
def test_rms_norm_rounds_once(impl):
    "bfloat16 and float16 inputs: out = x32 / rms * weight in float32, then out.to(x.dtype), rounding only once"
    for seed, dtype, scale in ((11, torch.bfloat16, 1.5), (12, torch.float16, 300.0)):
        x = _x((16, 256), seed, scale=scale, dtype=dtype)
        weight = _params(256, seed, "weight")["weight"]  # float32, not 1, not representable in x's dtype
        got = impl.call(norm_forward, "RMSNorm", {"weight": weight}, x, 1e-5)
        what = f"RMSNorm(256) with float32 weights, for a {dtype} x"
        out = expect.tensor(got["output"], what, shape=x.shape, dtype=dtype)
        x64 = x.double()
        once = (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * weight.double()).to(dtype)
        steps = _rounding_steps_apart(out, once)
        changed = int((steps != 0).sum())
        expect.that(
            int(steps.max()) <= 1 and changed <= ROUNDED_ONCE_FLIPS * x.numel(),
            f"{what}: {changed} of its {x.numel():,} entries ({changed / x.numel():.0%}) differ from x32 / rms * weight "
            f"computed in float32 and rounded to {dtype} once (by up to {int(steps.max())} steps of {dtype}): it "
            "rounds twice, e.g. casting x32 / rms to x.dtype before multiplying by the weight (Hugging Face Llama's "
            "order), or the weight to x.dtype. Multiply by the weight in float32, then return out.to(x.dtype)",
        )


@RMS_NORM.hidden
def test_rms_norm_eps_and_shapes(impl):
    "eps inside the square root, the constructor's eps used, any leading dimensions, a width of 1024"
    for seed, shape, eps, scale in [
        (3, (9,), 1e-3, 0.01),
        (4, (2, 2, 3, 16), 0.1, 0.05),
        (5, (5, 7), 1e-5, 1.0),
        (7, (3, 1024), 1e-5, 1.0),  # wider than the notebook's 512
    ]:
        got, x, weight, _ = _rms_case(impl, shape, seed, eps=eps, scale=scale)
        expect.close(
            got["output"],
            _rms_oracle(x, weight, eps),
            f"RMSNorm(eps={eps}) for x of shape {list(shape)}",
            **F32,
            alternatives=_rms_mistakes(x, weight, eps),
        )


@RMS_NORM.hidden
def test_rms_norm_gradients(impl):
    "gradients for the input and weight match autograd through F.rms_norm"
    got, x, weight, grad_output = _rms_case(impl, (3, 4, 12), 6, grads=True)
    xr, w = x.clone().requires_grad_(), weight.clone().requires_grad_()
    F.rms_norm(xr, (12,), w, 1e-5).backward(grad_output)
    grads = expect.gradients(got, "RMSNorm")
    expect.close(grads.get("input"), xr.grad, "the gradient of the input", **GRAD)
    expect.close(grads.get("weight"), w.grad, "the gradient of weight", **GRAD)


# ---------------------------------------------------------------------------------------------------------------
# Adapters: the only code in this module that touches the student's objects. They run beside the student's code
# (in the sandboxed worker while grading, in the kernel for the notebook's own test cells), build and call the
# student's classes and functions on the inputs a check gives, and return plain results; they compute and report,
# never judge. A check calls one by reference, ``impl.call(name, ...)``; only functions marked ``@adapter`` can be.
#
# Adapters for notebook 02: LayerNorm and RMSNorm.


@adapter
def norm_init(ns, class_name: str, d_model: int):
    module = need(ns, class_name)(d_model)
    return {"summary": summary(module), "state": dict(module.state_dict())}


@adapter
def norm_forward(ns, class_name: str, state: dict, x, eps: float, grad_output=None):
    """Output, and with ``grad_output`` the gradients of the input and of every parameter."""
    module = load(need(ns, class_name)(x.shape[-1], eps=eps), state)
    return forward_backward_inputs(module, grad_output, {"input": x})
