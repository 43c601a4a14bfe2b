#!/usr/bin/env python3
"""check_layers.py - the include graph of dynbatch's C sources, checked.

Reads every #include "..." in the C sources and checks three things:

  1. no include cycle between files (a .c and its .h count as one
     module) and none between folders;
  2. the product folders include only downwards, in the order LAYERS
     declares (top first); tests/, tools/, bench/ may include anything;
  3. every source path written in README.md and docs/*.md (a word like
     lib/util/log.c) exists.

A violation listed in EXCEPTIONS is printed as "known" and does not fail
the run; the goal is an empty list.  Exit status 0 when all is well, 1
otherwise.

  python3 tools/check_layers.py              check (make layers)
  python3 tools/check_layers.py --write-doc  also regenerate the marked
                                             section of docs/layout.md
  python3 tools/check_layers.py --graph      print the folder graph

Includes resolve as the compiler resolves them with the Makefile's
-Iinclude -Ilib -I.: the including file's folder first, then include/,
lib/, the top.  Only includes are seen, not calls: two files that call
each other through a third header are not a cycle here.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The folders whose C files are read.
SOURCE_DIRS = ["include", "lib", "engine", "sched", "shard", "kv", "server",
               "worker", "tools", "bench", "tests", "examples"]
# The Makefile's -I list, in order, after the including file's own folder.
INCLUDE_PATH = ["include", "lib", "."]

# The product folders, top layer first.  A folder may include its own
# files and those of folders in lower rows, never a higher row or another
# folder of its own row.
LAYERS = [
    ["server"],                         # main.c: options, wiring
    ["server/http", "server/jsonl"],    # the two front ends
    ["server/request"],                 # the request JSON codec both use
    ["engine"],                         # requests in flight, admission, commit
    ["sched"],                          # placement, refill, waiting
    ["shard"],                          # worker processes, supervision
    ["kv"],                             # block pool, tables, prefix hashes
    ["lib/io", "lib/text"],             # io_uring loop, output; tokenizer, stops
    ["lib/model", "lib/ipc"],           # models and their runner; shared memory
    ["lib/kernels", "lib/sampling", "lib/spec", "lib/grammar"],  # kernels; sampler; guesses; grammars
    ["lib/util"],                       # logging, strings, numbers, clocks
    ["include/dynbatch"],               # the plugin ABI: includes nothing
]

# Folders beside the stack: what each may include (its own files, and the
# rows from the named one down), and no layered folder may include them.
# The worker is its own process: it links lib/* and include/ only, and the
# coordinator never compiles its code.  An example plugin builds from the
# public ABI alone.
BESIDE = {
    "worker": "lib/io",
    "examples": "include/dynbatch",
}

# Folders that may include anything (still checked for cycles).
FREE = ["tests", "tools", "bench"]

# Known violations, each an include edge (from, to) that is allowed for
# now.  An end is a folder ("sched"), a module ("engine/engine_internal")
# or a file ("engine/engine_internal.h").  Each needs its reason and the
# work that removes it.
EXCEPTIONS = [
    # None today.  Issue 23 emptied the list: engine, sched and shard no
    # longer include each other, the request codec left engine/, the
    # HTTP routes use a connection API, and the sampler's ISA choice is a
    # table.  An entry is an include edge (from, to) allowed for now; an
    # end is a folder ("sched"), a module ("engine/engine_internal") or a
    # file ("engine/engine_internal.h").  Each needs its reason and the
    # work that removes it.
]

# One line on what each folder holds, for docs/layout.md.
FOLDER_NOTES = {
    ".": "the build, the manual",
    ".ci": "what CI runs",
    "bench": "benchmarks and the load test",
    "docs": "the documentation beside README.md",
    "engine": "requests in flight: admission, commit, stats, metrics",
    "examples": "a complete model plugin; nginx in front of replicas",
    "include": "public headers",
    "include/dynbatch": "the plugin ABI, the one public header",
    "kv": "the paged cache's block bookkeeping: block pool, tables, "
          "prefix hashes",
    "lib": "code the programs link by concern",
    "lib/io": "the io_uring loop, double-buffered output",
    "lib/ipc": "shared memory: objects, layout, rings, wake-ups",
    "lib/kernels": "weight types and kernels: f32, Q8_0, f16/bf16, ggml blocks; AVX2, portable",
    "lib/model": "models: loader, runner, sim, llama, checkpoints",
    "lib/sampling": "the sampler: cut-offs, weights, logprobs, Philox draws",
    "lib/grammar": "GBNF grammars, their byte matcher, token masks, JSON schema",
    "lib/text": "tokenizer, BPE trainer, stop strings, token stops, chat templates",
    "lib/util": "logging, strings, JSON, numbers, clocks, faults",
    "sched": "the shard scheduler, slot table, wait policy",
    "server": "the dynbatch command line",
    "server/http": "serve: connections, HTTP reader, routes, bodies",
    "server/jsonl": "run: input lines, parser thread, result lines",
    "server/request": "the request JSON codec: jansson, fast path, stop fields",
    "shard": "worker processes: the result channel, start, watch, replace",
    "tests": "the test suites",
    "tests/e2e": "end-to-end tests of the real binaries",
    "tests/fuzz": "libFuzzer targets, dictionaries",
    "tests/fuzz/corpus": "request-line seeds",
    "tests/fuzz/gguf_corpus": "GGUF file seeds",
    "tests/fuzz/http_corpus": "HTTP request seeds",
    "tests/fuzz/sampler_corpus": "sampler seeds",
    "tests/fuzz/tokenizer_corpus": "tokenizer.bin seeds",
    "tests/plugins": "hostile worker and plugins for attack tests",
    "tests/ggml_ref": "the GGUF weight types against llama.cpp's libggml (make test-ggml-ref)",
    "tests/tokenizers": "GGUF tokenizers against the real ones (npm)",
    "tests/chat_templates": "chat templates against their Jinja rendering (npm)",
    "tests/unit": "cmocka unit tests, one binary per module",
    "tools": "workloads, checkpoints, tokenizers, faults, soak",
    "tools/refdecode": "the reference decoder, apart from the engine",
    "worker": "dynbatch-worker: its loop and sandbox",
}

DOC = "docs/layout.md"
DOC_BEGIN = "<!-- layout:begin (tools/check_layers.py --write-doc) -->"
DOC_END = "<!-- layout:end -->"

# Skipped when walking the tree: build outputs and version control.
SKIP = {".git", "build", "build-asan", "build-tsan", "build-fuzz", "bin",
        "node_modules", "__pycache__"}

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# A path written in a document: at least one slash, a source suffix.
DOC_PATH_RE = re.compile(
    r'(?<![\w./:<>*-])((?:\.\./)?[\w.-]+(?:/[\w.-]+)+'
    r'\.(?:c|h|sh|py|mjs|conf|md|png|dict|jsonl|http))(?![\w/*<>-])')
# Written paths that are not ours to check: build outputs, other projects.
DOC_PATH_IGNORE = re.compile(r'^(build[\w-]*|bin|tmp)/|^/')


def rel(path):
    return os.path.relpath(path, ROOT).replace(os.sep, "/")


def walk(top):
    """Every file under top (relative paths), build outputs left out."""
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, top)):
        dirs[:] = sorted(x for x in dirs if x not in SKIP)
        for f in sorted(files):
            out.append(rel(os.path.join(d, f)))
    return out


def folder_of(path):
    d = os.path.dirname(path)
    return d if d else "."


def module_of(path):
    """A .c and its .h are one module: the path without its suffix.  A
    private header X_internal.h, which only X's own files include, is part
    of module X (as sqliteInt.h is SQLite's): X.c -> X_internal.h -> X.h
    is then no circle, while any other file that includes it is checked
    as it would be against X.h."""
    base = os.path.splitext(path)[0]
    if path.endswith("_internal.h"):
        base = base[:-len("_internal")]
    return base


def resolve(src, name):
    for base in [folder_of(src)] + INCLUDE_PATH:
        cand = os.path.normpath(os.path.join(base, name)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def read_includes():
    """(edges, unresolved): edges a list of (from_file, to_file, line)."""
    edges, unresolved = [], []
    for top in SOURCE_DIRS:
        for path in walk(top):
            if not path.endswith((".c", ".h")):
                continue
            with open(os.path.join(ROOT, path), encoding="utf-8",
                      errors="replace") as f:
                text = f.read()
            for m in INCLUDE_RE.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                to = resolve(path, m.group(1))
                if to is None:
                    unresolved.append((path, m.group(1), line))
                else:
                    edges.append((path, to, line))
    return edges, unresolved


def sccs(nodes, succ):
    """Tarjan's strongly connected components with more than one node."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(succ.get(v, ())):
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

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def a_cycle(comp, succ):
    """One cycle through a component, as a list of nodes, first repeated."""
    members = set(comp)
    start = comp[0]
    # Breadth-first from start's successors back to start.
    prev = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(succ.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start] + path[::-1][1:] + [start] \
                        if len(path) > 1 else [start, v, start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp + [comp[0]]


def end_matches(end, path):
    return end in (path, module_of(path), folder_of(path))


def excepted(src, dst):
    for a, b in EXCEPTIONS:
        if end_matches(a, src) and end_matches(b, dst):
            return (a, b)
    return None


def product_folder(path):
    """The layered or beside folder a file belongs to, or None."""
    d = folder_of(path)
    best = None
    for name in [f for row in LAYERS for f in row] + list(BESIDE):
        if d == name or d.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best


def row_of(folder):
    for i, row in enumerate(LAYERS):
        if folder in row:
            return i
    return None


def why_not(a, b, dst):
    """None when product folder a may include dst (in folder b), else why."""
    if a == b:
        return None
    if b is None:
        return "%s is in no layer: the product never includes tests or " \
               "tools" % folder_of(dst)
    if b in BESIDE:
        return "%s is beside the layers: nothing includes it" % b
    if a in BESIDE:
        if row_of(b) >= row_of(BESIDE[a]):
            return None
        return "%s may include only rows from %s down" % (a, BESIDE[a])
    if row_of(b) > row_of(a):
        return None
    if row_of(b) == row_of(a):
        return "%s is in %s's own row" % (b, a)
    return "%s is above %s" % (b, a)


def is_free(path):
    return any(path == f or path.startswith(f + "/") for f in FREE)


def check_docs():
    """Source paths written in README.md and docs/*.md that do not exist."""
    missing = []
    docs = ["README.md"] + [p for p in walk("docs") if p.endswith(".md")]
    for doc in docs:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for m in DOC_PATH_RE.finditer(line):
                    p = m.group(1)
                    if DOC_PATH_IGNORE.search(p) or "://" in line[
                            max(0, m.start() - 40):m.start()]:
                        continue
                    bases = [folder_of(doc)] + INCLUDE_PATH
                    if any(os.path.exists(os.path.join(ROOT, b, p))
                           for b in bases):
                        continue
                    missing.append((doc, n, p))
    return missing


def folder_graph(edges):
    """{(from_folder, to_folder): count} over includes between folders."""
    g = {}
    for src, dst, _ in edges:
        a, b = folder_of(src), folder_of(dst)
        if a != b:
            g[(a, b)] = g.get((a, b), 0) + 1
    return g


def layout_section(edges):
    """The generated part of docs/layout.md: tree, then include graph."""
    files = [p for p in walk(".") if p != ".git"]
    by_folder = {}
    for p in files:
        by_folder.setdefault(folder_of(p), []).append(os.path.basename(p))
    # Every parent of a folder with files is a folder of the tree.
    for d in list(by_folder):
        while d not in (".", ""):
            d = folder_of(d)
            by_folder.setdefault(d, [])
    out = ["The tree (each folder, what it holds, its files):", "", "```"]
    for d in sorted(by_folder, key=lambda x: (x != ".", x.split("/"))):
        depth = 0 if d == "." else d.count("/") + 1
        name = "./" if d == "." else d.split("/")[-1] + "/"
        note = FOLDER_NOTES.get(d, "(no note: add one to FOLDER_NOTES in "
                                   "tools/check_layers.py)")
        out.append("%s%-*s %s" % ("  " * depth, max(1, 22 - 2 * depth),
                                  name, note))
        names = sorted(by_folder[d])
        if not names:
            continue
        if len(names) > 12 and not any(
                n.endswith((".c", ".h", ".sh", ".py", ".mjs")) for n in names):
            out.append("%s  (%d files: %s, ...)" % (
                "  " * depth, len(names), ", ".join(names[:3])))
            continue
        line = "  " * depth + "  "
        width = len(line)
        for i, n in enumerate(names):
            piece = n + (", " if i < len(names) - 1 else "")
            if width + len(piece) > 78 and width > len("  " * depth) + 2:
                out.append(line.rstrip())
                line = "  " * depth + "  "
                width = len(line)
            line += piece
            width += len(piece)
        out.append(line.rstrip())
    out += ["```", ""]
    g = folder_graph(edges)
    out += ["The folder include graph: each row is a folder, then the "
            "folders its files include, with the number of `#include` "
            "lines (generated; `*` marks a known exception):", "",
            "| folder | includes |", "| --- | --- |"]
    order = [f for row in LAYERS for f in row] + list(BESIDE)
    rest = sorted({a for a, _ in g} - set(order))
    for a in order + rest:
        tos = sorted(((b, c) for (x, b), c in g.items() if x == a),
                     key=lambda bc: (-bc[1], bc[0]))
        if not tos and a not in order:
            continue
        cells = []
        for b, c in tos:
            star = "*" if any(excepted(s, t) for s, t, _ in edges
                              if folder_of(s) == a and folder_of(t) == b) \
                else ""
            cells.append("%s %d%s" % (b, c, star))
        out.append("| %s | %s |" % (a, ", ".join(cells) if cells else
                                    "(nothing)"))
    out.append("")
    return "\n".join(out)


def write_doc(edges):
    path = os.path.join(ROOT, DOC)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    b, e = text.find(DOC_BEGIN), text.find(DOC_END)
    if b < 0 or e < b:
        sys.exit("check_layers: %s has no %s ... %s section" %
                 (DOC, DOC_BEGIN, DOC_END))
    new = text[:b + len(DOC_BEGIN)] + "\n" + layout_section(edges) + \
        text[e:]
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
        print("check_layers: wrote %s" % DOC)


def doc_is_current(edges):
    try:
        with open(os.path.join(ROOT, DOC), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False
    b, e = text.find(DOC_BEGIN), text.find(DOC_END)
    return b >= 0 and text[b + len(DOC_BEGIN) + 1:e] == layout_section(edges)


def main(argv):
    edges, unresolved = read_includes()
    failures, known = [], []

    for src, name, line in unresolved:
        failures.append('%s:%d: #include "%s" names no file' %
                        (src, line, name))

    # 1. Cycles between modules and between folders.  A cycle is known
    # when it is gone once the EXCEPTIONS edges are left out; whatever
    # cycle remains without them fails.
    def report(kind, succ, clean, describe):
        for comp in sccs(set(succ) | {b for s in succ.values() for b in s},
                         succ):
            bad = [c for c in sccs(set(comp), {
                v: clean.get(v, set()) & set(comp) for v in comp})]
            for c in bad:
                failures.append(kind + describe(c, clean))
            if not bad:
                known.append(kind + describe(comp, succ))

    mod_succ, mod_clean, mod_edge = {}, {}, {}
    for src, dst, line in edges:
        a, b = module_of(src), module_of(dst)
        if a != b:
            mod_succ.setdefault(a, set()).add(b)
            mod_edge.setdefault((a, b), (src, dst, line))
            if not excepted(src, dst):
                mod_clean.setdefault(a, set()).add(b)

    def describe_files(comp, succ):
        cyc = a_cycle(comp, succ)
        steps = [mod_edge[(cyc[i], cyc[i + 1])] for i in range(len(cyc) - 1)]
        return " -> ".join(cyc) + "  (" + "; ".join(
            "%s:%d" % (s, n) for s, _, n in steps) + ")"
    report("file cycle: ", mod_succ, mod_clean, describe_files)

    fg = folder_graph(edges)
    f_succ, f_clean = {}, {}
    for src, dst, _ in edges:
        a, b = folder_of(src), folder_of(dst)
        if a != b:
            f_succ.setdefault(a, set()).add(b)
            if not excepted(src, dst):
                f_clean.setdefault(a, set()).add(b)

    def describe_folders(comp, succ):
        cyc = a_cycle(comp, succ)
        hops = list(zip(cyc, cyc[1:]))
        return "among " + ", ".join(comp) + ", e.g. " + " -> ".join(cyc) + \
            "  (" + ", ".join("%s -> %s %d" % (a, b, fg[(a, b)])
                              for a, b in hops) + ")"
    report("folder cycle ", f_succ, f_clean, describe_folders)

    # 2. The layer order.
    declared = {f for row in LAYERS for f in row} | set(BESIDE)
    for top in SOURCE_DIRS:
        for path in walk(top):
            if path.endswith((".c", ".h")) and not is_free(path) and \
                    product_folder(path) is None:
                failures.append("%s: folder %s is in no row of LAYERS "
                                "(tools/check_layers.py)" %
                                (path, folder_of(path)))
    seen = set()
    for src, dst, line in edges:
        if is_free(src):
            continue
        a, b = product_folder(src), product_folder(dst)
        if a is None or a not in declared:
            continue
        why = why_not(a, b, dst)
        if why is None:
            continue
        text = "%s:%d: %s includes %s (%s)" % (src, line, a, dst, why)
        ex = excepted(src, dst)
        if ex:
            key = ex
            if key not in seen:
                seen.add(key)
                n = sum(1 for s, d, _ in edges if excepted(s, d) == ex)
                known.append("upward: %s -> %s, %d include lines, the "
                             "first %s" % (ex[0], ex[1], n, text))
        else:
            failures.append(text)

    # 3. Paths written in the documents.
    for doc, n, p in check_docs():
        failures.append("%s:%d: %s does not exist" % (doc, n, p))

    for ex in EXCEPTIONS:
        if not any(excepted(s, d) == ex for s, d, _ in edges):
            print("note: EXCEPTIONS entry %s -> %s matches no include "
                  "now: remove it" % ex)

    if "--write-doc" in argv:
        write_doc(edges)
    if "--graph" in argv:
        for (a, b), c in sorted(fg.items()):
            print("%-16s -> %-16s %d" % (a, b, c))

    files = {s for s, _, _ in edges} | {d for _, d, _ in edges}
    print("check_layers: %d files in %d folders, %d includes, %d folder "
          "edges" % (len(files), len({folder_of(f) for f in files}),
                       len(edges), len(fg)))
    for k in known:
        print("known: " + k)
    for f in failures:
        print("FAIL: " + f)
    if "--write-doc" not in argv and not doc_is_current(edges):
        print("note: %s's generated section is out of date: make "
              "layers-doc" % DOC)
    if failures:
        print("check_layers: %d failures (%d known, in EXCEPTIONS)" %
              (len(failures), len(known)))
        return 1
    print("check_layers: ok (%d known, in EXCEPTIONS: the goal is none)" %
          len(known))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
