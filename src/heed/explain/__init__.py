"""Looking inside a trained model: word alignments from attention and their methods (align,
align_methods), forced decoding, the layer x head sweep and a corpus's AER (forced), what a
Translator reads off given pairs (given_pairs: the explanation half of heed.api.Translator), how far
two models' attention is apart (attention_gap), attribution by gradients (attribution), whether
attention explains the output (faithfulness), and attention over training (history). Reads models through
heed.nn's protocols and heed.api's Translator; never imports training, the CLI or the server."""
