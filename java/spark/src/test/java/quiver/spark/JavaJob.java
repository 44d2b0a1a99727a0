package quiver.spark;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * A Spark job in Java, as a user submits one with {@code spark-submit --jars ...}: reads a
 * quiver table, filters it, writes a part of it to another table, and prints what it saw on
 * one line for python/tests/test_spark_jvm.py to check.
 *
 * <p>Arguments: URI TABLE COPY.
 */
public final class JavaJob {
  private JavaJob() {}

  public static void main(String[] args) {
    if (args.length != 3) {
      System.err.println("usage: JavaJob URI TABLE COPY");
      System.exit(2);
    }
    String uri = args[0];
    SparkSession spark = LocalSpark.start("quiver-java-job");
    try {
      Dataset<Row> df = spark.read().format("quiver").option("uri", uri).load(args[1]);
      long rows = df.count();
      long from500 = df.where("id >= 500").count();
      int partitions = df.javaRDD().getNumPartitions();
      df.where("id < 100").write().format("quiver").option("uri", uri).mode("overwrite").save(args[2]);
      System.out.println(
          "quiver-java-job rows=" + rows + " from500=" + from500 + " partitions=" + partitions);
    } finally {
      spark.stop();
    }
  }
}
