#!/usr/bin/env bash
# The LocalStack tier (tests/localstack/): `make test-localstack`, and the last step of `make test`.
#
# LocalStack (localstack-core 2026.3.0) runs on Python 3.13 only, so the tier has its own
# environment, .venv-localstack/, from tests/localstack/requirements.txt. The interpreter is the
# first of:
#   1. $SPOTLINE_PYTHON313, or a python3.13 on the PATH or under pyenv that runs;
#   2. one this script built before (in $SPOTLINE_CACHE, default ~/.cache/spotline);
#   3. Debian's python3.13 package, where the configured apt sources offer it (Debian 13);
#   4. built from Debian's source package of python3.13 (trixie's, fetched through a private
#      apt source list, its checksums checked by apt), into $SPOTLINE_CACHE: about 18 minutes
#      on 2 cores. Off unless SPOTLINE_BUILD_PYTHON=1 (`make test` sets it in CI).
# PyPI has no CPython interpreter to install; none of uv's, pyenv's or the npm packages' ways works
# here (they download from elsewhere).
#
# Usage: scripts/localstack.sh [--optional] [pytest args...]
#   --optional: no interpreter to be had is a skip (exit 0, saying why), not a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

optional=0
if [ "${1:-}" = "--optional" ]; then
  optional=1
  shift
fi
cache="${SPOTLINE_CACHE:-$HOME/.cache/spotline}"
built="$cache/cpython-3.13/bin/python3.13"
venv=.venv-localstack
requirements=tests/localstack/requirements.txt

give_up() {
  echo "LocalStack tier skipped: $1" >&2
  [ "$optional" = 1 ] && exit 0
  exit 1
}

is_313() {
  [ -n "$1" ] && "$1" -c 'import sys, ssl, venv; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1
}

find_python() {
  local candidate
  for candidate in "${SPOTLINE_PYTHON313:-}" "$(command -v python3.13 2>/dev/null)" \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13 "$built" /usr/bin/python3.13; do
    if is_313 "$candidate"; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

sudo_=""
[ "$(id -u)" = 0 ] || sudo_="sudo"

install_from_apt() {
  command -v apt-get >/dev/null 2>&1 || return 1
  $sudo_ apt-get update -q >/dev/null 2>&1 || return 1
  apt-cache policy python3.13 2>/dev/null | grep -q 'Candidate: [0-9]' || return 1
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -q --no-install-recommends \
    python3.13 python3.13-venv >&2
}

build_from_debian_source() {
  command -v apt-get >/dev/null 2>&1 || return 1
  local work="$cache/build-python3.13" apt_opts
  rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/src" || return 1
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    >"$work/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
    -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
  echo "building Python 3.13 from Debian's source package (about 18 minutes on 2 cores)..." >&2
  apt-get "${apt_opts[@]}" update -q >/dev/null || return 1
  (cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only python3.13 >/dev/null) || return 1
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -q --no-install-recommends \
    build-essential libssl-dev libffi-dev zlib1g-dev libsqlite3-dev libbz2-dev liblzma-dev >/dev/null || return 1
  (cd "$work/src" && tar xf python3.13_*.orig.tar.xz && cd Python-3.13.* &&
    ./configure --prefix="$cache/cpython-3.13" >"$work/build.log" 2>&1 &&
    make -j"$(nproc)" >>"$work/build.log" 2>&1 && make altinstall >>"$work/build.log" 2>&1) || {
    echo "the build failed: see $work/build.log" >&2
    return 1
  }
  rm -rf "$work/src"
}

python=$(find_python)
if [ -z "$python" ]; then
  if install_from_apt; then
    python=$(find_python)
  elif [ "${SPOTLINE_BUILD_PYTHON:-0}" = 1 ] && build_from_debian_source; then
    python=$(find_python)
  fi
fi
if [ -z "$python" ]; then
  give_up "no Python 3.13 here: none on the PATH or under pyenv, the apt sources offer no python3.13 \
(Debian 12), and building it from Debian's source package is off (SPOTLINE_BUILD_PYTHON=1 turns it on)"
fi

stamp="$venv/.installed"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$stamp" ] || [ "$requirements" -nt "$stamp" ] ||
  ! is_313 "$venv/bin/python"; then
  echo "LocalStack tier: creating $venv with $python ($("$python" --version))" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv" || give_up "$python could not create a venv"
  "$venv/bin/pip" install -q --upgrade pip || give_up "pip could not upgrade itself in $venv"
  "$venv/bin/pip" install -q -r "$requirements" || {
    echo "LocalStack tier: installing $requirements failed" >&2
    exit 1
  }
  touch "$stamp"
fi

if [ ! -x .venv/bin/pytest ]; then
  echo "LocalStack tier: .venv/ is missing; run 'make venv' first" >&2
  exit 1
fi
echo "LocalStack tier: localstack-core $("$venv/bin/python" -c 'from importlib.metadata import version; print(version("localstack-core"))') on $("$venv/bin/python" --version)" >&2
SPOTLINE_LOCALSTACK_PYTHON="$PWD/$venv/bin/python" bash scripts/pytest.sh tests/localstack "$@"
