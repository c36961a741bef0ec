#!/usr/bin/env bash
# Test tbconvert as users get it: build the sdist and the wheel (the wheel from the sdist),
# install the wheel with its test extra into a fresh virtual environment, and run pytest there
# against the INSTALLED package, from a copy of tests/, fixtures/, docs/ and README.md in which
# the source tree cannot be imported.
#
#   tests/run-installed.sh PYTHON [pytest arguments...]
#
# e.g. tests/run-installed.sh python3.12 -m e2e
# The tests run in one process per core (pytest-xdist; each test file's tests stay together,
# in their order, in one process): pass -n 0 to run them in this one.
# The exit code is pytest's; "no tests collected" (5) counts as a failure.
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 PYTHON [pytest arguments...]" >&2
    exit 2
fi
python=$1
shift
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/tbconvert-installed.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== $("$python" -V 2>&1): building and installing into $work"
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
"$venv_python" -m pip install --quiet --upgrade pip build
# Build from a clean copy so that stray build/ or *.egg-info in the checkout cannot leak in.
mkdir "$work/src"
(cd "$repo" && tar -cf - --exclude=.git --exclude=.venv --exclude=build --exclude=dist \
    --exclude='*.egg-info' --exclude=__pycache__ --exclude=bench/_data .) | tar -xf - -C "$work/src"
"$venv_python" -m build --quiet --outdir "$work/dist" "$work/src" >/dev/null
wheel=$(ls "$work"/dist/*.whl)
"$venv_python" -m pip install --quiet "$wheel[test]"

mkdir "$work/run"
# bench/ (the real writers' record generators) and fuzz/ (the harnesses) are test tooling, not
# part of the package
cp -r "$repo/tests" "$repo/fixtures" "$repo/docs" "$repo/bench" "$repo/fuzz" "$repo/README.md" \
    "$repo/pyproject.toml" "$work/run/"
cd "$work/run"
set +e
TBCONVERT_TEST_INSTALLED=1 "$venv_python" -m pytest -p no:cacheprovider -n auto --dist loadfile "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
    echo "run-installed: no tests were collected (pytest exit 5)" >&2
    exit 5
fi
exit "$code"
