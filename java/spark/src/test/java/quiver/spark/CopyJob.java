package quiver.spark;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * A Spark job in Java that copies a quiver table: reads every row of TABLE with option
 * {@code transport} TRANSPORT and overwrites COPY with them (a write goes over gRPC), then
 * counts TABLE's rows the same way (a read of no column) and prints its input partitions and
 * that count on one line for python/tests/test_spark_jvm.py, which compares COPY with TABLE.
 *
 * <p>Arguments: URI TABLE COPY TRANSPORT.
 */
public final class CopyJob {
  private CopyJob() {}

  public static void main(String[] args) {
    if (args.length != 4) {
      System.err.println("usage: CopyJob URI TABLE COPY TRANSPORT");
      System.exit(2);
    }
    String uri = args[0];
    SparkSession spark = LocalSpark.start("quiver-copy-job");
    try {
      Dataset<Row> df =
          spark.read().format("quiver").option("uri", uri).option("transport", args[3]).load(args[1]);
      df.write().format("quiver").option("uri", uri).mode("overwrite").save(args[2]);
      System.out.println(
          "quiver-copy-job java="
              + Runtime.version().feature()
              + " partitions="
              + df.javaRDD().getNumPartitions()
              + " rows="
              + df.count());
    } finally {
      spark.stop();
    }
  }
}
