#!/usr/bin/env python3
"""Lists the lines longer than 120 characters in the repository's code and scripts, and exits
non-zero when there is one.

Why: a line that fits in 120 columns can be read in a side-by-side diff, a terminal and a code
review without scrolling sideways. rustfmt formats Rust to 100 columns (its default max_width)
but leaves the lines it cannot break (long string literals, comments, some macro calls), and
nothing keeps shell, Python and C short. This check covers every file git tracks of these kinds:
  *.rs *.c *.h *.sh *.py, and the files without an extension under scripts/ and .ci/
(the executable scripts there). Data, generated files and documentation (*.md, *.json, *.yaml,
go.sum) are not checked.

A character is a Unicode code point (files are read as UTF-8); a tab counts as one. Untracked
files are not checked, nor files that are not text (a NUL byte in them).

Output: PATH:LINE: LENGTH characters for each long line (or one line per file with --files),
then a summary on stderr. Exit status: 0 when no line is longer than the limit, 1 when one is,
2 when git cannot list the files.

Usage: scripts/check_lines.py [--max N] [--files]
"""

import argparse
import os
import subprocess
import sys

PATTERNS = ["*.rs", "*.c", "*.h", "*.sh", "*.py"]
# Directories whose files without an extension are scripts (.ci/run, ...).
SCRIPT_DIRS = ["scripts", ".ci"]


def tracked_files(root):
    """The tracked files to check, relative to root, sorted."""
    def ls(*pathspecs):
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--", *pathspecs],
                             capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p]

    files = set(ls(*PATTERNS))
    for path in ls(*SCRIPT_DIRS):
        if "." not in os.path.basename(path):
            files.add(path)
    return sorted(files)


def long_lines(path, limit):
    """(line number, length) of each line of path longer than limit; [] for a file that is not
    text or is gone from the work tree."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    if b"\0" in data:
        return []
    text = data.decode("utf-8", errors="replace")
    # Lines end at \n only (as for git, editors and awk; str.splitlines also splits at \f, ...).
    return [(n, len(line)) for n, line in enumerate(text.split("\n"), 1) if len(line) > limit]


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:-1]).rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, default=120, metavar="N",
                    help="the longest line allowed (default 120)")
    ap.add_argument("--files", action="store_true",
                    help="one line per file (its count of long lines and the longest), "
                    "not per line")
    args = ap.parse_args()

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        files = tracked_files(root)
    except (OSError, subprocess.CalledProcessError) as e:
        why = getattr(e, "stderr", None) or b""
        print(f"check_lines: cannot list the tracked files of {root} with git: {e} "
              f"{why.decode(errors='replace').strip()}", file=sys.stderr)
        return 2

    total, bad_files = 0, 0
    for path in files:
        found = long_lines(os.path.join(root, path), args.max)
        if not found:
            continue
        total += len(found)
        bad_files += 1
        if args.files:
            lines = "1 line" if len(found) == 1 else f"{len(found)} lines"
            print(f"{path}: {lines}, the longest {max(n for _, n in found)} characters")
        else:
            for line, length in found:
                print(f"{path}:{line}: {length} characters")
    if total:
        print(f"check_lines: {total} lines longer than {args.max} characters in {bad_files} of the "
              f"{len(files)} files checked; wrap them (a string can be split into parts)",
              file=sys.stderr)
        return 1
    print(f"check_lines: no line longer than {args.max} characters in the {len(files)} files "
          "checked", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
