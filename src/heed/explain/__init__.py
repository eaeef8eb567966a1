"""Looking inside a trained model: the reading registry (readings: every reading the command line,
the server and Translator.explain offer, each a module and one register line), given pairs made
ready from a codec (pairs), word alignments from attention and their methods (align,
align_methods), forced decoding, the layer x head sweep and a corpus's AER (forced), what is read
off given pairs for alignment (given_pairs), every head's maps and value norms (heads), rollout and
ALTI+ (contributions), the source share (source_share), the logit lens (logit_lens), how far two
models' attention is apart (attention_gap), attribution by gradients (attribution) and its
contrastive form (contrast), whether attention explains the output (faithfulness), and attention over training
(history). Reads models through heed.nn's protocols, as (model, codec, device); faithfulness is
handed a Translator (its translate and interventions) and history may be, but neither imports
heed.api. Never imports the facade, training, the CLI or the server."""
