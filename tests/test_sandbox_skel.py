"""issue 24: an environment's home skeleton (benchmark_core.sandbox.skel). A user's kept home holds
matplotlib's font list after the first run; our homes are new, so a warm parent (and each of the
published way's local runs) rebuilt it. The skeleton is built once per environment by trusted code
and copied into each new home; verdicts stay a fresh process's."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from benchmark_core.runner import Task, reference_code, run_tasks
from benchmark_core.sandbox import skel
from benchmark_core.sandbox.base import get_sandbox
from benchmark_core.sandbox.local import LocalSandbox
from benchmark_core.sandbox.process import interpreter_paths
from papers_support import SCIENTIFIC_REQUIREMENTS, one_snippet_paper

PYTHON = sys.executable


def _font_list(folder: Path) -> Path:
    lists = sorted((folder / ".config" / "matplotlib").glob("fontlist-*.json"))
    assert len(lists) == 1, lists
    return lists[0]


def test_a_skeleton_is_built_once_per_environment_and_fonts(tmp_path, monkeypatch):
    monkeypatch.setenv("RCB_SKEL_DIR", str(tmp_path / "skels"))
    fonts = tmp_path / "fonts"
    fonts.mkdir()
    monkeypatch.setattr(skel, "_FONT_ROOTS", (str(fonts),))
    packages = interpreter_paths(PYTHON)["packages"]
    first = skel.skel_for(PYTHON, packages)
    assert first is not None and first.parent == tmp_path / "skels"
    font_list = _font_list(first)
    assert '"ttflist"' in font_list.read_text()  # matplotlib's own font list, as a first import writes it
    assert oct(font_list.stat().st_mode & 0o777) == "0o644"
    made = font_list.stat().st_mtime_ns
    # asked again: the same skeleton, not built again
    assert skel.skel_for(PYTHON, packages) == first and _font_list(first).stat().st_mtime_ns == made
    # a font installed on the system, or other packages: another skeleton
    (fonts / "new.ttf").write_bytes(b"\0" * 10)
    second = skel.skel_for(PYTHON, packages)
    assert second is not None and second != first
    assert skel.skel_for(PYTHON, "other-packages") not in (None, first, second)
    # nothing left half-built beside them
    assert sorted(p.name.startswith(".") for p in (tmp_path / "skels").iterdir()) == [False] * 3
    # an interpreter that cannot build one: no skeleton (a home is then built as before)
    assert skel.skel_for(str(tmp_path / "no-python"), packages) is None


def test_home_seed_copies_files_and_folders_only(tmp_path):
    source = tmp_path / "skel"
    (source / ".config" / "matplotlib").mkdir(parents=True)
    (source / ".config" / "matplotlib" / "fontlist.json").write_text("{}")
    (source / "link").symlink_to("/etc/passwd")
    (source / "top.txt").write_text("top")
    source.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir(mode=0o711)
    home.chmod(0o711)
    skel.home_seed(str(source), str(home))
    assert (home / ".config" / "matplotlib" / "fontlist.json").read_text() == "{}"
    assert (home / "top.txt").read_text() == "top"
    # the home keeps its own mode (a warm parent's home is the work folder runs may pass, not list)
    assert oct(home.stat().st_mode & 0o777) == "0o711"
    assert not (home / "link").exists() and not (home / "link").is_symlink()
    skel.home_seed(None, str(home))  # no skeleton: nothing happens
    skel.home_seed(str(tmp_path / "missing"), str(home))


def _fonts_paper(root: Path):
    """A paper whose test imports matplotlib.pyplot (a warm parent preloads it), draws, and prints the
    font list matplotlib read: its folder and when that file was written, and the skeleton's (bwrap:
    /rcb/skel, docker: /opt/rcb/skel)."""
    return one_snippet_paper(
        root, "fonts_00", imports="import numpy as np", func="triple", body="    y = np.asarray(x) * 3.0\n",
        test="import glob\nimport os\nimport unittest\n\nimport matplotlib\nmatplotlib.use('Agg')\n"
        "import matplotlib.pyplot as plt\nimport numpy as np\n\nimport fonts_00 as m\nimport fonts_00_ref as r\n\n\n"
        "def stamp(folder):\n"
        "    found = glob.glob(os.path.join(folder, 'fontlist-*.json'))\n"
        "    return os.stat(found[0]).st_mtime_ns if found else None\n\n\n"
        "class TestFonts(unittest.TestCase):\n"
        "    def test_triple(self):\n"
        "        fig = plt.figure()\n        fig.text(0.5, 0.5, 'x')\n        fig.canvas.draw()\n        plt.close(fig)\n"
        "        print(f'cachedir={matplotlib.get_cachedir()} list={stamp(matplotlib.get_cachedir())}')\n"
        "        for base in ('/rcb/skel', '/opt/rcb/skel'):\n"
        "            print(f'skel {base}={stamp(os.path.join(base, \".config\", \"matplotlib\"))}')\n"
        "        np.testing.assert_allclose(m.triple(np.arange(5.0)), r.triple(np.arange(5.0)))\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n',
        requirements=SCIENTIFIC_REQUIREMENTS, title="Fonts")


def _printed(stdout: str, key: str) -> str:
    match = re.search(rf"{re.escape(key)}=(\S+)", stdout)
    assert match, (key, stdout[-500:])
    return match.group(1)


def _check_homes(backend: str, tmp_path: Path) -> None:
    """The font list matplotlib read in a run is the skeleton's copy, never one built anew: its file
    was written when the skeleton was (a rebuild would write it now). Warm (bwrap, docker): in the
    parent's home, where the parent's import read it; local (the published way's runs): in each
    run's own home. Verdicts equal a fresh process's."""
    pset = _fonts_paper(tmp_path)
    (paper, snip), = pset.snippets
    tasks = [Task(paper, snip, reference_code(paper, snip)), Task(paper, snip, ())]
    fresh = run_tasks(tasks, sandbox=get_sandbox("local"), workers=1, timeout=120)
    sandbox = get_sandbox(backend)
    try:
        runs = run_tasks(tasks, sandbox=sandbox, workers=1, timeout=120)
    finally:
        sandbox.close()
    assert [(r.passed, r.category) for r in runs] == [(r.passed, r.category) for r in fresh]
    assert [r.passed for r in runs] == [True, False]
    out = runs[0].stdout
    read = _printed(out, "list")
    assert read != "None", out[-500:]
    if backend == "local":
        home_skel = LocalSandbox.home_skel(PYTHON)
        assert home_skel is not None
        expected = str(_font_list(home_skel).stat().st_mtime_ns)
        assert _printed(out, "cachedir").endswith("/home/.config/matplotlib")  # the run's own home
    else:
        inside = "/rcb/skel" if backend == "bwrap" else "/opt/rcb/skel"
        expected = _printed(out, f"skel {inside}")
        assert expected != "None", out[-500:]
        assert _printed(out, "cachedir") == "/rcb/runs/.config/matplotlib"  # the parent's home
    assert read == expected, f"{backend}: the font list was built anew ({read}), not the skeleton's ({expected})"
    print(f"\n{backend}: runs {', '.join(f'{r.seconds:.3f}' for r in runs)} s; font list from the skeleton")


@pytest.mark.slow
def test_a_warm_parent_starts_from_the_skeleton(sandbox_backend_name, tmp_path):
    _check_homes(sandbox_backend_name, tmp_path)


@pytest.mark.slow
def test_a_published_way_run_starts_from_the_skeleton(tmp_path):
    _check_homes("local", tmp_path)
