"""`python -m heed` runs the command-line interface."""
from heed.cli import main

main()
