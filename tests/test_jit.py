"""`raptor.jit`: where the compiled kernels keep their machine code."""

from __future__ import annotations

from pathlib import Path

from raptor.jit import cache_dir


def _tree(root: Path, formula: str, note: str) -> Path:
    (root / "sim").mkdir(parents=True, exist_ok=True)
    (root / "noc.py").write_text(f"@jitable\ndef request(t):\n    {formula}\n")
    (root / "sim" / "loop.py").write_text("@kernel\ndef run(t):\n    return noc.request(t)\n")
    (root / "report.py").write_text(f"# {note}\n")
    return root


def test_an_edit_to_any_module_with_kernel_code_selects_a_fresh_cache(tmp_path: Path) -> None:
    """The loop inlines `noc.request` but numba keys the loop's cache by the loop's file:
    editing the formula must change the folder; editing a module without kernel code, or
    nothing, must keep it (a warm cache)."""
    base = tmp_path / "cache"
    tree = _tree(tmp_path / "a", "return t + 1", "one")
    before = cache_dir(tree, base)
    assert before.parent == base
    assert cache_dir(tree, base) == before
    assert cache_dir(_tree(tree, "return t + 1", "two"), base) == before
    assert cache_dir(_tree(tree, "return t + 2", "two"), base) != before
