"""One reading of a message's content as text for every place dagent reads messages."""

from dagent.trajectory.messages import content_text


def test_strings_parts_and_nothing():
    assert content_text("plain") == "plain"
    assert content_text(None) == "" and content_text([]) == ""
    parts = [
        {"type": "text", "text": "a"},
        "not a part",
        {"type": "toolCall", "name": "bash"},
        {"type": "thinking", "text": "hmm"},
        {"type": "text", "text": 3},
    ]
    assert content_text(parts) == "ahmm3"  # every part's text, a non-string text as its string
    assert content_text(parts, part_type="text") == "a3"  # pi's assistant blocks: the text parts only
