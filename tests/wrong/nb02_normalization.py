"""Mistakes students make in notebook 02."""

from wrong import Wrong

_LAYER_NORM = """
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        {params}

    def forward(self, x):
        mean = x.mean({dim}, keepdim=True)
        var = {var}
        return {out}
"""


def layer_norm(
    params="self.weight = nn.Parameter(torch.ones(d_model)); self.bias = nn.Parameter(torch.zeros(d_model))",
    dim="-1",
    var="((x - mean) ** 2).mean(-1, keepdim=True)",
    out="(x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias",
):
    return _LAYER_NORM.format(params=params, dim=dim, var=var, out=out)


_RMS_NORM = """
class RMSNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        {params}

    def forward(self, x):
        x32 = {upcast}
        rms = {rms}
        return {out}
"""


def rms_norm(
    params="self.weight = nn.Parameter(torch.ones(d_model))",
    upcast="x.float()",
    rms="torch.sqrt((x32 ** 2).mean(-1, keepdim=True) + self.eps)",
    out="(x32 / rms * self.weight).to(x.dtype)",
):
    return _RMS_NORM.format(params=params, upcast=upcast, rms=rms, out=out)


RIGHT = {"layer_norm": layer_norm(), "rms_norm": rms_norm()}

WRONG = [
    # The exercises' rules (autograder.rules): each message quotes the rule.
    Wrong(
        "layer_norm",
        "F.instance_norm on the tokens as channels",
        layer_norm(
            out="F.instance_norm(x.reshape(1, -1, x.shape[-1]), eps=self.eps).reshape(x.shape) * self.weight "
            "+ self.bias"
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "layer_norm",
        "F.batch_norm on transposed tokens",
        layer_norm(
            out="F.batch_norm(x.reshape(-1, x.shape[-1]).T, None, None, training=True, eps=self.eps).T"
            ".reshape(x.shape) * self.weight + self.bias"
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "layer_norm",
        "F.group_norm with one group",
        layer_norm(
            out="F.group_norm(x.reshape(-1, x.shape[-1]), 1, eps=self.eps).reshape(x.shape) * self.weight + self.bias"
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "rms_norm",
        "F.normalize scaled by the square root of the width",
        rms_norm(rms="1.0", out="(F.normalize(x32, dim=-1) * x32.shape[-1] ** 0.5 * self.weight).to(x.dtype)"),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "layer_norm",
        "calls F.layer_norm",
        layer_norm(out="F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)"),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "rms_norm",
        "calls F.rms_norm through getattr",
        rms_norm().replace(
            "def forward(self, x):\n",
            "def forward(self, x):\n        return getattr(F, 'rms_' + 'norm')(x, x.shape[-1:], self.weight, self.eps)\n",
        ),
        "this exercise's rule is: do not call any of PyTorch's ready-made normalizations",
    ),
    Wrong(
        "layer_norm",
        "eps outside the square root",
        layer_norm(out="(x - mean) / (torch.sqrt(var) + self.eps) * self.weight + self.bias"),
        "eps is added outside",
    ),
    Wrong(
        "layer_norm",
        "unbiased variance (torch.var's default)",
        layer_norm(var="x.var(-1, keepdim=True)"),
        "unbiased variance",
    ),
    Wrong(
        "layer_norm",
        "normalizes over the wrong dimension",
        layer_norm(dim="-2", var="((x - mean) ** 2).mean(-2, keepdim=True)"),
        "wrong dimension",
    ),
    Wrong(
        "layer_norm",
        "forgets the gain and bias",
        layer_norm(out="(x - mean) / torch.sqrt(var + self.eps)"),
        "are not applied",
    ),
    Wrong(
        "layer_norm",
        "calls them gamma and beta",
        layer_norm(
            params="self.gamma = nn.Parameter(torch.ones(d_model)); self.beta = nn.Parameter(torch.zeros(d_model))",
            out="(x - mean) / torch.sqrt(var + self.eps) * self.gamma + self.beta",
        ),
        "not `gamma`/`beta`",
    ),
    Wrong(
        "layer_norm",
        "hard-codes eps",
        layer_norm(out="(x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias"),
        "self.eps is used",
    ),
    Wrong(
        "layer_norm",
        "input gradient cut by detaching the statistics",
        layer_norm(var="((x - mean) ** 2).mean(-1, keepdim=True).detach()"),
        "gradient of the input",
    ),
    Wrong(
        "rms_norm",
        "eps outside the square root",
        rms_norm(rms="torch.sqrt((x32 ** 2).mean(-1, keepdim=True)) + self.eps"),
        "eps is added outside",
    ),
    Wrong(
        "rms_norm",
        "mean of x instead of mean of x squared",
        rms_norm(rms="torch.sqrt(x32.mean(-1, keepdim=True).abs() + self.eps)"),
        "mean of x squared",
    ),
    Wrong("rms_norm", "forgets the gain", rms_norm(out="(x32 / rms).to(x.dtype)"), "is not applied"),
    Wrong("rms_norm", "returns float32 for a bf16 input", rms_norm(out="x32 / rms * self.weight"), "cast back"),
    Wrong(
        "rms_norm",
        "computes in the input's precision (fp16 overflows)",
        rms_norm(upcast="x", out="(x32 / rms * self.weight).to(x.dtype)"),
        "float16 input",
    ),
    Wrong(
        "rms_norm",
        "re-centres like LayerNorm",
        rms_norm(upcast="x.float() - x.float().mean(-1, keepdim=True)"),
        "does not re-centre",
    ),
    Wrong(
        "rms_norm",
        "names the gain gamma",
        rms_norm(params="self.gamma = nn.Parameter(torch.ones(d_model))", out="(x32 / rms * self.gamma).to(x.dtype)"),
        "not `gamma`/`beta`",
    ),
    Wrong(
        "rms_norm",
        "keeps a bias like LayerNorm",
        rms_norm(
            params="self.weight = nn.Parameter(torch.ones(d_model)); self.bias = nn.Parameter(torch.zeros(d_model))"
        ),
        "expected `weight` of shape [6]",
    ),
    Wrong(
        "rms_norm",
        "normalizes over the wrong dimension",
        rms_norm(rms="torch.sqrt((x32 ** 2).mean(0, keepdim=True) + self.eps)"),
        "RMSNorm(8)(x)",
    ),
]
