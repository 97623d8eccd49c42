#!/usr/bin/env python3
"""Import cycles between modules of each crate under crates/.

At every level of a crate's module tree (the crate root, then each directory module), the
nodes are the sibling modules at that level (a file or directory) and the level's own file
(`lib.rs`, `main.rs` or `mod.rs`), printed as `self`. An edge A -> B means some file inside A
names B: `crate::B` at the root (or a name the root re-exports from B with `pub use B::…`), or
`super::B` / `crate::…::B` one level down. A child that names an item the level's own file
defines (`super::Client`, `crate::s3_answer`) has an edge to `self`; the level's own file has an
edge to a child it names in its code (`child::f()`, `use child::X;`, or a name `X` that
`pub use child::X;` brought in), but not for declaring it (`mod child;`) or only re-exporting
from it (`pub use child::X;` and no other use of `X`: a facade). So a `mod.rs` that
uses its children while they use it counts as a cycle. Comments are ignored. Prints every
strongly connected component of more than one module and exits 1 when there is one, so CI can
keep the crates free of cycles.

Test code is ignored, as the compiler ignores it outside `cargo test` (and as `cargo modules`
does by default): an item under `#[cfg(test)]` — an inline `mod tests { … }` (its end found by
matching braces, skipping strings, chars and comments), a `fn`, `use`, `impl`, … — is cut from
its file, and a `#[cfg(test)] mod NAME;` takes its file (`NAME.rs`, or the directory `NAME/`,
beside the declaring module) out of the tree: it is no node and names nothing. So tests may
build maps with the builder without that counting as a dependency of the code under test. Only
the exact attribute `#[cfg(test)]` is recognised (`cfg(all(test, …))` and the like are not), and
a `#[path]` on a test module is not followed.

Usage: scripts/module-cycles.py [--known FILE] [CRATE_DIR ...]
       (default: every crate under crates/)

With `--known FILE`, a cycle listed in FILE (lines `CRATE: LEVEL: mod, mod, …`, as this script
prints them after "cycle of N modules:"; `#` starts a comment) is reported but not counted,
provided the cycle found is that one or a part of it: a known cycle may shrink, never grow, and
a new one fails. That lets CI hold the line while a cycle being taken apart is still there.
"""
import functools
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
# Test-only files and directories (`#[cfg(test)] mod NAME;`, and what an inline test module's
# own `mod` declarations would load), found by `prepare`.
TEST_ONLY = set()
RAW_STRING = re.compile(r'(?:b|c)?r(#*)"')
STRING = re.compile(r'(?:b|c)?"')
# a char literal, not a lifetime: `'a'`, `'\''`, `'\u{1F600}'`, `b'x'`
CHAR = re.compile(r"b?'(?:\\(?:u\{[0-9a-fA-F_]*\}|x..|.)|[^\\'])'", re.S)


def skip_literal(text, i):
    """If a comment, string, raw string or char literal starts at `i`, the index just past it;
    else `i`."""
    n = len(text)
    if text.startswith("//", i):
        end = text.find("\n", i)
        return n if end < 0 else end
    if text.startswith("/*", i):
        depth, j = 0, i
        while j < n:
            if text.startswith("/*", j):
                depth, j = depth + 1, j + 2
            elif text.startswith("*/", j):
                depth, j = depth - 1, j + 2
                if depth == 0:
                    return j
            else:
                j += 1
        return n
    if text[i] not in "\"'bcr":
        return i
    prev = text[i - 1] if i > 0 else " "
    if prev.isalnum() or prev == "_":
        return i
    raw = RAW_STRING.match(text, i)
    if raw:
        end = text.find('"' + raw.group(1), raw.end())
        return n if end < 0 else end + 1 + len(raw.group(1))
    quote = STRING.match(text, i)
    if quote:
        j = quote.end()
        while j < n and text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return j + 1
    char = CHAR.match(text, i)
    return char.end() if char else i


def skip_attribute(text, i):
    """The index just past the attribute (`#[…]` or `#![…]`) at `i`, or `i` if none is there."""
    match = re.compile(r"#\s*!?\s*\[").match(text, i)
    if not match:
        return i
    depth, j = 1, match.end()
    while j < len(text) and depth:
        k = skip_literal(text, j)
        if k != j:
            j = k
            continue
        depth += {"[": 1, "]": -1}.get(text[j], 0)
        j += 1
    return j


QUALIFIERS = ("pub", "crate", "super", "self", "in", "unsafe", "async", "extern", "default")


