#!/usr/bin/env python3
"""check-includes.py — the include graph between the parts stays layered.

Every part gets src/ as its include path, so nothing in the compiler stops a
lower layer from reaching up; this script does. For each .c/.h file under
src/ and include/dynapipe/, each `#include "..."` is mapped to the part that
owns the named file, and the edge (including part -> owning part) must be in
ALLOWED below (an include inside one's own part is always allowed).

Ownership: src/<part>/... belongs to <part>; src/version.c is the library's
top ("lib": it sizes every public struct for dyn_abi_sizeof); a public header
include/dynapipe/X.h belongs to the part that implements it (PUBLIC_OWNER),
except common.h, which every part may include (it holds the error record
and the shared types). Public headers themselves may include only each
other and standard C headers. <mpi.h> is the runtime's alone.

Prints one line per bad include (file:line: what) and exits 1 if any.
Usage: scripts/check-includes.py [SOURCE_DIR]   (ctest: check_includes)
"""
import os
import re
import sys

# part -> the parts it may include (besides itself and dynapipe/common.h).
ALLOWED = {
    "util": set(),
    "data": {"util"},
    "cost": {"util"},
    "plan": {"cost", "util"},
    "sched": {"plan", "cost", "util"},
    "sim": {"sched", "plan", "cost", "util"},
    "pipeline": {"plan", "sched", "sim", "cost", "util"},
    "lib": {"util", "data", "cost", "plan", "sched", "sim", "pipeline"},
    "model": {"util", "cost"},
    "runtime": {"util", "data", "cost", "plan", "sched", "sim", "pipeline", "model", "lib"},
    "cli": {"util", "data", "cost", "plan", "sched", "sim", "pipeline", "model", "lib", "runtime"},
}

# Public header -> the part that implements it.
PUBLIC_OWNER = {
    "common.h": None,  # shared by all
    "dynapipe.h": "lib",
    "version.h": "lib",
    "data.h": "data",
    "corpus.h": "data",
    "cost.h": "cost",
    "model_config.h": "cost",
    "plan.h": "plan",
    "sched.h": "sched",
    "sim.h": "sim",
    "pipeline.h": "pipeline",
}

# Known edges that break the layering, each with its reason. Keep empty.
EXCEPTIONS = {
    # ("file", "included"): "why",
}

# Standard C headers a public header may include.
STD_HEADERS = {
    "assert.h", "complex.h", "ctype.h", "errno.h", "fenv.h", "float.h", "inttypes.h", "iso646.h",
    "limits.h", "locale.h", "math.h", "setjmp.h", "signal.h", "stdalign.h", "stdarg.h",
    "stdatomic.h", "stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h", "stdnoreturn.h",
    "string.h", "tgmath.h", "threads.h", "time.h", "uchar.h", "wchar.h", "wctype.h",
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')


def part_of_source(rel):
    """The part a file under src/ belongs to."""
    parts = rel.split("/")
    if len(parts) == 2:  # src/<file>: the library's top level
        return "lib"
    return parts[1]


def owner_of(target, including_dir, root):
    """The part owning `#include "target"`, None for common.h, or '?' if unknown."""
    if target.startswith("dynapipe/"):
        name = target[len("dynapipe/"):]
        return PUBLIC_OWNER.get(name, "?")
    if os.path.exists(os.path.join(including_dir, target)):  # beside the includer
        return part_of_source(os.path.relpath(os.path.join(including_dir, target), root))
    first = target.split("/")[0]
    if first in ALLOWED and first != "lib" and os.path.exists(os.path.join(root, "src", target)):
        return first
    return "?"


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    n_files = 0
    for top in ("src", os.path.join("include", "dynapipe")):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                n_files += 1
                public = rel.startswith("include" + os.sep)
                part = None if public else part_of_source(rel)
                if part is not None and part not in ALLOWED:
                    problems.append(f"{rel}: part '{part}' is not in ALLOWED (scripts/check-includes.py)")
                    continue
                with open(path, encoding="utf-8") as fp:
                    for lineno, line in enumerate(fp, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        quote, target = m.groups()
                        where = f"{rel}:{lineno}"
                        if (rel, target) in EXCEPTIONS:
                            continue
                        if public:
                            if quote == "<" and target not in STD_HEADERS:
                                problems.append(f"{where}: public header includes <{target}>, not a standard C header")
                            elif quote == '"' and (not target.startswith("dynapipe/")
                                                   or target[len("dynapipe/"):] not in PUBLIC_OWNER):
                                problems.append(f"{where}: public header includes \"{target}\", not a public header")
                            continue
                        if quote == "<":
                            if target == "mpi.h" and part != "runtime":
                                problems.append(f"{where}: <mpi.h> outside src/runtime")
                            continue
                        owner = owner_of(target, dirpath, root)
                        if owner == "?":
                            problems.append(f"{where}: \"{target}\" names no known header")
                        elif owner is not None and owner != part and owner not in ALLOWED[part]:
                            problems.append(f"{where}: {part} may not include {owner} (\"{target}\")")
    for p in problems:
        print(p)
    if problems:
        print(f"check-includes: {len(problems)} bad include(s); the allowed edges are in scripts/check-includes.py",
              file=sys.stderr)
        return 1
    print(f"check-includes: {n_files} files, every include within the allowed layering")
    return 0


if __name__ == "__main__":
    sys.exit(main())
