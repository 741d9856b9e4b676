"""guidecheck.py — the examples of the docs/guide-*.md pages, so tests can
run them: a fenced block right after a line `<!-- test: run -->` is an
example to run; a fenced block right after `<!-- test: output -->` is what
the example before it must print: its lines, in order, must be lines of the
output (other output lines may come between), where `...` inside a line
stands for any text. Used by test_guides.py and, for the C guide, by
tests/install/run.sh:
    python3 guidecheck.py output GUIDE.md OUTPUT.txt [INDEX]
checks OUTPUT.txt against output block INDEX (default 0) of GUIDE.md."""
import re
import sys

_MARK = re.compile(r"^<!-- test: (run|output) -->\s*$")


def blocks(path):
    """[(kind, language, text)] of the marked blocks of a guide, in order."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = _MARK.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        if j >= len(lines) or not lines[j].startswith("```"):
            raise ValueError(f"{path}:{i + 1}: a test marker must be followed by a fenced block")
        lang = lines[j][3:].strip()
        k = j + 1
        while k < len(lines) and lines[k] != "```":
            k += 1
        if k == len(lines):
            raise ValueError(f"{path}:{j + 1}: unterminated fenced block")
        out.append((m[1], lang, "\n".join(lines[j + 1:k]) + "\n"))
        i = k + 1
    return out


def mismatch(expected, actual):
    """None if every line of expected matches a line of actual, in order;
    else the first expected line that does not."""
    got = actual.splitlines()
    pos = 0
    for want in expected.splitlines():
        if not want.strip():
            continue
        pattern = re.compile("^" + ".*".join(re.escape(p) for p in want.split("...")) + "$")
        while pos < len(got) and not pattern.match(got[pos]):
            pos += 1
        if pos == len(got):
            return want
        pos += 1
    return None


def main(argv):
    if len(argv) not in (4, 5) or argv[1] != "output":
        sys.exit("usage: guidecheck.py output GUIDE.md OUTPUT.txt [INDEX]")
    index = int(argv[4]) if len(argv) == 5 else 0
    outputs = [text for kind, _, text in blocks(argv[2]) if kind == "output"]
    if index >= len(outputs):
        sys.exit(f"guidecheck: {argv[2]} has {len(outputs)} output blocks, no block {index}")
    with open(argv[3], encoding="utf-8") as f:
        actual = f.read()
    bad = mismatch(outputs[index], actual)
    if bad is not None:
        sys.exit(f"guidecheck: {argv[2]}: output block {index}: no line matches {bad!r} in:\n{actual}")
    print(f"guidecheck: {argv[2]}: output block {index} matches")


if __name__ == "__main__":
    main(sys.argv)
