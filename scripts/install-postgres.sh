#!/usr/bin/env bash
# Installs what the benchmark suite's `sql` suite needs from Debian's packages:
#   postgresql        the server (initdb, postgres, pg_isready) the harness starts on loopback;
#   odbc-postgresql   psqlODBC, the PostgreSQL ODBC driver pyodbc loads;
#   unixodbc          the ODBC driver manager (libodbc, odbcinst).
# Idempotent: it runs apt-get only when one of them is missing. The harness does not use
# the packaged cluster: it starts its own server in a temporary directory.
# Runs as root with no input (CI), or through sudo when not root.
set -euo pipefail

packages=(postgresql odbc-postgresql unixodbc)

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for package in "${packages[@]}"; do
    installed "$package" || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-postgres: ${packages[*]} already installed"
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-postgres: run as root (or install sudo)" >&2; exit 1; }
    sudo=(sudo)
fi

echo "install-postgres: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
