"""Mistakes students make in notebook 09."""

from wrong import Wrong

_EMBEDDINGS = """
class BertEmbeddings(nn.Module):
    def __init__(self, config, *, norm=LayerNorm):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_positions, config.d_model)
        self.token_type = nn.Embedding(config.type_vocab_size, config.d_model)
        self.norm = {norm}

    def forward(self, tokens, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(tokens)
        word = self.word(tokens)
        position = self.position(torch.arange(tokens.shape[1]))
        token_type = self.token_type(token_type_ids)
        return {body}
"""


def embeddings(norm="norm(config.d_model, eps=config.norm_eps)", body="self.norm(word + position + token_type)"):
    return _EMBEDDINGS.format(norm=norm, body=body)


_HEAD = """
class MLMHead(nn.Module):
    def __init__(self, config, word_embeddings, *, norm=LayerNorm):
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.norm = norm(config.d_model, eps=config.norm_eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size{bias})
        {tie}

    def forward(self, hidden):
        return {body}
"""


def head(
    tie="self.decoder.weight = word_embeddings.weight",
    body="self.decoder(self.norm(F.gelu(self.dense(hidden))))",
    bias="",
):
    return _HEAD.format(tie=tie, body=body, bias=bias)


_BERT = """
class BertForMaskedLM(nn.Module):
    def __init__(self, config, *, embeddings=BertEmbeddings, block=EncoderBlock, head=MLMHead, norm=LayerNorm):
        super().__init__()
        self.embeddings = embeddings(config, norm=norm)
        self.blocks = nn.ModuleList(
            block(config.d_model, config.n_heads, config.d_ff, "gelu", norm_first={norm_first}, norm={block_norm})
            for _ in range(config.n_layers))
        self.head = head(config, {table}, norm=norm)

    def forward(self, tokens, token_type_ids=None, padding_mask=None):
        x = self.embeddings(tokens, token_type_ids)
        for block in self.blocks:
            x = block(x, {mask})
        return self.head(x)
"""


def bert(
    norm_first="False",
    block_norm="partial(norm, eps=config.norm_eps)",
    table="self.embeddings.word",
    mask="padding_mask",
):
    return _BERT.format(norm_first=norm_first, block_norm=block_norm, table=table, mask=mask)


_MASK = """
def mask_tokens(tokens, *, mask_token_id, vocab_size, special_ids, generator, probability=0.15):
    special = torch.isin(tokens, torch.as_tensor(special_ids))
    picked = (torch.rand(tokens.shape, generator={gen}) < probability){exclude}
    labels = {labels}
    action = torch.rand(tokens.shape, generator={gen})
    random_ids = torch.randint(vocab_size, tokens.shape, generator={gen})
    inputs = {inputs}
    inputs[picked & (action < {mask_share})] = mask_token_id
    replace = picked & (action >= {mask_share}) & (action < 0.9)
    inputs[replace] = random_ids[replace]
    return inputs, labels
"""


def masking(
    gen="generator",
    exclude=" & ~special",
    labels="torch.where(picked, tokens, torch.full_like(tokens, -100))",
    inputs="tokens.clone()",
    mask_share="0.8",
):
    return _MASK.format(gen=gen, exclude=exclude, labels=labels, inputs=inputs, mask_share=mask_share)


def loss(body):
    return f"def mlm_loss(logits, labels):\n    {body}\n"


_ENCDEC = """
class EncoderDecoder(nn.Module):
    def __init__(self, config, *, encoder_block=EncoderBlock, decoder_block=DecoderBlock, norm=LayerNorm,
                 positions=SinusoidalPositionalEncoding):
        super().__init__()
        c = self.config = config
        if c.share_embeddings and c.src_vocab_size != c.tgt_vocab_size:
            raise ValueError("one vocabulary needed")
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.tgt_embed = {tgt_embed}
        self.positions = positions(c.max_len, c.d_model)
        args = (c.d_model, c.n_heads, c.d_ff, c.activation, c.norm_first)
        self.encoder = nn.ModuleList(encoder_block(*args) for _ in range(c.n_encoder_layers))
        self.encoder_norm = norm(c.d_model)
        self.decoder = nn.ModuleList(decoder_block(*args) for _ in range(c.n_decoder_layers))
        self.decoder_norm = norm(c.d_model)
        self.out_proj = nn.Linear(c.d_model, c.tgt_vocab_size)
        if c.share_embeddings:
            self.out_proj.weight = self.tgt_embed.weight

    def embed(self, table, tokens):
        return table(tokens) * {scale} + self.positions(torch.arange(tokens.shape[1]))

    def encode(self, src, src_padding=None):
        x = self.embed(self.src_embed, src)
        for block in self.encoder:
            x = block(x, src_padding)
        return {encoder_out}

    def decode(self, tgt, memory, tgt_padding=None, memory_padding=None):
        x = self.embed(self.tgt_embed, tgt)
        for block in self.decoder:
            x = block(x, memory, tgt_padding, memory_padding)
        return self.out_proj({decoder_out})

    def forward(self, src, tgt, src_padding=None, tgt_padding=None):
        return self.decode(tgt, {memory}, tgt_padding, {memory_padding})
"""


