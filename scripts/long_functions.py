#!/usr/bin/python3
"""Functions longer than a line limit, found with Universal Ctags.

    scripts/long_functions.py [--limit 80] [--baseline FILE] [--write-baseline FILE] FOLDER...

Prints one line per function longer than the limit ("path:line function N
lines"), longest first. With --baseline, exits 1 when a function that is not
in the baseline file (path and function name, one per line) is over the limit,
so new code stays within it while today's long functions are split one by one
(.clang-tidy holds the same limit for clang-tidy's readability-function-size).
Lambdas count as part of the function that holds them.
"""
import argparse
import json
import subprocess
import sys


def long_functions(folders, limit):
    out = subprocess.run(
        ["ctags", "-R", "--languages=C++", "--kinds-C++=f", "--fields=+neS", "--extras=-q",
         "--output-format=json", "-f", "-"] + folders,
        check=True, capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        tag = json.loads(line)
        if tag.get("name", "").startswith("__anon") or "end" not in tag:
            continue  # lambdas: counted in their enclosing function
        # Class::function, without namespaces (they move; the class does not).
        scope = tag.get("scope", "").split("::")[-1] if tag.get("scopeKind") != "namespace" else ""
        name = (scope + "::" if scope and not scope.startswith("__anon") else "") + tag["name"]
        n = tag["end"] - tag["line"] + 1
        if n > limit:
            found.append((n, tag["path"], tag["line"], name))
    found.sort(key=lambda f: (-f[0], f[1], f[2]))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--baseline")
    ap.add_argument("--write-baseline")
    ap.add_argument("folders", nargs="+")
    a = ap.parse_args()
    found = long_functions(a.folders, a.limit)
    for n, path, line, name in found:
        print(f"{path}:{line} {name} {n} lines")
    if a.write_baseline:
        with open(a.write_baseline, "w") as f:
            f.write(f"# Functions over {a.limit} lines when the limit was set (scripts/long_functions.py).\n")
            f.write("# Split them and delete their line; never add one.\n")
            for _, path, _, name in sorted(found, key=lambda f: (f[1], f[3])):
                f.write(f"{path} {name}\n")
    if a.baseline:
        with open(a.baseline) as f:
            known = {l.strip() for l in f if l.strip() and not l.startswith("#")}
        new = [f for f in found if f"{f[1]} {f[3]}" not in known]
        for n, path, line, name in new:
            print(f"{path}:{line}: {name} is {n} lines, over the {a.limit}-line limit and not in {a.baseline}",
                  file=sys.stderr)
        if new:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
