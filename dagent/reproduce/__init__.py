"""`dagent reproduce` as a library: the stage pipeline (`pipeline`: build the suite, smoke every loop,
evaluate, train both loops, evaluate paired) and its receipts (`receipts`: the checks per stage,
results.md and validation.md). The command line only parses its options and prints."""
