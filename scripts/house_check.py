#!/usr/bin/env python3
"""The house rules that keep the code walkable, checked on every test run (scripts/test).

1. Crate layers: a crate depends only on crates in lower layers (so the CLI never links the
   daemon, and nothing links the bench tool or the simulated disks but the tools and tests that
   are meant to).
2. Impl spread: the inherent `impl` blocks of one type sit in at most two files of its crate.
3. Function length: no non-test function is longer than MAX_FN_LINES lines.
4. Import circles (reported; `--strict` fails on them): inside each module, the graph of which
   child module's code names which sibling's items must have no cycle.

Tests are exempt from 2 and 3: files under a `tests/` directory, files named `tests.rs` or
`*_tests.rs`, and items behind `#[cfg(test)]` or `#[test]`.

Usage: scripts/house_check.py [--list N] [--strict]
  --list N   prints the N longest functions as well
  --strict   import circles fail the check too
"""

import json
import os
import re
import subprocess
import sys
from collections import defaultdict

MAX_FN_LINES = 120
MAX_IMPL_FILES = 2

# Lower numbers sit lower. A normal or build dependency must point to a strictly lower layer.
# Dev-dependencies are free: tests may use anything (core's tests run on the simulated disks).
LAYERS = {
    "nbraid-layout": 0,
    "nbraid-nbd": 0,
    "nbraid-config": 1,
    "nbraid-core": 1,
    "nbraid-sim": 2,
    "nbraid-remote": 2,
    "nbraid-control": 3,
    "nbraid-assembly": 3,
    "nbraid-bench": 4,
    "nbraid-daemon": 5,
    "nbraid-cli": 5,
    "nbraid-benches": 6,
}


def crate_layers(root):
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
            cwd=root, check=True, capture_output=True, text=True,
        ).stdout
    )
    problems = []
    for pkg in meta["packages"]:
        name = pkg["name"]
        if name not in LAYERS:
            problems.append(f"crate {name}: not in the layer table of scripts/house_check.py")
            continue
        for dep in pkg["dependencies"]:
            if dep["name"] not in LAYERS:
                continue
            mine, theirs = LAYERS[name], LAYERS[dep["name"]]
            if theirs < mine or dep.get("kind") == "dev":
                continue
            problems.append(
                f"crate {name} (layer {mine}) depends on {dep['name']} (layer {theirs}): "
                "dependencies point down"
            )
    return problems


