"""Mistakes students make in notebook 09.

Each wrong version is the solution's answer cell with one mistake written in (``variant`` checks that the
replaced text is there), so the wrong versions differ from a right one only by the mistake; the one written out
in full says why.
"""

from wrong import Wrong, catalogue

NOTEBOOK = "09_bert_encoder_decoder"
RIGHT, variant = catalogue(NOTEBOOK)

# The solution's lines that the wrong versions replace.
_SUM = "self.word(tokens) + self.position(positions) + self.token_type(token_type_ids)"
_TIE = "self.decoder.weight = word_embeddings.weight  # one Parameter, used twice"
_HEAD_OUT = "self.decoder(self.norm(F.gelu(self.dense(hidden))))"
_INPUTS = (
    "inputs = torch.where(picked & (action < 0.8), torch.full_like(tokens, mask_token_id), tokens)\n"
    "    inputs = torch.where(picked & (action >= 0.8) & (action < 0.9), random_ids, inputs)"
)
_SCALE = ("scale = math.sqrt(self.config.d_model)", "scale = 1.0")
_SHARED_TABLES = "tables = c.src_vocab_size * d  #"
_DECODER_BLOCK = "(2 * attention + ffn + 3 * norm)"

WRONG = [
    # Exercise 1
    Wrong(
        "bert_embeddings",
        "token types ignored",
        variant("bert_embeddings", (" + self.token_type(token_type_ids))", ")")),
        "the token types are not added",
    ),
    Wrong(
        "bert_embeddings",
        "no LayerNorm",
        variant("bert_embeddings", (f"self.norm({_SUM})", _SUM)),
        "the LayerNorm is missing",
    ),
    Wrong(
        "bert_embeddings",
        "LayerNorm before the sum",
        variant(
            "bert_embeddings", (f"self.norm({_SUM})", _SUM.replace("self.word(tokens)", "self.norm(self.word(tokens))"))
        ),
        "before the sum",
    ),
    Wrong(
        "bert_embeddings",
        "LayerNorm with PyTorch's default eps",
        variant("bert_embeddings", ("norm(config.d_model, eps=config.norm_eps)", "norm(config.d_model)")),
        "eps=1e-5",
    ),
    Wrong(
        "bert_embeddings",
        "attributes named as in Hugging Face",
        variant(
            "bert_embeddings",
            ("self.word = ", "self.word_embeddings = "),
            ("self.word(tokens)", "self.word_embeddings(tokens)"),
        ),
        "self.word, self.position, self.token_type",
    ),
    # Exercise 2
    Wrong(
        "mlm_head",
        "decoder untied (an equal copy made at construction)",
        variant("mlm_head", (_TIE, "self.decoder.weight = nn.Parameter(word_embeddings.weight.detach().clone())")),
        "decoder.weight is not the word embedding table",
    ),
    Wrong(
        "mlm_head",
        "decoder shares the storage but is another Parameter",
        variant("mlm_head", (_TIE, "self.decoder.weight = nn.Parameter(word_embeddings.weight.data)")),
        "decoder.weight is not the word embedding table",
    ),
    Wrong(
        "mlm_head",
        "tanh GELU",
        variant("mlm_head", ("F.gelu(self.dense(hidden))", "F.gelu(self.dense(hidden), approximate='tanh')")),
        "the tanh approximation",
    ),
    Wrong(
        "mlm_head",
        "no LayerNorm",
        variant("mlm_head", (_HEAD_OUT, "self.decoder(F.gelu(self.dense(hidden)))")),
        "the LayerNorm is missing",
    ),
    Wrong(
        "mlm_head",
        "decoder without bias",
        variant(
            "mlm_head",
            (
                "nn.Linear(config.d_model, config.vocab_size)",
                "nn.Linear(config.d_model, config.vocab_size, bias=False)",
            ),
        ),
        "the decoder has no bias",
    ),
    # Exercise 3
    Wrong(
        "bert_mlm",
        "pre-norm blocks",
        variant("bert_mlm", ("norm_first=False", "norm_first=True")),
        "the blocks are pre-norm",
    ),
    Wrong(
        "bert_mlm",
        "padding mask not passed to the blocks",
        variant("bert_mlm", ("x = layer(x, padding_mask)", "x = layer(x, None)")),
        "the padding mask does not reach the blocks",
    ),
    Wrong(
        "bert_mlm",
        "head given a new embedding table (untied)",
        variant(
            "bert_mlm",
            ("head(config, self.embeddings.word,", "head(config, nn.Embedding(config.vocab_size, config.d_model),"),
        ),
        "the head's decoder has a weight of its own",
    ),
    Wrong(
        "bert_mlm",
        "blocks' LayerNorm eps left at the default",
        variant(
            "bert_mlm",
            (
                "block_norm = partial(norm, eps=config.norm_eps)  # BERT's eps, 1e-12, in every block's LayerNorms too",
                "block_norm = norm",
            ),
        ),
        "the blocks' LayerNorms use eps=1e-5",
    ),
    # Exercise 4
    Wrong(
        "mask_tokens",
        "special tokens may be picked",
        variant("mask_tokens", (" & ~special", "")),
        "a special token was picked",
    ),
    Wrong(
        "mask_tokens",
        "every picked token becomes [MASK] (no 10% random, 10% kept)",
        variant(
            "mask_tokens",
            ("picked & (action < 0.8)", "picked & (action < 1.0)"),
            ("(action >= 0.8) & (action < 0.9)", "(action >= 1.0) & (action < 0.9)"),
        ),
        "the fraction of picked tokens replaced by [MASK]",
    ),
    Wrong(
        "mask_tokens",
        "labels on every position",
        variant("mask_tokens", ("torch.where(picked, tokens, torch.full_like(tokens, -100)).long()", "tokens.clone()")),
        "labels must hold the original token at the picked positions and -100 everywhere else",
    ),
    Wrong(
        "mask_tokens",
        "tokens edited in place",
        variant(
            "mask_tokens",
            (
                _INPUTS,
                "inputs = tokens\n    inputs[picked & (action < 0.8)] = mask_token_id\n"
                "    replace = picked & (action >= 0.8) & (action < 0.9)\n    inputs[replace] = random_ids[replace]",
            ),
        ),
        "changed its argument tokens in place",
    ),
    Wrong(
        "mask_tokens",
        "global random generator instead of the generator argument",
        variant(
            "mask_tokens",
            ("(torch.rand(tokens.shape, generator=generator)", "(torch.rand(tokens.shape, generator=None)"),
            (
                "action = torch.rand(tokens.shape, generator=generator)",
                "action = torch.rand(tokens.shape, generator=None)",
            ),
            ("tokens.shape, generator=generator, dtype", "tokens.shape, generator=None, dtype"),
        ),
        "draw every random number from the generator argument",
    ),
    Wrong(
        "mask_tokens",
        "probability argument ignored",
        variant("mask_tokens", ("< probability)", "< 0.15)")),
        "the fraction of non-special tokens picked",
    ),
    Wrong(
        "mask_tokens",
        "random ids drawn from the special ids upwards only",
        variant("mask_tokens", ("torch.randint(vocab_size,", "torch.randint(vocab_size // 2, vocab_size,")),
        "draw them uniformly from [0, vocab_size)",
    ),
    # Exercise 5
    Wrong(
        "mlm_loss",
        "averaged over all positions",
        variant("mlm_loss", ("ignore_index=-100)", "ignore_index=-100, reduction='sum') / labels.numel()")),
        "the loss is averaged over all positions",
    ),
    Wrong(
        "mlm_loss",
        "-100 replaced by 0 and every position counted",
        variant("mlm_loss", ("labels.reshape(-1), ignore_index=-100)", "labels.reshape(-1).clamp(min=0))")),
        "the loss includes the positions without a target",
    ),
    Wrong(
        "mlm_loss",
        "summed instead of averaged",
        variant("mlm_loss", ("ignore_index=-100)", "ignore_index=-100, reduction='sum')")),
        "the loss is summed",
    ),
    # Exercise 6
    Wrong(
        "encoder_decoder",
        "no sqrt(d_model) scale",
        variant("encoder_decoder", _SCALE, _SCALE),
        "not multiplied by sqrt(d_model)",
    ),
    Wrong(
        "encoder_decoder",
        "memory padding not passed to the decoder",
        variant("encoder_decoder", ("tgt_padding, src_padding)", "tgt_padding, None)")),
        "the source padding does not reach the decoder's cross-attention",
    ),
    Wrong(
        "encoder_decoder",
        "embeddings not shared when asked",
        variant(
            "encoder_decoder",
            (
                "self.tgt_embed = self.src_embed if c.share_embeddings else nn.Embedding(",
                "self.tgt_embed = nn.Embedding(",
            ),
        ),
        "tgt_embed.weight",
    ),
    Wrong(
        "encoder_decoder",
        "decoder reads the source embeddings",
        variant(
            "encoder_decoder",
            (
                "self.encode(src, src_padding)",
                "self.src_embed(src) * math.sqrt(self.config.d_model)"
                " + self.positions(torch.arange(src.shape[1], device=src.device))",
            ),
        ),
        "the decoder reads the source embeddings",
    ),
    Wrong(
        "encoder_decoder",
        "memory computed from the target",
        variant(
            "encoder_decoder",
            (
                "self.encode(src, src_padding), tgt_padding, src_padding)",
                "self.encode(tgt, tgt_padding), tgt_padding, tgt_padding)",
            ),
        ),
        "the memory must come from the source alone",
    ),
    Wrong(
        "encoder_decoder",
        "no final norms",
        variant(
            "encoder_decoder",
            ("return self.encoder_norm(x)", "return x"),
            ("return self.out_proj(self.decoder_norm(x))", "return self.out_proj(x)"),
        ),
        "the final LayerNorms of both stacks are missing",
    ),
    Wrong(
        "encoder_decoder",
        "decoder stack's final norm missing",
        variant("encoder_decoder", ("return self.out_proj(self.decoder_norm(x))", "return self.out_proj(x)")),
        "the decoder stack's final LayerNorm is missing",
    ),
    # Exercise 7
    Wrong(
        "transformer_num_parameters",
        "shared table counted three times",
        variant(
            "transformer_num_parameters", (_SHARED_TABLES, "tables = (c.src_vocab_size + 2 * c.tgt_vocab_size) * d  #")
        ),
        "the shared table is counted three times",
    ),
    Wrong(
        "transformer_num_parameters",
        "shared table counted twice (out_proj.weight as its own)",
        variant(
            "transformer_num_parameters", (_SHARED_TABLES, "tables = c.src_vocab_size * d + c.tgt_vocab_size * d  #")
        ),
        "the shared table is counted twice",
    ),
    Wrong(
        "transformer_num_parameters",
        "no biases anywhere",
        variant(
            "transformer_num_parameters",
            ("attention = 4 * (d * d + d)", "attention = 4 * d * d"),
            ("ffn = 2 * d * c.d_ff + c.d_ff + d", "ffn = 2 * d * c.d_ff"),
            ("tables + c.tgt_vocab_size", "tables + 0"),
        ),
        "the biases are missing",
    ),
    Wrong(
        "transformer_num_parameters",
        "out_proj's bias dropped",
        variant("transformer_num_parameters", ("tables + c.tgt_vocab_size", "tables + 0")),
        "out_proj's bias",
    ),
    Wrong(
        "transformer_num_parameters",
        "decoder blocks counted like encoder blocks",
        variant("transformer_num_parameters", (_DECODER_BLOCK, "(attention + ffn + 2 * norm)")),
        "the decoder blocks are counted like encoder blocks",
    ),
    Wrong(
        "transformer_num_parameters",
        "decoder blocks with two LayerNorms",
        variant("transformer_num_parameters", (_DECODER_BLOCK, "(2 * attention + ffn + 2 * norm)")),
        "a decoder block has three LayerNorms",
    ),
    Wrong(
        "transformer_num_parameters",
        "final LayerNorms forgotten",
        variant(
            "transformer_num_parameters",
            ("(attention + ffn + 2 * norm) + norm", "(attention + ffn + 2 * norm)"),
            (f"{_DECODER_BLOCK} + norm", _DECODER_BLOCK),
        ),
        "the final LayerNorms encoder_norm and decoder_norm",
    ),
    Wrong(
        "transformer_num_parameters",
        "LayerNorm counted as its weight only",
        variant("transformer_num_parameters", ("norm = 2 * d", "norm = d")),
        "each LayerNorm has a weight AND a bias",
    ),
    # Full code, not an edit: it builds the model and counts its parameters instead of working them out.
    Wrong(
        "transformer_num_parameters",
        "counts a model it builds",
        "def transformer_num_parameters(config):\n"
        "    return sum(p.numel() for p in EncoderDecoder(config).parameters())\n",
        "this exercise's rule is: work it out from the sizes in the config; do not build any module",
    ),
]
