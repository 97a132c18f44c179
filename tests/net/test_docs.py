"""docs/net.md's message tables are the codec's registry (generated, kept equal by this test)."""
import pathlib

from quorumlog.net.codec import describe_tables

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "net.md"


def test_message_tables_match_the_codec():
    text = DOC.read_text()
    begin = text.index("<!-- BEGIN GENERATED MESSAGE TABLES -->\n\n") + \
        len("<!-- BEGIN GENERATED MESSAGE TABLES -->\n\n")
    end = text.index("<!-- END GENERATED MESSAGE TABLES -->")
    assert text[begin:end].strip() == describe_tables().strip(), \
        "regenerate the tables in docs/net.md (see the command above them)"
