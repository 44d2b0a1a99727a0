#!/usr/bin/env bash
# Sets up what python/tests/test_jdbc.py needs to run Apache Arrow's Flight SQL JDBC
# driver against quiver:
#   1. a JDK 17+ and Maven: installed from Debian's packages (openjdk-17-jdk-headless,
#      maven) when missing, as root or through sudo;
#   2. the driver's shaded jar, org.apache.arrow:flight-sql-jdbc-driver at the version
#      pinned in java/flight-sql-jdbc-driver.version, resolved from Maven Central by Maven;
#   3. java/src/main/java/**/*.java compiled with javac against it;
#   4. a launcher, $cache/bin/flight-sql-jdbc-check, that runs the check program with the
#      JVM flags the driver needs:  flight-sql-jdbc-check JDBC_URL TABLE ROWS;
#   5. the PostgreSQL JDBC driver's jar, org.postgresql:postgresql at the version pinned in
#      bench/postgresql-jdbc.version, for the benchmark harness's engines suite (Spark's
#      JDBC reader and writer, the peers of quiver's Spark connector): $cache/lib/
#      postgresql-VERSION.jar.
# All of it goes to the cache directory, outside the repository, and is reused: a second
# run downloads and compiles nothing unless the pinned version or the sources changed.
#
# Usage: setup-java.sh            all of the above
#        setup-java.sh --spark    step 1 alone: the JDK and Maven that scripts/setup-spark-jvm.sh
#                                 (the JVM Spark connector) needs; no JDBC driver is fetched
#
# Environment:
#   QUIVER_JAVA_CACHE  the cache directory (default: $HOME/.cache/quiver/java)
#   JAVA_HOME          a JDK to prefer (used if it is 17 or newer)
#
# Exit codes: 0 ready; 3 no JDK 17+ or Maven and they cannot be installed here (not root,
# no sudo, or no apt-get); 1 anything else.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${QUIVER_JAVA_CACHE:-$HOME/.cache/quiver/java}"
group=org.apache.arrow
artifact=flight-sql-jdbc-driver
version="$(tr -d '[:space:]' < "$repo/java/$artifact.version")"
dependency_plugin=org.apache.maven.plugins:maven-dependency-plugin:3.8.1
main_class=quiver.jdbc.FlightSqlJdbcCheck
# The driver's Arrow memory code reads java.nio internals: JDK 16+ needs them opened.
jvm_flags=(--add-opens=java.base/java.nio=ALL-UNNAMED)

say() { printf 'setup-java: %s\n' "$*"; }
die() { printf 'setup-java: %s\n' "$*" >&2; exit "${2:-1}"; }

spark_only=false
case "${1:-}" in
    "") ;;
    --spark) spark_only=true ;;
    *) die "usage: setup-java.sh [--spark]" ;;
esac

mkdir -p "$cache"
# One setup at a time per cache (parallel test runs).
exec 9>"$cache/.lock"
flock 9

jar="$cache/lib/$artifact-$version.jar"
pg_group=org.postgresql
pg_artifact=postgresql
pg_version="$(tr -d '[:space:]' < "$repo/bench/postgresql-jdbc.version")"
pg_jar="$cache/lib/$pg_artifact-$pg_version.jar"

# The major version of a java or javac binary (8 for 1.8), or 0.
major() {
    local v
    v="$("$1" -version 2>&1 | sed -n 's/.*\(version\|javac\) "\{0,1\}\([0-9][0-9.]*\).*/\2/p' | head -n1)"
    case "$v" in
        1.*) v="${v#1.}" ;;
    esac
    v="${v%%.*}"
    [[ "$v" =~ ^[0-9]+$ ]] && echo "$v" || echo 0
}

