"""Mistakes students make in notebook 02.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "02_normalization"
RIGHT, variant = catalogue(NOTEBOOK)

_LN_OUT = "out = centred / torch.sqrt(var + self.eps) * self.weight + self.bias"
_LN_VAR = "var = (centred * centred).mean(dim=-1, keepdim=True)"
_PARAMS = "self.weight = nn.Parameter(torch.ones(d_model))\n        self.bias = nn.Parameter(torch.zeros(d_model))"
_GAIN = "self.weight = nn.Parameter(torch.ones(d_model))"
_MEAN_SQUARE = "(x32 * x32).mean(dim=-1, keepdim=True)"
_INV_RMS = "torch.rsqrt((x32 * x32).mean(dim=-1, keepdim=True) + self.eps)"

WRONG = [
    # The exercises' rules (autograder.rules): each message quotes the rule.
    Wrong(
        "layer_norm",
        "F.instance_norm on the tokens as channels",
        variant(
            "layer_norm",
            (
                _LN_OUT,
                "out = F.instance_norm(x.reshape(1, -1, x.shape[-1]), eps=self.eps).reshape(x.shape) * self.weight "
                "+ self.bias",
            ),
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "layer_norm",
        "F.batch_norm on transposed tokens",
        variant(
            "layer_norm",
            (
                _LN_OUT,
                "out = F.batch_norm(x.reshape(-1, x.shape[-1]).T, None, None, training=True, eps=self.eps).T"
                ".reshape(x.shape) * self.weight + self.bias",
            ),
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "layer_norm",
        "F.group_norm with one group",
        variant(
            "layer_norm",
            (
                _LN_OUT,
                "out = F.group_norm(x.reshape(-1, x.shape[-1]), 1, eps=self.eps).reshape(x.shape) * self.weight "
                "+ self.bias",
            ),
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "rms_norm",
        "F.normalize scaled by the square root of the width",
        variant(
            "rms_norm",
            (
                "out = x32 * inv_rms * self.weight",
                "out = F.normalize(x32, dim=-1) * x32.shape[-1] ** 0.5 * self.weight",
            ),
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "layer_norm",
        "calls F.layer_norm",
        variant("layer_norm", (_LN_OUT, "out = F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)")),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "rms_norm",
        "calls F.rms_norm through getattr",
        variant(
            "rms_norm",
            (
                "        x32 = x.float()\n",
                "        return getattr(F, 'rms_' + 'norm')(x, x.shape[-1:], self.weight, self.eps)\n"
                "        x32 = x.float()\n",
            ),
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "layer_norm",
        "eps outside the square root",
        variant("layer_norm", ("torch.sqrt(var + self.eps)", "(torch.sqrt(var) + self.eps)")),
        "eps is added outside",
    ),
    Wrong(
        "layer_norm",
        "unbiased variance (torch.var's default)",
        variant("layer_norm", (_LN_VAR + "  # biased: divide by d", "var = x.var(-1, keepdim=True)")),
        "unbiased variance",
    ),
    Wrong(
        "layer_norm",
        "normalizes over the wrong dimension",
        variant(
            "layer_norm",
            ("mean = x.mean(dim=-1,", "mean = x.mean(dim=-2,"),
            ("(centred * centred).mean(dim=-1,", "(centred * centred).mean(dim=-2,"),
        ),
        "wrong dimension",
    ),
    Wrong(
        "layer_norm",
        "forgets the gain and bias",
        variant("layer_norm", (" * self.weight + self.bias", "")),
        "are not applied",
    ),
    Wrong(
        "layer_norm",
        "calls them gamma and beta",
        variant(
            "layer_norm",
            (
                _PARAMS,
                "self.gamma = nn.Parameter(torch.ones(d_model))\n        self.beta = nn.Parameter(torch.zeros(d_model))",
            ),
            ("* self.weight + self.bias", "* self.gamma + self.beta"),
        ),
        "not `gamma`/`beta`",
    ),
    Wrong(
        "layer_norm",
        "hard-codes eps",
        variant("layer_norm", ("torch.sqrt(var + self.eps)", "torch.sqrt(var + 1e-5)")),
        "self.eps is used",
    ),
    Wrong(
        "layer_norm",
        "input gradient cut by detaching the statistics",
        variant("layer_norm", (_LN_VAR, _LN_VAR + ".detach()")),
        "gradient of the input",
    ),
    Wrong(
        "rms_norm",
        "eps outside the square root",
        variant("rms_norm", (_INV_RMS, "1 / (torch.sqrt(" + _MEAN_SQUARE + ") + self.eps)")),
        "eps is added outside",
    ),
    Wrong(
        "rms_norm",
        "mean of x instead of mean of x squared",
        variant("rms_norm", (_MEAN_SQUARE, "x32.mean(dim=-1, keepdim=True).abs()")),
        "mean of x squared",
    ),
    Wrong(
        "rms_norm",
        "forgets the gain",
        variant("rms_norm", ("out = x32 * inv_rms * self.weight", "out = x32 * inv_rms")),
        "is not applied",
    ),
    Wrong(
        "rms_norm",
        "returns float32 for a bf16 input",
        variant("rms_norm", ("return out.to(x.dtype)", "return out")),
        "cast back",
    ),
    Wrong(
        "rms_norm",
        "computes in the input's precision (fp16 overflows)",
        variant("rms_norm", ("x32 = x.float()", "x32 = x")),
        "float16 input",
    ),
    Wrong(
        "rms_norm",
        "re-centres like LayerNorm",
        variant("rms_norm", ("x32 = x.float()", "x32 = x.float() - x.float().mean(-1, keepdim=True)")),
        "does not re-centre",
    ),
    Wrong(
        "rms_norm",
        "names the gain gamma",
        variant(
            "rms_norm",
            (_GAIN, "self.gamma = nn.Parameter(torch.ones(d_model))"),
            ("inv_rms * self.weight", "inv_rms * self.gamma"),
        ),
        "not `gamma`/`beta`",
    ),
    Wrong(
        "rms_norm",
        "keeps a bias like LayerNorm",
        variant("rms_norm", (_GAIN, _PARAMS)),
        "expected `weight` of shape [6]",
    ),
    Wrong(
        "rms_norm",
        "normalizes over the wrong dimension",
        variant("rms_norm", (_MEAN_SQUARE, "(x32 * x32).mean(dim=0, keepdim=True)")),
        "RMSNorm(8)(x)",
    ),
]
