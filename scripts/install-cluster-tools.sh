#!/usr/bin/env bash
# Installs what the cluster's tests need, from Debian's packages (building quiver needs
# none of them: crates/quiver-etcd compiles etcd's API without protoc):
#   etcd-server        etcd, which python/tests/test_cluster.py and crates/quiver-etcd's
#                      tests start on loopback with a temporary data directory (the
#                      packaged service is not used);
#   etcd-client        etcdctl, which turns etcd's authentication on in those tests;
#   iptables           the firewall rule that cuts a node off inside the network
#                      namespace of test_cluster.py's partition test.
# Idempotent: it runs apt-get only when one of them is missing. Runs as root with no
# input (CI), or through passwordless sudo.
set -euo pipefail

say() { printf 'install-cluster-tools: %s\n' "$*"; }
die() { printf 'install-cluster-tools: %s\n' "$1" >&2; exit 1; }

packages=()
command -v etcd >/dev/null || packages+=(etcd-server)
command -v etcdctl >/dev/null || packages+=(etcd-client)
command -v iptables >/dev/null || packages+=(iptables)
if [ ${#packages[@]} -eq 0 ]; then
    say "etcd, etcdctl and iptables already installed"
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null \
        || die "${packages[*]} missing, and not root (nor passwordless sudo) to install them"
    sudo=(sudo -n)
fi
command -v apt-get >/dev/null || die "${packages[*]} missing, and no apt-get to install them"

say "installing ${packages[*]} from Debian's packages"
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${packages[@]}" >/dev/null
# The package may start its own etcd service where an init system runs; the tests
# start theirs on other ports, so it is left alone.
command -v etcd >/dev/null || die "installed etcd-server but found no etcd"
