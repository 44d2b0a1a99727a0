#!/usr/bin/env bash
# Builds the S3-compatible server that the tests start on 127.0.0.1 with a bucket and
# credentials (issue 66): SeaweedFS's `weed`, from its Go module at the version pinned
# below, fetched through the Go module proxy and compiled with the Go on the PATH
# (CGO_ENABLED=0: a static binary). python/quiver/testing.py's S3Server runs it;
# docs/object-storage.md says why this server.
#
# The module is built in its own directory of the module cache, with its own go.mod and
# go.sum (its replace directive rules out `go install PKG@VERSION`), so its dependencies
# are exactly the ones upstream pins.
#
# Everything goes to the cache directory, outside the repository, and is reused: the
# binary ($cache/bin/weed), a stamp with the version it was built from (another version
# rebuilds), and Go's module and build caches ($cache/go). A second run builds nothing
# and prints "reused". The last line printed is the binary's path.
#
# Environment:
#   QUIVER_S3_CACHE  the cache directory (default: $HOME/.cache/quiver/s3)
#   GO               the go command (default: go)
set -euo pipefail

module=github.com/seaweedfs/seaweedfs
version=v0.0.0-20261109003541-7506e5f91cd6
cache="${QUIVER_S3_CACHE:-$HOME/.cache/quiver/s3}"
go="${GO:-go}"

say() { printf 'install-s3-server: %s\n' "$*"; }
die() { printf 'install-s3-server: %s\n' "$1" >&2; exit 1; }

mkdir -p "$cache/bin"
# One build at a time per cache (parallel test runs).
exec 9>"$cache/.lock"
flock 9

bin="$cache/bin/weed"
stamp="$cache/bin/weed.version"
want="$module@$version"
if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    say "reused: weed from $want"
    echo "$bin"
    exit 0
fi

command -v "$go" >/dev/null || die "no go on the PATH: install Go (1.26 or newer) first"

# Go's caches beside the binary, so a rebuild (another version) downloads and compiles
# only what changed. GOFLAGS=-modcacherw: the module cache can be deleted with rm -rf.
export GOPATH="$cache/go"
export GOMODCACHE="$cache/go/pkg/mod"
export GOCACHE="$cache/go/cache"
export GOFLAGS=-modcacherw
export CGO_ENABLED=0
# The Go on the PATH, never a toolchain downloaded from elsewhere.
export GOTOOLCHAIN=local

say "building weed from $want with $("$go" version | cut -d' ' -f3) (cold: several minutes)"
start=$SECONDS
dir="$("$go" mod download -json "$want" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
if [ -z "$dir" ] || [ ! -f "$dir/go.mod" ]; then
    die "go mod download $want gave no module directory"
fi
tmp="$bin.tmp.$$"
trap 'rm -f "$tmp"' EXIT
# Two jobs (the machine has two cores, and the Rust build runs beside it), niced.
(cd "$dir" && nice -n 10 "$go" build -p 2 -trimpath -ldflags='-s -w' -o "$tmp" ./weed)
"$tmp" version >/dev/null 2>&1 || die "the weed just built does not run"
mv -f "$tmp" "$bin"
echo "$want" > "$stamp"
say "built in $((SECONDS - start)) s; cache: $(du -sh "$cache" | cut -f1)"
echo "$bin"
