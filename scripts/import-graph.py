#!/usr/bin/env python3
"""The module import graph of crates/fusebox, from its source: which
top-level module names which (`crate::X` in `use` lines and paths; comments
and test modules left out), checked against the layer order DESIGN.md
states ("Module layers").

    scripts/import-graph.py            the graph, its cycles, what breaks the layers
    scripts/import-graph.py --check    the same, and exit 1 on a cycle, a
                                       module no layer lists, an import
                                       upward, or an opcode named outside
                                       the parser, the opcode table and
                                       Dispatcher::call
    scripts/import-graph.py --dot      Graphviz, for `dot -Tsvg`

It reads the source as text: a name in a string counts, which errs on the
side of showing an edge."""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# Another tree may be checked (the layering test checks altered copies).
SRC = os.environ.get("IMPORT_GRAPH_SRC", os.path.join(ROOT, "crates", "fusebox", "src"))
DESIGN = os.environ.get("IMPORT_GRAPH_DESIGN", os.path.join(ROOT, "DESIGN.md"))

# Where naming an opcode is allowed: the parser (which turns an opcode into
# an `Op`) and its inverse, the request encoder, the opcode table, and the
# one match that calls the filesystem.
OPCODE_HOMES = {
    os.path.join("protocol", "parse.rs"): None,
    os.path.join("protocol", "encode.rs"): None,
    os.path.join("protocol", "opcodes.rs"): None,
    "dispatch.rs": "fn call(",
}
OPCODE_NAME = re.compile(r"\b(?:Opcode::[A-Z][A-Z0-9_]*\b(?<!TABLE_LEN)(?<!ALL)|Op::[A-Z][A-Za-z]*)")


def source(path):
    """The file's code: comments and the unit-test module removed."""
    text = open(path, encoding="utf-8").read()
    # Unit tests may reach anywhere.
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
    return re.sub(r"//[^\n]*", "", text)


def modules():
    """Top-level module -> its files."""
    mods = {}
    for root, _, files in os.walk(SRC):
        for f in files:
            # tests.rs: a unit-test module in a file of its own.
            if f.endswith(".rs") and f != "tests.rs":
                path = os.path.join(root, f)
                rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
                mods.setdefault(rel[0], []).append(path)
    return mods


def root_names():
    """Names lib.rs re-exports at the crate root (`pub use module::{A, B}`),
    with the module each comes from: `crate::Session` is an import of
    session."""
    text = source(os.path.join(SRC, "lib.rs"))
    names = {}
    for module, items in re.findall(r"pub use (\w+)::\{([^}]*)\}", text):
        for item in items.split(","):
            if item.strip():
                names[item.strip()] = module
    for module, item in re.findall(r"pub use (\w+)::(\w+);", text):
        names[item] = module
    return names


def edges(mods):
    graph = {m: set() for m in mods}
    roots = root_names()
    for m, files in mods.items():
        for path in files:
            for name in re.findall(r"crate::(\w+)", source(path)):
                name = roots.get(name, name)
                if name != m and name in mods:
                    graph[m].add(name)
    return graph


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layers():
    """Module -> its layer number, from DESIGN.md's "Module layers" list:
    lines `N. module module ...` inside the fenced block after that heading."""
    text = open(DESIGN, encoding="utf-8").read()
    at = text.find("### Module layers")
    if at < 0:
        return {}
    block = text[at:].split("```")[1]
    rank = {}
    for line in block.splitlines():
        m = re.match(r"\s*(\d+)\.\s+(.*?)\s*(?:--.*)?$", line)
        if m:
            for name in m.group(2).split():
                rank[name] = int(m.group(1))
    return rank


def upward(graph, rank):
    """Imports from a module to one in a higher layer."""
    return [
        (m, t)
        for m in sorted(graph)
        for t in sorted(graph[m])
        if m in rank and t in rank and rank[t] > rank[m]
    ]


def opcode_names(mods):
    """(file, names) for each file that names an opcode outside its homes."""
    found = []
    for files in mods.values():
        for path in sorted(files):
            rel = os.path.relpath(path, SRC)
            if rel in OPCODE_HOMES and OPCODE_HOMES[rel] is None:
                continue
            text = source(path)
            if rel in OPCODE_HOMES:
                # Only the named function's body is a home.
                start = text.find(OPCODE_HOMES[rel])
                if start >= 0:
                    end = text.find("\n    }\n", start)
                    text = text[:start] + text[end:]
            names = sorted(set(OPCODE_NAME.findall(text)))
            if names:
                found.append((rel, names))
    return found


def main():
    mods = modules()
    graph = edges(mods)
    if "--dot" in sys.argv:
        print("digraph fusebox {")
        for m in sorted(graph):
            for t in sorted(graph[m]):
                print(f'  "{m}" -> "{t}";')
        print("}")
        return
    rank = layers()
    for m in sorted(graph, key=lambda m: (rank.get(m, 99), m)):
        print(f"{rank.get(m, '?'):>2} {m:15} -> {' '.join(sorted(graph[m])) or '-'}")
    print()
    problems = 0
    found = cycles(graph)
    for c in found:
        print("cycle among:", " ".join(c))
        problems += 1
    if not found:
        print("no cycles")
    unlisted = sorted(m for m in mods if m not in rank)
    for m in unlisted:
        print(f"module {m} is in no layer of DESIGN.md's \"Module layers\"")
        problems += 1
    for m, t in upward(graph, rank):
        print(f"upward import: {m} (layer {rank[m]}) uses {t} (layer {rank[t]})")
        problems += 1
    for rel, names in opcode_names(mods):
        print(f"opcode named outside the table: {rel}: {' '.join(names)}")
        problems += 1
    if not problems:
        print("every import runs down the layers; opcodes are named only by the parser, the table and Dispatcher::call")
    if "--check" in sys.argv and problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