def rust_files(root):
    out = subprocess.run(
        ["git", "ls-files", "*.rs"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.split()
    return [p for p in out if p.startswith("crates/") or p.startswith("benches/")]


def is_test_file(path):
    base = os.path.basename(path)
    return "/tests/" in path or base == "tests.rs" or base.endswith("_tests.rs")


def code_only(text):
    """The text with comments, strings and char literals blanked (newlines kept), so braces
    and keywords inside them count for nothing."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif re.match(r'b?r#*"', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'(b?r)(#*)"', text[i:])
            end = '"' + m.group(2)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(n, j + 1)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:  # a char literal; otherwise a lifetime
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(code, open_at):
    """Index of the brace closing the one at `open_at`."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


# `impl` only where an item starts (not `-> impl Iterator` in a signature).
ITEM = re.compile(
    r"\bfn\s+(\w+)|^[ \t]*(?:unsafe\s+)?impl\b|\bmod\s+\w+\s*\{|#\[\s*(cfg\s*\(\s*test\s*\)|test)\s*\]",
    re.MULTILINE,
)
IMPL_HEAD = re.compile(r"\bimpl(?:\s*<[^{]*?>)?\s+([A-Z]\w*)(?:\s*<[^{]*?>)?\s*(?:where[^{]*)?\{")


def scan(path, code, functions, impls):
    """Collects non-test functions (name, lines) and inherent impl types of one file."""
    line_of = lambda at: code.count("\n", 0, at) + 1
    skip_until = -1
    test_next = False
    for m in ITEM.finditer(code):
        if m.start() < skip_until:
            continue
        if m.group(2):  # #[cfg(test)] or #[test]: the next item is test code
            test_next = True
            continue
        word = m.group(0).strip()
        if word.startswith(("impl", "unsafe")):
            head = IMPL_HEAD.match(code, code.index("impl", m.start()))
            if head and " for " not in code[m.start():head.end()] and not test_next:
                impls[head.group(1)].add(path)
            test_next = False
            continue
        brace = code.find("{", m.end() - 1 if word.endswith("{") else m.end())
        semi = code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace and word.startswith("fn")):
            test_next = False  # a declaration without a body
            continue
        end = block_end(code, brace)
        if test_next:
            skip_until = end
        elif word.startswith("fn"):
            lines = line_of(end) - line_of(m.start()) + 1
            functions.append((lines, f"{path}:{line_of(m.start())}", m.group(1)))
        test_next = False


def module_of(path):
    """`crates/core/src/raid/write.rs` -> ("core", ["raid", "write"]); None outside a src tree."""
    parts = path.split("/")
    if "src" not in parts:
        return None
    at = parts.index("src")
    crate = parts[1] if parts[0] == "crates" else parts[0]
    mods = parts[at + 1:]
    mods[-1] = mods[-1][:-3]
    if mods[-1] in ("mod", "lib", "main"):
        mods.pop()
    return crate, mods


def without_tests(code):
    """The code with `#[cfg(test)]` / `#[test]` items blanked (imports there are test-only)."""
    out = list(code)
    for m in re.finditer(r"#\[\s*(cfg\s*\(\s*test\s*\)|test)\s*\]", code):
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0:
            continue
        end = semi if 0 <= semi < brace else block_end(code, brace)
        for j in range(m.start(), end + 1):
            if out[j] != "\n":
                out[j] = " "
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    open_at = tree.find("{")
    if open_at < 0:
        return [re.sub(r"\bas\w+$", "", tree)]
    head, body = tree[:open_at], tree[open_at + 1:tree.rfind("}")]
    items, depth, start = [], 0, 0
    for j, c in enumerate(body + ","):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            if body[start:j]:
                items += [head + x for x in expand_use(body[start:j])]
            start = j + 1
    return items


def referenced_modules(mods, code, known):
    """Module paths (within the crate) that this module's code names."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        paths += expand_use(m.group(1))
    paths += re.findall(r"\b((?:crate|super)(?:::\w+)+)", code)
    found = set()
    for p in paths:
        segs = [x for x in p.split("::") if x]
        if not segs:
            continue
        if segs[0] == "crate":
            base, segs = [], segs[1:]
        elif segs[0] in ("super", "self"):
            base = list(mods)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super" and base:
                    base.pop()
                segs = segs[1:]
        else:
            continue
        target = list(base)
        for seg in segs:
            if tuple(target + [seg]) in known:
                target.append(seg)
            else:
                break
        found.add(tuple(target))
    return found


def circles(root, files):
    by_crate = defaultdict(dict)
    for path in files:
        got = module_of(path)
        if got:
            by_crate[got[0]][tuple(got[1])] = path
    problems = []
    for crate, modules in sorted(by_crate.items()):
        known = set(modules)
        for mods in list(known):  # parents of nested files are modules too
            for k in range(len(mods)):
                known.add(mods[:k])
        edges = defaultdict(lambda: defaultdict(set))  # parent -> child -> siblings it names
        for mods, path in modules.items():
            with open(os.path.join(root, path), encoding="utf-8") as f:
                code = without_tests(code_only(f.read()))
            for target in referenced_modules(mods, code, known):
                k = 0
                while k < min(len(mods), len(target)) and mods[k] == target[k]:
                    k += 1
                if k < len(mods) and k < len(target):
                    edges[mods[:k]][mods[k]].add(target[k])
        for parent, graph in edges.items():
            for cycle in strongly_connected(graph):
                where = "::".join((crate,) + parent)
                problems.append(f"import circle in {where}: {' <-> '.join(sorted(cycle))}")
    return problems


def strongly_connected(graph):
    """Components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            if len(comp) > 1:
                out.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    listing = int(sys.argv[sys.argv.index("--list") + 1]) if "--list" in sys.argv else 0
    problems = crate_layers(root)
    functions = []
    impls_by_crate = defaultdict(lambda: defaultdict(set))
    files = [p for p in rust_files(root) if not is_test_file(p)]
    cycles = circles(root, files)
    if "--strict" in sys.argv:
        problems += cycles
    else:
        for c in cycles:
            print(f"house_check (review): {c}", file=sys.stderr)
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            code = code_only(f.read())
        crate = path.split("/")[1] if path.startswith("crates/") else "benches"
        scan(path, code, functions, impls_by_crate[crate])
    for crate, impls in sorted(impls_by_crate.items()):
        for ty, files in sorted(impls.items()):
            if len(files) > MAX_IMPL_FILES:
                problems.append(
                    f"type {crate}::{ty}: inherent impls in {len(files)} files "
                    f"(at most {MAX_IMPL_FILES}): {' '.join(sorted(files))}"
                )
    functions.sort(reverse=True)
    for lines, at, name in functions:
        if lines > MAX_FN_LINES:
            problems.append(f"function {name} at {at}: {lines} lines (at most {MAX_FN_LINES})")
    for lines, at, name in functions[:listing]:
        print(f"{lines:5} {at} {name}")
    for p in problems:
        print(f"house_check: {p}", file=sys.stderr)
    print(
        f"house_check: {len(functions)} functions, longest {functions[0][0] if functions else 0} "
        f"lines; {len(problems)} problem(s)"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
