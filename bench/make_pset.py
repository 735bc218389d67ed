#!/usr/bin/env python3
"""Write a problem set of our own, big enough to measure scoring speed on.

    python bench/make_pset.py import-bound OUT [--papers 10 --snippets 8]
    python bench/make_pset.py compute-bound OUT [--papers 4 --snippets 6 --work-ms 1500]

import-bound: every paper's test imports torch and does a few milliseconds of tensor work, like
most published torch papers (the import is most of a fresh run's time). compute-bound: the test
does real work (matrix products for about ``--work-ms`` per run on one quiet core of this machine:
the product's cost is measured when the set is written), like llm-sci-use. Each snippet is
a line or a small block of a function the test checks against a reference copy (``*_ref.py``,
untagged), so the reference passes and a blanked snippet fails. The set is in the published format
(papers.yaml + one folder per paper) and validates with ``python -m benchmark_core validate``.

published-like: both kinds in one set, shaped like the published release's twelve torch papers
(seven import-bound papers with 54 snippets, five compute-bound ones with 61): seven import-bound
papers of 8 snippets and five compute-bound papers of 12 (``--work-ms`` each run). The whole-set
figure (ours against the floor) is measured on it, the import-bound figure on its import-bound
papers.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml


def _function(index: int, tagged: bool) -> str:
    """One small torch function; with ``tagged`` its body is a snippet of its own."""
    body = [
        "y = x * " + str(index + 2),
        "y = y + torch.arange(x.shape[-1], dtype=x.dtype)",
        "return torch.tanh(y).sum(dim=-1)",
    ]
    lines = [f"def f{index}(x):"]
    if tagged:
        lines.append(f'    # <paper2code name="step {index}">')
    lines += ["    " + b for b in body]
    if tagged:
        lines.append(f'    # </paper2code name="step {index}">')
    return "\n".join(lines) + "\n"


#: what one 256x256 product step of heavy() costs when it cannot be measured (ms)
PRODUCT_MS = 6.0
_PRODUCT_PROBE = """
import time, torch
torch.set_num_threads(1)
a = torch.rand(256, 256)
for _ in range(20):
    a = torch.tanh(a @ a / 256.0)
best = None
for _ in range(5):
    t = time.perf_counter()
    for _ in range(50):
        a = torch.tanh(a @ a / 256.0)
    best = min(best or 1e9, (time.perf_counter() - t) / 50)
