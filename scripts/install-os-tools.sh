#!/usr/bin/env bash
# Installs the programs some tests drive, from Debian's packages:
#   systemd   systemd-analyze (verify, syscall-filter) and systemd-sysusers, for
#             python/tests/test_deploy.py (nothing is started: the tests only run
#             those two programs on files in a temp dir);
#   tmux      the terminal `quiver top` is tested in (python/tests/test_top.py);
#   chromium, chromium-driver
#             the headless browser and its WebDriver the web console is tested in
#             (python/tests/test_console.py drives them with Selenium);
#   libnss3-tools
#             certutil and pk12util, which put a CA and a client certificate into
#             Chromium's NSS database for the console on a secure cluster
#             (python/tests/test_cluster_console.py).
# Idempotent: it runs apt-get only when one of them is missing.
#
# Exit codes: 0 ready; 3 missing and it cannot be installed here (not root nor
# passwordless sudo, or no apt-get); 1 anything else.
set -euo pipefail

say() { printf 'install-os-tools: %s\n' "$*"; }
die() { printf 'install-os-tools: %s\n' "$1" >&2; exit "${2:-1}"; }

packages=()
if ! command -v systemd-analyze >/dev/null || ! command -v systemd-sysusers >/dev/null; then
    packages+=(systemd)
fi
command -v tmux >/dev/null || packages+=(tmux)
[ -x /usr/bin/chromium ] || packages+=(chromium)
[ -x /usr/bin/chromedriver ] || packages+=(chromium-driver)
{ command -v certutil >/dev/null && command -v pk12util >/dev/null; } || packages+=(libnss3-tools)
if [ ${#packages[@]} -eq 0 ]; then
    say "systemd-analyze, systemd-sysusers, tmux, chromium, chromedriver, certutil and pk12util already installed"
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        die "${packages[*]} missing, and not root (nor passwordless sudo) to install them" 3
    fi
fi
command -v apt-get >/dev/null || die "${packages[*]} missing, and no apt-get to install them" 3

say "installing ${packages[*]} from Debian's packages"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${packages[@]}" >/dev/null
command -v systemd-analyze >/dev/null || die "installed systemd but found no systemd-analyze"
command -v tmux >/dev/null || die "installed tmux but found no tmux"
[ -x /usr/bin/chromium ] || die "installed chromium but found no /usr/bin/chromium"
[ -x /usr/bin/chromedriver ] || die "installed chromium-driver but found no /usr/bin/chromedriver"
command -v pk12util >/dev/null || die "installed libnss3-tools but found no pk12util"