def item_end(text, i):
    """The index just past the item (or statement) that starts at `i`, after any more
    attributes: the `}` that closes its body, or its `;` at depth 0. A `use`, `const`,
    `static`, `let` or `type` ends at its `;`, braces and all (`const fn` is a function)."""
    n = len(text)
    ident = re.compile(IDENT)
    depth = 0
    keyword = None
    while i < n:
        j = skip_literal(text, i)
        if j == i and depth == 0 and keyword is None:
            j = skip_attribute(text, i)
        if j != i:
            i = j
            continue
        word = ident.match(text, i) if depth == 0 and keyword in (None, "const") else None
        if word and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            if keyword == "const":
                if word.group(0) in ("fn", "unsafe", "async", "extern"):
                    keyword = "fn"
            elif word.group(0) not in QUALIFIERS:
                keyword = word.group(0)
            i = word.end()
            continue
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and ch == "}" and keyword not in ("use", "const", "static", "let", "type"):
                return i + 1
        elif ch == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def module_dir(file):
    """Where the modules that `file` declares live."""
    if os.path.basename(file) in ("lib.rs", "main.rs", "mod.rs"):
        return os.path.dirname(file)
    return file[:-3]


def strip_tests(text, file=None):
    """`text` without its `#[cfg(test)]` items; the test-only modules it declares go into
    `TEST_ONLY` when `file` is given."""
    out = []
    i = 0
    n = len(text)
    while i < n:
        j = skip_literal(text, i)
        if j != i:
            out.append(text[i:j])
            i = j
            continue
        match = CFG_TEST.match(text, i)
        if not match:
            out.append(text[i])
            i += 1
            continue
        end = item_end(text, match.end())
        item = text[match.end() : end]
        start = match.end()
        while True:
            start = re.compile(r"\s*").match(text, start).end()
            after = skip_attribute(text, start)
            if after == start:
                break
            start = after
        declared = re.compile(
            r"\s*(?:pub\s*(?:\([^)]*\))?\s*)?mod\s+(" + IDENT + r")\s*[;{]"
        ).match(text, start)
        if declared and file:
            base = os.path.join(module_dir(file), declared.group(1))
            TEST_ONLY.update({base + ".rs", base})
        out.append("\n" * item.count("\n"))
        i = end
    return "".join(out)


@functools.lru_cache(maxsize=None)
def source(file):
    """The code of `file` that the crate is built from: test items and comments removed."""
    return strip_comments(strip_tests(open(file, encoding="utf-8").read()))


def prepare(src):
    """Finds the test-only module files of the crate whose sources are in `src`."""
    for file in rust_files(src):
        strip_tests(open(file, encoding="utf-8").read(), file)


def rust_files(path):
    if path in TEST_ONLY:
        return []
    if path.endswith(".rs"):
        return [path]
    found = []
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in TEST_ONLY]
        found += [os.path.join(root, n) for n in names if n.endswith(".rs")]
    return sorted(f for f in found if f not in TEST_ONLY)


def children(directory):
    """Sibling modules directly in `directory`: name -> file or directory path."""
    mods = {}
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        if entry in ("lib.rs", "main.rs", "mod.rs") or path in TEST_ONLY:
            continue
        if entry.endswith(".rs"):
            mods[entry[:-3]] = path
        elif os.path.isdir(path) and rust_files(path):
            mods[entry] = path
    return mods


def reexports(level_file, mods):
    """Names that the level's own file (lib.rs / mod.rs) re-exports from a child module."""
    names = {}
    if not level_file or not os.path.exists(level_file):
        return names
    text = source(level_file)
    for module, rest in re.findall(r"pub\s+use\s+(" + IDENT + r")::([^;]*);", text, flags=re.S):
        if module in mods:
            for name in re.findall(IDENT, rest):
                names.setdefault(name, module)
    return names


def referenced(text, prefix, mods, exported):
    """Children of the level named by paths that start with `prefix` (e.g. `crate::` or
    `super::`)."""
    targets = set()
    pattern = re.escape(prefix)
    for name in re.findall(r"\b" + pattern + r"(" + IDENT + r")", text):
        targets.add(name)
    for group in re.findall(r"\b" + pattern + r"\{([^;]*?)\}\s*;", text, flags=re.S):
        # top-level names of a use group: those not preceded by `::`
        depth = 0
        token = ""
        for ch in group + ",":
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if depth == 0 and ch == ",":
                match = re.match(r"\s*(" + IDENT + r")", token)
                if match:
                    targets.add(match.group(1))
                token = ""
            elif depth == 0:
                token += ch
    result = set()
    for name in targets:
        if name in mods:
            result.add(name)
        elif name in exported:
            result.add(exported[name])
    return result


# The node of a level's own file (`lib.rs`, `main.rs`, `mod.rs`): `self`, a keyword, is never a
# module's name.
LEVEL = "self"
ITEM = re.compile(
    r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+(" + IDENT + r")"
    r"|\bmacro_rules!\s*(" + IDENT + r")"
)


def defined(level_file, mods):
    """Names of the items the level's own file defines (not its child modules)."""
    if not level_file or not os.path.exists(level_file):
        return set()
    names = {a or b for a, b in ITEM.findall(source(level_file))}
    return names - set(mods) - {"self", "super", "crate"}


