#!/usr/bin/env bash
# Checks that each crate's top-level modules only use modules of lower layers.
#
#   scripts/check-layers.sh [CRATE_DIR...]
#
# The layers of each crate are declared below, lowest first. A module may name (in code, by a
# `crate::` or `super::` path, through a re-export at the crate root or not) only modules of
# strictly lower layers: an upward import, or one between two modules of the same layer,
# fails, and so does a top-level module that no layer lists. The crate root (lib.rs, main.rs),
# documentation-only modules and test-only code (`#[cfg(test)]` items, `#[cfg(all(test, ..))]`
# modules such as the loom models) are not checked. Comments and string literals are ignored:
# good enough for rustfmt-formatted code, not a parser. Exit status: 1 when anything is
# reported, 0 otherwise. Default: the three crates of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- crates/rcukit crates/rcukit-torture crates/rcukit-lab

export RCUKIT_SCRIPTS="$PWD/scripts"
exec python3 - "$@" <<'PY'
import os, re, sys
sys.dont_write_bytecode = True
sys.path.insert(0, os.environ['RCUKIT_SCRIPTS'])
from rust_source import code_only

# Lowest layer first. Keep the crates' documentation of their layers (rcukit:
# `docs::internal`; the torture's and the lab's lib.rs) in step with these lists.
LAYERS = {
    "rcukit": [
        ("foundations", "sync report error threads"),
        ("primitives", "barrier seq per_thread pages"),
        ("read side", "reader"),
        ("grace periods", "gp"),
        ("deferred work and the lock alternatives", "callbacks locks"),
        ("the domain", "domain"),
        ("what a domain offers its users", "section qsbr"),
        ("what containers share: their tie to a domain, the words of compute", "domain_ref compute"),
        ("containers", "cell list map flat_map"),
    ],
    "rcukit-torture": [
        ("foundations", "config flavor"),
        ("the element pipeline", "pipe"),
        ("counters", "counters"),
        ("the map under test and owned sections handed off", "map handoff"),
        ("the shared state", "shared"),
        ("update paths", "update"),
        ("the actors", "reader writer updater faults map_writer"),
        ("the verdict", "report"),
        ("the run", "engine"),
    ],
    "rcukit-lab": [
        ("foundations", "args env measure progress c_peers"),
        ("tables and output files", "report"),
        ("plots", "plot"),
        ("experiments", "experiments"),
        ("the command line", "cli"),
    ],
}
ROOTS = {"lib", "main"}
DOC_ONLY = {"docs"}


TEST_CFG = re.compile(r'#\[cfg\((test|all\(\s*test\b[^\]]*)\)\]')


def strip_tests(code):
    """Blank test-only items; return the code and the names of test-only `mod x;` files."""
    test_mods = set()
    chars = list(code)
    for m in TEST_CFG.finditer(code):
        j = m.end()
        # Skip further attributes, then the item: up to its `;` or its balanced `{...}`.
        depth, end = 0, None
        k = j
        while k < len(code):
            ch = code[k]
            if ch == '{':
                depth += 1
            elif ch == '}':
                depth -= 1
                if depth == 0:
                    end = k + 1
                    break
            elif ch == ';' and depth == 0:
                end = k + 1
                decl = re.match(r'\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;', code[j:end])
                if decl:
                    test_mods.add(decl.group(3))
                break
            k += 1
        end = end or len(code)
        for x in range(m.start(), end):
            if chars[x] != '\n':
                chars[x] = ' '
    return ''.join(chars), test_mods


def used_roots(code, depth):
    """Names at the crate root that `code` (of a module `depth` levels below the root) names."""
    found = []
    for m in re.finditer(r'\b(crate|super(?:\s*::\s*super)*)\s*::\s*(\{|\w+)', code):
        if m.group(1) != 'crate' and m.group(1).count('super') < depth:
            continue  # inside the module's own tree
        line = code.count('\n', 0, m.start()) + 1
        if m.group(2) != '{':
            found.append((m.group(2), line))
            continue
        # A group: `crate::{a, b::c, d::{e, f}}`: the first segment of each element.
        k, depth_b, start = m.end(), 1, m.end()
        elements = []
        while k < len(code) and depth_b:
            ch = code[k]
            if ch == '{':
                depth_b += 1
            elif ch == '}':
                depth_b -= 1
            elif ch == ',' and depth_b == 1:
                elements.append(code[start:k])
                start = k + 1
            k += 1
        elements.append(code[start:k - 1])
        for e in elements:
            first = re.match(r'\s*(\w+)', e)
            if first and first.group(1) not in ('self',):
                found.append((first.group(1), line))
    return found


