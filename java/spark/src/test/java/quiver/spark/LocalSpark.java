package quiver.spark;

import org.apache.spark.sql.SparkSession;

/** The Spark the test jobs run in: {@code local[2]} on loopback, no UI, times in UTC. */
final class LocalSpark {
  private LocalSpark() {}

  static SparkSession start(String app) {
    return SparkSession.builder()
        .master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate();
  }
}
