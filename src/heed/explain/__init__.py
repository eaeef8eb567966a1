"""Looking inside a trained model: word alignments from attention and their methods (align,
align_methods), forced decoding and the layer x head sweep (forced), where attention and the output
disagree (attention_gap), attribution by gradients (attribution), whether attention explains the
output (faithfulness), and attention over training (history). Reads models through
heed.nn's protocols and heed.api's Translator; never imports training, the CLI or the server."""
