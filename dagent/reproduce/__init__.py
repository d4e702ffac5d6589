"""`dagent reproduce` as a library: the stage pipeline (`pipeline`: build the suite, smoke every loop,
evaluate, train both loops, evaluate paired), its profiles (`profiles`), a stage's record (`stages`),
the smoke stages (`smokes`), the checkpoint checks (`checkpoints`) and its receipts (`receipts`: the
checks per stage, results.md and validation.md). The command line only parses its options and prints."""
