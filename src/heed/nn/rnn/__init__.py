"""The RNN family: a (bi)LSTM/GRU encoder and Luong, Bahdanau or plain decoders, with input
feeding, coverage and copy attention (heed.nn.rnn.build makes one from a config)."""
