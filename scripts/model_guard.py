"""The drift guard the CPU models share (scripts/*_model.py): each transcribes lines of the code it models, and
stops with exit status 1 when one of them is no longer there, naming them, so that model and code change together."""
import sys


def read_transcribed(path, lines, what):
    """The text of `path`, after checking it still contains every one of `lines` (exit 1 listing those it lost)."""
    with open(path) as f:
        source = f.read()
    drifted = [line for line in lines if line not in source]
    if drifted:
        print(what + " no longer has these lines the model transcribes (update the model):", *drifted, sep="\n  ")
        sys.exit(1)
    return source
