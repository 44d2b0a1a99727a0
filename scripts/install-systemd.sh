#!/usr/bin/env bash
# Installs what python/tests/test_deploy.py needs to check deploy/quiver.service:
#   systemd   systemd-analyze (verify, syscall-filter) and systemd-sysusers.
# Nothing is started: the tests only run those two programs on files in a temp dir.
# Idempotent: it runs apt-get only when systemd-analyze is missing.
#
# Exit codes: 0 ready; 3 missing and it cannot be installed here (not root nor
# passwordless sudo, or no apt-get); 1 anything else.
set -euo pipefail

say() { printf 'install-systemd: %s\n' "$*"; }
die() { printf 'install-systemd: %s\n' "$1" >&2; exit "${2:-1}"; }

if command -v systemd-analyze >/dev/null && command -v systemd-sysusers >/dev/null; then
    say "systemd-analyze and systemd-sysusers already installed"
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        die "systemd-analyze is missing, and not root (nor passwordless sudo) to install systemd" 3
    fi
fi
command -v apt-get >/dev/null || die "systemd-analyze is missing, and no apt-get: install systemd" 3

say "installing systemd from Debian's packages"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    systemd >/dev/null
command -v systemd-analyze >/dev/null || die "installed systemd but found no systemd-analyze"
