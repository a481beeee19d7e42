"""Which cells the kernel extension takes over, and what it turns them into."""

from distrun.client.kernel_magic import CiaoTransformer, is_ciao_cell


def test_a_cell_starting_with_a_ciao_header_is_recognised() -> None:
    assert is_ciao_cell("%framework=pytorch\n%worker=2\nprint(1)\n")
    assert is_ciao_cell("\n# train\n%worker = 2\n%framework=tensorflow\n")
    assert is_ciao_cell("%worker.cpu=2\n")


def test_ordinary_cells_and_ipython_magics_are_left_alone() -> None:
    assert not is_ciao_cell("print(1)\n%framework=pytorch\n")
    assert not is_ciao_cell("%matplotlib inline\n")
    assert not is_ciao_cell("%time x = 1\n")
    assert not is_ciao_cell("%%distrun --workers 2\nprint(1)\n")
    assert not is_ciao_cell("x == 1\n")
    assert not is_ciao_cell("")


def test_a_spaced_equals_after_an_existing_line_magic_stays_ipython() -> None:
    def is_magic(name: str) -> bool:
        return name == "env"

    assert not is_ciao_cell("%env = X\n", is_magic)
    assert is_ciao_cell("%env=A=1\n%framework=generic\n", is_magic)  # never valid IPython
    assert is_ciao_cell("%worker = 2\n", is_magic)


class Shell:
    def find_line_magic(self, name: str) -> object | None:
        return None


def test_the_transformer_replaces_a_ciao_cell_by_one_call_carrying_the_exact_text() -> None:
    cell = "%framework=generic\n%worker=2\nprint('it''s \\n \"quoted\"')\n"
    (call,) = CiaoTransformer(Shell())(cell.splitlines(keepends=True))
    assert call.startswith("__import__('distrun.kernel_magic').kernel_magic.run_cell(")
    captured: list[str] = []

    class Module:
        class kernel_magic:  # mirrors the module path the call uses
            run_cell = captured.append

    eval(call, {"__import__": lambda name: Module})  # the call really passes the cell text
    assert captured == [cell]


def test_the_transformer_passes_other_cells_through_unchanged() -> None:
    lines = ["import os\n", "%time x = 1\n"]
    assert CiaoTransformer(Shell())(lines) == lines
