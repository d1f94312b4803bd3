"""Wrong versions of notebook 02's answers (02_normalization): see ``wrong/__init__.py``."""

from autograder.notebooks.nb02_normalization import LAYER_NORM, RMS_NORM
from wrong import WrongVersion, edit

_RULE = "this exercise's rule is: do not call any of PyTorch's ready-made normalizations"

# layer_norm ----------------------------------------------------------------------------------------------------
_OUT = "out = centred / torch.sqrt(var + self.eps) * self.weight + self.bias"
_VAR = "var = (centred * centred).mean(dim=-1, keepdim=True)  # biased: divide by d"

# rms_norm ------------------------------------------------------------------------------------------------------
_RMS_NORM_OUT = (
    "out = x32 * inv_rms * self.weight  # a product, not a division of every element: cheaper, forward and backward"
)
_INV_RMS = "inv_rms = torch.rsqrt((x32 * x32).mean(dim=-1, keepdim=True) + self.eps)  # 1 / rms, one per row"
_X32 = "x32 = x.float()"

WRONG_VERSIONS = (
    # layer_norm
    WrongVersion(
        LAYER_NORM,
        "F.instance_norm on the tokens as channels",
        _RULE,
        edit(
            _OUT,
            "out = F.instance_norm(x.reshape(1, -1, x.shape[-1]), eps=self.eps).reshape(x.shape) * self.weight + self.bias",
        ),
    ),
    WrongVersion(
        LAYER_NORM,
        "F.batch_norm on transposed tokens",
        _RULE,
        edit(
            _OUT,
            "out = F.batch_norm(x.reshape(-1, x.shape[-1]).T, None, None, training=True, eps=self.eps).T.reshape(x.shape) * self.weight + self.bias",
        ),
    ),
    WrongVersion(
        LAYER_NORM,
        "F.group_norm with one group",
        _RULE,
        edit(
            _OUT,
            "out = F.group_norm(x.reshape(-1, x.shape[-1]), 1, eps=self.eps).reshape(x.shape) * self.weight + self.bias",
        ),
    ),
    WrongVersion(
        LAYER_NORM,
        "calls F.layer_norm",
        _RULE,
        edit(_OUT, "out = F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)"),
    ),
    WrongVersion(
        LAYER_NORM,
        "eps outside the square root",
        "eps is added outside",
        edit(_OUT, "out = centred / (torch.sqrt(var) + self.eps) * self.weight + self.bias"),
    ),
    WrongVersion(
        LAYER_NORM,
        "unbiased variance (torch.var's default)",
        "unbiased variance",
        edit(_VAR, "var = x.var(-1, keepdim=True)"),
    ),
    WrongVersion(
        LAYER_NORM,
        "normalizes over the wrong dimension",
        "wrong dimension",
        edit("mean = x.mean(dim=-1, keepdim=True)", "mean = x.mean(dim=-2, keepdim=True)"),
        edit(_VAR, "var = (centred * centred).mean(dim=-2, keepdim=True)  # biased: divide by d"),
    ),
    WrongVersion(
        LAYER_NORM,
        "forgets the gain and bias",
        "are not applied",
        edit(_OUT, "out = centred / torch.sqrt(var + self.eps)"),
    ),
    WrongVersion(
        LAYER_NORM,
        "calls them gamma and beta",
        "not `gamma`/`beta`",
        edit(
            """\
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
""",
            """\
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
""",
        ),
        edit(_OUT, "out = centred / torch.sqrt(var + self.eps) * self.gamma + self.beta"),
    ),
    WrongVersion(
        LAYER_NORM,
        "hard-codes eps",
        "self.eps is used",
        edit(_OUT, "out = centred / torch.sqrt(var + 1e-5) * self.weight + self.bias"),
    ),
    WrongVersion(
        LAYER_NORM,
        "input gradient cut by detaching the statistics",
        "gradient of the input",
        edit(_VAR, "var = (centred * centred).mean(dim=-1, keepdim=True).detach()  # biased: divide by d"),
    ),
    WrongVersion(
        LAYER_NORM,
        "result not cast back: a bf16 x with float32 parameters gives float32",
        "so cast it back with .to(x.dtype)",
        edit("return out.to(x.dtype)", "return out"),
    ),
    WrongVersion(
        LAYER_NORM,
        "one-pass variance E[x^2] - E[x]^2 (cancels digits for tokens with a large common offset)",
        "as in the one-pass variance",
        edit(_VAR, "var = (x * x).mean(dim=-1, keepdim=True) - mean * mean"),
    ),
    WrongVersion(
        LAYER_NORM,
        "bias created but never added",
        "the `bias` is not added",
        edit(_OUT, "out = centred / torch.sqrt(var + self.eps) * self.weight"),
    ),
    # rms_norm
    WrongVersion(
        RMS_NORM,
        "F.normalize scaled by the square root of the width",
        _RULE,
        edit(
            _RMS_NORM_OUT,
            "out = F.normalize(x32, dim=-1) * x32.shape[-1] ** 0.5 * self.weight  # a product, not a division of every element: cheaper, forward and backward",
        ),
    ),
    WrongVersion(
        RMS_NORM,
        "calls F.rms_norm through getattr",
        _RULE,
        edit(
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n",
            """\
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(F, 'rms_' + 'norm')(x, x.shape[-1:], self.weight, self.eps)
""",
        ),
    ),
    WrongVersion(
        RMS_NORM,
        "eps outside the square root",
        "eps is added outside",
        edit(
            _INV_RMS,
            "inv_rms = 1 / (torch.sqrt((x32 * x32).mean(dim=-1, keepdim=True)) + self.eps)  # 1 / rms, one per row",
        ),
    ),
    WrongVersion(
        RMS_NORM,
        "mean of x instead of mean of x squared",
        "mean of x squared",
        edit(
            _INV_RMS, "inv_rms = torch.rsqrt(x32.mean(dim=-1, keepdim=True).abs() + self.eps)  # 1 / rms, one per row"
        ),
    ),
    WrongVersion(
        RMS_NORM,
        "forgets the gain",
        "is not applied",
        edit(
            _RMS_NORM_OUT,
            "out = x32 * inv_rms  # a product, not a division of every element: cheaper, forward and backward",
        ),
    ),
    WrongVersion(
        RMS_NORM, "returns float32 for a bf16 input", "cast back", edit("return out.to(x.dtype)", "return out")
    ),
    WrongVersion(
        RMS_NORM, "computes in the input's precision (fp16 overflows)", "float16 input", edit(_X32, "x32 = x")
    ),
    WrongVersion(
        RMS_NORM,
        "re-centres like LayerNorm",
        "does not re-centre",
        edit(_X32, "x32 = x.float() - x.float().mean(-1, keepdim=True)"),
    ),
    WrongVersion(
        RMS_NORM,
        "names the gain gamma",
        "not `gamma`/`beta`",
        edit("self.weight = nn.Parameter(torch.ones(d_model))", "self.gamma = nn.Parameter(torch.ones(d_model))"),
        edit(
            _RMS_NORM_OUT,
            "out = x32 * inv_rms * self.gamma  # a product, not a division of every element: cheaper, forward and backward",
        ),
    ),
    WrongVersion(
        RMS_NORM,
        "keeps a bias like LayerNorm",
        "expected `weight` of shape [6]",
        edit(
            "        self.weight = nn.Parameter(torch.ones(d_model))\n",
            """\
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
""",
        ),
    ),
    WrongVersion(
        RMS_NORM,
        "normalizes over the wrong dimension",
        "RMSNorm(8)(x)",
        edit(
            _INV_RMS, "inv_rms = torch.rsqrt((x32 * x32).mean(dim=0, keepdim=True) + self.eps)  # 1 / rms, one per row"
        ),
    ),
    WrongVersion(
        RMS_NORM,
        "Hugging Face Llama's order: normalized x cast to x.dtype, then multiplied by the weight (rounds twice)",
        "Hugging Face Llama's order",
        edit(
            """\
        out = x32 * inv_rms * self.weight  # a product, not a division of every element: cheaper, forward and backward
        return out.to(x.dtype)
""",
            "        return self.weight.to(x.dtype) * (x32 * inv_rms).to(x.dtype)\n",
        ),
    ),
    WrongVersion(
        RMS_NORM,
        "weight rounded to x.dtype before the float32 product",
        "rounds twice",
        edit(
            _RMS_NORM_OUT,
            "out = x32 * inv_rms * self.weight.to(x.dtype)  # a product, not a division of every element: cheaper, forward and backward",
        ),
    ),
)