print(best * 1000)
"""


def product_ms(python: str | None = None) -> float:
    """What one product step of heavy() takes on one core of this machine, at its quietest of five
    tries (ms; PRODUCT_MS when torch cannot be run): the compute-bound tests are sized by it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    try:
        out = subprocess.run([python or sys.executable, "-c", _PRODUCT_PROBE], capture_output=True, text=True,
                             timeout=300, check=True, env=env)
        return max(0.01, float(out.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return PRODUCT_MS


#: support code (classes and helpers no snippet tags) around a paper's tagged functions: the
#: published papers' annotated files are hundreds of lines, of which the snippets are a few, and a
#: run compiles the whole file (and the checks of ours read it)
SUPPORT_UNITS = 16


def _numpy_helper(k: int) -> str:
    """One untagged NumPy helper of a scientific paper's file, with a docstring as real ones have."""
    return textwrap.dedent(f'''\
        def moment_{k}(x, order={k % 4 + 1}, axis=-1, center=True):
            """The order-th moment of ``x`` along ``axis``, averaged with harmonic weights.

            Parameters
            ----------
            x : array_like
                Samples, any shape.
            order : int
                The moment's order.
            axis : int
                The axis the samples lie along.
            center : bool
                Subtract the mean first.
            """
            x = np.asarray(x, dtype=float)
            if center:
                x = x - x.mean(axis=axis, keepdims=True)
            out = np.mean(x ** order, axis=axis)
            if not np.all(np.isfinite(out)):
                raise ValueError("non-finite moment")
            weights = [1.0 / (i + 1) for i in range({k % 5 + 2})]
            return out * sum(weights) / len(weights)
        ''')


_NUMPY_CLASS = textwrap.dedent('''\
    class Standardizer:
        """Scale features to zero mean and unit variance, fitted once on a sample.

        The statistics are kept, so that a later batch is scaled the same way.
        """

        def __init__(self, eps=1e-8, axis=0):
            self.eps = eps
            self.axis = axis
            self.mean_ = None
            self.scale_ = None

        def fit(self, x):
            x = np.asarray(x, dtype=float)
            self.mean_ = x.mean(axis=self.axis, keepdims=True)
            self.scale_ = np.sqrt(x.var(axis=self.axis, keepdims=True) + self.eps)
            return self

        def transform(self, x):
            if self.mean_ is None:
                raise RuntimeError("fit the standardizer first")
            return (np.asarray(x, dtype=float) - self.mean_) / self.scale_

        def inverse(self, y):
            return np.asarray(y) * self.scale_ + self.mean_

        @property
        def fitted(self):
            return self.mean_ is not None
    ''')


def _torch_block(k: int) -> str:
    """One untagged torch module of a paper's file, as the published papers define their models."""
    return textwrap.dedent(f'''\
        class Block{k}(torch.nn.Module):
            """A residual MLP block: layer norm, up-projection, GELU, down-projection."""

            def __init__(self, dim, hidden=None, dropout=0.0):
                super().__init__()
                hidden = hidden or {k % 3 + 2} * dim
                self.norm = torch.nn.LayerNorm(dim)
                self.up = torch.nn.Linear(dim, hidden)
                self.down = torch.nn.Linear(hidden, dim)
                self.dropout = torch.nn.Dropout(dropout)

            def forward(self, x):
                h = self.up(self.norm(x))
                h = torch.nn.functional.gelu(h)
                return x + self.dropout(self.down(h))

            def extra_repr(self):
                return f"dim={{self.up.in_features}}, hidden={{self.up.out_features}}"
        ''')


def _support(lib: str, part: int) -> str:
    """Half (``part`` 0: before the tagged functions, 1: after) of a paper file's support code."""
    units = range(part * SUPPORT_UNITS // 2, (part + 1) * SUPPORT_UNITS // 2)
    if lib == "numpy":
        pieces = ([_NUMPY_CLASS] if part == 0 else []) + [_numpy_helper(k) for k in units]
    else:
        pieces = [_torch_block(k) for k in units]
    return "\n\n".join(pieces) + "\n\n"


def _module(snippets: int, tagged: bool, work_ms: int, step_ms: float = PRODUCT_MS) -> str:
    head = "import torch\n\n\n" + _support("torch", 0) + "\n"
    funcs = "\n\n".join(_function(i, tagged) for i in range(snippets)) + "\n\n" + _support("torch", 1).rstrip() + "\n"
    work = ""
    if work_ms:
        # the test calls heavy() on the completion's module and the reference's: about work_ms of
        # 256x256 products on one quiet core in all (step_ms a product step, measured by product_ms)
        reps = max(1, round(work_ms / (2 * step_ms)))
        work = textwrap.dedent(f"""


            def heavy(seed):
                g = torch.Generator().manual_seed(seed)
                a = torch.rand(256, 256, generator=g)
                for _ in range({reps}):
                    a = torch.tanh(a @ a / 256.0)
                return float(a.sum())
            """)
    return head + funcs + work


def _test(paper: str, snippets: int, work_ms: int) -> str:
    checks = "\n".join(
        f"        self.assertTrue(torch.allclose(m.f{i}(x), r.f{i}(x)))" for i in range(snippets)
    )
    heavy = "        self.assertAlmostEqual(m.heavy(0), r.heavy(0), places=3)\n" if work_ms else ""
    return (
        "import unittest\n\nimport torch\n\n"
        f"import {paper} as m\nimport {paper}_ref as r\n\n\n"
        "class TestPaper(unittest.TestCase):\n"
        "    def test_functions(self):\n"
        "        torch.manual_seed(0)\n"
        "        x = torch.rand(4, 16)\n"
        f"{checks}\n"
        f"{heavy}\n"
        "    def test_block(self):\n"
        "        x = torch.rand(4, 16)\n"
        "        torch.manual_seed(1)\n"
        "        mine = m.Block0(16)(x)\n"
        "        torch.manual_seed(1)\n"
        "        self.assertTrue(torch.allclose(mine, r.Block0(16)(x)))\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    )


def _scientific_function(index: int, tagged: bool) -> str:
    """One NumPy/SciPy function of a "scientific" paper; with ``tagged`` its body is a snippet with
    a nested snippet inside (as the published papers nest theirs)."""
    outer = [
        "z = common.scale(x, " + str(index + 2) + ")",
        "y = special.expit(z) + np.log1p(np.abs(x))",
    ]
    inner = [f"y = y * {1.0 + index / 10:.1f} + stats.norm.logpdf(x).mean()"]
    lines = [f"def f{index}(x):"]
    if tagged:
        lines.append(f'    # <paper2code name="step {index}">')
    lines += ["    " + b for b in outer]
    if tagged:
        lines.append(f'    # <paper2code name="step {index} weighting">')
    lines += ["    " + b for b in inner]
    if tagged:
        lines.append(f'    # </paper2code name="step {index} weighting">')
    lines.append("    return y.sum(axis=-1)")
    if tagged:
        # the outer snippet closes after the return: both snippets are whole lines of the body
        lines.insert(-1, f'    # </paper2code name="step {index}">')
        lines[-2], lines[-1] = lines[-1], lines[-2]
    return "\n".join(lines) + "\n"


def _scientific_module(snippets: int, tagged: bool) -> str:
    head = "import numpy as np\nfrom scipy import special, stats\n\nimport common\n\n\n" + _support("numpy", 0) + "\n"
    return (head + "\n\n".join(_scientific_function(i, tagged) for i in range(snippets)) + "\n\n"
            + _support("numpy", 1).rstrip() + "\n")


def _scientific_test(paper: str, snippets: int) -> str:
    """Like the published NumPy/SciPy papers' tests: pandas reads a data file, matplotlib draws,
    an ml_collections config, many test cases (one a function, and two more)."""
    cases = "\n".join(
        f"    def test_f{i}(self):\n"
        f"        x = self.data[{i % 4}::4][:32]\n"
        f"        np.testing.assert_allclose(m.f{i}(x), r.f{i}(x), rtol=self.config.rtol)\n"
        for i in range(snippets))
    return (
        "import io\nimport unittest\n\nimport matplotlib\nmatplotlib.use(\"Agg\")\n"
        "import matplotlib.pyplot as plt\nimport numpy as np\nimport pandas as pd\nfrom ml_collections import ConfigDict\n"
        "from scipy import stats\n\n"
        f"import {paper} as m\nimport {paper}_ref as r\n\n\n"
        "class TestPaper(unittest.TestCase):\n"
        "    @classmethod\n"
        "    def setUpClass(cls):\n"
        "        frame = pd.read_csv(\"data/inputs.csv\")\n"
        "        cls.data = frame[[\"a\", \"b\", \"c\", \"d\"]].to_numpy().reshape(-1, 8)\n"
        "        cls.weights = np.load(\"data/weights.npz\")[\"w\"]\n"
        "        cls.config = ConfigDict({\"rtol\": 1e-10, \"bins\": 16})\n\n"
        f"{cases}\n"
        "    def test_standardized_moments(self):\n"
        "        mine = m.moment_1(m.Standardizer().fit(self.data).transform(self.data))\n"
        "        np.testing.assert_allclose(mine, r.moment_1(r.Standardizer().fit(self.data).transform(self.data)))\n\n"
        "    def test_summary_table(self):\n"
        "        frame = pd.DataFrame({\"v\": m.f0(self.data), \"w\": r.f0(self.data)})\n"
        "        self.assertTrue(np.allclose(frame.v.describe().values, frame.w.describe().values))\n\n"
        "    def test_figure(self):\n"
        "        fig, ax = plt.subplots()\n"
        "        ax.hist(m.f1(self.data), bins=self.config.bins)\n"
        "        buf = io.BytesIO()\n"
        "        fig.savefig(buf, format=\"png\")\n"
        "        plt.close(fig)\n"
        "        self.assertGreater(buf.tell(), 0)\n"
        "        self.assertGreater(stats.kurtosis(self.weights.ravel()), -3)\n\n\n"
        'if __name__ == "__main__":\n    unittest.main()\n'
    )


def _scientific_files(folder: Path, pid: str, snippets: int) -> None:
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(len(pid))
    (folder / "data").mkdir(exist_ok=True)
    rows = rng.normal(size=(512, 4))
    (folder / "data" / "inputs.csv").write_text(
        "a,b,c,d\n" + "\n".join(",".join(f"{v:.6f}" for v in row) for row in rows) + "\n")
    np.savez(folder / "data" / "weights.npz", w=rng.normal(size=(256, 64)))
    (folder / "common.py").write_text("def scale(x, k):\n    return x * k\n")
    (folder / f"{pid}.py").write_text(_scientific_module(snippets, True))
    (folder / f"{pid}_ref.py").write_text(_scientific_module(snippets, False))
    (folder / "paper2code_test.py").write_text(_scientific_test(pid, snippets))
    (folder / "requirements.txt").write_text("numpy\nscipy\npandas\nmatplotlib\nml_collections\n")


def _threaded_module(snippets: int, tagged: bool, work_ms: int, step_ms: float) -> str:
    """A compute-heavy torch paper whose runs use torch's own threads (as many as it starts)."""
    module = _module(snippets, tagged, 0).replace("import torch\n", "import torch\n", 1)
    reps = max(1, round(work_ms / (2 * step_ms)))
    return module + textwrap.dedent(f"""


        def heavy(seed):
            g = torch.Generator().manual_seed(seed)
            a = torch.rand(512, 512, generator=g)
            for _ in range({max(1, reps // 8)}):
                a = torch.tanh(a @ a / 512.0)
            return float(a.sum())
        """)


#: (kind, papers, snippets) of each generated set; compute-bound papers do ``work_ms`` a run
SHAPES: dict[str, tuple[tuple[str, int, int], ...]] = {
    "import-bound": (("import-bound", 10, 8),),
    "compute-bound": (("compute-bound", 4, 6),),
    "published-like": (("import-bound", 7, 8), ("compute-bound", 5, 12)),
    # like the published papers, not like our own: tests that import scipy, pandas, matplotlib,
    # ml_collections and a sibling module, read data files and run many cases; nested snippets;
    # one compute-heavy paper whose runs use torch's threads
    "realistic": (("scientific", 7, 8), ("threaded", 1, 6), ("compute-bound", 4, 12)),
}
#: the kinds whose runs are mostly imports (the "import-bound papers" of a whole set)
IMPORT_BOUND = ("import-bound", "scientific")


def pset_shape(kind: str, papers: int | None = None, snippets: int | None = None) -> tuple[tuple[str, int, int], ...]:
    """The (kind, papers, snippets) groups of set ``kind``; ``papers``/``snippets`` change a one-kind set's."""
    groups = SHAPES[kind]
    if len(groups) > 1:
        if papers or snippets:
            raise ValueError(f"the {kind} set has a fixed shape: no papers or snippets to give")
        return groups
    return ((groups[0][0], papers or groups[0][1], snippets or groups[0][2]),)


def pset_write(out: Path, *, kind: str, papers: int | None = None, snippets: int | None = None,
               work_ms: int = 1500, python: str | None = None) -> Path:
    """Write the problem set ``kind`` (a key of SHAPES) into ``out`` (created); return it.
    Compute-bound papers' work is sized for this machine, with ``python``'s torch (``product_ms``)."""
    out.mkdir(parents=True, exist_ok=True)
    groups = pset_shape(kind, papers, snippets)
    heavy = ("compute-bound", "threaded")
    step_ms = product_ms(python) if work_ms and any(g[0] in heavy for g in groups) else PRODUCT_MS
    entries = []
    for group, count, size in groups:
        entries += _papers_write(out, kind=group, papers=count, snippets=size,
                                 work_ms=work_ms if group in heavy else 0, step_ms=step_ms)
    (out / "papers.yaml").write_text(yaml.safe_dump(entries, sort_keys=False))
    return out


def paper_kind(paper_id: str) -> str:
    """The kind of a generated paper, from its id (``import_bound_03`` -> ``import-bound``)."""
    return paper_id.rsplit("_", 1)[0].replace("_", "-")


def _papers_write(out: Path, *, kind: str, papers: int, snippets: int, work_ms: int, step_ms: float) -> list[dict]:
    entries = []
    for p in range(papers):
        pid = f"{kind.replace('-', '_')}_{p:02d}"
        folder = out / pid
        folder.mkdir(exist_ok=True)
        if kind == "scientific":
            _scientific_files(folder, pid, snippets)
        else:
            make = _threaded_module if kind == "threaded" else _module
            (folder / f"{pid}.py").write_text(make(snippets, True, work_ms, step_ms))
            (folder / f"{pid}_ref.py").write_text(make(snippets, False, work_ms, step_ms))
            (folder / "paper2code_test.py").write_text(_test(pid, snippets, work_ms))
            (folder / "requirements.txt").write_text("torch\n")
        (folder / "paper2code_paper.md").write_text(f"# Bench paper {p}\n\nA synthetic {kind} paper.\n")
        entries.append({
            "id": pid, "title": f"Bench {kind} paper {p}", "venue": "bench",
            "first_commit_date": "2025-01-01", "annotated_file_paths": f"{pid}.py",
            "context_file_paths": None,
        })
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=tuple(SHAPES))
    parser.add_argument("out", type=Path)
    parser.add_argument("--papers", type=int, help="papers of a one-kind set")
    parser.add_argument("--snippets", type=int, help="snippets a paper, in a one-kind set")
    parser.add_argument("--work-ms", type=int, default=1500, help="compute-bound papers: work per run (ms)")
    parser.add_argument("--python", help="interpreter whose torch sizes the compute-bound work (default: this one)")
    args = parser.parse_args(argv)
    try:
        shape = pset_shape(args.kind, args.papers, args.snippets)
    except ValueError as exc:
        parser.error(str(exc))
    pset_write(args.out, kind=args.kind, papers=args.papers, snippets=args.snippets, work_ms=args.work_ms,
               python=args.python)
    print(f"{args.out}: " + ", ".join(f"{n} {k} papers x {m} snippets" for k, n, m in shape))
    return 0


if __name__ == "__main__":
    sys.exit(main())
