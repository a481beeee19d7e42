"""The layout stays true: no module of distrun takes part in an import cycle, counting imports
inside functions too (only imports under TYPE_CHECKING, which never run, are left out). The
one-way rule between core, engines, server and client is `lint-imports` (pyproject.toml)."""

import grimp


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_module_of_distrun_is_in_an_import_cycle() -> None:
    graph = grimp.build_graph("distrun", exclude_type_checking_imports=True, cache_dir=None)
    assert len(graph.modules) > 40, "distrun was not found where the test looked"
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle(tmp_path, monkeypatch) -> None:
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic import b\n")
    (package / "b.py").write_text("def f():\n    from cyclic import a\n")
    (package / "c.py").write_text("from cyclic import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclic", cache_dir=None)
    assert import_cycles(graph) == [["cyclic.a", "cyclic.b"]]
