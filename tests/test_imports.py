"""Start-up weight: what ``import tbconvert`` and light commands load.

pyarrow, h5py, pandas and TensorBoard's protobuf modules each cost tens of MiB and a good
part of a second to import; a command loads only those its conversion uses.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CLI_CWD, FIXTURES, cli_env

HEAVY = ("numpy", "pyarrow", "h5py", "pandas", "tensorboard", "google.protobuf", "crc32c")


def loaded_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; which of :data:`HEAVY` it left imported."""
    probe = (code + "\nimport json, sys\n"
             f"print(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=CLI_CWD, env=cli_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip(), out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def command(*argv) -> str:
    """Python code that runs ``tbconvert ARGV`` the way the installed script does."""
    return ("import contextlib, io\nfrom tbconvert.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), "
            f"contextlib.redirect_stderr(io.StringIO()):\n    main({list(map(str, argv))!r})")


def test_import_tbconvert_loads_no_heavy_library():
    loaded = loaded_after("import tbconvert")
    assert not any(loaded.values()), loaded


def test_public_names_still_load_on_first_use():
    loaded = loaded_after("import tbconvert\n"
                          "assert callable(tbconvert.convert) and callable(tbconvert.read)\n"
                          "assert callable(tbconvert.read) and callable(tbconvert.scalars)\n"
                          "assert tbconvert.ScalarSeries.__name__ == 'ScalarSeries'")
    assert loaded["numpy"]


@pytest.mark.parametrize("argv", [["--help"], ["convert", "--help"], ["formats"]])
def test_help_and_formats_load_no_heavy_library(argv):
    loaded = loaded_after(command(*argv))
    assert not any(loaded.values()), loaded


def test_info_on_unrecognised_directory_loads_no_heavy_library(tmp_path):
    loaded = loaded_after(command("info", tmp_path))
    assert not any(loaded.values()), loaded


def test_info_on_event_files_loads_no_archive_library():
    loaded = loaded_after(command("info", FIXTURES / "torch_logdir", "-j", "1"))
    assert loaded["numpy"]
    assert not loaded["pyarrow"] and not loaded["h5py"] and not loaded["pandas"], loaded


@pytest.mark.parametrize("run", ["torch_logdir/multi/losses_train", "tensorboardx_logdir/run_b/compare/x"])
def test_info_on_plain_scalars_loads_what_reading_needs(run):
    """A short command's time is mostly its start: ``info`` on the scalar files PyTorch and
    tensorboardX write loads no protobuf (their records, the version record first, are read
    without it), nor what only writers (the host's name, blob ids), names that cannot be
    used as they are (their digest) or a mistyped format (its suggestion) need."""
    probe = command("info", FIXTURES / run, "-j", "1") + (
        "\nimport sys\nprint(sorted(m for m in ('google.protobuf', 'tensorboard', 'socket', "
        "'hashlib', 'difflib', 'uuid') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=CLI_CWD, env=cli_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_event_files_to_hdf5_loads_no_pyarrow(tmp_path):
    loaded = loaded_after(command("convert", FIXTURES / "torch_logdir", tmp_path / "o.h5",
                                  "-j", "1"))
    assert (tmp_path / "o.h5").is_file()
    assert loaded["h5py"] and not loaded["pyarrow"] and not loaded["pandas"], loaded


def test_event_files_to_parquet_loads_no_h5py_nor_pandas(tmp_path):
    loaded = loaded_after(command("convert", FIXTURES / "torch_logdir", tmp_path / "o.parquet",
                                  "-j", "1"))
    assert (tmp_path / "o.parquet").is_file()
    assert loaded["pyarrow"] and not loaded["h5py"] and not loaded["pandas"], loaded


def test_format_classes_name_their_reader_and_writer():
    from tbconvert import registry
    from tbconvert.formats.base import has_reader, has_writer
    for fmt in registry.all_formats():
        assert has_reader(fmt) == (fmt.reader is not None)
        assert has_writer(fmt) == (fmt.writer is not None)
        if fmt.reader is not None:
            assert fmt.reader.__module__.startswith("tbconvert.formats.")


def test_parquet_marker_name_is_named_once():
    """Sniffing and sync name the marker without importing pyarrow: the one name lives in
    the package, and the schema module keeps no copy of its own."""
    from tbconvert.formats import parquet
    from tbconvert.formats.parquet import schema
    assert parquet.MARKER_FILE == "_tbconvert.json"
    assert "MARKER_FILE" not in vars(schema)


def _pool_after(code: str) -> str:
    probe = code + "\nimport pyarrow\nprint(pyarrow.default_memory_pool().backend_name)"
    env = {k: v for k, v in cli_env().items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=CLI_CWD, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip(), out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_command_allocates_arrow_memory_from_jemalloc_and_the_api_leaves_the_pool(tmp_path):
    import pyarrow as pa
    if "jemalloc" not in pa.supported_memory_backends():
        pytest.skip("this pyarrow has no jemalloc")
    src = FIXTURES / "torch_logdir"
    assert _pool_after(command("convert", src, tmp_path / "a.parquet", "-j", "1")) == "jemalloc"
    default = _pool_after("pass")
    assert _pool_after(f"import tbconvert\ntbconvert.convert({str(src)!r}, "
                       f"{str(tmp_path / 'b.parquet')!r})") == default


# Python code that makes pyarrow and h5py fail to import, as where they are missing.
_WITHOUT = (
    "import sys\n"
    "gone = tuple(sys.argv.pop(1).split(','))\n"
    "class _Gone:\n"
    "    @staticmethod\n"
    "    def find_spec(name, path=None, target=None):\n"
    "        if name.split('.')[0] in gone:\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, _Gone)\n"
    "from tbconvert.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n")


def _without(modules, *argv):
    """``tbconvert ARGV`` in a process where ``modules`` do not import."""
    return subprocess.run([sys.executable, "-c", _WITHOUT, ",".join(modules), *map(str, argv)],
                          cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True,
                          timeout=300)


def _without_archive_libraries(*argv):
    return _without(("pyarrow", "h5py"), *argv)


def test_event_files_need_neither_pyarrow_nor_h5py(tmp_path):
    """Telling a run's format and converting it to event files work where pyarrow and h5py
    do not import; only a conversion that needs one says so, in one line naming it."""
    run = FIXTURES / "tf2_logdir" / "hparams" / "trial_0"
    info = _without_archive_libraries("info", run)
    assert info.returncode == 0, info.stderr
    assert "accuracy" in info.stdout and "1 run, 3 series, 7 points" in info.stdout
    out = _without_archive_libraries("convert", run, tmp_path / "events", "--to", "tfevents")
    assert out.returncode == 0, out.stderr
    for dst, library in (("a.parquet", "pyarrow"), ("a.h5", "h5py")):
        done = _without_archive_libraries("convert", run, tmp_path / dst)
        assert done.returncode == 7, done.stderr
        assert done.stderr.count("\n") == 1 and f"needs {library}" in done.stderr, done.stderr
        assert not (tmp_path / dst).exists()


def test_a_missing_protobuf_is_named_as_the_package_to_install():
    """The event-file reader needs ``google.protobuf`` for the records its decoders without
    protobuf leave (this run's hparams), and asks for it only then: without it, one line
    naming the package pip knows (protobuf), not the module's first name, and not a run
    skipped as unreadable."""
    done = _without(("google",), "info", FIXTURES / "tf2_logdir" / "hparams" / "trial_0")
    assert done.returncode == 7, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "needs protobuf" in done.stderr and "pip install protobuf," in done.stderr, done.stderr


def test_the_tbparse_reader_without_protobuf_names_it_too():
    """The tbparse-compatible reader, whose every value goes through protobuf: without it, the
    same missing-dependency error, not each directory skipped as unreadable."""
    program = _WITHOUT.replace(
        "from tbconvert.cli import main\nsys.exit(main(sys.argv[1:]))\n",
        "from tbconvert.errors import MissingDependencyError\n"
        "from tbconvert.tbparse import SummaryReader\n"
        "try:\n"
        "    SummaryReader(sys.argv[1]).scalars\n"
        "except MissingDependencyError as exc:\n"
        "    print('missing:', exc)\n")
    assert program != _WITHOUT
    done = subprocess.run([sys.executable, "-c", program, "google",
                           str(FIXTURES / "tf2_logdir" / "hparams" / "trial_0")],
                          cwd=CLI_CWD, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert "missing:" in done.stdout and "needs protobuf" in done.stdout, done.stdout + done.stderr


def test_an_install_without_dependencies_is_told_all_it_lacks(monkeypatch):
    """Installed without its dependencies (``pip install --no-deps``, or into another Python
    than the ``pip`` on the PATH), tbconvert names the Python it runs under and every missing
    dependency in one command; a dependency that is installed but fails to import is told
    apart, with its version."""
    import importlib.metadata

    from tbconvert.formats import base
    real_version = importlib.metadata.version

    def version(name):
        if name == "protobuf":
            raise importlib.metadata.PackageNotFoundError(name)
        return real_version(name)
    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(base, "_dependencies", lambda: ["tensorboard", "protobuf", "numpy", "tqdm"])
    monkeypatch.setattr(base, "_importable", lambda d: d not in ("tensorboard", "tqdm"))
    monkeypatch.setattr(base, "_source_tree", lambda: None)     # as installed from the wheel
    said = base._missing("tfevents", "protobuf", ModuleNotFoundError("No module named 'google'"))
    assert f"not installed for {sys.executable} (nor are tensorboard, tqdm)" in said, said
    # the copy that ran is named: an install made without the dependencies is found by it
    home = Path(base.__file__).resolve().parents[2]
    assert f"(nor are tensorboard, tqdm), which runs the tbconvert installed in {home}:" \
        in said, said
    assert said.endswith(f"{sys.executable} -m pip install protobuf tensorboard tqdm, or "
                         "reinstall tbconvert with its dependencies"), said
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "7.1")
    said = base._missing("tfevents", "protobuf", ImportError("broken"))
    assert "protobuf 7.1 is installed for" in said and "pip install protobuf," in said, said


def test_a_source_tree_run_without_the_dependencies_is_told_so(monkeypatch, tmp_path):
    """``python -m tbconvert`` in a checkout imports the package from there, under a Python
    that may have none of its dependencies: the message says which tree ran and how to
    install it."""
    import importlib.metadata

    from tbconvert.formats import base

    def version(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(base, "_dependencies", lambda: [])
    monkeypatch.setattr(base, "_source_tree", lambda: tmp_path)
    said = base._missing("tfevents", "protobuf", ModuleNotFoundError("No module named 'google'"))
    assert said.count("\n") == 0, said
    assert f"this tbconvert is the source tree in {tmp_path}" in said, said
    assert said.endswith(f"{sys.executable} -m pip install {tmp_path}"), said


def test_the_source_tree_is_told_apart_from_an_installed_copy():
    from tbconvert.formats import base
    installed = "site-packages" in os.path.realpath(base.__file__)
    assert (base._source_tree() is None) == installed


def test_dependencies_are_read_from_the_installed_metadata():
    from tbconvert.formats import base
    try:
        import importlib.metadata
        importlib.metadata.requires("tbconvert")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("tbconvert runs from a source tree without metadata")
    assert {"protobuf", "tensorboard", "numpy"} <= set(base._dependencies())
    assert "pandas" not in base._dependencies()       # an extra, not a dependency
    assert base._importable("protobuf") and not base._importable("no-such-package-x")


def test_every_library_tbconvert_imports_is_declared():
    """A library the package imports itself is a dependency or in an extra of its own, not
    only something another dependency happens to bring (an install of the declared
    dependencies alone, as some tools make, must import)."""
    import ast
    import re
    from pathlib import Path

    import tbconvert
    from tbconvert.formats.base import DISTRIBUTIONS
    try:
        import tomllib
    except ModuleNotFoundError:      # Python 3.10
        pytest.skip("needs tomllib")
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml")
                            .read_text())["project"]

    def names(requirements) -> set:
        return {re.split(r"[<>=!\[; ]", r, maxsplit=1)[0].lower() for r in requirements}
    core = names(project["dependencies"])
    extras = set().union(*(names(r) for r in project["optional-dependencies"].values()))
    imported = set()
    for path in Path(tbconvert.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"tbconvert"}
    wanted = {DISTRIBUTIONS.get(m, m).lower() for m in third_party}
    assert "protobuf" in wanted and "protobuf" in core
    assert wanted <= core | extras, sorted(wanted - core - extras)


def test_the_crc32c_function_is_loaded_without_the_package_init():
    """The crc32c package's ``__init__`` imports importlib.metadata (10 ms of every command's
    start) to look its version up: tbconvert takes the C function from the extension module
    itself, the same function as the package's."""
    code = ("import sys\nfrom tbconvert.checksum import crc32c\n"
            "assert type(crc32c).__name__ == 'builtin_function_or_method', type(crc32c)\n"
            "assert crc32c(b'123456789') == 0xE3069283\n"
            "assert crc32c(b'456789', crc32c(b'123')) == 0xE3069283\n"
            "assert 'crc32c' not in sys.modules and 'importlib.metadata' not in sys.modules\n"
            "import crc32c as package\n"
            "data = bytes(range(256)) * 37\n"
            "assert crc32c(data) == package.crc32c(data)\n"
            "print('ok')")
    env = cli_env()     # -S: no site, so no .pth file imports importlib.metadata first
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], *(p for p in sys.path if p)])
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=CLI_CWD, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr


def test_the_crc32c_loader_falls_back_to_the_ordinary_import(monkeypatch):
    import importlib.util

    import crc32c as package

    from tbconvert import checksum
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert checksum._load() is package.crc32c


def test_a_missing_crc32c_is_named_as_the_package_to_install():
    done = _without(("crc32c",), "info", FIXTURES / "tf2_logdir" / "hparams" / "trial_0")
    assert done.returncode == 7, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "needs crc32c" in done.stderr and "pip install crc32c" in done.stderr, done.stderr
