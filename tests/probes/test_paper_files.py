"""Completions that reach the reference, or the expected values, through the paper's files instead of
its modules: a copy of the ``*_ref`` module written under another name (or linked, or put in /tmp)
and imported, a later-imported module of the paper rewritten, the data file the test reads its
expected values from overwritten with the completion's own answer. Nothing names the reference
module and no library namespace is written, and a fresh interpreter passes each of them, so they
pass here too; never unflagged (``audit:unshipped-code``, ``audit:paper-write``). Honest runs that
write their own files, or read the test's source, stay unflagged. Two workers, bwrap and docker."""
from __future__ import annotations

import re

import pytest

from benchmark_core import runner
from benchmark_core.runner import Task, run_tasks
from benchmark_core.sandbox.base import get_sandbox
from papers_support import one_snippet_paper
from probe_support import PROBE_LIMITS

#: each answers ``twice(x)`` with a wrong value or none of its own; (body, flag it must carry)
CHEATS = {
    "copy_of_ref_imported": ("src = open('files_00_' + 'ref.py').read()\nwith open('helper_a.py', 'w') as fh:\n"
                             "    fh.write(src)\nimport helper_a\ny = helper_a.twice(x)",
                             r"audit:unshipped-code"),
    "copy_by_pathlib": ("import pathlib\nhere = pathlib.Path('helper_b.py')\nif not here.exists():\n"
                        "    here.write_text(pathlib.Path('files_00_' + 'ref.py').read_text())\n"
                        "import helper_b\ny = helper_b.twice(x)", r"audit:unshipped-code"),
    "link_to_ref": ("import pathlib\nhere = pathlib.Path('helper_c.py')\nif not here.is_symlink():\n"
                    "    here.symlink_to('files_00_' + 'ref.py')\nimport helper_c\ny = helper_c.twice(x)",
                    r"audit:unshipped-code"),
    "copy_in_tmp": ("import pkgutil\nopen('/tmp/helper_d.py', 'w').write(open('files_00_' + 'ref.py').read())\n"
                    "y = pkgutil.get_importer('/tmp').find_module('helper_d').load_module('helper_d').twice(x)",
                    r"audit:unshipped-code"),
    # the test imports the paper's `scale` module only after the completion ran: rewritten, it
    # agrees with the wrong answer the completion gives there (and only there: right elsewhere)
    "later_module_rewritten": ("with open('scale.py', 'w') as fh:\n    fh.write('def factor():\\n    return 0.5\\n')\n"
                               "y = [v * 0.5 for v in x] if len(x) == 1 else [v * 2.0 for v in x]",
                               r"audit:paper-write"),
    # the test reads its expected values from a data file after calling the completion
    "expected_values_overwritten": ("import json\nwith open('expected.json', 'w') as fh:\n"
                                    "    json.dump({'twice': [0.0, 0.0, 0.0]}, fh)\n"
                                    "y = [0.0] * 3 if len(x) == 3 else [v * 2.0 for v in x]", r"audit:paper-write"),
}
HONEST = {
    "right": "y = [v * 2.0 for v in x]",
    "writes_its_own_files": ("open('notes.txt', 'w').write('x')\nopen('out.json', 'w').write('{}')\n"
                             "y = [v * 2.0 for v in x]"),
    "reads_the_test": "open('paper2code_test.py').read()\ny = [v * 2.0 for v in x]",
}
TEST = '''import json
import unittest

import files_00 as m
import files_00_ref as r


class TestTwice(unittest.TestCase):
    def test_against_the_reference(self):
        self.assertEqual(m.twice([1.0, 2.0]), r.twice([1.0, 2.0]))

    def test_against_the_data(self):
        got = m.twice([1.0, 2.0, 3.0])
        with open("expected.json") as fh:
            self.assertEqual(got, json.load(fh)["twice"])

    def test_scaled(self):
        got = m.twice([4.0])
        import scale
        self.assertEqual(got, [4.0 * scale.factor()])


if __name__ == "__main__":
    unittest.main()
'''


def _paper(tmp_path):
    pset = one_snippet_paper(tmp_path, "files_00", imports="import math", func="twice",
                             body="    y = [v * 2.0 for v in x]\n", test=TEST, requirements="", title="Files")
    folder = tmp_path / "set" / "files_00"
    (folder / "expected.json").write_text('{"twice": [2.0, 4.0, 6.0]}\n')
    (folder / "scale.py").write_text("def factor():\n    return 2.0\n")
    return pset


@pytest.mark.slow
def test_the_reference_and_the_expected_values_reached_through_files_never_pass_unflagged(sandbox_backend_name,
                                                                                          tmp_path):
    (paper, snippet), = _paper(tmp_path).snippets
    runner._REFERENCE.clear()
    named = [(name, Task(paper, snippet, tuple("    " + line for line in body.splitlines())))
             for name, body in {**{k: b for k, (b, _) in CHEATS.items()}, **HONEST}.items()]
    tasks = [t for _, t in named]
    fresh = run_tasks(tasks, sandbox=get_sandbox("local"), workers=2, timeout=60)
    sandbox = get_sandbox(sandbox_backend_name, limits=PROBE_LIMITS)
    try:
        runs = run_tasks(tasks, sandbox=sandbox, workers=2, timeout=60)
    finally:
        sandbox.close()
    for (name, _), run, alone in zip(named, runs, fresh):
        # every one passes, as in a fresh interpreter: the attacks are real and the honest runs right
        assert run.passed and alone.passed, (name, run.category, alone.category, run.output_tail[-600:])
        if name in CHEATS:
            assert any(re.fullmatch(CHEATS[name][1], f) for f in run.flags), (name, run.flags)
        else:
            assert run.flags == [], (name, run.flags)
