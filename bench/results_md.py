"""bench/RESULTS.md sections: each bench owns the text between `<!-- KEY:begin -->` and
`<!-- KEY:end -->` and replaces it on a re-run (appended at the end the first time)."""
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def replace_section(key, text):
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    with open(PATH) as f:
        md = f.read()
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    if begin in md and end in md:
        md = md[:md.index(begin)] + block + md[md.index(end) + len(end) + 1:]
    else:
        md = md.rstrip("\n") + "\n\n" + block
    with open(PATH, "w") as f:
        f.write(md)
