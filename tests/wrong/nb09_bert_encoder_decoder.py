"""Wrong versions of notebook 09's answers (09_bert_encoder_decoder): see ``wrong/__init__.py``."""

from autograder.notebooks.nb09_bert_encoder_decoder import BERT, COUNT, EMBEDDINGS, ENCDEC, HEAD, LOSS, MASKING
from wrong import WrongVersion, edit

# bert_embeddings -----------------------------------------------------------------------------------------------
_RETURN_SELF_NORM = "return self.norm(self.word(tokens) + self.position(positions) + self.token_type(token_type_ids))"
_SELF_NORM = "self.norm = norm(config.d_model, eps=config.norm_eps)"
_POSITIONS = "positions = torch.arange(tokens.shape[1], device=tokens.device)"

# mlm_head ------------------------------------------------------------------------------------------------------
_SELF_DECODER_WEIGHT = "self.decoder.weight = word_embeddings.weight  # one Parameter, used twice"
_RETURN_SELF_DECODER = "return self.decoder(self.norm(F.gelu(self.dense(hidden))))"

# bert_mlm ------------------------------------------------------------------------------------------------------
_SELF_HEAD = "self.head = head(config, self.embeddings.word, norm=norm)"

# mask_tokens ---------------------------------------------------------------------------------------------------
_PICKED = "picked = (torch.rand(tokens.shape, generator=generator) < probability) & ~special"
_INPUTS = """\
    inputs = torch.where(picked & (action < 0.8), torch.full_like(tokens, mask_token_id), tokens)
    inputs = torch.where(picked & (action >= 0.8) & (action < 0.9), random_ids, inputs)
"""
_LABELS = "labels = torch.where(picked, tokens, torch.full_like(tokens, -100)).long()"
_RANDOM_IDS = "random_ids = torch.randint(vocab_size, tokens.shape, generator=generator, dtype=tokens.dtype)"

# mlm_loss ------------------------------------------------------------------------------------------------------
_RETURN_F_CROSS_ENTROPY = (
    "return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)"
)

# encoder_decoder -----------------------------------------------------------------------------------------------
_RETURN_SELF_DECODE = "return self.decode(tgt, self.encode(src, src_padding), tgt_padding, src_padding)"
_RETURN_SELF_OUT_PROJ = "return self.out_proj(self.decoder_norm(x))"
_SELF_POSITIONS = "self.positions = positions(c.max_len, c.d_model)"
_NEW_RETURN_SELF_OUT_PROJ = "return self.out_proj(x)"

# transformer_num_parameters ------------------------------------------------------------------------------------
_TABLES = "tables = c.src_vocab_size * d  # src_embed = tgt_embed = out_proj.weight"
_RETURN_ENCODER_DECODER = "return encoder + decoder + tables + c.tgt_vocab_size  # + out_proj's bias"
_DECODER = "decoder = c.n_decoder_layers * (2 * attention + ffn + 3 * norm) + norm  # cross-attention, third norm; decoder_norm"
_NEW_RETURN_ENCODER_DECODER = "return encoder + decoder + tables + 0  # + out_proj's bias"

