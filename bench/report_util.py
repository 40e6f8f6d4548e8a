"""Shared by the Python bench drivers: paired-seed statistics and bench/RESULTS.md sections."""
import math
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def mean_se(xs):
    """Mean and standard error of the mean of xs (NaN error for a single value)."""
    n = len(xs)
    m = sum(xs) / n
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n) if n > 1 else float("nan"))


# Each bench owns the text between `<!-- KEY:begin -->` and `<!-- KEY:end -->` of
# bench/RESULTS.md and replaces it on a re-run (appended at the end the first time).
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
