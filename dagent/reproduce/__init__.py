"""`dagent reproduce`: every stage from the suite to the paired evaluation (`pipeline`), and the
receipts and results it writes (`report`).
"""