# Sets $jdk to the bin directory of a JDK 17+ (with javac and java), if there is one.
find_jdk() {
    jdk=""
    local candidates=() javac
    [ -n "${JAVA_HOME:-}" ] && candidates+=("$JAVA_HOME/bin/javac")
    javac="$(command -v javac || true)"
    [ -n "$javac" ] && candidates+=("$(readlink -f "$javac")")
    for javac in /usr/lib/jvm/*/bin/javac; do
        [ -e "$javac" ] && candidates+=("$javac")
    done
    for javac in "${candidates[@]}"; do
        local bin
        bin="$(dirname "$javac")"
        if [ -x "$javac" ] && [ -x "$bin/java" ] && [ "$(major "$javac")" -ge 17 ] \
            && [ "$(major "$bin/java")" -ge 17 ]; then
            jdk="$bin"
            return 0
        fi
    done
    return 1
}

need_mvn=false
[ -s "$jar" ] && [ -s "$pg_jar" ] || need_mvn=true
# The Spark connector is built by Maven every time its sources change.
! $spark_only || need_mvn=true

if ! find_jdk || { $need_mvn && ! command -v mvn >/dev/null; }; then
    packages=(openjdk-17-jdk-headless maven)
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            die "no JDK 17+ or no Maven, and not root (nor passwordless sudo) to install ${packages[*]}" 3
        fi
    fi
    command -v apt-get >/dev/null || die "no JDK 17+ or no Maven, and no apt-get: install ${packages[*]}" 3
    say "installing ${packages[*]} from Debian's packages"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${packages[@]}" >/dev/null
    find_jdk || die "installed ${packages[*]} but found no JDK 17+"
fi
say "JDK: $jdk ($("$jdk/java" -version 2>&1 | head -n1))"
if $spark_only; then
    say "Maven: $(command -v mvn); now scripts/setup-spark-jvm.sh PYTHON builds the Spark connector"
    exit 0
fi

# Resolves GROUP:ARTIFACT:VERSION from Maven Central into $cache/lib/ARTIFACT-VERSION.jar,
# unless it is there already.
fetch_jar() {
    local group="$1" artifact="$2" version="$3" tmp
    local target="$cache/lib/$artifact-$version.jar"
    [ -s "$target" ] && return 0
    command -v mvn >/dev/null || die "Maven (mvn) not found"
    say "resolving $group:$artifact:$version from Maven Central"
    tmp="$(mktemp -d "$cache/lib.tmp.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    # No project: run from an empty directory. --strict-checksums fails on a bad download.
    if ! (cd "$tmp" && JAVA_HOME="$(dirname "$jdk")" mvn -B -q -Dstyle.color=never --strict-checksums \
        "$dependency_plugin:copy" \
        -Dartifact="$group:$artifact:$version" \
        -DoutputDirectory="$tmp/out") > "$tmp/mvn.log" 2>&1; then
        cat "$tmp/mvn.log" >&2
        die "Maven could not resolve $group:$artifact:$version"
    fi
    [ -s "$tmp/out/$artifact-$version.jar" ] || die "Maven did not produce $artifact-$version.jar"
    mkdir -p "$cache/lib"
    mv "$tmp/out/$artifact-$version.jar" "$target"
    rm -rf "$tmp"
    trap - EXIT
}

fetch_jar "$group" "$artifact" "$version"
fetch_jar "$pg_group" "$pg_artifact" "$pg_version"
say "driver: $jar"
say "PostgreSQL JDBC driver (bench engines suite): $pg_jar"

# Compile when the sources, the driver version or the JDK changed.
mapfile -t sources < <(cd "$repo" && find java/src/main/java -name '*.java' | LC_ALL=C sort)
[ ${#sources[@]} -gt 0 ] || die "no Java sources under $repo/java/src/main/java"
classes="$cache/classes"
stamp="$(
    cd "$repo"
    {
        echo "$version $jdk $(major "$jdk/javac")"
        sha256sum "${sources[@]}"
    } | sha256sum | cut -d' ' -f1
)"
if [ "$(cat "$classes/.stamp" 2>/dev/null)" != "$stamp" ]; then
    say "compiling ${#sources[@]} source file(s)"
    rm -rf "$classes.tmp"
    mkdir -p "$classes.tmp"
    (cd "$repo" && "$jdk/javac" --release 17 -Xlint:all -Werror -encoding UTF-8 \
        -cp "$jar" -d "$classes.tmp" "${sources[@]}")
    echo "$stamp" > "$classes.tmp/.stamp"
    rm -rf "$classes"
    mv "$classes.tmp" "$classes"
fi
say "classes: $classes"

mkdir -p "$cache/bin"
launcher="$cache/bin/flight-sql-jdbc-check"
{
    echo '#!/bin/sh'
    echo "# Written by $repo/scripts/setup-java.sh: runs $main_class with driver $version."
    printf 'exec %q' "$jdk/java"
    printf ' %q' "${jvm_flags[@]}" -cp "$classes:$jar" "$main_class"
    printf ' "$@"\n'
} > "$launcher.tmp"
chmod +x "$launcher.tmp"
mv "$launcher.tmp" "$launcher"
say "launcher: $launcher JDBC_URL TABLE ROWS"
