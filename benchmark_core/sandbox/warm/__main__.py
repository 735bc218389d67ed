"""``python warm.py ...`` in a sandbox (this folder, bound or copied there as ``/rcb/warm.py``), or
``python benchmark_core/sandbox/warm ...`` on the host: the runner's command line.

The folder is loaded as the package ``_rcb_warm`` (a name no paper uses), so that its rooms import
each other; ``sys.path[0]`` becomes the folder holding it, as it was for the one-file runner, so
that none of the rooms can be imported by a paper under its own short name."""
import importlib.util
import os
import sys


def _package():
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.path.dirname(here)
    spec = importlib.util.spec_from_file_location("_rcb_warm", os.path.join(here, "__init__.py"),
                                                  submodule_search_locations=[here])
    module = importlib.util.module_from_spec(spec)
    sys.modules["_rcb_warm"] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(_package().main())