def encdec(
    tgt_embed="self.src_embed if c.share_embeddings else nn.Embedding(c.tgt_vocab_size, c.d_model)",
    scale="math.sqrt(self.config.d_model)",
    encoder_out="self.encoder_norm(x)",
    decoder_out="self.decoder_norm(x)",
    memory="self.encode(src, src_padding)",
    memory_padding="src_padding",
):
    return _ENCDEC.format(
        tgt_embed=tgt_embed,
        scale=scale,
        encoder_out=encoder_out,
        decoder_out=decoder_out,
        memory=memory,
        memory_padding=memory_padding,
    )


_COUNT = """
def transformer_num_parameters(config):
    c, d = config, config.d_model
    attention = 4 * (d * d + {attention_bias})
    ffn = 2 * d * c.d_ff + {ffn_bias}
    norm = {norm}
    encoder = c.n_encoder_layers * (attention + ffn + 2 * norm)
    decoder = c.n_decoder_layers * ({decoder_block})
    tables = {tables}
    return encoder + decoder + {final_norms} + tables + {out_bias}
"""


def count(
    attention_bias="d",
    ffn_bias="c.d_ff + d",
    norm="2 * d",
    decoder_block="2 * attention + ffn + 3 * norm",
    tables="c.src_vocab_size * d if c.share_embeddings else (c.src_vocab_size + 2 * c.tgt_vocab_size) * d",
    final_norms="2 * norm",
    out_bias="c.tgt_vocab_size",
):
    return _COUNT.format(
        attention_bias=attention_bias,
        ffn_bias=ffn_bias,
        norm=norm,
        decoder_block=decoder_block,
        tables=tables,
        final_norms=final_norms,
        out_bias=out_bias,
    )


RIGHT = {
    "bert_embeddings": embeddings(),
    "mlm_head": head(),
    "bert_mlm": bert(),
    "mask_tokens": masking(),
    "mlm_loss": loss("return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=-100)"),
    "encoder_decoder": encdec(),
    "transformer_num_parameters": count(),
}