WRONG_VERSIONS = (
    # bert_embeddings
    WrongVersion(
        EMBEDDINGS,
        "token types ignored",
        "the token types are not added",
        edit(_RETURN_SELF_NORM, "return self.norm(self.word(tokens) + self.position(positions))"),
    ),
    WrongVersion(
        EMBEDDINGS,
        "no LayerNorm",
        "the LayerNorm is missing",
        edit(
            _RETURN_SELF_NORM, "return self.word(tokens) + self.position(positions) + self.token_type(token_type_ids)"
        ),
    ),
    WrongVersion(
        EMBEDDINGS,
        "LayerNorm before the sum",
        "before the sum",
        edit(
            _RETURN_SELF_NORM,
            "return self.norm(self.word(tokens)) + self.position(positions) + self.token_type(token_type_ids)",
        ),
    ),
    WrongVersion(
        EMBEDDINGS,
        "LayerNorm with PyTorch's default eps",
        "eps=1e-5",
        edit(_SELF_NORM, "self.norm = norm(config.d_model)"),
    ),
    WrongVersion(
        EMBEDDINGS,
        "attributes named as in Hugging Face",
        "self.word, self.position, self.token_type",
        edit(
            "self.word = nn.Embedding(config.vocab_size, config.d_model)",
            "self.word_embeddings = nn.Embedding(config.vocab_size, config.d_model)",
        ),
        edit(
            _RETURN_SELF_NORM,
            "return self.norm(self.word_embeddings(tokens) + self.position(positions) + self.token_type(token_type_ids))",
        ),
    ),
    WrongVersion(
        EMBEDDINGS,
        "position embeddings made but not added",
        "the position embeddings are not added",
        edit(_RETURN_SELF_NORM, "return self.norm(self.word(tokens) + self.token_type(token_type_ids))"),
    ),
    WrongVersion(
        EMBEDDINGS,
        "token_type_ids always replaced by zeros",
        "token_type_ids is ignored",
        edit(
            "        if token_type_ids is None:\n            token_type_ids = torch.zeros_like(tokens)\n",
            "        token_type_ids = torch.zeros_like(tokens)\n",
        ),
    ),
    # The norm argument (the checks pass a norm of their own, unlike LayerNorm).
    WrongVersion(
        EMBEDDINGS,
        "norm= accepted and ignored: LayerNorm built by name",
        "the norm argument is not used",
        edit(_SELF_NORM, "self.norm = LayerNorm(config.d_model, eps=config.norm_eps)"),
    ),
    # Beyond BERT's 512 positions.
    WrongVersion(
        EMBEDDINGS,
        "positions cached for 512 tokens",
        "were made for a fixed length",
        edit(
            "        self.norm = norm(config.d_model, eps=config.norm_eps)\n",
            """\
        self.norm = norm(config.d_model, eps=config.norm_eps)
        self.register_buffer("positions", torch.arange(512), persistent=False)
""",
        ),
        edit(_POSITIONS, "positions = self.positions[:tokens.shape[1]]"),
    ),
    # Invisible on the meta device unless the lookups are observed: nn.Embedding there accepts CPU indices.
    WrongVersion(
        EMBEDDINGS,
        "positions made on the CPU",
        "the position table was given positions made on the CPU",
        edit(_POSITIONS, "positions = torch.arange(tokens.shape[1])"),
    ),
    WrongVersion(
        EMBEDDINGS,
        "default segment ids made on the CPU",
        "the token-type table was given default segment ids made on the CPU",
        edit(
            "token_type_ids = torch.zeros_like(tokens)", "token_type_ids = torch.zeros(tokens.shape, dtype=torch.long)"
        ),
    ),
    # mlm_head
    WrongVersion(
        HEAD,
        "decoder untied (an equal copy made at construction)",
        "decoder.weight is not the word embedding table",
        edit(_SELF_DECODER_WEIGHT, "self.decoder.weight = nn.Parameter(word_embeddings.weight.detach().clone())"),
    ),
    WrongVersion(
        HEAD,
        "decoder shares the storage but is another Parameter",
        "decoder.weight is not the word embedding table",
        edit(_SELF_DECODER_WEIGHT, "self.decoder.weight = nn.Parameter(word_embeddings.weight.data)"),
    ),
    WrongVersion(
        HEAD,
        "tanh GELU",
        "the tanh approximation",
        edit(_RETURN_SELF_DECODER, "return self.decoder(self.norm(F.gelu(self.dense(hidden), approximate='tanh')))"),
    ),
    WrongVersion(
        HEAD,
        "no LayerNorm",
        "the LayerNorm is missing",
        edit(_RETURN_SELF_DECODER, "return self.decoder(F.gelu(self.dense(hidden)))"),
    ),
    WrongVersion(
        HEAD,
        "decoder without bias",
        "the decoder has no bias",
        edit(
            "self.decoder = nn.Linear(config.d_model, config.vocab_size)",
            "self.decoder = nn.Linear(config.d_model, config.vocab_size, bias=False)",
        ),
    ),
    # The norm argument (the checks pass a norm of their own, unlike LayerNorm).
    WrongVersion(
        HEAD,
        "norm= accepted and ignored: LayerNorm built by name",
        "the norm argument is not used",
        edit(
            "self.norm = norm(config.d_model, eps=config.norm_eps)",
            "self.norm = LayerNorm(config.d_model, eps=config.norm_eps)",
        ),
    ),
    WrongVersion(
        HEAD,
        "ReLU in the head",
        "the activation is ReLU",
        edit(_RETURN_SELF_DECODER, "return self.decoder(self.norm(F.relu(self.dense(hidden))))"),
    ),
    WrongVersion(
        HEAD,
        "no activation in the head",
        "the activation is missing",
        edit(_RETURN_SELF_DECODER, "return self.decoder(self.norm(self.dense(hidden)))"),
    ),
    WrongVersion(
        HEAD,
        "norm before the GELU",
        "the norm comes before the GELU",
        edit(_RETURN_SELF_DECODER, "return self.decoder(F.gelu(self.norm(self.dense(hidden))))"),
    ),
    WrongVersion(
        HEAD,
        "decoder written as a product with the tied weight, its bias left out",
        "the decoder's bias is not added",
        edit(_RETURN_SELF_DECODER, "return self.norm(F.gelu(self.dense(hidden))) @ self.decoder.weight.T"),
    ),
    # bert_mlm
    WrongVersion(
        BERT,
        "pre-norm blocks",
        "the blocks are pre-norm",
        edit(
            'layers = [block(config.d_model, config.n_heads, config.d_ff, "gelu", norm_first=False, norm=block_norm)',
            'layers = [block(config.d_model, config.n_heads, config.d_ff, "gelu", norm_first=True, norm=block_norm)',
        ),
    ),
    WrongVersion(
        BERT,
        "padding mask not passed to the blocks",
        "the padding mask does not reach the blocks",
        edit("x = layer(x, padding_mask)", "x = layer(x, None)"),
    ),
    WrongVersion(
        BERT,
        "head given a new embedding table (untied)",
        "the head's decoder has a weight of its own",
        edit(_SELF_HEAD, "self.head = head(config, nn.Embedding(config.vocab_size, config.d_model), norm=norm)"),
    ),
    WrongVersion(
        BERT,
        "blocks' LayerNorm eps left at the default",
        "the blocks' LayerNorms use eps=1e-5",
        edit(
            "block_norm = partial(norm, eps=config.norm_eps)  # BERT's eps, 1e-12, in every block's LayerNorms too",
            "block_norm = norm",
        ),
    ),
    # The constructor arguments, observed by recording stand-ins (the notebook's own parts give the same numbers).
    WrongVersion(
        BERT,
        "head built without norm= (its default LayerNorm)",
        "head.norm was not made by calling the norm argument",
        edit(_SELF_HEAD, "self.head = head(config, self.embeddings.word)"),
    ),
    WrongVersion(
        BERT,
        "embeddings= ignored: BertEmbeddings by name",
        "embeddings was not made by calling the embeddings argument",
        edit("self.embeddings = embeddings(config, norm=norm)", "self.embeddings = BertEmbeddings(config, norm=norm)"),
    ),
    WrongVersion(
        BERT,
        "head= ignored: MLMHead by name",
        "head was not made by calling the head argument",
        edit(_SELF_HEAD, "self.head = MLMHead(config, self.embeddings.word, norm=norm)"),
    ),
    WrongVersion(
        BERT,
        "block= ignored: EncoderBlock by name",
        "blocks were made by calling the block argument",
        edit("        layers = [block(config.d_model,", "        layers = [EncoderBlock(config.d_model,"),
    ),
    WrongVersion(
        BERT,
        "blocks' norms a LayerNorm by name (with the config's eps)",
        "norms were not made by calling the norm argument",
        edit("norm_first=False, norm=block_norm)", "norm_first=False, norm=partial(LayerNorm, eps=config.norm_eps))"),
    ),
    WrongVersion(
        BERT,
        "token_type_ids not passed to the embeddings",
        "token_type_ids does not reach the embeddings",
        edit("x = self.embeddings(tokens, token_type_ids)", "x = self.embeddings(tokens)"),
    ),
    # mask_tokens
    WrongVersion(
        MASKING,
        "special tokens may be picked",
        "a special token was picked",
        edit(_PICKED, "picked = (torch.rand(tokens.shape, generator=generator) < probability)"),
    ),
    WrongVersion(
        MASKING,
        "every picked token becomes [MASK] (no 10% random, 10% kept)",
        "the fraction of picked tokens replaced by [MASK]",
        edit(
            _INPUTS,
            """\
    inputs = torch.where(picked & (action < 1.0), torch.full_like(tokens, mask_token_id), tokens)
    inputs = torch.where(picked & (action >= 1.0) & (action < 0.9), random_ids, inputs)
""",
        ),
    ),
    WrongVersion(
        MASKING,
        "labels on every position",
        "labels must hold the original token at the picked positions and -100 everywhere else",
        edit(_LABELS, "labels = tokens.clone()"),
    ),
    WrongVersion(
        MASKING,
        "tokens edited in place",
        "changed its argument tokens in place",
        edit(
            _INPUTS,
            """\
    inputs = tokens
    inputs[picked & (action < 0.8)] = mask_token_id
    replace = picked & (action >= 0.8) & (action < 0.9)
    inputs[replace] = random_ids[replace]
""",
        ),
    ),
    WrongVersion(
        MASKING,
        "global random generator instead of the generator argument",
        "draw every random number from the generator argument",
        edit(_PICKED, "picked = (torch.rand(tokens.shape, generator=None) < probability) & ~special"),
        edit(
            """\
    action = torch.rand(tokens.shape, generator=generator)  # < 0.8: [MASK]; 0.8..0.9: random; >= 0.9: kept
    random_ids = torch.randint(vocab_size, tokens.shape, generator=generator, dtype=tokens.dtype)
""",
            """\
    action = torch.rand(tokens.shape, generator=None)  # < 0.8: [MASK]; 0.8..0.9: random; >= 0.9: kept
    random_ids = torch.randint(vocab_size, tokens.shape, generator=None, dtype=tokens.dtype)
""",
        ),
    ),
    WrongVersion(
        MASKING,
        "probability argument ignored",
        "the fraction of non-special tokens picked",
        edit(_PICKED, "picked = (torch.rand(tokens.shape, generator=generator) < 0.15) & ~special"),
    ),
    WrongVersion(
        MASKING,
        "random ids drawn from the special ids upwards only",
        "draw them uniformly from [0, vocab_size)",
        edit(
            _RANDOM_IDS,
            "random_ids = torch.randint(vocab_size // 2, vocab_size, tokens.shape, generator=generator, dtype=tokens.dtype)",
        ),
    ),
    # Invisible with int64 tokens: int32 tokens give int32 labels.
    WrongVersion(
        MASKING,
        "labels keep the tokens' dtype",
        "expected torch.long (int64) whatever the tokens' integer dtype",
        edit(_LABELS, "labels = torch.where(picked, tokens, torch.full_like(tokens, -100))"),
    ),
    WrongVersion(
        MASKING,
        "random ids from randint(0, vocab_size - 1): the last id never drawn",
        "never came up",
        edit(
            _RANDOM_IDS,
            "random_ids = torch.randint(0, vocab_size - 1, tokens.shape, generator=generator, dtype=tokens.dtype)",
        ),
    ),
    # mlm_loss
    WrongVersion(
        LOSS,
        "averaged over all positions",
        "the loss is averaged over all positions",
        edit(
            _RETURN_F_CROSS_ENTROPY,
            "return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction='sum') / labels.numel()",
        ),
    ),
    WrongVersion(
        LOSS,
        "-100 replaced by 0 and every position counted",
        "the loss includes the positions without a target",
        edit(
            _RETURN_F_CROSS_ENTROPY,
            "return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).clamp(min=0))",
        ),
    ),
    WrongVersion(
        LOSS,
        "summed instead of averaged",
        "the loss is summed",
        edit(
            _RETURN_F_CROSS_ENTROPY,
            "return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100, reduction='sum')",
        ),
    ),
    WrongVersion(
        LOSS,
        "log of softmax: -inf where a target is far below the largest logit (blind round)",
        "softmax underflows to 0 for a target far below the largest logit",
        edit(
            _RETURN_F_CROSS_ENTROPY,
            "return F.nll_loss(torch.log(torch.softmax(logits, dim=-1)).reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)",
        ),
    ),
    # encoder_decoder
    WrongVersion(
        ENCDEC,
        "no sqrt(d_model) scale",
        "not multiplied by sqrt(d_model)",
        edit(
            """\
    def encode(self, src: torch.Tensor, src_padding: torch.Tensor | None = None) -> torch.Tensor:
        scale = math.sqrt(self.config.d_model)
""",
            """\
    def encode(self, src: torch.Tensor, src_padding: torch.Tensor | None = None) -> torch.Tensor:
        scale = 1.0
""",
        ),
        edit(
            """\
               memory_padding: torch.Tensor | None = None) -> torch.Tensor:
        scale = math.sqrt(self.config.d_model)
""",
            """\
               memory_padding: torch.Tensor | None = None) -> torch.Tensor:
        scale = 1.0
""",
        ),
    ),
    WrongVersion(
        ENCDEC,
        "memory padding not passed to the decoder",
        "the source padding does not reach the decoder's cross-attention",
        edit(_RETURN_SELF_DECODE, "return self.decode(tgt, self.encode(src, src_padding), tgt_padding, None)"),
    ),
    WrongVersion(
        ENCDEC,
        "embeddings not shared when asked",
        "tgt_embed.weight",
        edit(
            "self.tgt_embed = self.src_embed if c.share_embeddings else nn.Embedding(c.tgt_vocab_size, c.d_model)",
            "self.tgt_embed = nn.Embedding(c.tgt_vocab_size, c.d_model)",
        ),
    ),
    WrongVersion(
        ENCDEC,
        "decoder reads the source embeddings",
        "the decoder reads the source embeddings",
        edit(
            _RETURN_SELF_DECODE,
            "return self.decode(tgt, self.src_embed(src) * math.sqrt(self.config.d_model) + self.positions(torch.arange(src.shape[1], device=src.device)), tgt_padding, src_padding)",
        ),
    ),
    WrongVersion(
        ENCDEC,
        "memory computed from the target",
        "the memory must come from the source alone",
        edit(_RETURN_SELF_DECODE, "return self.decode(tgt, self.encode(tgt, tgt_padding), tgt_padding, tgt_padding)"),
    ),
    WrongVersion(
        ENCDEC,
        "no final norms",
        "the final LayerNorms of both stacks are missing",
        edit("return self.encoder_norm(x)", "return x"),
        edit(_RETURN_SELF_OUT_PROJ, _NEW_RETURN_SELF_OUT_PROJ),
    ),
    WrongVersion(
        ENCDEC,
        "decoder stack's final norm missing",
        "the decoder stack's final LayerNorm is missing",
        edit(_RETURN_SELF_OUT_PROJ, _NEW_RETURN_SELF_OUT_PROJ),
    ),
    # Beyond the default max_len of 512.
    WrongVersion(
        ENCDEC,
        "position table built for 512 positions, not config.max_len",
        "were made for a fixed length",
        edit(_SELF_POSITIONS, "self.positions = positions(512, c.d_model)"),
    ),
    # Invisible on the meta device unless the lookup is observed: indexing the table there accepts CPU indices.
    WrongVersion(
        ENCDEC,
        "positions made on the CPU",
        "the position table was given positions made on the CPU",
        edit(
            "self.positions(torch.arange(src.shape[1], device=src.device))",
            "self.positions(torch.arange(src.shape[1]))",
        ),
        edit(
            "self.positions(torch.arange(tgt.shape[1], device=tgt.device))",
            "self.positions(torch.arange(tgt.shape[1]))",
        ),
    ),
    # The constructor arguments, observed by recording stand-ins (the notebook's own parts give the same numbers).
    WrongVersion(
        ENCDEC,
        "encoder_block= ignored: EncoderBlock by name",
        "0 of them made by calling the encoder_block argument",
        edit(
            "        self.encoder = nn.ModuleList(encoder_block(*block_args)",
            "        self.encoder = nn.ModuleList(EncoderBlock(*block_args)",
        ),
    ),
    WrongVersion(
        ENCDEC,
        "norm= ignored: LayerNorm by name for encoder_norm",
        "encoder_norm was not made by calling the norm argument",
        edit("self.encoder_norm = norm(c.d_model)", "self.encoder_norm = LayerNorm(c.d_model)"),
    ),
    WrongVersion(
        ENCDEC,
        "positions= ignored: SinusoidalPositionalEncoding by name",
        "positions was not made by calling the positions argument",
        edit(_SELF_POSITIONS, "self.positions = SinusoidalPositionalEncoding(c.max_len, c.d_model)"),
    ),
    WrongVersion(
        ENCDEC,
        "encoder stack without its final LayerNorm",
        "the encoder stack's final LayerNorm is missing",
        edit("return self.encoder_norm(x)", "return x"),
    ),
    WrongVersion(
        ENCDEC,
        "positions never added",
        "the positions are not added",
        edit(
            "x = self.src_embed(src) * scale + self.positions(torch.arange(src.shape[1], device=src.device))",
            "x = self.src_embed(src) * scale",
        ),
        edit(
            "x = self.tgt_embed(tgt) * scale + self.positions(torch.arange(tgt.shape[1], device=tgt.device))",
            "x = self.tgt_embed(tgt) * scale",
        ),
    ),
    # transformer_num_parameters
    WrongVersion(
        COUNT,
        "shared table counted three times",
        "the shared table is counted three times",
        edit(
            _TABLES, "tables = (c.src_vocab_size + 2 * c.tgt_vocab_size) * d  # src_embed = tgt_embed = out_proj.weight"
        ),
    ),
    WrongVersion(
        COUNT,
        "shared table counted twice (out_proj.weight as its own)",
        "the shared table is counted twice",
        edit(
            _TABLES, "tables = c.src_vocab_size * d + c.tgt_vocab_size * d  # src_embed = tgt_embed = out_proj.weight"
        ),
    ),
    WrongVersion(
        COUNT,
        "no biases anywhere",
        "the biases are missing",
        edit(
            """\
    attention = 4 * (d * d + d)  # q, k, v and out projections, each with a bias
    ffn = 2 * d * c.d_ff + c.d_ff + d  # fc1 and fc2 with their biases
""",
            """\
    attention = 4 * d * d  # q, k, v and out projections, each with a bias
    ffn = 2 * d * c.d_ff  # fc1 and fc2 with their biases
""",
        ),
        edit(_RETURN_ENCODER_DECODER, _NEW_RETURN_ENCODER_DECODER),
    ),
    WrongVersion(
        COUNT, "out_proj's bias dropped", "out_proj's bias", edit(_RETURN_ENCODER_DECODER, _NEW_RETURN_ENCODER_DECODER)
    ),
    WrongVersion(
        COUNT,
        "decoder blocks counted like encoder blocks",
        "the decoder blocks are counted like encoder blocks",
        edit(
            _DECODER,
            "decoder = c.n_decoder_layers * (attention + ffn + 2 * norm) + norm  # cross-attention, third norm; decoder_norm",
        ),
    ),
    WrongVersion(
        COUNT,
        "decoder blocks with two LayerNorms",
        "a decoder block has three LayerNorms",
        edit(
            _DECODER,
            "decoder = c.n_decoder_layers * (2 * attention + ffn + 2 * norm) + norm  # cross-attention, third norm; decoder_norm",
        ),
    ),
    WrongVersion(
        COUNT,
        "final LayerNorms forgotten",
        "the final LayerNorms encoder_norm and decoder_norm",
        edit(
            """\
    encoder = c.n_encoder_layers * (attention + ffn + 2 * norm) + norm  # + encoder_norm
    decoder = c.n_decoder_layers * (2 * attention + ffn + 3 * norm) + norm  # cross-attention, third norm; decoder_norm
""",
            """\
    encoder = c.n_encoder_layers * (attention + ffn + 2 * norm)  # + encoder_norm
    decoder = c.n_decoder_layers * (2 * attention + ffn + 3 * norm)  # cross-attention, third norm; decoder_norm
""",
        ),
    ),
    WrongVersion(
        COUNT,
        "LayerNorm counted as its weight only",
        "each LayerNorm has a weight AND a bias",
        edit("norm = 2 * d  # weight and bias", "norm = d  # weight and bias"),
    ),
    # Full code, not an edit: it builds the model and counts its parameters instead of working them out.
    WrongVersion(
        COUNT,
        "counts a model it builds",
        "this exercise's rule is: work it out from the sizes in the config; do not build any module",
        code="""\
def transformer_num_parameters(config):
    return sum(p.numel() for p in EncoderDecoder(config).parameters())
""",
    ),
)
