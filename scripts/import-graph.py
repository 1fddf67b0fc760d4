#!/usr/bin/env python3
"""The module import graph of crates/fusebox, from its source: which
top-level module names which (`crate::X` in `use` lines and paths; test
modules left out), and the cycles among them.

    scripts/import-graph.py            the graph and its cycles
    scripts/import-graph.py --dot      Graphviz, for `dot -Tsvg`

It reads the source as text: a name in a comment or a string counts too,
which errs on the side of showing an edge."""

import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates", "fusebox", "src")


def modules():
    """Top-level module -> its files."""
    mods = {}
    for root, _, files in os.walk(SRC):
        for f in files:
            if f.endswith(".rs"):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
                mods.setdefault(rel[0], []).append(path)
    return mods


def edges(mods):
    graph = {m: set() for m in mods}
    for m, files in mods.items():
        for path in files:
            text = open(path, encoding="utf-8").read()
            # Unit tests may reach anywhere.
            text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
            for name in re.findall(r"crate::([a-z_]+)", text):
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


def main():
    graph = edges(modules())
    if "--dot" in sys.argv:
        print("digraph fusebox {")
        for m in sorted(graph):
            for t in sorted(graph[m]):
                print(f'  "{m}" -> "{t}";')
        print("}")
        return
    for m in sorted(graph):
        print(f"{m:15} -> {' '.join(sorted(graph[m])) or '-'}")
    found = cycles(graph)
    print()
    if not found:
        print("no cycles")
    for c in found:
        print("cycle among:", " ".join(c))


if __name__ == "__main__":
    main()
