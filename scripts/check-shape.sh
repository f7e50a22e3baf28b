#!/usr/bin/env bash
# Reports Rust functions longer than N lines and files longer than M lines.
#
#   scripts/check-shape.sh [--fn-lines N] [--file-lines M] [--exclude GLOB]... DIR...
#
# Defaults: N = 60, M = 700. A function is counted from the line holding its
# `fn` keyword to the line closing its body (signature and body; attributes
# and doc comments above it are not counted). The scan matches braces after
# removing comments, string and char literals: good enough for
# rustfmt-formatted code, not a parser. Exit status: 1 when anything is
# reported, 0 otherwise.
set -euo pipefail

fn_lines=60
file_lines=700
excludes=()
dirs=()
while [ $# -gt 0 ]; do
    case "$1" in
    --fn-lines) fn_lines="$2"; shift 2 ;;
    --file-lines) file_lines="$2"; shift 2 ;;
    --exclude) excludes+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) dirs+=("$1"); shift ;;
    esac
done
[ ${#dirs[@]} -gt 0 ] || dirs=(.)

export RCUKIT_SCRIPTS="$(cd "$(dirname "$0")" && pwd)"
exec python3 - "$fn_lines" "$file_lines" "${#excludes[@]}" "${excludes[@]}" "${dirs[@]}" <<'PY'
import fnmatch, os, re, sys
sys.dont_write_bytecode = True
sys.path.insert(0, os.environ['RCUKIT_SCRIPTS'])
from rust_source import code_only

fn_max, file_max, n_ex = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
excludes = sys.argv[4:4 + n_ex]
dirs = sys.argv[4 + n_ex:]
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern(\s+"[^"]*")?)\s+)*fn\s+(?P<name>\w+)')


def long_fns(path):
    code = code_only(open(path, encoding='utf-8').read()).split('\n')
    found = []
    for start, line in enumerate(code):
        m = FN.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for end in range(start, len(code)):
            for ch in code[end]:
                if ch == '{':
                    depth, opened = depth + 1, True
                elif ch == '}':
                    depth -= 1
                elif ch == ';' and not opened and depth == 0:
                    break  # a declaration without a body
            else:
                if opened and depth == 0:
                    length = end - start + 1
                    if length > fn_max:
                        found.append((length, start + 1, m.group("name")))
                    break
                continue
            break
    return found


bad = False
for d in dirs:
    for root, _, names in sorted(os.walk(d)):
        for name in sorted(names):
            path = os.path.join(root, name)
            if not name.endswith('.rs') or any(fnmatch.fnmatch(path, g) for g in excludes):
                continue
            lines = sum(1 for _ in open(path, encoding='utf-8'))
            if lines > file_max:
                print(f'file {path}: {lines} lines (> {file_max})')
                bad = True
            for length, line, fn in long_fns(path):
                print(f'fn   {path}:{line} {fn}: {length} lines (> {fn_max})')
                bad = True
sys.exit(1 if bad else 0)
PY
