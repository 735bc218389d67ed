"""``python warm.py ...`` in a sandbox (this folder, bound or copied there as ``/rcb/warm.py``), or
``python benchmark_core/sandbox/warm ...`` on the host: the runner's command line.

The folder is loaded as the package ``_rcb_warm`` (a name no paper uses), so that its rooms import
each other; ``sys.path[0]`` becomes the folder holding it, as it was for the one-file runner, so
that none of the rooms can be imported by a paper under its own short name.

Its rooms come from the host's bytecode when the sandbox has it: a folder ``BYTECODE_FOLDER`` beside
this one (``/rcb/warm-pyc``, bound read-only or copied in by the backend: sandbox/bytecode.py) holding
``<room>.<cache tag>.pyc`` files, hash-based, each used only when the hash in it is the one of the
room's source here and its code names that source. The sandboxes write no bytecode
(``PYTHONDONTWRITEBYTECODE``, a read-only folder), so without it every warm parent, and every run of
a fresh-interpreter paper, compiled the rooms again (0.05-0.2 s on the path where a core waits).
Only this package's modules are looked up there: the paper's and the libraries' bytecode is found
where it always is."""
import importlib.machinery
import importlib.util
import marshal
import os
import sys

#: the folder, beside this one, that holds the host's bytecode of the rooms (see the docstring)
BYTECODE_FOLDER = "warm-pyc"
#: the flags of a hash-based .pyc whose hash is checked against its source (PEP 552)
_CHECKED_HASH = 0b11


class _RoomLoader(importlib.machinery.SourceFileLoader):
    """A room's code from the host's bytecode when it matches the source, else compiled from it."""

    bytecode = ""

    def get_code(self, fullname):
        source_path = self.get_filename(fullname)
        room = os.path.splitext(os.path.basename(source_path))[0]
        cached = os.path.join(self.bytecode, f"{room}.{sys.implementation.cache_tag}.pyc")
        try:
            with open(cached, "rb") as fh:
                data = fh.read()
            source = self.get_data(source_path)
        except OSError:
            return super().get_code(fullname)
        if (len(data) > 16 and data[:4] == importlib.util.MAGIC_NUMBER
                and int.from_bytes(data[4:8], "little") == _CHECKED_HASH
                and data[8:16] == importlib.util.source_hash(source)):
            try:
                code = marshal.loads(data[16:])
            except (EOFError, ValueError, TypeError):
                code = None
            if getattr(code, "co_filename", None) == source_path:
                return code
        return super().get_code(fullname)


def _package():
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.path.dirname(here)
    loader_class = importlib.machinery.SourceFileLoader
    bytecode = os.path.join(os.path.dirname(here), BYTECODE_FOLDER)
    if os.path.isdir(bytecode) and not sys.flags.optimize:  # (-O would want .opt-1 bytecode)
        _RoomLoader.bytecode = bytecode
        loader_class = _RoomLoader
        # the rooms (submodules of the package) are found in ``here`` by a finder using that loader
        sys.path_importer_cache[here] = importlib.machinery.FileFinder(here, (loader_class, [".py"]))
    init = os.path.join(here, "__init__.py")
    spec = importlib.util.spec_from_file_location("_rcb_warm", init, loader=loader_class("_rcb_warm", init),
                                                  submodule_search_locations=[here])
    module = importlib.util.module_from_spec(spec)
    sys.modules["_rcb_warm"] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    sys.exit(_package().main())