def level_uses(level_file, crate_path, mods, exported):
    """Children that the level's own file names in its code: not in `mod child;` declarations
    nor in `pub use child::…;` re-exports (a facade), but in any other path that starts at a
    child (`child::f()`, `use child::X;`, `self::child::…`, `crate::…::child`)."""
    if not level_file or not os.path.exists(level_file):
        return set()
    text = source(level_file)
    text = re.sub(r"(?:pub\s*(?:\([^)]*\))?\s*)?mod\s+" + IDENT + r"\s*;", "", text)
    # Names a re-export brings into scope: using one in the file's code uses its module.
    brought = {}

    def facade(match):
        if match.group(1) not in mods:
            return match.group(0)
        for name in re.findall(IDENT, match.group(2)):
            brought.setdefault(name, match.group(1))
        return ""

    text = re.sub(
        r"\bpub\s*(?:\([^)]*\))?\s*use\s+(?:self::)?(" + IDENT + r")::([^;]*);",
        facade,
        text,
        flags=re.S,
    )
    targets = set()
    for name, module in brought.items():
        # (not a field: `.name`, `name: T`)
        used = r"(?<![\w:.])" + name + r"\b(?!\s*:(?!:))"
        if name not in ("self", "as") and re.search(used, text):
            targets.add(module)
    for name in re.findall(r"(?<![\w:])(?:self::)?(" + IDENT + r")\s*::", text):
        if name in mods:
            targets.add(name)
    for prefix in ("crate::" + "".join(p + "::" for p in crate_path), "self::"):
        targets |= referenced(text, prefix, mods, exported)
    return targets


def level_edges(directory, crate_path, level_file):
    mods = children(directory)
    exported = reexports(level_file, mods)
    own = defined(level_file, mods)
    edges = {m: set() for m in mods}
    for mod, path in mods.items():
        for file in rust_files(path):
            text = source(file)
            prefix = "crate::" + "".join(p + "::" for p in crate_path)
            targets = referenced(text, prefix, mods, exported)
            if referenced(text, prefix, own, {}):
                targets.add(LEVEL)
            if os.path.dirname(file) == directory:
                targets |= referenced(text, "super::", mods, exported)
                if referenced(text, "super::", own, {}) or re.search(r"\bsuper::\*", text):
                    targets.add(LEVEL)
            targets.discard(mod)
            edges[mod] |= targets
    edges[LEVEL] = level_uses(level_file, crate_path, mods, exported)
    return mods, edges


def sccs(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


KNOWN_SEEN = []


def check(crate_name, directory, crate_path, level_file, known):
    found = 0
    mods, edges = level_edges(directory, crate_path, level_file)
    where = "::".join(["crate"] + crate_path)
    for comp in sccs(edges):
        line = f"{crate_name}: {where}: cycle of {len(comp)} modules: {', '.join(comp)}"
        if any(set(comp) <= allowed for allowed in known.get((crate_name, where), [])):
            print(f"{line} (known, being taken apart)")
            KNOWN_SEEN.append(line)
            continue
        found += 1
        print(line)
    for mod, path in mods.items():
        if os.path.isdir(path):
            found += check(
                crate_name, path, crate_path + [mod], os.path.join(path, "mod.rs"), known
            )
    return found


def read_known(path):
    """`CRATE: LEVEL: mod, mod, …` lines -> {(crate, level): [set of modules, …]}."""
    known = {}
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            line = line.split("#")[0].strip()
            if not line:
                continue
            # `: ` separates the fields (a level such as `crate::a::b` holds `::`).
            parts = [part.strip() for part in re.split(r":\s+", line, maxsplit=2)]
            if len(parts) != 3 or not parts[2]:
                sys.exit(f"{path}:{number}: expected `CRATE: LEVEL: mod, mod, …`, got {line!r}")
            mods = {m.strip() for m in parts[2].split(",") if m.strip()}
            known.setdefault((parts[0], parts[1]), []).append(mods)
    return known


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates")
    args = sys.argv[1:]
    known = {}
    if args[:1] == ["--known"]:
        if len(args) < 2:
            sys.exit("--known needs a file")
        known = read_known(args[1])
        args = args[2:]
    crates = args or [os.path.join(root, c) for c in sorted(os.listdir(root))]
    found = 0
    for crate in crates:
        src = os.path.join(crate, "src")
        if not os.path.isdir(src):
            continue
        name = os.path.basename(os.path.normpath(crate))
        prepare(src)
        top = os.path.join(src, "lib.rs")
        if not os.path.exists(top):
            top = os.path.join(src, "main.rs")
        found += check(name, src, [], top, known)
    if found:
        print(f"{found} import cycle(s)")
        return 1
    if KNOWN_SEEN:
        print(f"no import cycles between modules but the {len(KNOWN_SEEN)} known one(s)")
    else:
        print("no import cycles between modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
