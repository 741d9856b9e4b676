#!/usr/bin/env bash
# check-docs.sh — the documentation stays short and its links resolve.
#
# Checks, for README.md and every docs/*.md:
#   1. docs/*.md are at most MAX_LINES lines (default 400);
#   2. every relative markdown link [text](path[#anchor]) outside code names
#      a file that exists, and an #anchor names a heading of the target
#      .md file (GitHub's rule: lower case, punctuation dropped, spaces to
#      hyphens, a repeated heading gets -1, -2, ...);
#   3. every docs/<name>.md written anywhere in the tracked files (source
#      comments, scripts, docs) exists.
# Prints one line per problem (file:line: what) and exits 1 if there is any.
# Usage: scripts/check-docs.sh [SOURCE_DIR]   (ctest: check_docs)
set -euo pipefail
root=${1:-"$(dirname "$0")/.."}
cd "$root"
MAX_LINES=${MAX_LINES:-400} exec python3 - <<'EOF'
import os, re, subprocess, sys

max_lines = int(os.environ["MAX_LINES"])
problems = []
docs = sorted("docs/" + f for f in os.listdir("docs") if f.endswith(".md"))
files = ["README.md"] + docs

def slug(text):
    text = re.sub(r"`|\*\*|\*", "", text.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")

anchors = {}
def anchors_of(path):
    if path not in anchors:
        seen, out, fence = {}, set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.lstrip().startswith("```"):
                    fence = not fence
                    continue
                m = None if fence else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    s = slug(m.group(1))
                    n = seen.get(s, 0)
                    seen[s] = n + 1
                    out.add(s if n == 0 else f"{s}-{n}")
        anchors[path] = out
    return anchors[path]

link = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
for path in files:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if path.startswith("docs/") and len(lines) > max_lines:
        problems.append(f"{path}: {len(lines)} lines, more than {max_lines}")
    fence = False
    for no, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        for target in link.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                problems.append(f"{path}:{no}: link to {target}: no file {dest}")
            elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                problems.append(f"{path}:{no}: link to {target}: {dest} has no heading #{anchor}")

try:
    tracked = subprocess.run(["git", "ls-files", "-z"], capture_output=True, check=True).stdout.decode().split("\0")
except (OSError, subprocess.CalledProcessError):
    tracked = []  # not a git checkout: check 3 is skipped
mention = re.compile(r"docs/[A-Za-z0-9_-]+\.md")
for path in tracked:
    if not path or not os.path.isfile(path) or path.startswith("docs/img/"):
        continue
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        continue
    for no, line in enumerate(text.split("\n"), 1):
        for name in mention.findall(line):
            if not os.path.exists(name) and not os.path.exists(os.path.join(os.path.dirname(path), name)):
                problems.append(f"{path}:{no}: names {name}, which does not exist")

for p in problems:
    print(p)
if problems:
    print(f"check-docs: {len(problems)} problem(s)", file=sys.stderr)
    sys.exit(1)
print(f"check-docs: {len(files)} files, links and line caps ok")
EOF