WRONG = [
    # Exercise 1
    Wrong(
        "bert_embeddings",
        "token types ignored",
        embeddings(body="self.norm(word + position)"),
        "the token types are not added",
    ),
    Wrong(
        "bert_embeddings", "no LayerNorm", embeddings(body="word + position + token_type"), "the LayerNorm is missing"
    ),
    Wrong(
        "bert_embeddings",
        "LayerNorm before the sum",
        embeddings(body="self.norm(word) + position + token_type"),
        "before the sum",
    ),
    Wrong(
        "bert_embeddings", "LayerNorm with PyTorch's default eps", embeddings(norm="norm(config.d_model)"), "eps=1e-5"
    ),
    Wrong(
        "bert_embeddings",
        "attributes named as in Hugging Face",
        embeddings().replace("self.word", "self.word_embeddings"),
        "self.word, self.position, self.token_type",
    ),
    # Exercise 2
    Wrong(
        "mlm_head",
        "decoder untied (an equal copy made at construction)",
        head(tie="self.decoder.weight = nn.Parameter(word_embeddings.weight.detach().clone())"),
        "decoder.weight is not the word embedding table",
    ),
    Wrong(
        "mlm_head",
        "decoder shares the storage but is another Parameter",
        head(tie="self.decoder.weight = nn.Parameter(word_embeddings.weight.data)"),
        "decoder.weight is not the word embedding table",
    ),
    Wrong(
        "mlm_head",
        "tanh GELU",
        head(body="self.decoder(self.norm(F.gelu(self.dense(hidden), approximate='tanh')))"),
        "the tanh approximation",
    ),
    Wrong(
        "mlm_head", "no LayerNorm", head(body="self.decoder(F.gelu(self.dense(hidden)))"), "the LayerNorm is missing"
    ),
    Wrong("mlm_head", "decoder without bias", head(bias=", bias=False"), "the decoder has no bias"),
    # Exercise 3
    Wrong("bert_mlm", "pre-norm blocks", bert(norm_first="True"), "the blocks are pre-norm"),
    Wrong(
        "bert_mlm",
        "padding mask not passed to the blocks",
        bert(mask="None"),
        "the padding mask does not reach the blocks",
    ),
    Wrong(
        "bert_mlm",
        "head given a new embedding table (untied)",
        bert(table="nn.Embedding(config.vocab_size, config.d_model)"),
        "the head's decoder has a weight of its own",
    ),
    Wrong(
        "bert_mlm",
        "blocks' LayerNorm eps left at the default",
        bert(block_norm="norm"),
        "the blocks' LayerNorms use eps=1e-5",
    ),
    # Exercise 4
    Wrong("mask_tokens", "special tokens may be picked", masking(exclude=""), "a special token was picked"),
    Wrong(
        "mask_tokens",
        "every picked token becomes [MASK] (no 10% random, 10% kept)",
        masking(mask_share="1.0"),
        "the fraction of picked tokens replaced by [MASK]",
    ),
    Wrong(
        "mask_tokens",
        "labels on every position",
        masking(labels="tokens.clone()"),
        "labels must hold the original token at the picked positions and -100 everywhere else",
    ),
    Wrong("mask_tokens", "tokens edited in place", masking(inputs="tokens"), "changed its argument tokens in place"),
    Wrong(
        "mask_tokens",
        "global random generator instead of the generator argument",
        masking(gen="None"),
        "draw every random number from the generator argument",
    ),
    Wrong(
        "mask_tokens",
        "probability argument ignored",
        masking().replace("< probability)", "< 0.15)"),
        "the fraction of non-special tokens picked",
    ),
    Wrong(
        "mask_tokens",
        "random ids drawn from the special ids upwards only",
        masking().replace("torch.randint(vocab_size,", "torch.randint(vocab_size // 2, vocab_size,"),
        "draw them uniformly from [0, vocab_size)",
    ),
    # Exercise 5
    Wrong(
        "mlm_loss",
        "averaged over all positions",
        loss(
            "return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=-100, reduction='sum') "
            "/ labels.numel()"
        ),
        "the loss is averaged over all positions",
    ),
    Wrong(
        "mlm_loss",
        "-100 replaced by 0 and every position counted",
        loss("return F.cross_entropy(logits.flatten(0, -2), labels.flatten().clamp(min=0))"),
        "the loss includes the positions without a target",
    ),
    Wrong(
        "mlm_loss",
        "summed instead of averaged",
        loss("return F.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=-100, reduction='sum')"),
        "the loss is summed",
    ),
    # Exercise 6
    Wrong("encoder_decoder", "no sqrt(d_model) scale", encdec(scale="1.0"), "not multiplied by sqrt(d_model)"),
    Wrong(
        "encoder_decoder",
        "memory padding not passed to the decoder",
        encdec(memory_padding="None"),
        "the source padding does not reach the decoder's cross-attention",
    ),
    Wrong(
        "encoder_decoder",
        "embeddings not shared when asked",
        encdec(tgt_embed="nn.Embedding(c.tgt_vocab_size, c.d_model)"),
        "tgt_embed.weight",
    ),
    Wrong(
        "encoder_decoder",
        "decoder reads the source embeddings",
        encdec(memory="self.embed(self.src_embed, src)"),
        "the decoder reads the source embeddings",
    ),
    Wrong(
        "encoder_decoder",
        "memory computed from the target",
        encdec(memory="self.encode(tgt, tgt_padding)", memory_padding="tgt_padding"),
        "the memory must come from the source alone",
    ),
    Wrong(
        "encoder_decoder",
        "no final norms",
        encdec(encoder_out="x", decoder_out="x"),
        "the final LayerNorms of both stacks are missing",
    ),
    Wrong(
        "encoder_decoder",
        "decoder stack's final norm missing",
        encdec(decoder_out="x"),
        "the decoder stack's final LayerNorm is missing",
    ),
    # Exercise 7
    Wrong(
        "transformer_num_parameters",
        "shared table counted three times",
        count(tables="(c.src_vocab_size + 2 * c.tgt_vocab_size) * d"),
        "the shared table is counted three times",
    ),
    Wrong(
        "transformer_num_parameters",
        "shared table counted twice (out_proj.weight as its own)",
        count(
            tables="c.src_vocab_size * d + c.tgt_vocab_size * d if c.share_embeddings else "
            "(c.src_vocab_size + 2 * c.tgt_vocab_size) * d"
        ),
        "the shared table is counted twice",
    ),
    Wrong(
        "transformer_num_parameters",
        "no biases anywhere",
        count(attention_bias="0", ffn_bias="0", out_bias="0"),
        "the biases are missing",
    ),
    Wrong("transformer_num_parameters", "out_proj's bias dropped", count(out_bias="0"), "out_proj's bias"),
    Wrong(
        "transformer_num_parameters",
        "decoder blocks counted like encoder blocks",
        count(decoder_block="attention + ffn + 2 * norm"),
        "the decoder blocks are counted like encoder blocks",
    ),
    Wrong(
        "transformer_num_parameters",
        "decoder blocks with two LayerNorms",
        count(decoder_block="2 * attention + ffn + 2 * norm"),
        "a decoder block has three LayerNorms",
    ),
    Wrong(
        "transformer_num_parameters",
        "final LayerNorms forgotten",
        count(final_norms="0"),
        "the final LayerNorms encoder_norm and decoder_norm",
    ),
    Wrong(
        "transformer_num_parameters",
        "LayerNorm counted as its weight only",
        count(norm="d"),
        "each LayerNorm has a weight AND a bias",
    ),
    Wrong(
        "transformer_num_parameters",
        "counts a model it builds",
        "def transformer_num_parameters(config):\n"
        "    return sum(p.numel() for p in EncoderDecoder(config).parameters())\n",
        "this exercise's rule is: work it out from the sizes in the config; do not build any module",
    ),
]
