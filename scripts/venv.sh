# Sourced by scripts/run and scripts/test: make .venv usable, never touching a working one.
# A working .venv is kept as it is (re-running `python3 -m venv` over it with another Python would
# rewrite its pyvenv.cfg and break it); a missing or broken one is made afresh with the first
# Python 3.11+ on PATH.
ensure_venv() {
  # pip too: a venv made where python3-venv is missing has none.
  if .venv/bin/python -c 'import sys, unicodedata, pip; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    return 0
  fi
  local py=""
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
      py=$candidate; break
    fi
  done
  if [ -z "$py" ]; then
    echo "$0: Python 3.11 or newer is needed (python3 --version says $(python3 --version 2>&1))" >&2
    exit 1
  fi
  "$py" -m venv --clear .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
}