def root_exports(lib):
    """Names the crate root re-exports, and the top-level module each comes from."""
    code = code_only(open(lib, encoding='utf-8').read())
    names = {}
    for m in re.finditer(r'pub\s+use\s+(\w+)((?:::\w+)*)::(\{[^;]*\}|\w+(?:\s+as\s+\w+)?)\s*;', code):
        module, _, items = m.group(1), m.group(2), m.group(3)
        for item in re.split(r'[{},]', items):
            item = item.strip()
            if not item:
                continue
            alias = re.match(r'(\w+)(?:\s+as\s+(\w+))?', item)
            names[alias.group(2) or alias.group(1)] = module
    return names


def check(crate_dir):
    name = os.path.basename(os.path.normpath(crate_dir))
    src = os.path.join(crate_dir, 'src')
    layers = LAYERS[name]
    layer_of = {}
    for index, (_, mods) in enumerate(layers):
        for mod in mods.split():
            layer_of[mod] = index
    top = set()
    for entry in os.listdir(src):
        path = os.path.join(src, entry)
        if entry.endswith('.rs'):
            top.add(entry[:-3])
        elif os.path.isdir(path):
            top.add(entry)
    top -= ROOTS | DOC_ONLY
    for root in ROOTS:
        lib = os.path.join(src, root + '.rs')
        if os.path.exists(lib):
            top -= strip_tests(code_only(open(lib, encoding='utf-8').read()))[1]
    errors = []
    for mod in sorted(top - set(layer_of)):
        errors.append(f'{src}/{mod}: a top-level module that no layer lists (see LAYERS in scripts/check-layers.sh)')
    for mod in sorted(set(layer_of) - top):
        errors.append(f'{src}: layer list names {mod!r}, which is not a top-level module')
    exports = {}
    for root in ROOTS:
        lib = os.path.join(src, root + '.rs')
        if os.path.exists(lib):
            exports.update(root_exports(lib))
    # First pass: every file's code, and the files of test-only modules (skipped).
    files, skipped = [], set()
    for dirpath, dirs, names in os.walk(src):
        dirs.sort()
        for f in sorted(names):
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src).split(os.sep)
            mod = rel[0][:-3] if len(rel) == 1 else rel[0]
            if not f.endswith('.rs') or mod in ROOTS or mod in DOC_ONLY or mod not in layer_of:
                continue
            code, test_mods = strip_tests(code_only(open(path, encoding='utf-8').read()))
            # Where the files of its `mod x;` declarations live.
            here = dirpath if f == 'mod.rs' else os.path.join(dirpath, f[:-3])
            for t in test_mods:
                skipped.add(os.path.join(here, t + '.rs'))
                skipped.add(os.path.join(here, t, ''))
            # How deep the file's module is: `a.rs` and `a/mod.rs` 1, `a/b.rs` 2, ...
            depth = len(rel) - (1 if f == 'mod.rs' else 0)
            files.append((path, mod, depth, code))
    for path, mod, depth, code in files:
        if any(path == s or (s.endswith(os.sep) and path.startswith(s)) for s in skipped):
            continue
        for used, line in used_roots(code, depth):
            target = used if used in top else exports.get(used)
            if target is None or target == mod or target not in layer_of:
                continue
            if layer_of[target] >= layer_of[mod]:
                same = layer_of[target] == layer_of[mod]
                errors.append(
                    f'{path}:{line}: {mod} ({layers[layer_of[mod]][0]}) uses {target}'
                    + (f' (crate::{used})' if used != target else '')
                    + (', of the same layer' if same else f', of a higher layer ({layers[layer_of[target]][0]})'))
    return errors


bad = False
for crate in sys.argv[1:]:
    errors = check(crate)
    for e in errors:
        print(e)
    if errors:
        bad = True
    else:
        name = os.path.basename(os.path.normpath(crate))
        print(f'{name}: layers ok (' + ' < '.join(' '.join(mods.split()) for _, mods in LAYERS[name]) + ')')
sys.exit(1 if bad else 0)
PY
