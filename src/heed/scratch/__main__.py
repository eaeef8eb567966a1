"""`python -m heed.scratch` trains the NumPy attention seq2seq on the dates task."""
from heed.scratch.train import main

main()
